//! `router-node`: the Switchyard binary. Thin on purpose: parse the command line, run the
//! command, turn its result into an exit code.

mod cli;
mod demo;

fn main() -> std::process::ExitCode {
    cli::run(std::env::args_os())
}
