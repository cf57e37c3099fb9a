//! The node's in-flight registry: this router's own live bookings and the workers its pool
//! knows, kept outside the RouterActor so that a restarted actor starts with its workers and
//! books its requests again (no leak, no double count, no window without workers).
//!
//! Releases are recorded here by the [`RouterHandle`](crate::RouterHandle) before it casts
//! them ([`InflightRegistry::end`]): a release sent while the actor restarts (to no actor, or
//! to one that failed with it still in its mailbox) is neither restored by the next
//! incarnation nor lost by it, which applies what is recorded when it starts and before each
//! message it handles ([`InflightRegistry::take_ended`]).

use router_core::ledger::Booking;
use router_core::{RequestId, WorkerId, WorkerSpec};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

/// Releases recorded and not yet applied by an actor, at most (past it, the oldest are
/// dropped: their bookings are out of the registry already, and a live ledger's copy expires
/// with its lease).
const MAX_ENDED: usize = 65_536;

#[derive(Debug, Default)]
struct Inner {
    bookings: HashMap<RequestId, Booking>,
    workers: HashMap<WorkerId, WorkerSpec>,
    /// Releases recorded by handles, for the actor to apply.
    ended: Vec<RequestId>,
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

    /// A caller released `request` (the handle, before it casts the release): no later start
    /// restores it, and the actor applies the release at its next message.
    pub fn end(&self, request: RequestId) {
        let mut inner = self.lock();
        inner.bookings.remove(&request);
        if inner.ended.len() >= MAX_ENDED {
            inner.ended.remove(0);
        }
        inner.ended.push(request);
    }

    /// The releases recorded since the last call, in order, for the actor to apply.
    pub fn take_ended(&self) -> Vec<RequestId> {
        let mut inner = self.lock();
        if inner.ended.is_empty() {
            return Vec::new();
        }
        std::mem::take(&mut inner.ended)
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
