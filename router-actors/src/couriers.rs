//! A node's courier tasks: the decode pool's `RoomChanged` out on the bus and peers' into the
//! prefill actor (disaggregated), and the room-credit messages of each pool both ways.
//! None is restarted, so each is named for the node's liveness watcher: one that ended
//! leaves the node unable to route as one gate, and the node is then no longer alive.

use crate::bus::Bus;
use crate::credit_bus::{CreditBusCounters, spawn_credit_publisher, spawn_credit_subscriber};
use crate::node::{NodeConfig, NodeError, Topology};
use crate::room_bus::{RoomBusCounters, spawn_room_publisher, spawn_room_subscriber};
use crate::room_view::RoomReader;
use crate::router::RouterHandle;
use crate::wire::Subjects;
use router_core::PoolRole;
use router_core::credits::CreditOut;
use std::sync::Arc;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// What the couriers of one node need.
pub(crate) struct Couriers<'a> {
    pub config: &'a NodeConfig,
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
) -> Result<Vec<(String, JoinHandle<()>)>, NodeError> {
    let mut couriers = Vec::new();
    let router = |pool: PoolRole| c.routers.iter().find(|(p, _)| *p == pool).map(|(_, h)| h);
    if c.config.topology == Topology::Disaggregated
        && let Some(prefill) = router(PoolRole::Prefill)
    {
        let sender = c.config.router_id.0;
        let publisher = spawn_room_publisher(
            Arc::clone(c.bus),
            c.subjects.clone(),
            sender,
            c.room_in.clone(),
            Arc::clone(c.room_counters),
        );
        couriers.push(("room-publisher".to_owned(), publisher));
        let subscriber = spawn_room_subscriber(
            Arc::clone(c.bus),
            c.subjects.clone(),
            sender,
            prefill.clone(),
            Arc::clone(c.room_counters),
        )
        .await?;
        couriers.push(("room-subscriber".to_owned(), subscriber));
    }
    for (pool, outgoing) in c.credit_links {
        let Some(credit_router) = router(pool) else {
            continue;
        };
        let token = crate::wire::pool_token(pool);
        let publisher = spawn_credit_publisher(
            Arc::clone(c.bus),
            c.subjects.clone(),
            pool,
            c.config.router_id,
            outgoing,
            Arc::clone(c.credit_counters),
        );
        couriers.push((format!("credit-publisher-{token}"), publisher));
        let subscriber = spawn_credit_subscriber(
            Arc::clone(c.bus),
            c.subjects.clone(),
            pool,
            c.config.router_id,
            credit_router.clone(),
            Arc::clone(c.credit_counters),
        )
        .await?;
        couriers.push((format!("credit-subscriber-{token}"), subscriber));
    }
    Ok(couriers)
}
