//! Reading the keys file, and keeping the keys in use in step with it: a reload at every
//! SIGHUP, and a poll of the file's text every `auth.reload_interval_ms` (0: SIGHUP only).
//! Polling the text (not the modification time) sees every change, a Kubernetes Secret's
//! symlink swap and a rename over the file included. Each reload is logged (the names added
//! and removed, never a key or digest) and counted by outcome; a failure keeps the keys in
//! use.

use super::{KeyStore, KeysError, Reload};
use crate::metrics::Metrics;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinHandle;

/// Largest keys file read (a few hundred bytes per key).
pub const MAX_KEYS_FILE_BYTES: u64 = 16 * 1024 * 1024;

/// The file's text. Refused: a file larger than [`MAX_KEYS_FILE_BYTES`], and on Unix one
/// that every user of the host may write (anyone could add a key).
pub fn read_keys_file(path: &Path) -> Result<String, KeysError> {
    let file = |why: String| KeysError::File(why);
    let meta = std::fs::metadata(path).map_err(|e| file(format!("cannot read it: {e}")))?;
    if !meta.is_file() {
        return Err(file("is not a file".to_owned()));
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        if meta.permissions().mode() & 0o002 != 0 {
            return Err(file(
                "is writable by every user of the host, who could add a key: `chmod o-w` it"
                    .to_owned(),
            ));
        }
    }
    if meta.len() > MAX_KEYS_FILE_BYTES {
        return Err(file(format!(
            "is {} bytes, more than the {MAX_KEYS_FILE_BYTES} a keys file may have",
            meta.len()
        )));
    }
    std::fs::read_to_string(path).map_err(|e| file(format!("cannot read it: {e}")))
}

/// Reloads `store` at every SIGHUP and, with `every`, whenever the file's text changes;
/// records each reload in `metrics`. Runs until aborted.
pub fn spawn_reloader(
    store: Arc<KeyStore>,
    metrics: Arc<Metrics>,
    every: Option<Duration>,
) -> JoinHandle<()> {
    // Installed now, not at the task's first poll: a SIGHUP right after start is not lost
    // (nor does it kill the node).
    let mut hangup = hangup_signal();
    tokio::spawn(async move {
        let mut poll = every.map(|every| {
            let mut poll = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
            poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            poll
        });
        loop {
            let forced = tokio::select! {
                () = next_hangup(&mut hangup) => true,
                _ = async {
                    match &mut poll {
                        Some(poll) => poll.tick().await,
                        None => std::future::pending().await,
                    }
                } => false,
            };
            if forced {
                tracing::info!(keys_file = %store.path().display(), "SIGHUP: reloading the API keys");
            }
            let path = store.path().to_owned();
            let read = tokio::task::spawn_blocking(move || read_keys_file(&path))
                .await
                .unwrap_or_else(|e| Err(KeysError::File(format!("reading it failed: {e}"))));
            record(&store, &metrics, store.apply(read, forced));
        }
    })
}

/// Logs and counts one reload.
fn record(store: &KeyStore, metrics: &Metrics, reload: Reload) {
    let path = store.path().display();
    match reload {
        Reload::Unchanged => {}
        Reload::Loaded {
            keys,
            added,
            removed,
        } => {
            metrics.auth_reload("ok");
            metrics.auth_keys(keys);
            tracing::info!(
                keys_file = %path,
                keys,
                added = ?added,
                removed = ?removed,
                "API keys reloaded",
            );
        }
        Reload::Failed(error) => {
            metrics.auth_reload("error");
            tracing::error!(
                keys_file = %path,
                error = %error,
                keys_in_use = store.keys().len(),
                "API keys not reloaded: the keys in use stay",
            );
        }
    }
}

#[cfg(unix)]
type Hangup = Option<tokio::signal::unix::Signal>;
#[cfg(not(unix))]
type Hangup = ();

#[cfg(unix)]
fn hangup_signal() -> Hangup {
    use tokio::signal::unix::{SignalKind, signal};
    match signal(SignalKind::hangup()) {
        Ok(signal) => Some(signal),
        Err(e) => {
            tracing::warn!(error = %e, "cannot listen for SIGHUP: the API keys reload only when the file changes");
            None
        }
    }
}

#[cfg(not(unix))]
fn hangup_signal() -> Hangup {}

#[cfg(unix)]
async fn next_hangup(hangup: &mut Hangup) {
    if let Some(signal) = hangup
        && signal.recv().await.is_some()
    {
        return;
    }
    std::future::pending().await
}

#[cfg(not(unix))]
async fn next_hangup(_: &mut Hangup) {
    std::future::pending().await
}
