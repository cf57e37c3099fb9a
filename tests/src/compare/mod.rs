//! Issue #12's side-by-side comparison, shared by the `compare-routers` command and its CI
//! smoke test: the same simulated fleet behind each router in turn, the same trace replayed
//! through each by `router-tools bench` (text prompts, after a warm-up), one table.
//!
//! For every router the fleet is fresh (cold caches): `--workers` engines with one
//! configuration (KV blocks, block size 16, speedup, batch limits) and one word-level
//! tokenizer shared by every process that reads prompts ([`CompareOptions::model_dir`], made by
//! `scripts/make-word-tokenizer.py`), so a prompt is the same tokens whoever routes it.
//!
//! - `fronts.rs`: bringing up a fleet and one router in front of it ([`Router`]), our
//!   processes through the system-test harness;
//! - `peers.rs`: SGLang's gateway, vLLM's router and NVIDIA Dynamo from `.tools/peers`
//!   (`scripts/install-peers.sh`), each in a process group of its own;
//! - `table.rs`: a router's row from bench's JSON, the markdown table and the combined TTFT
//!   CDF plot;
//! - `repeat.rs`: several rounds of every router (`--repeat`), summed up as medians.

pub mod fronts;
pub mod peers;
pub mod repeat;
pub mod stages;
pub mod table;
pub mod tails;

pub use table::{Outcome, Row};

use crate::support::{router_tools, workspace_root};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

/// A router the comparison can put in front of the fleet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Router {
    /// HAProxy round robin straight over the workers (health-checked on `/health`).
    HaproxyRr,
    /// SGLang's gateway (`smg launch --policy cache_aware`).
    SglangGateway,
    /// vLLM's router (`vllm-router --policy cache_aware`).
    VllmRouter,
    /// NVIDIA Dynamo's KV router (`dynamo.frontend --router-mode kv`) over its own simulated
    /// engines (`dynamo.mocker`).
    Dynamo,
    /// One `router-node serve` over the workers (NATS).
    Switchyard1,
    /// Three `serve` replicas on one nats-server behind HAProxy round robin.
    Switchyard3,
}

impl Router {
    pub const ALL: [Router; 6] = [
        Self::HaproxyRr,
        Self::SglangGateway,
        Self::VllmRouter,
        Self::Dynamo,
        Self::Switchyard1,
        Self::Switchyard3,
    ];

    /// Its name on the command line and in the table.
    pub fn name(self) -> &'static str {
        match self {
            Self::HaproxyRr => "haproxy-rr",
            Self::SglangGateway => "sglang-gateway",
            Self::VllmRouter => "vllm-router",
            Self::Dynamo => "dynamo",
            Self::Switchyard1 => "switchyard-1",
            Self::Switchyard3 => "switchyard-3",
        }
    }

    /// What it is, for the notes under the table.
    pub fn describe(self) -> &'static str {
        match self {
            Self::HaproxyRr => "HAProxy round robin over the workers",
            Self::SglangGateway => "SGLang's gateway 0.3.2, cache_aware policy",
            Self::VllmRouter => "vLLM's router 0.1.17, cache_aware policy",
            Self::Dynamo => "NVIDIA Dynamo 1.6.1 KV router over its own simulated engines",
            Self::Switchyard1 => "Switchyard, one replica",
            Self::Switchyard3 => "Switchyard, three replicas on NATS behind HAProxy",
        }
    }

    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|r| r.name() == name)
    }

    /// `a,b,c` (or `all`) as routers, in the order given; an unknown name is an error
    /// listing the known ones.
    pub fn parse_list(list: &str) -> Result<Vec<Self>, String> {
        if list.trim() == "all" {
            return Ok(Self::ALL.to_vec());
        }
        let mut out = Vec::new();
        for name in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            let router = Self::parse(name).ok_or_else(|| {
                let known: Vec<&str> = Self::ALL.iter().map(|r| r.name()).collect();
                format!(
                    "unknown router {name:?}: one of {}, or all",
                    known.join(", ")
                )
            })?;
            if !out.contains(&router) {
                out.push(router);
            }
        }
        if out.is_empty() {
            return Err("no router named".to_owned());
        }
        Ok(out)
    }
}

