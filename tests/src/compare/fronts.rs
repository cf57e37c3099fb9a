//! One router in front of a fresh simulated fleet ([`start`]), and stopping both
//! ([`Front::stop`]).
//!
//! - `haproxy-rr`, `sglang-gateway`, `vllm-router`: `--workers` standalone `worker --sim`
//!   engines (no NATS), the router over their URLs;
//! - `switchyard-1`, `switchyard-3`: the cluster harness (a nats-server, the engines on it,
//!   one `serve` replica, or three behind HAProxy), every replica and engine reading the
//!   shared tokenizer;
//! - `dynamo`: Dynamo's own engines and frontend (`peers.rs`).
//!
//! Every engine has the same configuration: [`CompareOptions::kv_blocks`] blocks of
//! [`BLOCK_SIZE`] tokens, the run's speedup, the simulated worker's default batch limits.

use super::peers::{self, PeerProc};
use super::{BLOCK_SIZE, CompareOptions, MODEL, Router, UP_TIMEOUT};
use crate::support::haproxy::{Haproxy, HaproxyConfig};
use crate::support::{Cluster, ClusterBuilder, Role, SimWorker, TempDir};
use futures::FutureExt;
use std::any::Any;
use std::panic::AssertUnwindSafe;
use std::path::Path;
use std::time::Duration;
use tokio::task::JoinError;

/// A router and its fleet, up and answering.
#[derive(Debug)]
pub struct Front {
    /// Where bench sends requests.
    pub url: String,
    parts: Parts,
    /// The tokenizer config file the engines and replicas read.
    _dir: TempDir,
}

/// What runs behind a [`Front`]; fields drop in order, the router before its engines.
#[derive(Debug)]
enum Parts {
    Haproxy {
        haproxy: Haproxy,
        workers: Vec<SimWorker>,
    },
    Peer {
        router: PeerProc,
        workers: Vec<SimWorker>,
    },
    Dynamo {
        frontend: PeerProc,
        engines: PeerProc,
        _state: TempDir,
    },
    Cluster(Box<Cluster>),
}

/// Starts the fleet and `router` for `opts` and waits until the router answers a completion.
pub async fn start(router: Router, opts: &CompareOptions) -> Result<Front, String> {
    let dir = TempDir::new("compare");
    let tokenizer = if opts.o200k {
        if router == Router::Dynamo {
            return Err(
                "its frontend tokenizes from a model directory: not with --tokenizer o200k"
                    .to_owned(),
            );
        }
        "[tokenizer]\nkind = \"tiktoken\"\nencoding = \"o200k_base\"\n".to_owned()
    } else {
        let tokenizer_json = opts.model_dir.join("tokenizer.json");
        if !tokenizer_json.is_file() {
            return Err(format!("no tokenizer at {}", tokenizer_json.display()));
        }
        format!(
            "[tokenizer]\nkind = \"huggingface\"\npath = {:?}\n",
            tokenizer_json.to_string_lossy()
        )
    };
    let toml = dir.write("tokenizer.toml", &tokenizer);
    let (url, parts) = match router {
        Router::HaproxyRr => {
            let workers = sim_workers(opts, &toml).await?;
            let urls: Vec<String> = workers.iter().map(|w| w.url().to_owned()).collect();
            let config = HaproxyConfig {
                check_uri: "/health".to_owned(),
                ..HaproxyConfig::default()
            };
            let haproxy = joined(
                tokio::task::spawn_blocking(move || Haproxy::start_with(&urls, &config)).await,
            )?;
            wait_haproxy_up(&haproxy, workers.len()).await?;
            (haproxy.url(), Parts::Haproxy { haproxy, workers })
        }
        Router::SglangGateway | Router::VllmRouter => {
            let workers = sim_workers(opts, &toml).await?;
            let urls: Vec<String> = workers.iter().map(|w| w.url().to_owned()).collect();
            let router = peers::start_gateway(router, &opts.peers_dir, &urls)?;
            (router.url().to_owned(), Parts::Peer { router, workers })
        }
        Router::Dynamo => {
            let state = TempDir::new("dynamo");
            let (engines, frontend) = peers::start_dynamo(opts, state.path()).await?;
            let url = frontend.url().to_owned();
            let parts = Parts::Dynamo {
                frontend,
                engines,
                _state: state,
            };
            (url, parts)
        }
        Router::Switchyard1 | Router::Switchyard3 => {
            let cluster = switchyard(router, opts, &toml).await?;
            (cluster.url(), Parts::Cluster(Box::new(cluster)))
        }
    };
    let front = Front {
        url,
        parts,
        _dir: dir,
    };
    front.wait_answering().await?;
    Ok(front)
}

