//! `router-tools demo`: the embedded default over real HTTP.
//!
//! One process, nothing installed: an in-process [`LocalBus`], `N` [`SimWorker`]s on
//! `127.0.0.1:0` (announced on the bus like any worker, with a small KV and a speedup so the
//! run takes seconds), one router node with the built-in two-class profile (its SLOs divided
//! by the same speedup) behind the OpenAI frontend on `--listen`, then the built-in workload
//! (`workload::generate`: shared system prompts, two classes, an overload phase) sent by
//! real streaming HTTP clients with `x-policy-class` to that endpoint (`load`). After the
//! load: the router's `/debug/state` (on the node's admin listener, `--admin-listen`) must
//! show an idle ledger and an empty queue, the
//! engines' counters give the prefix-cache hit rate, and the summary (`report`) is printed.
//! With `--once` everything stops; otherwise the node keeps serving until Ctrl-C.
//!
//! The node is assembled from the same parts as `router_node::serve` (`Config::node_config`,
//! `Node::start`, `AppState`, [`RegistryDirectory`], `frontend::serve` and
//! `frontend::serve_admin`); only the policy
//! profile comes from memory instead of a file.

mod load;
mod report;

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use router_actors::Node;
use router_actors::bus::Bus;
use router_actors::bus::local::LocalBus;
use router_core::{PoolRole, WorkerId};
use router_node::config::{BusKind, Config, TopologyKind};
use router_node::frontend::{self, AppState};
use router_node::serve::{RegistryDirectory, shutdown_signal};
use router_sim::Role;
use router_sim::{SimConfig, SimWorker};
use serde_json::Value;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::workload;
use report::{HttpReport, RunFacts};

/// Every modelled engine duration, and every class SLO, is divided by this.
pub const SPEEDUP: f64 = 10.0;
/// KV blocks (16 tokens) per simulated engine: about a dozen of the workload's requests.
pub const KV_BLOCKS: usize = 2048;
const MAX_BATCHED_TOKENS: usize = 8192;
/// How long the fleet may take to be announced and the node to be ready.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(15);
/// How long the ledger may take to drain after the last response.
const IDLE_TIMEOUT: Duration = Duration::from_secs(5);
const STOP_TIMEOUT: Duration = Duration::from_secs(5);

/// What `router-tools demo` (HTTP) was asked for.
#[derive(Debug, Clone)]
pub struct HttpOptions {
    /// A prefill pool and a decode pool of `workers` engines each.
    pub disagg: bool,
    pub workers: u32,
    pub requests: u32,
    pub seed: u64,
    pub listen: SocketAddr,
    /// Where the node serves `/metrics` and `/debug/state` (port 0: any free port).
    pub admin_listen: SocketAddr,
    pub once: bool,
    pub json: bool,
}

/// Runs the demo on its own runtime; the exit code follows `cli`'s convention.
pub fn main(opts: &HttpOptions) -> ExitCode {
    let runtime = match router_node::runtime::start("router-tools demo") {
        Ok(runtime) => runtime,
        Err(code) => return code,
    };
    runtime.block_on(async move {
        // Warnings only on stderr (the report is the output); spans when the standard
        // OTEL_* variables (or SWITCHYARD_OTLP_ENDPOINT) name an OTLP endpoint.
        let telemetry = router_node::config::TelemetrySection {
            log_filter: "warn".to_owned(),
            ..router_node::config::TelemetrySection::default()
        };
        let guard = match router_node::telemetry::init(&telemetry) {
            Ok(guard) => guard,
            Err(e) => {
                eprintln!("router-tools demo: {e}");
                return ExitCode::from(2);
            }
        };
        router_node::runtime::raise_open_files_limit();
        let code = match run(opts).await {
            Ok(code) => code,
            Err(e) => {
                eprintln!("router-tools demo: {e}");
                ExitCode::from(1)
            }
        };
        guard.shutdown().await;
        code
    })
}

/// The running pieces.
struct Fleet {
    workers: Vec<SimWorker>,
    node: Node,
    stop: oneshot::Sender<()>,
    server: JoinHandle<std::io::Result<()>>,
    stop_admin: oneshot::Sender<()>,
    admin: JoinHandle<std::io::Result<()>>,
}

