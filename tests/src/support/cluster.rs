//! The cluster harness: a whole replicated fleet from real processes, as an operator runs
//! it. [`ClusterBuilder`] starts a real nats-server, N `router-node serve` replicas on it, M
//! simulated workers (`worker --sim`: one aggregated pool, or disaggregated prefill and
//! decode pools, each worker with its own KV blocks, all at one speedup) and HAProxy in front
//! of the replicas. [`Cluster`] then waits until the fleet is whole ([`Cluster::wait_ready`]:
//! every replica ready, knowing every worker and every peer, and HAProxy's checks passing on
//! every replica) and reads it from outside: each replica's `/debug/state` and `/metrics`,
//! each worker's own `/load`, a [`KvSampler`] over the decode workers, and whether every
//! ledger returned to idle.
//!
//! Every process is killed when the cluster is dropped; [`Cluster::stop`] sends SIGTERM to
//! each instead and returns how each exited.

use super::haproxy::{Haproxy, HaproxyConfig};
use super::observe::{KvSampler, get_json, get_text, ledger_idle, router_snapshots, status_of};
use super::process::{NodeBus, RouterNode, SimWorker, Stopped};
use super::{NatsServer, TempDir};
use serde_json::Value;
use std::time::Duration;

/// The part a simulated worker plays.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Agg,
    Prefill,
    Decode,
}

impl Role {
    /// Its `--role` value.
    pub fn arg(self) -> &'static str {
        match self {
            Self::Agg => "agg",
            Self::Prefill => "prefill",
            Self::Decode => "decode",
        }
    }

    /// The first worker id of the role: prefill 1.., decode 101.., aggregated 1...
    fn first_id(self) -> u64 {
        match self {
            Self::Agg | Self::Prefill => 1,
            Self::Decode => 101,
        }
    }
}

/// What fleet to start. Defaults: one replica, no workers, speedup 10, heartbeats every
/// 200 ms, the fallback policy (one class that never queues), HAProxy in front.
#[derive(Debug, Clone)]
pub struct ClusterBuilder {
    replicas: usize,
    workers: Vec<(Role, u64)>,
    speedup: f64,
    heartbeat_ms: u64,
    policy: Option<String>,
    node_extra: String,
    extra: String,
    haproxy: Option<HaproxyConfig>,
}

impl Default for ClusterBuilder {
    fn default() -> Self {
        Self {
            replicas: 1,
            workers: Vec::new(),
            speedup: 10.0,
            heartbeat_ms: 200,
            policy: None,
            node_extra: String::new(),
            extra: String::new(),
            haproxy: Some(HaproxyConfig::default()),
        }
    }
}

impl ClusterBuilder {
    pub fn new() -> Self {
        Self::default()
    }

    /// `n` `serve` replicas.
    pub fn replicas(mut self, n: usize) -> Self {
        self.replicas = n;
        self
    }

    /// `count` more workers of `role`, each with `kv_blocks` KV blocks. Prefill and decode
    /// workers make the replicas disaggregated (`node.topology`); they cannot be mixed with
    /// aggregated ones.
    pub fn workers(mut self, role: Role, count: usize, kv_blocks: u64) -> Self {
        self.workers
            .extend(std::iter::repeat_n((role, kv_blocks), count));
        self
    }

    /// Every worker's `--speedup`.
    pub fn speedup(mut self, speedup: f64) -> Self {
        self.speedup = speedup;
        self
    }

    /// Workers' announcement and load period and the replicas' peer heartbeat.
    pub fn heartbeat_ms(mut self, ms: u64) -> Self {
        self.heartbeat_ms = ms;
        self
    }

    /// A policy profile (TOML) every replica loads.
    pub fn policy(mut self, toml: &str) -> Self {
        self.policy = Some(toml.to_owned());
        self
    }

    /// More `[node]` keys of every replica (`topology` is set from the workers).
    pub fn node_extra(mut self, keys: &str) -> Self {
        self.node_extra = keys.to_owned();
        self
    }

