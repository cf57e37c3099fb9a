//! The node's in-flight registry: this router's own live bookings and the workers its pool
//! knows, kept outside the RouterActor so that a restarted actor starts with its workers and
//! books its requests again (no leak, no double count, no window without workers).

use router_core::ledger::Booking;
use router_core::{RequestId, WorkerId, WorkerSpec};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

#[derive(Debug, Default)]
struct Inner {
    bookings: HashMap<RequestId, Booking>,
    workers: HashMap<WorkerId, WorkerSpec>,
}

#[derive(Debug, Clone, Default)]
pub struct InflightRegistry {
    inner: Arc<Mutex<Inner>>,
}

impl InflightRegistry {
    pub fn booked(&self, request: RequestId, booking: Booking) {
        self.lock().bookings.insert(request, booking);
    }

    pub fn prefill_done(&self, request: RequestId) {
        if let Some(b) = self.lock().bookings.get_mut(&request) {
            b.prefill_tokens = 0;
        }
    }

    pub fn released(&self, request: RequestId) {
        self.lock().bookings.remove(&request);
    }

    pub fn worker_up(&self, spec: WorkerSpec) {
        self.lock().workers.insert(spec.id, spec);
    }

    pub fn worker_down(&self, worker: WorkerId) {
        self.lock().workers.remove(&worker);
    }

    /// Own live bookings, by request.
    pub fn snapshot(&self) -> Vec<(RequestId, Booking)> {
        let mut all: Vec<_> = self
            .lock()
            .bookings
            .iter()
            .map(|(r, b)| (*r, b.clone()))
            .collect();
        all.sort_by_key(|(r, _)| *r);
        all
    }

    /// Known workers, by id.
    pub fn workers(&self) -> Vec<WorkerSpec> {
        let mut all: Vec<_> = self.lock().workers.values().cloned().collect();
        all.sort_by_key(|w| w.id);
        all
    }

    /// Number of own live bookings.
    pub fn len(&self) -> usize {
        self.lock().bookings.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