impl Fleet {
    async fn shutdown(self) {
        let _ = self.stop.send(());
        let _ = self.stop_admin.send(());
        for mut server in [self.server, self.admin] {
            if tokio::time::timeout(STOP_TIMEOUT, &mut server)
                .await
                .is_err()
            {
                server.abort();
            }
        }
        self.node.shutdown().await;
        for worker in self.workers {
            let _ = tokio::time::timeout(STOP_TIMEOUT, worker.shutdown()).await;
        }
    }
}

async fn run(opts: &HttpOptions) -> Result<ExitCode, String> {
    let listener = TcpListener::bind(opts.listen)
        .await
        .map_err(|e| format!("--listen {}: cannot bind: {e}", opts.listen))?;
    let local = listener
        .local_addr()
        .map_err(|e| format!("cannot read the listener's address: {e}"))?;
    let url = format!("http://{local}");
    let admin_listener = TcpListener::bind(opts.admin_listen)
        .await
        .map_err(|e| format!("--admin-listen {}: cannot bind: {e}", opts.admin_listen))?;
    let admin_url = admin_listener
        .local_addr()
        .map(|a| format!("http://{a}"))
        .map_err(|e| format!("cannot read the admin listener's address: {e}"))?;
    let profile =
        workload::profile_scaled(SPEEDUP).map_err(|e| format!("built-in profile: {e}"))?;
    let class_names: Vec<String> = profile.classes().iter().map(|c| c.name.clone()).collect();
    let cluster = format!("demo-{}", uuid::Uuid::new_v4().simple());
    let bus: Arc<dyn Bus> = Arc::new(LocalBus::new());

    let engines = if opts.disagg {
        opts.workers * 2
    } else {
        opts.workers
    };
    let mut workers = Vec::with_capacity(engines as usize);
    for i in 0..engines {
        // Disaggregated: the first half prefill, the second half decode.
        let role = match (opts.disagg, i < opts.workers) {
            (false, _) => Role::Agg,
            (true, true) => Role::Prefill,
            (true, false) => Role::Decode,
        };
        let worker_listener = TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(|e| format!("binding a worker on 127.0.0.1:0: {e}"))?;
        let cfg = SimConfig {
            worker_id: WorkerId(u64::from(i) + 1),
            total_kv_blocks: KV_BLOCKS,
            max_num_batched_tokens: MAX_BATCHED_TOKENS,
            speedup: SPEEDUP,
            role,
            model: load::MODEL.to_owned(),
            cluster: cluster.clone(),
            heartbeat: Duration::from_millis(100),
            lease: Duration::from_secs(2),
            ..crate::worker::sim_config()
        };
        let worker = SimWorker::start(worker_listener, bus.clone(), cfg)
            .await
            .map_err(|e| format!("starting simulated worker {}: {e}", i + 1))?;
        workers.push(worker);
    }

    let config = node_config(&cluster, local, opts.disagg)?;
    let node = Node::start(config.node_config(profile.clone()), bus)
        .await
        .map_err(|e| format!("starting the node: {e}"))?;
    let gate = if opts.disagg {
        PoolRole::Prefill
    } else {
        PoolRole::Aggregated
    };
    let router = node
        .router(gate)
        .ok_or("the node has no admitting pool")?
        .clone();
    let decode = node.router(PoolRole::Decode).cloned();
    let state = AppState::new(
        router,
        Arc::new(RegistryDirectory(node.registry().clone())),
        profile,
        config.limits(),
        node.ready(),
    )
    .with_models([load::MODEL.to_owned()])
    .with_alive(node.alive());
    let state = match decode {
        Some(decode) => state.with_decode(decode),
        None => state,
    };
    let (stop, stopped) = oneshot::channel::<()>();
    let (stop_admin, admin_stopped) = oneshot::channel::<()>();
    let admin = tokio::spawn(frontend::serve_admin(
        admin_listener,
        state.clone(),
        None,
        async {
            let _ = admin_stopped.await;
        },
    ));
    let server = tokio::spawn(frontend::serve(listener, state, async {
        let _ = stopped.await;
    }));
    let fleet = Fleet {
        workers,
        node,
        stop,
        server,
        stop_admin,
        admin,
    };
    let urls = Urls {
        api: url.clone(),
        admin: admin_url.clone(),
    };
    let result = drive(opts, &fleet, &urls, &class_names).await;
    let report = match result {
        Ok(report) => report,
        Err(e) => {
            fleet.shutdown().await;
            return Err(e);
        }
    };
    if opts.json {
        match serde_json::to_string_pretty(&report) {
            Ok(json) => println!("{json}"),
            Err(e) => {
                fleet.shutdown().await;
                return Err(format!("cannot encode the report: {e}"));
            }
        }
    } else {
        print!("{}", report.render_table());
    }
    if !report.ok() {
        eprintln!("router-tools demo: accounting or ledger check failed (see the report)");
        if opts.once {
            fleet.shutdown().await;
            return Ok(ExitCode::from(1));
        }
        // Serving: other clients may already be sending (a bench started beside the demo),
        // so busy ledgers need not be a leak; the report said so, the node keeps serving.
        eprintln!(
            "router-tools demo: serving on (requests from other clients also keep the ledgers busy)"
        );
    }
    if !opts.once {
        let hint = format!(
            "\nThe node keeps serving the OpenAI API at {url} (Ctrl-C to stop), and \
             /metrics and /debug/state at {admin_url}. Try:\n  \
             curl -sN {url}/v1/completions -H 'content-type: application/json' \
             -H 'x-policy-class: interactive' \
             -d '{{\"model\":\"{model}\",\"prompt\":\"hello\",\"max_tokens\":8,\"stream\":true}}'\n  \
             curl -s {admin_url}/debug/state\n",
            model = load::MODEL
        );
        // Keep stdout parseable as JSON.
        if opts.json {
            eprint!("{hint}");
        } else {
            print!("{hint}");
        }
        shutdown_signal().await;
    }
    fleet.shutdown().await;
    Ok(ExitCode::SUCCESS)
}

