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
//!
//! - `builder.rs`: [`Role`] and [`ClusterBuilder`].

mod builder;
pub use builder::{ClusterBuilder, Role};

use super::haproxy::Haproxy;
use super::observe::{KvSampler, get_json, get_text, ledger_idle, router_snapshots, status_of};
use super::process::{RouterNode, SimWorker, Stopped};
use super::{NatsServer, TempDir};
use serde_json::Value;
use std::time::Duration;

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

    /// The prefill workers of a disaggregated fleet (none in an aggregated one).
    pub fn prefill_workers(&self) -> Vec<&ClusterWorker> {
        self.workers
            .iter()
            .filter(|w| w.role == Role::Prefill)
            .collect()
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
            let state =
                match get_json(&self.http, &format!("{}/debug/state", replica.admin_url())).await {
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
            states
                .push(get_json(&self.http, &format!("{}/debug/state", replica.admin_url())).await);
        }
        states
    }

    /// Each replica's `/metrics` (Prometheus text).
    pub async fn metrics(&self) -> Vec<Result<String, String>> {
        let mut all = Vec::new();
        for replica in &self.replicas {
            all.push(get_text(&self.http, &format!("{}/metrics", replica.admin_url())).await);
        }
        all
    }

    /// Each replica's `/ready`: its status (0: no answer) and JSON body (which says whether
    /// its bus is connected).
    pub async fn ready_bodies(&self) -> Vec<(u16, Value)> {
        let mut out = Vec::new();
        for replica in &self.replicas {
            let url = format!("{}/ready", replica.url());
            out.push(match self.http.get(&url).send().await {
                Ok(r) => (r.status().as_u16(), r.json().await.unwrap_or(Value::Null)),
                Err(_) => (0, Value::Null),
            });
        }
        out
    }

    /// What each replica's ledgers hold over every pool, from its `/debug/state`:
    /// (bookings, reservations, queued requests); an unreadable state is an error.
    pub async fn ledger_totals(&self) -> Vec<Result<(u64, u64, u64), String>> {
        self.states()
            .await
            .into_iter()
            .map(|state| {
                state.map(|state| {
                    let sum = |f: &dyn Fn(&Value) -> &Value| {
                        router_snapshots(&state)
                            .iter()
                            .map(|r| f(r).as_u64().unwrap_or(0))
                            .sum::<u64>()
                    };
                    (
                        sum(&|r| &r["scheduler"]["ledger"]["bookings"]),
                        sum(&|r| &r["scheduler"]["ledger"]["reservations"]),
                        sum(&|r| &r["scheduler"]["queue"]["len"]),
                    )
                })
            })
            .collect()
    }

    /// Each replica's count of live peers (the fewest over its pools) and of workers in its
    /// registry, from its `/debug/state` (`None` when unreadable).
    pub async fn membership(&self) -> Vec<Option<(usize, usize)>> {
        self.states()
            .await
            .into_iter()
            .map(|state| {
                let state = state.ok()?;
                let peers = state["node"]["peer_sync"]
                    .as_array()?
                    .iter()
                    .map(|s| s["state"]["peers"].as_array().map_or(0, Vec::len))
                    .min()?;
                let workers = state["node"]["registry"]["workers"].as_array()?.len();
                Some((peers, workers))
            })
            .collect()
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

    /// [`Self::stop`], then panics naming any router or worker process that did not exit
    /// with code 0 (HAProxy's own exit code is not the project's).
    pub fn stop_cleanly(self) {
        for (name, stopped) in self.stop() {
            if name != "haproxy" {
                assert_eq!(stopped.code, Some(0), "{name}: {}", stopped.stderr);
            }
        }
    }
}
