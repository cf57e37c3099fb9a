//! Subject names, all under the cluster prefix (DESIGN §6).

use router_core::{PoolRole, RouterId};

/// The token a pool has in subjects.
pub fn pool_token(role: PoolRole) -> &'static str {
    match role {
        PoolRole::Aggregated => "agg",
        PoolRole::Prefill => "prefill",
        PoolRole::Decode => "decode",
    }
}

/// The subject prefix of a model's pool in `cluster`: `<cluster>.pool.<token>`, the token
/// the model's name in lowercase letters, digits, `-` and `_` (at most 40 of them) and 8 hex
/// digits of its hash, so names that read alike never share subjects. Workers, sidecars and
/// every replica derive it alike from the same name.
pub fn pool_cluster(cluster: &str, model: &str) -> String {
    let readable: String = model
        .chars()
        .map(|c| match c {
            'a'..='z' | '0'..='9' | '-' | '_' => c,
            'A'..='Z' => c.to_ascii_lowercase(),
            _ => '-',
        })
        .take(40)
        .collect();
    let hash = xxhash_rust::xxh3::xxh3_64(model.as_bytes());
    format!("{cluster}.pool.{readable}-{:08x}", hash >> 32)
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subjects {
    cluster: String,
}

impl Subjects {
    pub fn new(cluster: impl Into<String>) -> Self {
        Self {
            cluster: cluster.into(),
        }
    }

    pub fn cluster(&self) -> &str {
        &self.cluster
    }

    /// `workers.<pool>.announce`: worker specs, heartbeats and leases.
    pub fn announce(&self, pool: PoolRole) -> String {
        format!("{}.workers.{}.announce", self.cluster, pool_token(pool))
    }

    /// `kv.<pool>.events`: workers' stored / removed / cleared blocks.
    pub fn kv_events(&self, pool: PoolRole) -> String {
        format!("{}.kv.{}.events", self.cluster, pool_token(pool))
    }

    /// `workers.<pool>.load`: engine-reported load, apart from router bookings.
    pub fn load(&self, pool: PoolRole) -> String {
        format!("{}.workers.{}.load", self.cluster, pool_token(pool))
    }

    /// `router.<pool>.bookings`: booking deltas and heartbeats between router replicas.
    pub fn bookings(&self, pool: PoolRole) -> String {
        format!("{}.router.{}.bookings", self.cluster, pool_token(pool))
    }

    /// `router.<pool>.snapshot`: request/reply for a router's live bookings.
    pub fn snapshot(&self, pool: PoolRole) -> String {
        format!("{}.router.{}.snapshot", self.cluster, pool_token(pool))
    }

    /// `router.<pool>.credits`: room credits between a pool's routers (asks, grants,
    /// reports), each message naming the router it is for.
    pub fn credits(&self, pool: PoolRole) -> String {
        format!("{}.router.{}.credits", self.cluster, pool_token(pool))
    }

    /// `router.<pool>.credits.<router>`: room credits for one router (its id, 32 hex
    /// digits), which only it subscribes to.
    pub fn credits_to(&self, pool: PoolRole, router: RouterId) -> String {
        format!("{}.{}", self.credits(pool), router.0.simple())
    }

    /// `router.decode.room`: RoomChanged from decode routers to every prefill queue.
    pub fn room(&self) -> String {
        format!("{}.router.decode.room", self.cluster)
    }
}