/// A router's CPU seconds: its own, and the load balancer's in front of its replicas.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct RouterCpu {
    pub router: f64,
    pub balancer: f64,
}

impl RouterCpu {
    fn of(router: f64, balancer: f64) -> Self {
        Self { router, balancer }
    }

    /// What was used between `before` and this reading.
    pub fn since(self, before: RouterCpu) -> RouterCpu {
        RouterCpu::of(
            (self.router - before.router).max(0.0),
            (self.balancer - before.balancer).max(0.0),
        )
    }
}

impl Front {
    /// Waits until a one-token text completion through the router answers 200 (a gateway's
    /// health checks have admitted the engines, Dynamo's frontend has found its engines).
    async fn wait_answering(&self) -> Result<(), String> {
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .build()
            .map_err(|e| e.to_string())?;
        let body = serde_json::json!({
            "model": MODEL, "prompt": "the first word", "max_tokens": 1, "stream": false,
        });
        let url = format!("{}/v1/completions", self.url);
        let deadline = tokio::time::Instant::now() + UP_TIMEOUT;
        loop {
            let last = match http.post(&url).json(&body).send().await {
                Ok(r) if r.status().is_success() => return Ok(()),
                Ok(r) => format!(
                    "HTTP {}: {}",
                    r.status(),
                    r.text().await.unwrap_or_default()
                ),
                Err(e) => e.to_string(),
            };
            if let Some(exited) = self.exited() {
                return Err(exited);
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(format!(
                    "{url} did not answer within {UP_TIMEOUT:?} (last: {last})\n{}",
                    self.output()
                ));
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// The CPU seconds the router has used so far: its own processes, and apart from them
    /// the load balancer in front of several replicas (HAProxy round robin *is* the router
    /// of its row). Dynamo's frontend only (its engines are the fleet).
    pub fn cpu(&self) -> RouterCpu {
        use crate::support::cpu::process_seconds;
        let own = |pid: u32| process_seconds(pid).unwrap_or(0.0);
        match &self.parts {
            Parts::Haproxy { haproxy, .. } => RouterCpu::of(own(haproxy.id()), 0.0),
            Parts::Peer { router, .. } => RouterCpu::of(router.cpu_seconds(), 0.0),
            Parts::Dynamo { frontend, .. } => RouterCpu::of(frontend.cpu_seconds(), 0.0),
            Parts::Cluster(cluster) => RouterCpu::of(
                cluster.replicas.iter().map(|r| own(r.id())).sum(),
                cluster.haproxy.as_ref().map_or(0.0, |h| own(h.id())),
            ),
        }
    }

    /// The admin listeners of Switchyard's replicas (`/metrics`); none for the others.
    pub fn admin_urls(&self) -> Vec<String> {
        match &self.parts {
            Parts::Cluster(cluster) => cluster
                .replicas
                .iter()
                .map(|r| r.admin_url().to_owned())
                .collect(),
            _ => Vec::new(),
        }
    }

    /// A peer process that exited, with its output.
    fn exited(&self) -> Option<String> {
        match &self.parts {
            Parts::Peer { router, .. } => router.exited(),
            Parts::Dynamo {
                frontend, engines, ..
            } => frontend.exited().or_else(|| engines.exited()),
            _ => None,
        }
    }

    /// What the router printed (the peers'; ours are in the harness's assertion output).
    fn output(&self) -> String {
        match &self.parts {
            Parts::Peer { router, .. } => router.output(),
            Parts::Dynamo {
                frontend, engines, ..
            } => format!("{}\n{}", frontend.output(), engines.output()),
            Parts::Haproxy { haproxy, .. } => haproxy.output(),
            Parts::Cluster(cluster) => cluster.outputs(),
        }
    }

    /// Stops the router, then its engines (SIGTERM, each waited for). Returns a note for
    /// each of our processes that did not exit 0.
    pub async fn stop(self) -> Vec<String> {
        let Front { parts, _dir, .. } = self;
        let stopped = tokio::task::spawn_blocking(move || match parts {
            Parts::Haproxy { haproxy, workers } => {
                drop(haproxy.stop());
                stop_workers(workers)
            }
            Parts::Peer { router, workers } => {
                router.stop();
                stop_workers(workers)
            }
            Parts::Dynamo {
                frontend, engines, ..
            } => {
                frontend.stop();
                engines.stop();
                Vec::new()
            }
            Parts::Cluster(cluster) => cluster
                .stop()
                .into_iter()
                .filter(|(name, s)| name != "haproxy" && s.code != Some(0))
                .map(|(name, s)| format!("{name} exited {:?}: {}", s.code, s.stderr))
                .collect(),
        })
        .await;
        joined(stopped).unwrap_or_else(|e| vec![e])
    }
}

fn stop_workers(workers: Vec<SimWorker>) -> Vec<String> {
    workers
        .into_iter()
        .enumerate()
        .filter_map(|(i, w)| {
            let s = w.stop();
            (s.code != Some(0)).then(|| format!("worker {i} exited {:?}: {}", s.code, s.stderr))
        })
        .collect()
}

/// The arguments every engine gets after `worker --sim --listen 127.0.0.1:0` besides how it
/// joins (standalone, or NATS through the harness), its KV blocks and its speedup.
fn engine_args(toml: &Path) -> Vec<String> {
    vec![
        "--block-size".to_owned(),
        BLOCK_SIZE.to_string(),
        "--model".to_owned(),
        MODEL.to_owned(),
        "--tokenizer-config".to_owned(),
        toml.to_string_lossy().into_owned(),
    ]
}

/// `--workers` standalone simulated engines, started in parallel.
async fn sim_workers(opts: &CompareOptions, toml: &Path) -> Result<Vec<SimWorker>, String> {
    let mut tasks = Vec::new();
    for i in 0..opts.workers {
        let mut args = vec![
            "--standalone".to_owned(),
            "--kv-blocks".to_owned(),
            opts.kv_blocks.to_string(),
            "--speedup".to_owned(),
            opts.speedup.to_string(),
        ];
        args.extend(engine_args(toml));
        tasks.push(tokio::task::spawn_blocking(move || {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            SimWorker::start(&format!("worker {i}"), &args)
        }));
    }
    let mut workers = Vec::new();
    for task in tasks {
        workers.push(joined(task.await)?);
    }
    Ok(workers)
}

/// Switchyard's fleet from the cluster harness: the engines on NATS and one replica (no
/// load balancer), or three behind HAProxy; every replica and engine with the tokenizer.
async fn switchyard(router: Router, opts: &CompareOptions, toml: &Path) -> Result<Cluster, String> {
    let replicas = if router == Router::Switchyard3 { 3 } else { 1 };
    let args = engine_args(toml);
    let extra: Vec<&str> = args.iter().map(String::as_str).collect();
    // The replicas send the engines the token ids they computed (the engines tokenize
    // exactly alike), as Dynamo's frontend does: a prompt is tokenized once, not twice.
    let mut tables =
        std::fs::read_to_string(toml).map_err(|e| e.to_string())? + "forward_token_ids = true\n";
    if let Some(extra) = &opts.switchyard_config {
        tables.push('\n');
        tables.push_str(extra);
    }
    let mut builder = ClusterBuilder::new()
        .replicas(replicas)
        .workers(Role::Agg, opts.workers, opts.kv_blocks)
        .speedup(opts.speedup)
        .worker_args(&extra)
        .node_extra(&format!("block_size = {BLOCK_SIZE}"))
        .extra(&tables);
    if replicas == 1 {
        builder = builder.without_haproxy();
    }
    // The harness panics (with every process's output) when the fleet does not come up.
    let started = AssertUnwindSafe(async move {
        let cluster = builder.start().await;
        cluster.wait_ready(UP_TIMEOUT).await;
        cluster
    })
    .catch_unwind()
    .await;
    started.map_err(|panic| panic_message(panic.as_ref()))
}

/// Waits until HAProxy's checks pass on all `n` workers.
async fn wait_haproxy_up(haproxy: &Haproxy, n: usize) -> Result<(), String> {
    let http = reqwest::Client::new();
    let deadline = tokio::time::Instant::now() + UP_TIMEOUT;
    loop {
        let servers = haproxy.servers(&http).await;
        match &servers {
            Ok(s) if s.len() == n && s.iter().all(|s| s.checked_up()) => return Ok(()),
            _ if tokio::time::Instant::now() >= deadline => {
                return Err(format!("haproxy's checks did not pass: {servers:?}"));
            }
            _ => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

/// A task's result, its panic (the harness panics with the processes' output) as an error.
pub(crate) fn joined<T>(result: Result<T, JoinError>) -> Result<T, String> {
    result.map_err(|e| match e.try_into_panic() {
        Ok(panic) => panic_message(panic.as_ref()),
        Err(e) => e.to_string(),
    })
}

fn panic_message(panic: &(dyn Any + Send)) -> String {
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
        .unwrap_or_else(|| "a panic".to_owned())
}
