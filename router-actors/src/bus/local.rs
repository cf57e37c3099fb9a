//! The in-process bus: the embedded default (`router-tools demo`) and unit tests. Same
//! contract as NATS (see `bus/mod.rs`): wildcard subjects, per-publisher order, at-most-once
//! delivery, request/reply with a private inbox, and a bounded queue per subscriber that drops
//! the newest message (counted) instead of slowing publishers.

use super::{Bus, BusError, BusMessage, Subscription, subject_matches, valid_subject};
use bytes::Bytes;
use futures::StreamExt;
use futures::future::BoxFuture;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::sync::mpsc;

/// Messages a subscriber may have waiting before newer ones are dropped.
pub const SUBSCRIBER_QUEUE: usize = 65_536;

#[derive(Debug)]
struct Sub {
    pattern: String,
    tx: mpsc::Sender<BusMessage>,
}

#[derive(Debug, Default)]
struct Inner {
    subs: Vec<Sub>,
}

/// An in-process bus. Clones share one set of subscriptions.
#[derive(Debug, Clone, Default)]
pub struct LocalBus {
    inner: Arc<Mutex<Inner>>,
    dropped: Arc<AtomicU64>,
}

impl LocalBus {
    pub fn new() -> Self {
        Self::default()
    }

    /// Messages dropped because a subscriber's queue was full.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Delivers to every matching subscriber; false when nobody matched.
    fn deliver(&self, message: BusMessage) -> bool {
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let mut delivered = false;
        inner.subs.retain(|sub| {
            if !subject_matches(&sub.pattern, &message.subject) {
                return !sub.tx.is_closed();
            }
            match sub.tx.try_send(message.clone()) {
                Ok(()) => {
                    delivered = true;
                    true
                }
                Err(mpsc::error::TrySendError::Full(_)) => {
                    delivered = true;
                    self.dropped.fetch_add(1, Ordering::Relaxed);
                    true
                }
                Err(mpsc::error::TrySendError::Closed(_)) => false,
            }
        });
        delivered
    }

    fn add_subscription(&self, pattern: String) -> Subscription {
        let (tx, mut rx) = mpsc::channel(SUBSCRIBER_QUEUE);
        self.inner
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .subs
            .push(Sub { pattern, tx });
        futures::stream::poll_fn(move |cx| rx.poll_recv(cx)).boxed()
    }
}

impl Bus for LocalBus {
    fn publish(&self, subject: String, payload: Bytes) -> BoxFuture<'_, Result<(), BusError>> {
        Box::pin(async move {
            if !valid_subject(&subject, false) {
                return Err(BusError::InvalidSubject(subject));
            }
            self.deliver(BusMessage {
                subject,
                payload,
                reply: None,
            });
            Ok(())
        })
    }

    fn subscribe(&self, subject: String) -> BoxFuture<'_, Result<Subscription, BusError>> {
        Box::pin(async move {
            if !valid_subject(&subject, true) {
                return Err(BusError::InvalidSubject(subject));
            }
            Ok(self.add_subscription(subject))
        })
    }

    fn request(
        &self,
        subject: String,
        payload: Bytes,
        timeout: Duration,
    ) -> BoxFuture<'_, Result<Bytes, BusError>> {
        Box::pin(async move {
            if !valid_subject(&subject, false) {
                return Err(BusError::InvalidSubject(subject));
            }
            let inbox = format!("_INBOX.{}", uuid::Uuid::new_v4().simple());
            let mut answers = self.add_subscription(inbox.clone());
            if !self.deliver(BusMessage {
                subject: subject.clone(),
                payload,
                reply: Some(inbox),
            }) {
                return Err(BusError::NoResponders(subject));
            }
            match tokio::time::timeout(timeout, answers.next()).await {
                Ok(Some(answer)) => Ok(answer.payload),
                Ok(None) => Err(BusError::Closed),
                Err(_) => Err(BusError::Timeout(timeout)),
            }
        })
    }

    fn flush(&self) -> BoxFuture<'_, Result<(), BusError>> {
        Box::pin(async { Ok(()) })
    }
}
