//! RoomChanged across nodes. A decode pool's room signal (the in-process `watch`) is also
//! published on `router.decode.room`, and every node's prefill actor subscribes to it. The
//! message is a hint: a prefill actor that drains before its own decode view has caught up
//! (the peer's release arrives through peer sync) finds nothing to admit, and drains again
//! when its decode view moves (its local signal) or at its periodic recheck. Both tasks are
//! the loops of a bridge (`bridge.rs`) whose sender is this node's router.

use crate::bridge::{Bridge, BridgeCounters};
use crate::bus::BusError;
use crate::room_view::RoomReader;
use crate::router::{RouterHandle, RouterMsg};
use crate::wire::{Envelope, RoomChanged};
use futures::StreamExt as _;
use tokio::task::JoinHandle;

/// Counters of the room bridge.
pub type RoomBusCounters = BridgeCounters;

/// Publishes every rise of the decode room epoch on `router.decode.room`.
pub(crate) fn spawn_room_publisher(bridge: &Bridge, room: RoomReader) -> JoinHandle<()> {
    // The task takes its receiver when it first runs: what rose before is not published.
    let signals = futures::stream::once(async move { room.signals() });
    let bodies = signals.flat_map(|signals| {
        futures::stream::unfold(signals, |mut signals| async move {
            signals.changed().await.ok()?;
            let epoch = *signals.borrow_and_update();
            let body = RoomChanged {
                epoch,
                classes: Vec::new(),
            };
            Some((body, signals))
        })
    });
    bridge.publish(bridge.subjects.room(), bodies)
}

/// Turns other nodes' RoomChanged into drains of this node's prefill actor.
pub(crate) async fn spawn_room_subscriber(
    bridge: &Bridge,
    prefill: RouterHandle,
) -> Result<JoinHandle<()>, BusError> {
    let me = bridge.sender;
    let from_others = move |envelope: &Envelope<RoomChanged>| envelope.sender != me;
    let deliver = move |_: Envelope<RoomChanged>| {
        if prefill.cast(RouterMsg::RoomChanged).is_err() {
            tracing::debug!("prefill actor gone; RoomChanged dropped");
        }
    };
    bridge
        .receive(bridge.subjects.room(), from_others, deliver)
        .await
}
