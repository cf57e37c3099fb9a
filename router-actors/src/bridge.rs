//! A bridge between the bus and a node's actors, in its two directions: the one publish loop
//! (each body a stream yields sealed in the bridge's own [`Outbox`] and published on one
//! subject, counted published or failed) and the one receive loop (every message on one
//! subject decoded, the ones for this node counted and handed on, the rest dropped, the
//! undecodable counted by the wire). The room bridge (`room_bus.rs`) and the credit bridge
//! (`credit_bus.rs`) are these two loops with their own subjects, bodies and destinations;
//! `couriers.rs` starts a node's. Subjects and payloads stay in `crate::wire`: a bridge only
//! moves what the wire seals and decodes.

use crate::bus::{Bus, BusError, publish_sealed};
use crate::wire::{self, Envelope, Outbox, Subjects, WireCounters};
use futures::{Stream, StreamExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use tokio::task::JoinHandle;
use uuid::Uuid;

/// Counters of one bridge (both directions).
#[derive(Debug, Default)]
pub struct BridgeCounters {
    pub published: AtomicU64,
    pub publish_errors: AtomicU64,
    pub received: AtomicU64,
    pub wire: WireCounters,
}

/// The counters as plain numbers, for `/debug/state` and `/metrics`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct BridgeCounts {
    pub published: u64,
    pub publish_errors: u64,
    pub received: u64,
    pub malformed: u64,
}

impl BridgeCounters {
    pub fn counts(&self) -> BridgeCounts {
        BridgeCounts {
            published: self.published.load(Ordering::Relaxed),
            publish_errors: self.publish_errors.load(Ordering::Relaxed),
            received: self.received.load(Ordering::Relaxed),
            malformed: self.wire.total(),
        }
    }
}

/// One bridge's ends: the bus, this node's subjects, the sender id its envelopes carry, and
/// the counters both directions count in.
#[derive(Clone)]
pub(crate) struct Bridge {
    pub(crate) bus: Arc<dyn Bus>,
    pub(crate) subjects: Subjects,
    pub(crate) sender: Uuid,
    pub(crate) counters: Arc<BridgeCounters>,
}

impl Bridge {
    /// Publishes every body of `bodies` on `subject`, each sealed in the next envelope of
    /// the task's own outbox, until the stream ends.
    pub(crate) fn publish<B>(
        &self,
        subject: String,
        bodies: impl Stream<Item = B> + Send + 'static,
    ) -> JoinHandle<()>
    where
        B: Serialize + Send + 'static,
    {
        self.publish_to(bodies.map(move |body| (subject.clone(), body)))
    }

    /// [`Self::publish`] with each body on a subject of its own (a message for one peer on
    /// that peer's subject).
    pub(crate) fn publish_to<B>(
        &self,
        messages: impl Stream<Item = (String, B)> + Send + 'static,
    ) -> JoinHandle<()>
    where
        B: Serialize + Send + 'static,
    {
        let bus = Arc::clone(&self.bus);
        let counters = Arc::clone(&self.counters);
        let mut outbox = Outbox::new(self.subjects.cluster(), self.sender);
        tokio::spawn(async move {
            let mut messages = std::pin::pin!(messages);
            while let Some((subject, body)) = messages.next().await {
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

    /// Subscribes to `subject` (before this returns) and hands every envelope of this
    /// cluster that `wanted` accepts to `deliver`, counted received; ends with the
    /// subscription.
    pub(crate) async fn receive<B, W, D>(
        &self,
        subject: String,
        wanted: W,
        mut deliver: D,
    ) -> Result<JoinHandle<()>, BusError>
    where
        B: DeserializeOwned + Send + 'static,
        W: Fn(&Envelope<B>) -> bool + Send + 'static,
        D: FnMut(Envelope<B>) + Send + 'static,
    {
        let mut messages = self.bus.subscribe(subject).await?;
        let cluster = self.subjects.cluster().to_owned();
        let counters = Arc::clone(&self.counters);
        Ok(tokio::spawn(async move {
            while let Some(message) = messages.next().await {
                match wire::decode::<B>(&message.payload, &cluster) {
                    Ok(envelope) if wanted(&envelope) => {
                        counters.received.fetch_add(1, Ordering::Relaxed);
                        deliver(envelope);
                    }
                    Ok(_) => {}
                    Err(error) => counters.wire.count(&error),
                }
            }
        }))
    }
}
