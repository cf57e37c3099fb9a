//! What `/metrics` reads from a running node at scrape time: every RouterActor's, peer-sync
//! actor's, KV-events actor's and engine link's `observe()`, the worker registry's snapshot
//! (with the engines' own load) and the room bus counters, gathered concurrently with a short timeout per actor.
//!
//! An actor that is gone or does not answer within [`NodeSources::timeout`] is left out of
//! that scrape and named in [`NodeScrape::failed`] (the frontend counts it in
//! `switchyard_scrape_errors_total{component}`); a scrape never fails because of one.
//!
//! This module only gathers plain data; the families are declared in `families.rs` and
//! filled from a [`NodeScrape`] in `record.rs`.

use router_actors::kv_events::KvEventsSnapshot;
use router_actors::peer_sync::PeerSyncSnapshot;
use router_actors::registry::RegistrySnapshot;
use router_actors::room_bus::RoomBusCounters;
use router_actors::router::RouterSnapshot;
use router_actors::{KvEventsHandle, Node, PeerSyncHandle, RegistryHandle, RouterHandle};
use router_core::PoolRole;
use router_engine::{EngineLinkHandle, EngineLinkSnapshot};
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// How long one actor gets to answer a scrape by default.
pub const DEFAULT_SCRAPE_TIMEOUT: Duration = Duration::from_millis(200);

/// Clones of a node's handles: enough to observe it without owning it.
#[derive(Debug, Clone)]
pub struct NodeSources {
    routers: Vec<(PoolRole, RouterHandle)>,
    peer_syncs: Vec<(PoolRole, PeerSyncHandle)>,
    kv_events: Vec<(PoolRole, KvEventsHandle)>,
    registry: RegistryHandle,
    /// The node's own engine links (`[[engines]]`).
    engines: Vec<EngineLinkHandle>,
    room: Arc<RoomBusCounters>,
    /// Class names by class id (the node's policy profile), for the `class` label.
    classes: Arc<[String]>,
    timeout: Duration,
}

/// The room bus counters at one instant.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RoomCounts {
    pub published: u64,
    pub publish_errors: u64,
    pub received: u64,
    pub malformed: u64,
    pub unknown_version: u64,
    pub foreign_cluster: u64,
}

/// One scrape's worth of node state. Actors that did not answer are absent.
#[derive(Debug, Clone, Default)]
pub struct NodeScrape {
    pub routers: Vec<(PoolRole, RouterSnapshot)>,
    pub peer_syncs: Vec<(PoolRole, PeerSyncSnapshot)>,
    pub kv_events: Vec<(PoolRole, KvEventsSnapshot)>,
    pub registry: Option<RegistrySnapshot>,
    pub engines: Vec<EngineLinkSnapshot>,
    pub room: RoomCounts,
    /// Class names by class id.
    pub classes: Arc<[String]>,
    /// The component (`router`, `peer_sync`, `kv_events`, `registry`) of each actor that was
    /// gone or too slow.
    pub failed: Vec<&'static str>,
}

impl NodeScrape {
    /// Every snapshot as JSON (for `/debug/state`): routers, peer sync, KV events, registry,
    /// the room bus, and the components that did not answer.
    pub fn to_json(&self) -> serde_json::Value {
        let by_pool = |items: Vec<serde_json::Value>| serde_json::Value::Array(items);
        serde_json::json!({
            "routers": by_pool(self.routers.iter().map(|(p, s)| serde_json::json!({"pool": pool_label(*p), "state": s})).collect()),
            "peer_sync": by_pool(self.peer_syncs.iter().map(|(p, s)| serde_json::json!({"pool": pool_label(*p), "state": s})).collect()),
            "kv_events": by_pool(self.kv_events.iter().map(|(p, s)| serde_json::json!({"pool": pool_label(*p), "state": s})).collect()),
            "registry": self.registry,
            "engines": self.engines,
            "room_bus": {
                "published": self.room.published,
                "publish_errors": self.room.publish_errors,
                "received": self.room.received,
            },
            "unavailable": self.failed,
        })
    }

    /// The name of class `index` (`unknown` for an id outside the profile).
    pub fn class_name(&self, index: usize) -> &str {
        self.classes.get(index).map_or("unknown", String::as_str)
    }
}

