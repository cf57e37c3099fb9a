//! `router-tools`: Switchyard's demo, load tools and simulated worker. Thin on purpose:
//! parse the command line, run the command, turn its result into an exit code.

mod cli;

/// mimalloc, as in the serving binary: the demo's node and the load generator allocate small
/// buffers on every request.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    cli::run(std::env::args_os())
}
