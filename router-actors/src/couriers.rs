//! A node's courier tasks: the decode pool's `RoomChanged` out on the bus and peers' into the
//! prefill actor (disaggregated), and the room-credit messages of each pool both ways.
//! None is restarted, so each is named for the node's liveness watcher: one that ended
//! leaves the node unable to route as one gate, and the node is then no longer alive.
//! `node.rs` says what to start (this module knows nothing of a node's configuration).

use crate::bridge::{Bridge, BridgeCounters};
use crate::bus::{Bus, BusError};
use crate::credit_bus::{CreditBusCounters, spawn_credit_publisher, spawn_credit_subscriber};
use crate::room_bus::{RoomBusCounters, spawn_room_publisher, spawn_room_subscriber};
use crate::room_view::RoomReader;
use crate::router::RouterHandle;
use crate::wire::Subjects;
use router_core::credits::CreditOut;
use router_core::{PoolRole, RouterId};
use std::sync::Arc;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// What the couriers of one node need.
pub(crate) struct Couriers<'a> {
    /// This router: the sender of what the couriers publish.
    pub router_id: RouterId,
    /// Whether the decode room goes out and peers' into the prefill actor (disaggregated).
    pub room_bridge: bool,
    pub bus: &'a Arc<dyn Bus>,
    pub subjects: &'a Subjects,
    pub routers: &'a [(PoolRole, RouterHandle)],
    pub room_in: &'a RoomReader,
    pub room_counters: &'a Arc<RoomBusCounters>,
    pub credit_counters: &'a Arc<CreditBusCounters>,
    /// Each pool's router's outgoing credit messages, when credits are on.
    pub credit_links: Vec<(PoolRole, mpsc::Receiver<CreditOut>)>,
}

/// Starts the node's couriers; returns each task with its name.
pub(crate) async fn spawn_couriers(
    c: Couriers<'_>,
) -> Result<Vec<(String, JoinHandle<()>)>, BusError> {
    let mut couriers = Vec::new();
    let router = |pool: PoolRole| c.routers.iter().find(|(p, _)| *p == pool).map(|(_, h)| h);
    let bridge = |counters: &Arc<BridgeCounters>| Bridge {
        bus: Arc::clone(c.bus),
        subjects: c.subjects.clone(),
        sender: c.router_id.0,
        counters: Arc::clone(counters),
    };
    if c.room_bridge
        && let Some(prefill) = router(PoolRole::Prefill)
    {
        let room = bridge(c.room_counters);
        let publisher = spawn_room_publisher(&room, c.room_in.clone());
        couriers.push(("room-publisher".to_owned(), publisher));
        let subscriber = spawn_room_subscriber(&room, prefill.clone()).await?;
        couriers.push(("room-subscriber".to_owned(), subscriber));
    }
    let credits = bridge(c.credit_counters);
    for (pool, outgoing) in c.credit_links {
        let Some(credit_router) = router(pool) else {
            continue;
        };
        let token = crate::wire::pool_token(pool);
        let publisher = spawn_credit_publisher(&credits, pool, outgoing);
        couriers.push((format!("credit-publisher-{token}"), publisher));
        let subscriber = spawn_credit_subscriber(&credits, pool, credit_router.clone()).await?;
        couriers.push((format!("credit-subscriber-{token}"), subscriber));
    }
    Ok(couriers)
}
