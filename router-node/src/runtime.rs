//! The tokio runtime every command of this crate (and the system-test tools) runs on, built
//! once at the top of a command: a runtime that cannot start is said on stderr, naming the
//! command, and ends it with exit code 1. And the process's open-files limit, raised for a
//! serving node ([`raise_open_files_limit`]): every client and every upstream leg holds a
//! socket. And one command line's parsing for every binary ([`parse_args`]).

use std::process::ExitCode;
use tokio::runtime::{Builder, Runtime};

/// A multi-threaded runtime with I/O and time, or exit code 1 after saying why on stderr as
/// `<command>: cannot start the async runtime: <error>`.
pub fn start(command: &str) -> Result<Runtime, ExitCode> {
    start_with(command, None)
}

/// [`start`] with `worker_threads` async worker threads (`None`: tokio's default, one per
/// core the process may use, or `TOKIO_WORKER_THREADS`).
pub fn start_with(command: &str, worker_threads: Option<usize>) -> Result<Runtime, ExitCode> {
    let mut builder = Builder::new_multi_thread();
    if let Some(threads) = worker_threads {
        builder.worker_threads(threads.max(1));
    }
    builder.enable_all().build().map_err(|e| {
        eprintln!("{command}: cannot start the async runtime: {e}");
        ExitCode::from(1)
    })
}

/// The command line of a binary (`args` with the program name): help and version printed
/// on stdout, usage errors on stderr, each with clap's exit code (0, or 2) to end with.
pub fn parse_args<C: clap::Parser>(
    args: impl IntoIterator<Item = std::ffi::OsString>,
) -> Result<C, ExitCode> {
    C::try_parse_from(args).map_err(|e| {
        let _ = e.print();
        ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(2))
    })
}

/// Raises the soft open-files limit to the hard one and logs both (once per process, at the
/// first call): a node with the distribution's default of 1,024 runs out of sockets long
/// before `http.max_connections`. Where it cannot be raised it says so and goes on.
pub fn raise_open_files_limit() -> Option<u64> {
    static RAISED: std::sync::OnceLock<Option<u64>> = std::sync::OnceLock::new();
    *RAISED.get_or_init(|| {
        let before = rlimit::getrlimit(rlimit::Resource::NOFILE).ok();
        match rlimit::increase_nofile_limit(u64::MAX) {
            Ok(now) => {
                tracing::info!(
                    soft_before = before.map(|(soft, _)| soft),
                    soft = now,
                    hard = before.map(|(_, hard)| hard),
                    "open-files limit"
                );
                Some(now)
            }
            Err(e) => {
                tracing::warn!(error = %e, "the open-files limit could not be raised");
                None
            }
        }
    })
}
