//! Fault injection around a real bus: the Nth publish on one subject made through this
//! wrapper is dropped or delivered twice; everything else passes through unchanged.

use crate::bus::{Bus, BusError, Subscription};
use bytes::Bytes;
use futures::future::BoxFuture;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Fault {
    Drop,
    Duplicate,
}

pub(super) struct FaultBus {
    inner: Arc<dyn Bus>,
    subject: String,
    nth: u64,
    fault: Fault,
    seen: AtomicU64,
    pub(super) injected: AtomicU64,
}

impl FaultBus {
    pub(super) fn new(inner: Arc<dyn Bus>, subject: String, nth: u64, fault: Fault) -> Self {
        Self {
            inner,
            subject,
            nth,
            fault,
            seen: AtomicU64::new(0),
            injected: AtomicU64::new(0),
        }
    }
}

impl Bus for FaultBus {
    fn publish(&self, subject: String, payload: Bytes) -> BoxFuture<'_, Result<(), BusError>> {
        Box::pin(async move {
            let hit =
                subject == self.subject && self.seen.fetch_add(1, Ordering::SeqCst) + 1 == self.nth;
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
        self.inner.request(subject, payload, timeout)
    }

    fn flush(&self) -> BoxFuture<'_, Result<(), BusError>> {
        self.inner.flush()
    }
}
