//! RoomChanged across nodes. A decode pool's room signal (the in-process `watch`) is also
//! published on `router.decode.room`, and every node's prefill actor subscribes to it. The
//! message is a hint: a prefill actor that drains before its own decode view has caught up
//! (the peer's release arrives through peer sync) finds nothing to admit, and drains again
//! when its decode view moves (its local signal) or at its periodic recheck.

use crate::bus::{Bus, publish_sealed};
use crate::room_view::RoomReader;
use crate::router::{RouterHandle, RouterMsg};
use crate::wire::{self, Outbox, RoomChanged, Subjects, WireCounters};
use futures::StreamExt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use tokio::task::JoinHandle;
use uuid::Uuid;

/// Counters of the room bridge.
#[derive(Debug, Default)]
pub struct RoomBusCounters {
    pub published: AtomicU64,
    pub publish_errors: AtomicU64,
    pub received: AtomicU64,
    pub wire: WireCounters,
}

/// Publishes every rise of the decode room epoch on `router.decode.room`.
pub fn spawn_room_publisher(
    bus: Arc<dyn Bus>,
    subjects: Subjects,
    sender: Uuid,
    room: RoomReader,
    counters: Arc<RoomBusCounters>,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let subject = subjects.room();
        let mut outbox = Outbox::new(subjects.cluster(), sender);
        let mut signals = room.signals();
        while signals.changed().await.is_ok() {
            let epoch = *signals.borrow_and_update();
            let body = RoomChanged {
                epoch,
                classes: Vec::new(),
            };
            let sent = publish_sealed(bus.as_ref(), &mut outbox, &subject, body).await;
            let counter = if sent {
                &counters.published
            } else {
                &counters.publish_errors
            };
            counter.fetch_add(1, Ordering::Relaxed);
        }
    })
}

/// Turns other nodes' RoomChanged into drains of this node's prefill actor.
pub async fn spawn_room_subscriber(
    bus: Arc<dyn Bus>,
    subjects: Subjects,
    sender: Uuid,
    prefill: RouterHandle,
    counters: Arc<RoomBusCounters>,
) -> Result<JoinHandle<()>, crate::bus::BusError> {
    let mut messages = bus.subscribe(subjects.room()).await?;
    let cluster = subjects.cluster().to_owned();
    Ok(tokio::spawn(async move {
        while let Some(message) = messages.next().await {
            match wire::decode::<RoomChanged>(&message.payload, &cluster) {
                Ok(envelope) if envelope.sender == sender => {}
                Ok(_) => {
                    counters.received.fetch_add(1, Ordering::Relaxed);
                    if prefill.cast(RouterMsg::RoomChanged).is_err() {
                        tracing::debug!("prefill actor gone; RoomChanged dropped");
                    }
                }
                Err(error) => counters.wire.count(&error),
            }
        }
    }))
}
