//! The harness of the disaggregated frontend tests, shared by `disagg_frontend.rs` (vLLM
//! convention) and `disagg_sglang.rs` (SGLang): a node's prefill and decode RouterActors on a
//! `LocalBus`, simulated or stand-in workers, and the frontend over both pools, using the
//! including module's `CONVENTION` (each includes it with `#[path]`).

use futures::StreamExt as _;
use router_actors::bus::Bus;
use router_actors::bus::local::LocalBus;
use router_actors::wire::{Subjects, WorkerAnnounce};
use router_actors::{Node, NodeConfig, PeerSyncConfig, RouterHandle, Topology, WorkerLink};
use router_core::ledger::LedgerSnapshot;
use router_core::{PolicyProfile, PoolRole, RouterId, WorkerId, WorkerSpec};
use router_node::frontend::{AppState, Limits, StaticDirectory, serve, serve_admin};
use router_sim::Role;
use router_sim::{SimConfig, SimWorker};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::{oneshot, watch};

pub(crate) const MS: Duration = Duration::from_millis(1);
pub(crate) const CLUSTER: &str = "switchyard";

/// One class; a decode rank has room while booked + reserved + need ≤ half its KV.
pub(crate) const PROFILE: &str = r#"
default_class = "interactive"
[[classes]]
name = "interactive"
slo_ms = 20000
quantum = 100
prefill_busy_threshold = 100000
decode_busy_threshold_frac = 0.5
"#;

pub(crate) const PREFILL_ID: u64 = 1;
pub(crate) const DECODE_ID: u64 = 11;

pub(crate) struct Fleet {
    pub(crate) node: Node,
    pub(crate) profile: &'static str,
    pub(crate) bus: Arc<dyn Bus>,
    pub(crate) directory: HashMap<WorkerId, String>,
    pub(crate) workers: Vec<SimWorker>,
    pub(crate) links: Vec<WorkerLink>,
}

pub(crate) struct Frontend {
    pub(crate) url: String,
    /// The admin listener (`/metrics`, `/debug/state`; read by `classifiers.rs`).
    #[allow(dead_code)]
    pub(crate) admin_url: String,
    pub(crate) state: AppState,
    pub(crate) prefill: RouterHandle,
    pub(crate) decode: RouterHandle,
    pub(crate) http: reqwest::Client,
    pub(crate) _stop: oneshot::Sender<()>,
    pub(crate) _stop_admin: oneshot::Sender<()>,
    pub(crate) _fleet: Fleet,
}

pub(crate) async fn fleet() -> Fleet {
    fleet_with(PROFILE).await
}

pub(crate) async fn fleet_with(profile: &'static str) -> Fleet {
    let mut config = NodeConfig::new(
        CLUSTER,
        RouterId(uuid::Uuid::from_u128(7)),
        Topology::Disaggregated,
        PolicyProfile::from_toml_str(profile).unwrap(),
    );
    config.peer_sync = PeerSyncConfig {
        snapshot_window: 50 * MS,
        snapshot_timeout: 100 * MS,
        ..PeerSyncConfig::default()
    };
    config.recheck_every = 100 * MS;
    let bus: Arc<dyn Bus> = Arc::new(LocalBus::new());
    let node = Node::start(config, Arc::clone(&bus)).await.unwrap();
    Fleet {
        node,
        profile,
        bus,
        directory: HashMap::new(),
        workers: Vec::new(),
        links: Vec::new(),
    }
}

impl Fleet {
    /// A simulated worker announcing itself in its role's pool.
    pub(crate) async fn sim(&mut self, id: u64, role: Role, total_kv_blocks: usize, speedup: f64) {
        let cfg = SimConfig {
            total_kv_blocks,
            speedup,
            ..Self::sim_config(id, role)
        };
        self.start_sim(cfg).await;
    }

    /// A simulated worker with a staging timeout of `staging` (prefill role; SGLang tests).
    #[allow(dead_code)]
    pub(crate) async fn sim_staging(&mut self, id: u64, role: Role, staging: Duration) {
        let cfg = SimConfig {
            speedup: 20.0,
            staging_timeout: staging,
            ..Self::sim_config(id, role)
        };
        self.start_sim(cfg).await;
    }

    fn sim_config(id: u64, role: Role) -> SimConfig {
        SimConfig {
            worker_id: WorkerId(id),
            role,
            heartbeat: 100 * MS,
            cluster: CLUSTER.to_owned(),
            ..crate::support::sim_config()
        }
    }