/// The node's configuration: the in-process bus, `local` as its address, fast timers.
fn node_config(cluster: &str, local: SocketAddr, disagg: bool) -> Result<Config, String> {
    let mut config = Config::default();
    if disagg {
        config.node.topology = TopologyKind::Disaggregated;
    }
    config.node.cluster = cluster.to_owned();
    config.bus.kind = BusKind::InProcess;
    config.http.listen = local.to_string();
    config.http.models = vec![load::MODEL.to_owned()];
    config.http.drain_timeout_ms = 2_000;
    config.peer_sync.heartbeat_ms = 100;
    config.peer_sync.lease_ms = 500;
    config.peer_sync.snapshot_window_ms = 100;
    config.scheduler.recheck_ms = 50;
    config
        .validate()
        .map_err(|e| format!("the demo's node configuration: {e}"))?;
    Ok(config)
}

/// Where the node serves: the OpenAI API, and the admin endpoints.
struct Urls {
    api: String,
    admin: String,
}

/// Waits for the fleet, sends the workload, checks the ledger and builds the report.
async fn drive(
    opts: &HttpOptions,
    fleet: &Fleet,
    urls: &Urls,
    class_names: &[String],
) -> Result<HttpReport, String> {
    let url = urls.api.as_str();
    let engines = if opts.disagg {
        opts.workers * 2
    } else {
        opts.workers
    };
    wait_ready(fleet, engines).await?;
    // The frontend and the engines tokenize every prompt: build the tokenizer first so the
    // first requests do not wait for it.
    router_tokenizer::Prompter::default().warm().await;
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .map_err(|e| format!("building the HTTP client: {e}"))?;
    let specs = workload::generate(opts.requests, opts.workers, opts.seed);
    if !opts.json {
        eprintln!(
            "router-tools demo: {} simulated engines ready; sending {} streaming requests to {url}",
            opts.workers, opts.requests
        );
    }
    let started = Instant::now();
    let finished = load::run(url, specs, SPEEDUP).await?;
    let wall = started.elapsed();
    let (mut idle, state) = wait_idle(&client, &urls.admin).await?;
    // `/debug/state` shows the admitting pool; a decode pool must end idle too.
    if let Some(decode) = fleet.node.router(PoolRole::Decode) {
        idle &= decode_idle(decode).await;
    }
    let mut computed_tokens = 0;
    for worker in &fleet.workers {
        if let Some(engine) = worker.engine()
            && let Ok(load) = engine.load().await
        {
            computed_tokens += load.prefill_tokens;
        }
    }
    HttpReport::build(
        class_names,
        &finished,
        RunFacts {
            mode: if opts.disagg {
                "disaggregated"
            } else {
                "aggregated"
            },
            url: url.to_owned(),
            workers: engines,
            requests: opts.requests,
            seed: opts.seed,
            speedup: SPEEDUP,
            kv_blocks_per_worker: KV_BLOCKS,
            wall,
            computed_tokens,
            router_stats: state["scheduler"]["stats"].clone(),
            ledgers_idle: idle,
        },
    )
}

