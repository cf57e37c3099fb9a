//! The peer routers, from the venv `scripts/install-peers.sh` makes (`.tools/peers`, or
//! `$SWITCHYARD_PEERS_DIR`): whether each is installed ([`missing`]), and running them
//! ([`start_gateway`], [`start_dynamo`]) as [`PeerProc`]s.
//!
//! A peer runs in a process group of its own, so stopping it (SIGTERM to the group, SIGKILL
//! after [`STOP_GRACE`]) also stops whatever it started; dropping a [`PeerProc`] kills the
//! group. How they are run here is in docs/bench.md ("Side by side with other routers").

use super::{BLOCK_SIZE, CompareOptions, MODEL, Router, UP_TIMEOUT};
use crate::support::process::Proc;
use crate::support::{free_port, workspace_root};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Overrides where the peers' venv is.
pub const PEERS_DIR_ENV: &str = "SWITCHYARD_PEERS_DIR";
/// How long a peer may take to exit after SIGTERM before its group is killed.
pub const STOP_GRACE: Duration = Duration::from_secs(10);
/// What a row says for a peer that is not there.
pub const NOT_INSTALLED: &str = "not installed (scripts/install-peers.sh)";

/// `$SWITCHYARD_PEERS_DIR`, else `<workspace>/.tools/peers`.
pub fn default_dir() -> PathBuf {
    std::env::var_os(PEERS_DIR_ENV)
        .filter(|d| !d.is_empty())
        .map_or_else(|| workspace_root().join(".tools/peers"), PathBuf::from)
}

/// The install marker and the executable of a peer router (None for ours and HAProxy).
fn needs(router: Router) -> Option<(&'static str, &'static str)> {
    match router {
        Router::SglangGateway => Some(("sglang-router-0.3.2", "bin/smg")),
        Router::VllmRouter => Some(("vllm-router-0.1.17", "bin/vllm-router")),
        Router::Dynamo => Some(("ai-dynamo-1.6.1", "bin/python")),
        Router::HaproxyRr | Router::Switchyard1 | Router::Switchyard3 => None,
    }
}

/// Why `router` cannot run from `dir` ([`NOT_INSTALLED`]), or `None` when it can (or is
/// not a peer).
pub fn missing(router: Router, dir: &Path) -> Option<String> {
    let (marker, bin) = needs(router)?;
    let installed = dir.join("ok").join(marker).is_file() && dir.join(bin).is_file();
    (!installed).then(|| NOT_INSTALLED.to_owned())
}

/// A peer process in its own process group, with its output collected.
#[derive(Debug)]
pub struct PeerProc {
    proc: Mutex<Option<Proc>>,
    pgid: u32,
    url: String,
}

impl PeerProc {
    /// Starts it; a peer that cannot start (e.g. a venv whose interpreter moved) is an error
    /// telling to reinstall.
    fn spawn(name: &str, mut command: Command, url: String) -> Result<Self, String> {
        command.process_group(0);
        let proc = Proc::try_spawn_command(name, command)
            .map_err(|e| format!("{e}; reinstall with scripts/install-peers.sh"))?;
        Ok(Self {
            pgid: proc.id(),
            proc: Mutex::new(Some(proc)),
            url,
        })
    }

    /// Where it serves (`http://127.0.0.1:<port>`).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The CPU seconds of its process group so far (its children included).
    pub fn cpu_seconds(&self) -> f64 {
        crate::support::cpu::group_seconds(self.pgid)
    }

    /// Its exit and output, when it has exited.
    pub fn exited(&self) -> Option<String> {
        let mut guard = self.proc.lock().ok()?;
        let proc = guard.as_mut()?;
        let status = proc.exited()?;
        Some(format!("exited ({status})\n{}", proc.output()))
    }

    pub fn output(&self) -> String {
        self.proc
            .lock()
            .ok()
            .and_then(|p| p.as_ref().map(Proc::output))
            .unwrap_or_default()
    }

    /// SIGTERM to its group, SIGKILL after [`STOP_GRACE`]; waits for it.
    pub fn stop(self) {
        signal_group(self.pgid, "TERM");
        let deadline = Instant::now() + STOP_GRACE;
        while Instant::now() < deadline && self.exited().is_none() {
            std::thread::sleep(Duration::from_millis(50));
        }
        // Drop: SIGKILL to the group (anything left in it), the process reaped.
    }
}

impl Drop for PeerProc {
    fn drop(&mut self) {
        signal_group(self.pgid, "KILL");
        if let Ok(mut guard) = self.proc.lock()
            && let Some(proc) = guard.take()
        {
            drop(proc.kill());
        }
    }
}