    /// More tables of every replica's config (not `[node]`, `[http]`, `[bus]`,
    /// `[telemetry]`, `[peer_sync]` or `[policy]`, which the harness writes).
    pub fn extra(mut self, tables: &str) -> Self {
        self.extra = tables.to_owned();
        self
    }

    /// HAProxy with another configuration.
    pub fn haproxy(mut self, config: HaproxyConfig) -> Self {
        self.haproxy = Some(config);
        self
    }

    /// No load balancer: clients talk to the replicas themselves.
    pub fn without_haproxy(mut self) -> Self {
        self.haproxy = None;
        self
    }

    /// Starts every process; returns once each serves HTTP (not yet [`Cluster::wait_ready`]).
    pub async fn start(self) -> Cluster {
        assert!(self.replicas > 0, "a cluster needs a replica");
        assert!(!self.workers.is_empty(), "a cluster needs workers");
        let has = |role: Role| self.workers.iter().any(|(r, _)| *r == role);
        let disaggregated = has(Role::Prefill) || has(Role::Decode);
        assert!(
            !disaggregated || (has(Role::Prefill) && has(Role::Decode) && !has(Role::Agg)),
            "a disaggregated cluster needs prefill and decode workers and no aggregated one"
        );
        let nats = NatsServer::start().await.expect("a nats-server");
        let name = format!("cluster{}", uuid::Uuid::new_v4().simple());
        let dir = TempDir::new("cluster");

        let mut started: Vec<Role> = Vec::new();
        let mut workers = Vec::new();
        for (role, kv_blocks) in &self.workers {
            let id = role.first_id() + started.iter().filter(|r| *r == role).count() as u64;
            started.push(*role);
            let args: Vec<String> = [
                "--role",
                role.arg(),
                "--nats",
                nats.url(),
                "--cluster",
                &name,
                "--worker-id",
                &id.to_string(),
                "--kv-blocks",
                &kv_blocks.to_string(),
                "--speedup",
                &self.speedup.to_string(),
                "--heartbeat-ms",
                &self.heartbeat_ms.to_string(),
            ]
            .iter()
            .map(|s| (*s).to_owned())
            .collect();
            let (role, kv_blocks) = (*role, *kv_blocks);
            workers.push(tokio::task::spawn_blocking(move || {
                let args: Vec<&str> = args.iter().map(String::as_str).collect();
                let proc = SimWorker::start(&format!("{} worker {id}", role.arg()), &args);
                ClusterWorker {
                    id,
                    role,
                    kv_blocks,
                    proc,
                }
            }));
        }

        let node_extra = format!(
            "{}\n{}",
            if disaggregated {
                "topology = \"disaggregated\""
            } else {
                ""
            },
            self.node_extra
        );
        let policy = match &self.policy {
            Some(text) => format!(
                "[policy]\npath = {:?}\n\n",
                dir.write("policy.toml", text).to_string_lossy()
            ),
            None => String::new(),
        };
        let extra = format!(
            "[peer_sync]\nheartbeat_ms = {}\n\n{policy}{}",
            self.heartbeat_ms, self.extra
        );
        let bus = NodeBus::Nats(nats.url().to_owned());
        let replicas: Vec<_> = (0..self.replicas)
            .map(|i| {
                let (name, bus, node_extra, extra) =
                    (name.clone(), bus.clone(), node_extra.clone(), extra.clone());
                tokio::task::spawn_blocking(move || {
                    RouterNode::start_with_node(
                        &format!("replica {i}"),
                        &name,
                        &bus,
                        &node_extra,
                        &extra,
                    )
                })
            })
            .collect();

        let mut started_workers = Vec::new();
        for worker in workers {
            started_workers.push(worker.await.expect("a worker started"));
        }
        let mut started_replicas = Vec::new();
        for replica in replicas {
            started_replicas.push(replica.await.expect("a replica started"));
        }
        let haproxy = match self.haproxy {
            Some(config) => {
                let backends: Vec<String> = started_replicas
                    .iter()
                    .map(|r| r.url().to_owned())
                    .collect();
                Some(
                    tokio::task::spawn_blocking(move || Haproxy::start_with(&backends, &config))
                        .await
                        .expect("haproxy started"),
                )
            }
            None => None,
        };
        Cluster {
            haproxy,
            replicas: started_replicas,
            workers: started_workers,
            nats,
            name,
            disaggregated,
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(5))
                .build()
                .expect("an HTTP client"),
            _dir: dir,
        }
    }
}