/// Until the node is ready and every worker's endpoint is in its registry.
async fn wait_ready(fleet: &Fleet, workers: u32) -> Result<(), String> {
    let deadline = Instant::now() + STARTUP_TIMEOUT;
    let mut ready = fleet.node.ready();
    loop {
        let known = (1..=u64::from(workers))
            .filter(|&w| fleet.node.registry().endpoint(WorkerId(w)).is_some())
            .count();
        if *ready.borrow_and_update() && known == workers as usize {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "the node was not ready after {STARTUP_TIMEOUT:?} ({known} of {workers} \
                 workers announced)"
            ));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Polls the decode router until its ledger is idle (or the timeout).
async fn decode_idle(decode: &router_actors::RouterHandle) -> bool {
    let deadline = Instant::now() + IDLE_TIMEOUT;
    while Instant::now() < deadline {
        if decode
            .observe()
            .await
            .is_ok_and(|s| s.scheduler.ledger.is_idle())
        {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

/// Polls `/debug/state` on the admin listener at `url` until the router's ledger and queue
/// are empty (or the timeout); returns whether they were and the last state read.
async fn wait_idle(client: &reqwest::Client, url: &str) -> Result<(bool, Value), String> {
    let deadline = Instant::now() + IDLE_TIMEOUT;
    loop {
        let state: Value = client
            .get(format!("{url}/debug/state"))
            .send()
            .await
            .map_err(|e| format!("GET /debug/state: {e}"))?
            .json()
            .await
            .map_err(|e| format!("GET /debug/state: not JSON: {e}"))?;
        if is_idle(&state) {
            return Ok((true, state));
        }
        if Instant::now() >= deadline {
            return Ok((false, state));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Nothing booked, reserved, queued or waiting in a `/debug/state` router snapshot.
fn is_idle(state: &Value) -> bool {
    let s = &state["scheduler"];
    let zero = |v: &Value| v.as_u64() == Some(0);
    let ranks_idle = s["ledger"]["ranks"].as_array().is_some_and(|ranks| {
        ranks.iter().all(|r| {
            zero(&r["prefill_tokens"])
                && zero(&r["decode_blocks"])
                && zero(&r["reserved_blocks"])
                && zero(&r["requests"])
        })
    });
    ranks_idle
        && zero(&s["ledger"]["bookings"])
        && zero(&s["ledger"]["reservations"])
        && zero(&s["queue"]["len"])
        && zero(&s["inflight_reservations"])
        && zero(&state["waiting_replies"])
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn idle_means_nothing_booked_queued_or_waiting() {
        let idle = json!({
            "waiting_replies": 0,
            "scheduler": {
                "queue": {"len": 0},
                "inflight_reservations": 0,
                "ledger": {"bookings": 0, "reservations": 0, "ranks": [
                    {"prefill_tokens": 0, "decode_blocks": 0, "reserved_blocks": 0, "requests": 0}
                ]},
            },
        });
        assert!(is_idle(&idle));
        let mut busy = idle.clone();
        busy["scheduler"]["ledger"]["ranks"][0]["decode_blocks"] = json!(3);
        assert!(!is_idle(&busy));
        let mut queued = idle.clone();
        queued["scheduler"]["queue"]["len"] = json!(1);
        assert!(!is_idle(&queued));
        assert!(!is_idle(&json!({"error": {}})));
    }
}