    async fn start_sim(&mut self, cfg: SimConfig) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let id = cfg.worker_id;
        let worker = SimWorker::start(listener, Arc::clone(&self.bus), cfg)
            .await
            .unwrap();
        self.directory.insert(id, worker.endpoint().to_owned());
        self.workers.push(worker);
    }

    /// A worker announced at `endpoint` without a simulated engine behind it.
    pub(crate) async fn announce(&mut self, id: u64, pool: PoolRole, endpoint: &str) {
        let announce = WorkerAnnounce {
            spec: WorkerSpec::new(id, 1, 16_384, 8192),
            pool,
            endpoint: endpoint.to_owned(),
            heartbeat_ms: 0,
            lease_ms: 5_000,
            leaving: false,
        };
        let link = WorkerLink::start(
            Arc::clone(&self.bus),
            &Subjects::new(CLUSTER),
            announce,
            100 * MS,
        )
        .await
        .unwrap();
        self.directory.insert(WorkerId(id), endpoint.to_owned());
        self.links.push(link);
    }

    /// The frontend over the node's two pools, once the node admits and both pools know
    /// their worker.
    pub(crate) async fn frontend(self) -> Frontend {
        self.frontend_tuned(|state| state).await
    }

    /// [`Self::frontend`] with its state changed by `tune` first.
    pub(crate) async fn frontend_tuned(self, tune: impl FnOnce(AppState) -> AppState) -> Frontend {
        let mut ready = self.node.ready();
        tokio::time::timeout(Duration::from_secs(10), ready.wait_for(|r| *r))
            .await
            .expect("node ready in time")
            .unwrap();
        let prefill = self.node.router(PoolRole::Prefill).unwrap().clone();
        let decode = self.node.router(PoolRole::Decode).unwrap().clone();
        for router in [&prefill, &decode] {
            eventually("both pools know their worker", || async {
                !ledger(router).await.ranks.is_empty()
            })
            .await;
        }
        let (_ready_tx, ready_rx) = watch::channel(true);
        let state = AppState::new(
            prefill.clone(),
            Arc::new(StaticDirectory(self.directory.clone())),
            PolicyProfile::from_toml_str(self.profile).unwrap(),
            Limits::default(),
            ready_rx,
        )
        .with_decode(decode.clone())
        .with_convention(super::CONVENTION);
        let state = tune(state);
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let admin = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let admin_url = format!("http://{}", admin.local_addr().unwrap());
        let (stop, stopped) = oneshot::channel::<()>();
        let (stop_admin, admin_stopped) = oneshot::channel::<()>();
        tokio::spawn(serve(listener, state.clone(), async {
            let _ = stopped.await;
        }));
        tokio::spawn(serve_admin(admin, state.clone(), None, async {
            let _ = admin_stopped.await;
        }));
        Frontend {
            url,
            admin_url,
            state,
            prefill,
            decode,
            http: reqwest::Client::new(),
            _stop: stop,
            _stop_admin: stop_admin,
            _fleet: self,
        }
    }
}

pub(crate) async fn ledger(router: &RouterHandle) -> LedgerSnapshot {
    router.observe().await.unwrap().scheduler.ledger
}

/// Polls `check` every 10 ms for up to 20 s (generous: CI machines are slow and shared).
pub(crate) async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    for _ in 0..2000 {
        if check().await {
            return;
        }
        tokio::time::sleep(10 * MS).await;
    }
    panic!("never happened: {what}");
}

impl Frontend {
    pub(crate) fn post(&self, path: &str) -> reqwest::RequestBuilder {
        self.http.post(format!("{}{}", self.url, path))
    }

    /// Waits (bounded) until both ledgers are idle (no booking, no reservation, no load)
    /// and nothing is in flight.
    pub(crate) async fn assert_idle(&self) {
        for _ in 0..300 {
            let p = self.prefill.observe().await.unwrap().scheduler;
            let d = self.decode.observe().await.unwrap().scheduler;
            if p.ledger.is_idle() && d.ledger.is_idle() && self.state.metrics.inflight() == 0 {
                return;
            }
            tokio::time::sleep(10 * MS).await;
        }
        let p = self.prefill.observe().await.unwrap().scheduler;
        let d = self.decode.observe().await.unwrap().scheduler;
        panic!(
            "not idle: prefill {:?}, decode {:?}, inflight {}",
            p.ledger,
            d.ledger,
            self.state.metrics.inflight()
        );
    }

