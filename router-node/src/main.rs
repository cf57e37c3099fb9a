//! `router-node`: the Switchyard serving binary. Thin on purpose: parse the command line, run the
//! command, turn its result into an exit code.

mod cli;

/// mimalloc instead of the system allocator: the request path allocates small buffers on
/// every hop, and glibc malloc cost ~20 % of the router's CPU under load (BENCHMARKS.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    cli::run(std::env::args_os())
}