impl NodeSources {
    /// The handles of every pool of `node`, with the default timeout.
    pub fn from_node(node: &Node) -> Self {
        let routers = node.routers().to_vec();
        let peer_syncs = routers
            .iter()
            .filter_map(|(pool, _)| node.peer_sync(*pool).map(|h| (*pool, h.clone())))
            .collect();
        let kv_events = routers
            .iter()
            .filter_map(|(pool, _)| node.kv_events(*pool).map(|h| (*pool, h.clone())))
            .collect();
        let classes = node
            .config
            .profile
            .classes()
            .iter()
            .map(|c| c.name.clone())
            .collect();
        Self {
            routers,
            peer_syncs,
            kv_events,
            registry: node.registry().clone(),
            engines: Vec::new(),
            room: Arc::clone(&node.room_counters),
            classes,
            timeout: DEFAULT_SCRAPE_TIMEOUT,
        }
    }

    /// The same sources, observing the node's engine links too.
    pub fn with_engines(mut self, engines: Vec<EngineLinkHandle>) -> Self {
        self.engines = engines;
        self
    }

    /// The same sources with another per-actor timeout.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Observes every actor at once; each gets `timeout` to answer.
    pub async fn gather(&self) -> NodeScrape {
        let timeout = self.timeout;
        let routers = futures::future::join_all(
            self.routers
                .iter()
                .map(|(pool, h)| within(timeout, *pool, h.observe())),
        );
        let peer_syncs = futures::future::join_all(
            self.peer_syncs
                .iter()
                .map(|(pool, h)| within(timeout, *pool, h.observe())),
        );
        let kv_events = futures::future::join_all(
            self.kv_events
                .iter()
                .map(|(pool, h)| within(timeout, *pool, h.observe())),
        );
        let registry = async {
            tokio::time::timeout(timeout, self.registry.observe())
                .await
                .ok()
                .and_then(Result::ok)
        };
        let engines = futures::future::join_all(self.engines.iter().map(|h| async move {
            tokio::time::timeout(timeout, h.observe())
                .await
                .ok()
                .and_then(Result::ok)
        }));
        let (routers, peer_syncs, kv_events, registry, engines) =
            futures::join!(routers, peer_syncs, kv_events, registry, engines);

        let mut failed = Vec::new();
        let routers = answered(routers, "router", &mut failed);
        let peer_syncs = answered(peer_syncs, "peer_sync", &mut failed);
        let kv_events = answered(kv_events, "kv_events", &mut failed);
        if registry.is_none() {
            failed.push("registry");
        }
        let answered_engines = engines.len();
        let engines: Vec<EngineLinkSnapshot> = engines.into_iter().flatten().collect();
        if engines.len() < answered_engines {
            failed.push("engine_link");
        }
        NodeScrape {
            routers,
            peer_syncs,
            kv_events,
            registry,
            engines,
            room: self.room_counts(),
            classes: Arc::clone(&self.classes),
            failed,
        }
    }

    fn room_counts(&self) -> RoomCounts {
        let room = &self.room;
        RoomCounts {
            published: room.published.load(Ordering::Relaxed),
            publish_errors: room.publish_errors.load(Ordering::Relaxed),
            received: room.received.load(Ordering::Relaxed),
            malformed: room.wire.malformed.load(Ordering::Relaxed),
            unknown_version: room.wire.unknown_version.load(Ordering::Relaxed),
            foreign_cluster: room.wire.foreign_cluster.load(Ordering::Relaxed),
        }
    }
}

/// `observe`'s answer for `pool`, or `None` when the actor is gone or slower than `timeout`.
async fn within<T, E>(
    timeout: Duration,
    pool: PoolRole,
    observe: impl Future<Output = Result<T, E>>,
) -> (PoolRole, Option<T>) {
    let answer = tokio::time::timeout(timeout, observe)
        .await
        .ok()
        .and_then(Result::ok);
    (pool, answer)
}

fn answered<T>(
    answers: Vec<(PoolRole, Option<T>)>,
    component: &'static str,
    failed: &mut Vec<&'static str>,
) -> Vec<(PoolRole, T)> {
    let mut out = Vec::with_capacity(answers.len());
    for (pool, answer) in answers {
        match answer {
            Some(snapshot) => out.push((pool, snapshot)),
            None => failed.push(component),
        }
    }
    out
}

/// The `pool` label of a pool role.
pub fn pool_label(pool: PoolRole) -> &'static str {
    match pool {
        PoolRole::Aggregated => "aggregated",
        PoolRole::Prefill => "prefill",
        PoolRole::Decode => "decode",
    }
}