/// What to replay and on what fleet.
#[derive(Debug, Clone)]
pub struct CompareOptions {
    /// A Mooncake JSONL trace, plain or gzipped.
    pub trace: PathBuf,
    /// Bench's `--block-tokens`: prompt positions per hash id of the trace.
    pub block_tokens: u64,
    pub workers: usize,
    /// The engines' speed and the replay's time compression (bench's `--speedup`).
    pub speedup: f64,
    pub max_requests: Option<u64>,
    pub max_output_tokens: u64,
    /// Short requests before the run (bench's `--warmup`).
    pub warmup: u64,
    /// KV blocks of each engine (16 tokens a block).
    pub kv_blocks: u64,
    /// The model directory every process tokenizes with (`tokenizer.json`,
    /// `tokenizer_config.json`, `config.json`), unless `o200k`.
    pub model_dir: PathBuf,
    /// Every engine and Switchyard tokenize with tiktoken's `o200k_base` instead of the
    /// model directory (Dynamo, whose frontend needs a model directory, cannot run then).
    pub o200k: bool,
    /// Where the results go.
    pub out: PathBuf,
    /// Where the peers are installed (`.tools/peers`).
    pub peers_dir: PathBuf,
    /// More configuration for every Switchyard replica (TOML tables, e.g. `[selection]`),
    /// from `--switchyard-config`.
    pub switchyard_config: Option<String>,
}

/// Tokens per KV block of every engine (our simulated worker's and the mocker's default).
pub const BLOCK_SIZE: u64 = 16;
/// The model name every engine serves and every request asks for.
pub const MODEL: &str = "sim";

impl CompareOptions {
    /// The defaults of the command: the shipped conversation trace, 4 workers, speedup 10.
    pub fn new(out: impl Into<PathBuf>) -> Self {
        let root = workspace_root();
        let root = root.canonicalize().unwrap_or(root);
        Self {
            trace: root.join("traces/conversation_trace.jsonl.gz"),
            block_tokens: 512,
            workers: 4,
            speedup: 10.0,
            max_requests: None,
            max_output_tokens: 256,
            warmup: 8,
            kv_blocks: 16_384,
            model_dir: root.join("tests/data/word-tokenizer"),
            o200k: false,
            out: out.into(),
            peers_dir: peers::default_dir(),
            switchyard_config: None,
        }
    }

    /// One line saying what was compared.
    pub fn setup(&self) -> String {
        format!(
            "trace {}{}, text prompts, block tokens {}, speedup {}, max output tokens {}, \
             warm-up {}; {} simulated engines each with {} KV blocks of {BLOCK_SIZE} tokens, \
             speedup {}, tokenizer {}",
            self.trace.display(),
            self.max_requests
                .map_or(String::new(), |n| format!(" (first {n} requests)")),
            self.block_tokens,
            self.speedup,
            self.max_output_tokens,
            self.warmup,
            self.workers,
            self.kv_blocks,
            self.speedup,
            self.tokenizer(),
        )
    }

    /// The tokenizer every process uses, as the setup line names it.
    pub fn tokenizer(&self) -> String {
        match self.o200k {
            true => "tiktoken o200k_base".to_owned(),
            false => self.model_dir.join("tokenizer.json").display().to_string(),
        }
    }
}