/// One simulated worker of a cluster.
#[derive(Debug)]
pub struct ClusterWorker {
    pub id: u64,
    pub role: Role,
    pub kv_blocks: u64,
    pub proc: SimWorker,
}

/// A running fleet. Fields drop in order: the load balancer first, NATS last.
#[derive(Debug)]
pub struct Cluster {
    pub haproxy: Option<Haproxy>,
    pub replicas: Vec<RouterNode>,
    pub workers: Vec<ClusterWorker>,
    pub nats: NatsServer,
    /// The subject prefix (`node.cluster`, `--cluster`) of this fleet.
    pub name: String,
    pub disaggregated: bool,
    http: reqwest::Client,
    _dir: TempDir,
}

impl Cluster {
    /// Where clients send requests: HAProxy, else the first replica.
    pub fn url(&self) -> String {
        match &self.haproxy {
            Some(haproxy) => haproxy.url(),
            None => self.replicas[0].url().to_owned(),
        }
    }

    /// The workers holding decode KV: the decode pool, or every aggregated worker.
    pub fn decode_workers(&self) -> Vec<&ClusterWorker> {
        let role = if self.disaggregated {
            Role::Decode
        } else {
            Role::Agg
        };
        self.workers.iter().filter(|w| w.role == role).collect()
    }