    /// A worker's `/load`.
    pub(crate) async fn load(&self, id: u64) -> Value {
        let base = &self._fleet.directory[&WorkerId(id)];
        self.http
            .get(format!("{base}/load"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    }
}

/// `blocks` full blocks of token ids, distinct per `seed`.
pub(crate) fn prompt(seed: u32, blocks: u32) -> Vec<u32> {
    (0..blocks * 16).map(|t| seed * 100_000 + t).collect()
}

/// A prefill and a decode simulated worker behind the frontend.
/// A stand-in prefill worker (one chunk, then `fault`) and a simulated decode worker at
/// `decode_speedup`, behind the frontend.
pub(crate) async fn stand_in_prefill(
    fault: crate::support::Fault,
    decode_speedup: f64,
) -> (crate::support::StandInWorker, Frontend) {
    let prefill = crate::support::spawn_faulty_worker(1, MS, fault).await;
    let mut fleet = fleet().await;
    fleet
        .announce(PREFILL_ID, PoolRole::Prefill, &prefill.url)
        .await;
    fleet
        .sim(DECODE_ID, Role::Decode, 16_384, decode_speedup)
        .await;
    (prefill, fleet.frontend().await)
}

pub(crate) async fn sim_fleet(
    decode_kv: usize,
    prefill_speedup: f64,
    decode_speedup: f64,
) -> Frontend {
    let mut fleet = fleet().await;
    fleet
        .sim(PREFILL_ID, Role::Prefill, 16_384, prefill_speedup)
        .await;
    fleet
        .sim(DECODE_ID, Role::Decode, decode_kv, decode_speedup)
        .await;
    fleet.frontend().await
}

/// Both conventions: a completion and a streamed chat each run a prefill and a decode leg;
/// the prefill worker computes the prompts and hands both KVs over, the decode worker pulls
/// them and computes no prompt token itself.
pub(crate) async fn both_legs_serve_a_completion_and_a_streamed_chat() {
    let fe = sim_fleet(16_384, 20.0, 20.0).await;

    let body: Value = fe
        .post("/v1/completions")
        .json(&json!({"model": "sim", "prompt": prompt(1, 4), "max_tokens": 5}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(body["choices"][0]["text"], "tok tok tok tok tok ", "{body}");
    assert_eq!(body["usage"]["completion_tokens"], 5, "{body}");
    assert_eq!(body["usage"]["prompt_tokens"], 64, "{body}");

    let response = fe
        .post("/v1/chat/completions")
        .json(
            &json!({"model": "sim", "messages": [{"role": "user", "content": "hi there"}],
                      "max_tokens": 3, "stream": true}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(
        response.headers()["content-type"],
        "text/event-stream",
        "streamed"
    );
    let text = response.text().await.unwrap();
    assert_eq!(text.matches(r#""content":"tok ""#).count(), 3, "{text}");
    assert!(text.trim_end().ends_with("data: [DONE]"), "{text}");
    fe.assert_idle().await;

    let prefill = fe.load(PREFILL_ID).await;
    assert_eq!(prefill["pulled"], 2, "{prefill}");
    assert_eq!(prefill["staged"], 0, "{prefill}");
    assert_eq!(prefill["stranded"], 0, "{prefill}");
    assert!(
        prefill["prefill_tokens"].as_u64().unwrap() >= 64,
        "{prefill}"
    );
    let decode = fe.load(DECODE_ID).await;
    assert_eq!(decode["prefill_tokens"], 0, "{decode}");
    assert_eq!(decode["pull_failures"], 0, "{decode}");
    assert_eq!(decode["output_tokens"], 8, "{decode}");
    let stats = fe.decode.observe().await.unwrap().scheduler.stats;
    assert_eq!(stats.admitted_upstream, 2, "{stats:?}");
}

/// Both conventions: a client that leaves once the decode stream has begun (the prefill
/// booking already ended, the decode booking live) leaves both pools idle.
pub(crate) async fn a_client_leaving_mid_stream_releases_both_pools() {
    // A slow decode: 200 tokens take seconds.
    let fe = sim_fleet(16_384, 20.0, 0.2).await;
    let response = fe
        .post("/v1/completions")
        .json(
            &json!({"model": "sim", "prompt": prompt(8, 4), "max_tokens": 200,
                      "stream": true}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let mut body = response.bytes_stream();
    let first = body.next().await.unwrap().unwrap();
    assert!(!first.is_empty());
    let (prefill, decode) = (fe.prefill.clone(), fe.decode.clone());
    eventually("the prefill answer ended the prefill booking", || async {
        let (p, d) = (ledger(&prefill).await, ledger(&decode).await);
        p.bookings == 0 && (d.bookings, d.reservations) == (1, 0)
    })
    .await;
    drop(body);
    fe.assert_idle().await;
    let load = fe.load(PREFILL_ID).await;
    assert_eq!(load["pulled"], 1, "{load}");
}
