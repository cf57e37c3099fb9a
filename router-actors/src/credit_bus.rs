//! Room credits across nodes (`router.<pool>.credits`): a courier task publishes what the
//! router's credit agent says to its peers, and a subscriber task hands the messages
//! addressed to this router to its router actor (decode pool, or the aggregated pool). Asks, grants and reports are plain
//! messages (no sequence of their own): a lost one is repaired by the next periodic report
//! or a repeated ask (see `router_core::credits`).

use crate::bus::{Bus, publish_sealed};
use crate::router::RouterHandle;
use crate::wire::{self, CreditEnvelope, Outbox, Subjects, WireCounters};
use futures::StreamExt;
use router_core::credits::CreditOut;
use router_core::{PoolRole, RouterId};
use serde::Serialize;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// Counters of the credit courier.
#[derive(Debug, Default)]
pub struct CreditBusCounters {
    pub published: AtomicU64,
    pub publish_errors: AtomicU64,
    pub received: AtomicU64,
    pub wire: WireCounters,
}

/// The counters as plain numbers, for `/debug/state` and `/metrics`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct CreditBusCounts {
    pub published: u64,
    pub publish_errors: u64,
    pub received: u64,
    pub malformed: u64,
}

impl CreditBusCounters {
    pub fn counts(&self) -> CreditBusCounts {
        CreditBusCounts {
            published: self.published.load(Ordering::Relaxed),
            publish_errors: self.publish_errors.load(Ordering::Relaxed),
            received: self.received.load(Ordering::Relaxed),
            malformed: self.wire.total(),
        }
    }
}

/// Publishes the router's credit messages, each addressed to one peer.
pub fn spawn_credit_publisher(
    bus: Arc<dyn Bus>,
    subjects: Subjects,
    pool: PoolRole,
    me: RouterId,
    mut outgoing: mpsc::Receiver<CreditOut>,
    counters: Arc<CreditBusCounters>,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let subject = subjects.credits(pool);
        let mut outbox = Outbox::new(subjects.cluster(), me.0);
        while let Some(out) = outgoing.recv().await {
            let body = CreditEnvelope {
                to: out.to.0,
                msg: out.msg,
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

/// Hands credit messages addressed to `me` to the pool's router actor.
pub async fn spawn_credit_subscriber(
    bus: Arc<dyn Bus>,
    subjects: Subjects,
    pool: PoolRole,
    me: RouterId,
    router: RouterHandle,
    counters: Arc<CreditBusCounters>,
) -> Result<JoinHandle<()>, crate::bus::BusError> {
    let mut messages = bus.subscribe(subjects.credits(pool)).await?;
    let cluster = subjects.cluster().to_owned();
    Ok(tokio::spawn(async move {
        while let Some(message) = messages.next().await {
            match wire::decode::<CreditEnvelope>(&message.payload, &cluster) {
                Ok(envelope) if envelope.body.to == me.0 && envelope.sender != me.0 => {
                    counters.received.fetch_add(1, Ordering::Relaxed);
                    let from = RouterId(envelope.sender);
                    if router.credit(from, envelope.body.msg).is_err() {
                        tracing::debug!("router actor gone; credit message dropped");
                    }
                }
                Ok(_) => {}
                Err(error) => counters.wire.count(&error),
            }
        }
    }))
}