/// Brings up the fleet and `router`, replays the trace through it, stops everything and
/// returns the row. A peer that is not installed is [`Outcome::NotInstalled`]; a fleet or
/// router that does not come up, or a bench that does not run, is [`Outcome::Failed`].
pub async fn run_router(router: Router, opts: &CompareOptions) -> Outcome {
    if let Some(missing) = peers::missing(router, &opts.peers_dir) {
        return Outcome::NotInstalled(missing);
    }
    let front = match fronts::start(router, opts).await {
        Ok(front) => front,
        Err(e) => return Outcome::Failed(format!("did not come up: {e}")),
    };
    let json = opts.out.join(format!("{}.json", router.name()));
    let before = front.cpu();
    let ran = bench(&front, router, opts, &json).await;
    let cpu = front.cpu().since(before);
    let stages = stage_times(&front, router, opts).await;
    let stopped = front.stop().await;
    match ran {
        Ok(()) => match table::read_row(router, &json) {
            Ok(mut row) => {
                row.cpu = Some(cpu);
                row.stages = stages;
                row.notes.extend(stopped);
                Outcome::Ran(Box::new(row))
            }
            Err(e) => Outcome::Failed(e),
        },
        Err(e) => Outcome::Failed(e),
    }
}

/// Switchyard's stage times over the run (`stages.rs`), read from every replica's
/// `/metrics`, each scrape also kept as `<router>-metrics-<i>.txt`; `None` for the others.
async fn stage_times(
    front: &fronts::Front,
    router: Router,
    opts: &CompareOptions,
) -> Option<stages::StageTimes> {
    let urls = front.admin_urls();
    if urls.is_empty() {
        return None;
    }
    let http = reqwest::Client::new();
    let mut times = stages::StageTimes::default();
    for (i, url) in urls.iter().enumerate() {
        let Ok(response) = http.get(format!("{url}/metrics")).send().await else {
            continue;
        };
        let Ok(text) = response.text().await else {
            continue;
        };
        let file = opts.out.join(format!("{}-metrics-{i}.txt", router.name()));
        let _ = std::fs::write(file, &text);
        times.add_scrape(&text);
    }
    (!times.is_empty()).then_some(times)
}

/// `router-tools bench` through `front`: the trace as text, its table in `<router>.txt`, its
/// JSON (every request) in `json`, its plots in `<router>/`; progress on this stderr.
async fn bench(
    front: &fronts::Front,
    router: Router,
    opts: &CompareOptions,
    json: &Path,
) -> Result<(), String> {
    let name = router.name();
    let table = opts.out.join(format!("{name}.txt"));
    let stdout = std::fs::File::create(&table)
        .map_err(|e| format!("cannot write {}: {e}", table.display()))?;
    let plots = opts.out.join(name);
    let mut command = router_tools();
    command
        .args(["bench", "--url", &front.url, "--trace"])
        .arg(&opts.trace)
        .args(["--prompt-format", "text", "--model", MODEL])
        .args(["--block-tokens", &opts.block_tokens.to_string()])
        .args(["--speedup", &opts.speedup.to_string()])
        .args(["--max-output-tokens", &opts.max_output_tokens.to_string()])
        .args(["--warmup", &opts.warmup.to_string()])
        .args(["--timeout-secs", "600", "--per-request", "--json"])
        .arg(json)
        .arg("--plots")
        .arg(&plots);
    if let Some(n) = opts.max_requests {
        command.args(["--max-requests", &n.to_string()]);
    }
    command
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(Stdio::inherit());
    let mut child = tokio::process::Command::from(command)
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("cannot run router-tools bench: {e}"))?;
    let status = child
        .wait()
        .await
        .map_err(|e| format!("router-tools bench: {e}"))?;
    // Exit 0: the run finished (shed requests included); 1: every request failed.
    match status.code() {
        Some(0) => Ok(()),
        Some(1) if json.is_file() => Ok(()),
        _ => Err(format!(
            "router-tools bench exited {status} (its output: {})",
            table.display()
        )),
    }
}

/// How long a fleet and its router may take to come up (Python peers import for seconds).
pub const UP_TIMEOUT: Duration = Duration::from_secs(180);
