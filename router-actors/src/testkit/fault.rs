//! Fault injection around a real bus: the chosen publishes on one subject made through
//! this wrapper are dropped or delivered twice, and answers to
//! requests may be held back; everything else passes through unchanged.

use crate::bus::{Bus, BusError, Subscription};
use bytes::Bytes;
use futures::future::BoxFuture;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// What happens to a chosen publish.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    Drop,
    Duplicate,
}

/// A real bus with chosen publishes on one subject dropped or duplicated.
pub struct FaultBus {
    inner: Arc<dyn Bus>,
    subject: String,
    pick: Box<dyn Fn(u64) -> bool + Send + Sync>,
    fault: Fault,
    /// Answers to requests made through this wrapper are held back this long.
    reply_delay: Duration,
    seen: AtomicU64,
    pub injected: AtomicU64,
}

impl FaultBus {
    /// Faults the `nth` publish on `subject` (1-based).
    pub fn new(inner: Arc<dyn Bus>, subject: String, nth: u64, fault: Fault) -> Self {
        Self::picking(inner, subject, Box::new(move |i| i == nth), fault)
    }

    /// Faults every publish on `subject` whose 1-based index `pick` selects.
    pub fn picking(
        inner: Arc<dyn Bus>,
        subject: String,
        pick: Box<dyn Fn(u64) -> bool + Send + Sync>,
        fault: Fault,
    ) -> Self {
        Self {
            inner,
            subject,
            pick,
            fault,
            reply_delay: Duration::ZERO,
            seen: AtomicU64::new(0),
            injected: AtomicU64::new(0),
        }
    }
}

impl FaultBus {
    /// Holds back every answer to a request by `delay` (tokio time).
    pub fn delaying_replies(mut self, delay: Duration) -> Self {
        self.reply_delay = delay;
        self
    }
}

impl Bus for FaultBus {
    fn connected(&self) -> bool {
        self.inner.connected()
    }

    fn publish(&self, subject: String, payload: Bytes) -> BoxFuture<'_, Result<(), BusError>> {
        Box::pin(async move {
            let hit = subject == self.subject
                && (self.pick)(self.seen.fetch_add(1, Ordering::SeqCst) + 1);
            if !hit {
                return self.inner.publish(subject, payload).await;
            }
            self.injected.fetch_add(1, Ordering::SeqCst);
            match self.fault {
                Fault::Drop => Ok(()),
                Fault::Duplicate => {
                    self.inner.publish(subject.clone(), payload.clone()).await?;
                    self.inner.publish(subject, payload).await
                }
            }
        })
    }

    fn subscribe(&self, subject: String) -> BoxFuture<'_, Result<Subscription, BusError>> {
        self.inner.subscribe(subject)
    }

    fn request(
        &self,
        subject: String,
        payload: Bytes,
        timeout: Duration,
    ) -> BoxFuture<'_, Result<Bytes, BusError>> {
        Box::pin(async move {
            let answer = self.inner.request(subject, payload, timeout).await;
            tokio::time::sleep(self.reply_delay).await;
            answer
        })
    }

    fn flush(&self) -> BoxFuture<'_, Result<(), BusError>> {
        self.inner.flush()
    }
}

impl std::fmt::Debug for FaultBus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaultBus")
            .field("subject", &self.subject)
            .field("fault", &self.fault)
            .field("injected", &self.injected)
            .finish_non_exhaustive()
    }
}
