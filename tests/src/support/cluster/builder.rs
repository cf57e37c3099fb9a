//! Starting a cluster: [`Role`] of a simulated worker and [`ClusterBuilder`], which starts
//! the nats-server, the workers and the replicas (in parallel, each on a port of its own),
//! then HAProxy in front of the replicas, and hands back a [`Cluster`].

use super::{Cluster, ClusterWorker};
use crate::support::haproxy::{Haproxy, HaproxyConfig};
use crate::support::process::{NodeBus, RouterNode, SimWorker};
use crate::support::{NatsServer, TempDir};
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
    http_extra: String,
    extra: String,
    haproxy: Option<HaproxyConfig>,
    /// Environment of every process (replicas and workers).
    env: Vec<(String, String)>,
    /// More environment of the workers alone.
    worker_env: Vec<(String, String)>,
    /// More arguments of every worker (e.g. `--tokenizer-config FILE`).
    worker_args: Vec<String>,
    /// More environment of replica `i` alone.
    replica_env: Vec<(usize, String, String)>,
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
            http_extra: String::new(),
            extra: String::new(),
            haproxy: Some(HaproxyConfig::default()),
            env: Vec::new(),
            worker_env: Vec::new(),
            worker_args: Vec::new(),
            replica_env: Vec::new(),
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

    /// More `[http]` keys of every replica (e.g. `shutdown_delay_ms = 1000`).
    pub fn http_extra(mut self, keys: &str) -> Self {
        self.http_extra = keys.to_owned();
        self
    }

    /// More tables of every replica's config (not `[node]`, `[http]`, `[bus]`,
    /// `[telemetry]`, `[peer_sync]` or `[policy]`, which the harness writes).
    pub fn extra(mut self, tables: &str) -> Self {
        self.extra = tables.to_owned();
        self
    }

    /// An environment variable of every process (replicas and workers), e.g. `OTEL_*`.
    pub fn env(mut self, name: &str, value: &str) -> Self {
        self.env.push((name.to_owned(), value.to_owned()));
        self
    }

    /// An environment variable of every worker.
    pub fn worker_env(mut self, name: &str, value: &str) -> Self {
        self.worker_env.push((name.to_owned(), value.to_owned()));
        self
    }

    /// More arguments of every worker, after the harness's own.
    pub fn worker_args(mut self, args: &[&str]) -> Self {
        self.worker_args
            .extend(args.iter().map(|a| (*a).to_owned()));
        self
    }

    /// An environment variable of replica `i` (from 0).
    pub fn replica_env(mut self, i: usize, name: &str, value: &str) -> Self {
        self.replica_env
            .push((i, name.to_owned(), value.to_owned()));
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
            .chain(self.worker_args.iter().cloned())
            .collect();
            let (role, kv_blocks) = (*role, *kv_blocks);
            let env: Vec<(String, String)> =
                self.env.iter().chain(&self.worker_env).cloned().collect();
            workers.push(tokio::task::spawn_blocking(move || {
                let args: Vec<&str> = args.iter().map(String::as_str).collect();
                let name = format!("{} worker {id}", role.arg());
                let proc = SimWorker::start_with_env(&name, &args, &env);
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
                let (name, bus, node_extra, http_extra, extra) = (
                    name.clone(),
                    bus.clone(),
                    node_extra.clone(),
                    self.http_extra.clone(),
                    extra.clone(),
                );
                let mut env = self.env.clone();
                env.extend(
                    self.replica_env
                        .iter()
                        .filter(|(r, _, _)| *r == i)
                        .map(|(_, k, v)| (k.clone(), v.clone())),
                );
                tokio::task::spawn_blocking(move || {
                    RouterNode::start_with_env(
                        &format!("replica {i}"),
                        &name,
                        &bus,
                        &[&node_extra, &http_extra, &extra],
                        &env,
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