    /// Waits until every replica answers `/ready` 200, lists every worker in its registry and
    /// every other replica as a peer in each pool, and HAProxy's last check passed on every
    /// replica. Panics after `timeout`, naming what was still missing.
    pub async fn wait_ready(&self, timeout: Duration) {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let missing = self.not_ready().await;
            let Some(missing) = missing else { return };
            if tokio::time::Instant::now() >= deadline {
                panic!(
                    "cluster not ready within {timeout:?}: {missing}\n{}",
                    self.outputs()
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// What keeps the cluster from being ready, or `None`.
    async fn not_ready(&self) -> Option<String> {
        for (i, replica) in self.replicas.iter().enumerate() {
            let status = status_of(&self.http, &format!("{}/ready", replica.url())).await;
            if status != 200 {
                return Some(format!("replica {i}: /ready answers {status}"));
            }
            let state = match get_json(&self.http, &format!("{}/debug/state", replica.url())).await
            {
                Ok(state) => state,
                Err(e) => return Some(format!("replica {i}: {e}")),
            };
            let workers = state["node"]["registry"]["workers"]
                .as_array()
                .map_or(0, Vec::len);
            if workers != self.workers.len() {
                return Some(format!(
                    "replica {i} knows {workers} of {} workers",
                    self.workers.len()
                ));
            }
            let syncs = state["node"]["peer_sync"].as_array().cloned();
            for sync in syncs.unwrap_or_default() {
                let peers = sync["state"]["peers"].as_array().map_or(0, Vec::len);
                if peers + 1 != self.replicas.len() {
                    return Some(format!(
                        "replica {i} sees {peers} peers in pool {}",
                        sync["pool"]
                    ));
                }
            }
        }
        if let Some(haproxy) = &self.haproxy {
            match haproxy.servers(&self.http).await {
                Ok(servers) if servers.len() == self.replicas.len() => {
                    if let Some(down) = servers.iter().find(|s| !s.checked_up()) {
                        return Some(format!("haproxy sees {down:?}"));
                    }
                }
                Ok(servers) => return Some(format!("haproxy lists {servers:?}")),
                Err(e) => return Some(e),
            }
        }
        None
    }

    /// Each replica's `/debug/state`.
    pub async fn states(&self) -> Vec<Result<Value, String>> {
        let mut states = Vec::new();
        for replica in &self.replicas {
            states.push(get_json(&self.http, &format!("{}/debug/state", replica.url())).await);
        }
        states
    }

    /// Each replica's `/metrics` (Prometheus text).
    pub async fn metrics(&self) -> Vec<Result<String, String>> {
        let mut all = Vec::new();
        for replica in &self.replicas {
            all.push(get_text(&self.http, &format!("{}/metrics", replica.url())).await);
        }
        all
    }

    /// Each worker's own `/load` (its `kv_used_blocks`, `running`, ...), by worker id.
    pub async fn worker_loads(&self) -> Vec<(u64, Result<Value, String>)> {
        let mut loads = Vec::new();
        for worker in &self.workers {
            let url = format!("{}/load", worker.proc.url());
            loads.push((worker.id, get_json(&self.http, &url).await));
        }
        loads
    }

    /// Starts sampling the decode workers' own KV use every `every`.
    pub fn sample_decode_kv(&self, every: Duration) -> KvSampler {
        let workers = self
            .decode_workers()
            .iter()
            .map(|w| (w.id, w.proc.url().to_owned()))
            .collect();
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(1))
            .build()
            .expect("an HTTP client");
        KvSampler::start(http, workers, every)
    }

    /// Waits until every pool's ledger of every replica is idle (no booking, no
    /// reservation, no load, empty queue); the error shows what was still held.
    pub async fn wait_ledgers_idle(&self, timeout: Duration) -> Result<(), String> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let mut held = Vec::new();
            for (i, state) in self.states().await.into_iter().enumerate() {
                match state {
                    Ok(state) if ledger_idle(&state) => {}
                    Ok(state) => {
                        let pools: Vec<String> = router_snapshots(&state)
                            .iter()
                            .map(|s| {
                                format!(
                                    "{}: ledger {} queue {}",
                                    s["role"], s["scheduler"]["ledger"], s["scheduler"]["queue"]
                                )
                            })
                            .collect();
                        held.push(format!("replica {i}: {}", pools.join("; ")));
                    }
                    Err(e) => held.push(format!("replica {i}: {e}")),
                }
            }
            if held.is_empty() {
                return Ok(());
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(format!(
                    "ledgers not idle within {timeout:?}:\n{}",
                    held.join("\n")
                ));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Everything every process printed, for assertion messages.
    pub fn outputs(&self) -> String {
        let mut all = String::new();
        if let Some(haproxy) = &self.haproxy {
            all.push_str(&format!("=== haproxy\n{}\n", haproxy.output()));
        }
        for (i, replica) in self.replicas.iter().enumerate() {
            all.push_str(&format!("=== replica {i}\n{}\n", replica.output()));
        }
        for worker in &self.workers {
            let role = worker.role.arg();
            all.push_str(&format!(
                "=== {role} worker {}\n{}\n",
                worker.id,
                worker.proc.output()
            ));
        }
        all
    }

    /// SIGTERM to HAProxy, every replica, then every worker (NATS still up), each waited
    /// for; returns each process's name and exit.
    pub fn stop(self) -> Vec<(String, Stopped)> {
        let mut stopped = Vec::new();
        if let Some(haproxy) = self.haproxy {
            stopped.push(("haproxy".to_owned(), haproxy.stop()));
        }
        for (i, replica) in self.replicas.into_iter().enumerate() {
            stopped.push((format!("replica {i}"), replica.stop()));
        }
        for worker in self.workers {
            let name = format!("{} worker {}", worker.role.arg(), worker.id);
            stopped.push((name, worker.proc.stop()));
        }
        stopped
    }
}
