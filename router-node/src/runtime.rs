//! The tokio runtime every command of this crate (and the system-test tools) runs on, built
//! once at the top of a command: a runtime that cannot start is said on stderr, naming the
//! command, and ends it with exit code 1.

use std::process::ExitCode;
use tokio::runtime::{Builder, Runtime};

/// A multi-threaded runtime with I/O and time, or exit code 1 after saying why on stderr as
/// `<command>: cannot start the async runtime: <error>`.
pub fn start(command: &str) -> Result<Runtime, ExitCode> {
    Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| {
            eprintln!("{command}: cannot start the async runtime: {e}");
            ExitCode::from(1)
        })
}
