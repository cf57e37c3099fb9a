//! From a bus subscription to an actor's mailbox: the one place where subscribing actors
//! (worker registry, KV events) turn payloads into typed messages.
//!
//! A forwarder task reads the subscription, decodes each payload with [`crate::wire::decode`]
//! (failures counted by kind and dropped), and casts the typed message to its actor. Ractor
//! mailboxes are unbounded, so the [`Inbox`] bounds them: it counts messages cast but not yet
//! handled, and when `capacity` are waiting the forwarder drops the newest message and counts
//! it (`overflow`), as the in-process bus does for a slow subscriber. The actor calls
//! [`Inbox::done`] once for every forwarded message it handles.

use crate::bus::Subscription;
use crate::wire::{Envelope, WireCounters, decode};
use futures::StreamExt;
use ractor::{ActorRef, Message};
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use tokio::task::JoinHandle;

/// The bounded, counted entrance of one subscribing actor.
#[derive(Debug)]
pub struct Inbox {
    capacity: usize,
    pending: AtomicUsize,
    received: AtomicU64,
    overflow: AtomicU64,
    wire: WireCounters,
}

/// What an [`Inbox`] has seen, for `Observe`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct EdgeCounts {
    /// Payloads read from the subscription (decoded or not).
    pub received: u64,
    /// Decoded messages dropped because `capacity` were already waiting.
    pub overflow: u64,
    /// Forwarded and not yet handled.
    pub pending: usize,
    pub malformed: u64,
    pub unknown_version: u64,
    pub foreign_cluster: u64,
}

impl Inbox {
    /// At most `capacity` (at least 1) messages wait in the actor's mailbox.
    pub fn new(capacity: usize) -> Arc<Self> {
        Arc::new(Self {
            capacity: capacity.max(1),
            pending: AtomicUsize::new(0),
            received: AtomicU64::new(0),
            overflow: AtomicU64::new(0),
            wire: WireCounters::default(),
        })
    }

    /// Takes a place in the mailbox, or counts an overflow.
    fn admit(&self) -> bool {
        let taken = self
            .pending
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.capacity).then_some(n + 1)
            })
            .is_ok();
        if !taken {
            self.overflow.fetch_add(1, Ordering::Relaxed);
        }
        taken
    }

    /// The actor handled one forwarded message.
    pub fn done(&self) {
        let _ = self
            .pending
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1));
    }

    pub fn counts(&self) -> EdgeCounts {
        EdgeCounts {
            received: self.received.load(Ordering::Relaxed),
            overflow: self.overflow.load(Ordering::Relaxed),
            pending: self.pending.load(Ordering::Relaxed),
            malformed: self.wire.malformed.load(Ordering::Relaxed),
            unknown_version: self.wire.unknown_version.load(Ordering::Relaxed),
            foreign_cluster: self.wire.foreign_cluster.load(Ordering::Relaxed),
        }
    }
}

/// Reads `subscription` until it ends or the actor is gone: decodes `Envelope<T>` of
/// `cluster`, wraps it with `to_msg` and casts it, within the inbox's bound.
pub fn spawn_forwarder<T, M, F>(
    mut subscription: Subscription,
    cluster: String,
    inbox: Arc<Inbox>,
    actor: ActorRef<M>,
    to_msg: F,
) -> JoinHandle<()>
where
    T: DeserializeOwned + Send + 'static,
    M: Message,
    F: Fn(Envelope<T>) -> M + Send + 'static,
{
    tokio::spawn(async move {
        while let Some(message) = subscription.next().await {
            inbox.received.fetch_add(1, Ordering::Relaxed);
            let envelope = match decode::<T>(&message.payload, &cluster) {
                Ok(envelope) => envelope,
                Err(error) => {
                    inbox.wire.count(&error);
                    tracing::debug!(subject = %message.subject, %error, "payload dropped");
                    continue;
                }
            };
            if !inbox.admit() {
                continue;
            }
            if actor.cast(to_msg(envelope)).is_err() {
                inbox.done();
                break;
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_inbox_holds_at_most_its_capacity_and_counts_overflow() {
        let inbox = Inbox::new(2);
        assert!(inbox.admit() && inbox.admit());
        assert!(!inbox.admit(), "a third waiting message is dropped");
        inbox.done();
        assert!(inbox.admit());
        let counts = inbox.counts();
        assert_eq!((counts.pending, counts.overflow), (2, 1));
        for _ in 0..5 {
            inbox.done();
        }
        assert_eq!(inbox.counts().pending, 0, "done never goes below zero");
    }
}
