//! Arize Phoenix as the traces test's real OpenTelemetry backend: a Python package from PyPI
//! (`scripts/install-phoenix.sh` puts it in `.tools/phoenix`) that receives OTLP over HTTP
//! (`/v1/traces` on its web port) and over gRPC, keeps spans in SQLite under a scratch
//! directory, and answers queries over REST (`GET /v1/projects/<project>/spans`).
//!
//! [`Phoenix::binary`] finds the executable (`$PHOENIX_BIN`, else the workspace's
//! `.tools/phoenix/bin/phoenix`, running the install script when it is missing) or says why
//! it cannot be had; [`Phoenix::start`] runs it on two free ports and waits for `/healthz`.
//! A project is named by the resource attribute `openinference.project.name` of the spans
//! sent to it (`OTEL_RESOURCE_ATTRIBUTES`).

use super::process::Proc;
use super::{TempDir, free_port, workspace_root};
use serde_json::Value;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

/// Overrides where the `phoenix` executable is.
pub const PHOENIX_ENV: &str = "PHOENIX_BIN";

/// How long Phoenix may take to answer `/healthz` (about 15 s on a 2-core machine).
const START_TIMEOUT: Duration = Duration::from_secs(180);

/// A running Phoenix server; killed when dropped.
#[derive(Debug)]
pub struct Phoenix {
    proc: Proc,
    http_port: u16,
    grpc_port: u16,
    _dir: TempDir,
}

impl Phoenix {
    /// The `phoenix` executable: `$PHOENIX_BIN`, else `.tools/phoenix/bin/phoenix`, installed
    /// by `scripts/install-phoenix.sh` when missing. `Err` says why the install failed (no
    /// Python, no package registry): the caller skips, saying so. A `$PHOENIX_BIN` that is
    /// not a file is a mistake of the caller's: it panics.
    pub fn binary() -> Result<PathBuf, String> {
        if let Some(path) = std::env::var_os(PHOENIX_ENV) {
            let path = PathBuf::from(path);
            assert!(
                path.is_file(),
                "{PHOENIX_ENV}={} is not a file",
                path.display()
            );
            return Ok(path);
        }
        let root = workspace_root();
        let bin = root.join(".tools/phoenix/bin/phoenix");
        if bin.is_file() {
            return Ok(bin);
        }
        let script = root.join("scripts/install-phoenix.sh");
        let out = Command::new(&script)
            .output()
            .map_err(|e| format!("cannot run {}: {e}", script.display()))?;
        if !out.status.success() || !bin.is_file() {
            return Err(format!(
                "{} failed ({}): {}",
                script.display(),
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        Ok(bin)
    }

    /// Starts `bin serve` on 127.0.0.1 (a free web port and a free gRPC port, data in a
    /// scratch directory, no telemetry of its own) and waits until it answers `/healthz`.
    pub async fn start(bin: PathBuf) -> Self {
        let dir = TempDir::new("phoenix");
        let (http_port, grpc_port) = (free_port(), free_port());
        let mut command = Command::new(bin);
        command
            .arg("serve")
            .env("PHOENIX_HOST", "127.0.0.1")
            .env("PHOENIX_PORT", http_port.to_string())
            .env("PHOENIX_GRPC_PORT", grpc_port.to_string())
            .env("PHOENIX_WORKING_DIR", dir.path())
            .env("PHOENIX_TELEMETRY_ENABLED", "false");
        let mut proc = Proc::spawn_command("phoenix", command);
        let http = reqwest::Client::new();
        let health = format!("http://127.0.0.1:{http_port}/healthz");
        let deadline = tokio::time::Instant::now() + START_TIMEOUT;
        loop {
            let up = http
                .get(&health)
                .send()
                .await
                .is_ok_and(|r| r.status().is_success());
            if up {
                break;
            }
            if let Some(status) = proc.exited() {
                panic!(
                    "phoenix exited ({status}) before serving\n{}",
                    proc.output()
                );
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "phoenix did not answer {health} within {START_TIMEOUT:?}\n{}",
                proc.output()
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        Self {
            proc,
            http_port,
            grpc_port,
            _dir: dir,
        }
    }

    /// The web port's base URL: REST queries, and OTLP over HTTP at `/v1/traces`.
    pub fn http_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.http_port)
    }

    /// OTLP over gRPC.
    pub fn grpc_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.grpc_port)
    }

    /// Everything it printed so far.
    pub fn output(&self) -> String {
        self.proc.output()
    }

    /// The spans of `project` matching `query` (`trace_id=...`, `parent_id=null`, ...;
    /// up to 1,000). A project nobody sent to yet has none.
    pub async fn spans(
        &self,
        http: &reqwest::Client,
        project: &str,
        query: &str,
    ) -> Result<Vec<Value>, String> {
        let url = format!(
            "{}/v1/projects/{project}/spans?limit=1000&{query}",
            self.http_url()
        );
        let response = http
            .get(&url)
            .send()
            .await
            .map_err(|e| format!("GET {url}: {e}"))?;
        let status = response.status();
        let body = response
            .text()
            .await
            .map_err(|e| format!("GET {url}: {e}"))?;
        if status.as_u16() == 404 {
            return Ok(Vec::new());
        }
        if !status.is_success() {
            return Err(format!("GET {url}: {status}: {body}"));
        }
        let value: Value =
            serde_json::from_str(&body).map_err(|e| format!("GET {url}: not JSON ({e})"))?;
        Ok(value["data"].as_array().cloned().unwrap_or_default())
    }
}