fn signal_group(pgid: u32, signal: &str) {
    let _ = Command::new("kill")
        .arg(format!("-{signal}"))
        .arg("--")
        .arg(format!("-{pgid}"))
        .stderr(std::process::Stdio::null())
        .status();
}

/// SGLang's gateway or vLLM's router, cache-aware, over `workers` (base URLs).
pub fn start_gateway(router: Router, dir: &Path, workers: &[String]) -> Result<PeerProc, String> {
    let (port, metrics_port) = (free_port(), free_port());
    let mut command = match router {
        Router::SglangGateway => {
            let mut c = Command::new(dir.join("bin/smg"));
            c.arg("launch");
            c
        }
        Router::VllmRouter => Command::new(dir.join("bin/vllm-router")),
        other => return Err(format!("{} is not a gateway", other.name())),
    };
    command
        .args(["--host", "127.0.0.1", "--port", &port.to_string()])
        .args(["--policy", "cache_aware"])
        .args(["--prometheus-host", "127.0.0.1"])
        .args(["--prometheus-port", &metrics_port.to_string()])
        .arg("--worker-urls")
        .args(workers);
    let url = format!("http://127.0.0.1:{port}");
    PeerProc::spawn(router.name(), command, url)
}

/// Dynamo without etcd or NATS: file discovery under `state`, TCP requests, ZMQ events, every
/// address on 127.0.0.1.
fn dynamo_env(command: &mut Command, state: &Path) {
    command
        .env("DYN_DISCOVERY_BACKEND", "file")
        .env("DYN_FILE_KV", state)
        .env("DYN_REQUEST_PLANE", "tcp")
        .env("DYN_EVENT_PLANE", "zmq");
    for host in [
        "DYN_TCP_RPC_HOST",
        "DYN_EVENT_PLANE_HOST",
        "DYN_TCP_RESPONSE_STREAM_HOST",
        "DYN_SYSTEM_HOST",
    ] {
        command.env(host, "127.0.0.1");
    }
}

/// Dynamo's simulated engines (`dynamo.mocker`, one process, `--workers` engines configured
/// like ours) and its frontend with the KV router. Returns once every engine has registered
/// (the frontend is then waited for by a completion through it).
pub async fn start_dynamo(
    opts: &CompareOptions,
    state: &Path,
) -> Result<(PeerProc, PeerProc), String> {
    let python = opts.peers_dir.join("bin/python");
    let mut mocker = Command::new(&python);
    mocker
        .args(["-m", "dynamo.mocker", "--model-path"])
        .arg(&opts.model_dir)
        .args(["--model-name", MODEL])
        .args(["--num-workers", &opts.workers.to_string()])
        .args(["--num-gpu-blocks-override", &opts.kv_blocks.to_string()])
        .args(["--block-size", &BLOCK_SIZE.to_string()])
        .args(["--speedup-ratio", &opts.speedup.to_string()])
        // Our simulated worker's defaults (router-sim's `SimArgs`).
        .args(["--max-num-seqs", "256", "--max-num-batched-tokens", "8192"])
        .args(["--enable-prefix-caching", "--enable-chunked-prefill"]);
    dynamo_env(&mut mocker, state);
    let engines = PeerProc::spawn("dynamo.mocker", mocker, String::new())?;
    wait_engines(&engines, state, opts.workers).await?;

    let port = free_port();
    let mut frontend = Command::new(&python);
    frontend
        .args(["-m", "dynamo.frontend", "--router-mode", "kv"])
        .args(["--http-host", "127.0.0.1", "--http-port", &port.to_string()]);
    dynamo_env(&mut frontend, state);
    let url = format!("http://127.0.0.1:{port}");
    Ok((engines, PeerProc::spawn("dynamo.frontend", frontend, url)?))
}

/// Waits until `n` engines have registered their `generate` endpoint in the file discovery.
async fn wait_engines(engines: &PeerProc, state: &Path, n: usize) -> Result<(), String> {
    let dir = state.join("v1/instances");
    let deadline = tokio::time::Instant::now() + UP_TIMEOUT;
    loop {
        let registered = std::fs::read_dir(&dir).map_or(0, |entries| {
            entries
                .filter_map(Result::ok)
                .filter(|e| {
                    e.file_name()
                        .to_string_lossy()
                        .starts_with("dynamo%2Fbackend%2Fgenerate%2F")
                })
                .count()
        });
        if registered >= n {
            return Ok(());
        }
        if let Some(exited) = engines.exited() {
            return Err(format!("dynamo.mocker {exited}"));
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(format!(
                "{registered} of {n} Dynamo engines registered within {UP_TIMEOUT:?}\n{}",
                engines.output()
            ));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
