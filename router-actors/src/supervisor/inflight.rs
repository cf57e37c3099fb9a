//! The node's in-flight registry: this router's own live bookings, kept outside the
//! RouterActor so that a restarted actor can book them again (no leak, no double count).

use router_core::RequestId;
use router_core::ledger::Booking;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

#[derive(Debug, Clone, Default)]
pub struct InflightRegistry {
    inner: Arc<Mutex<HashMap<RequestId, Booking>>>,
}

impl InflightRegistry {
    pub fn booked(&self, request: RequestId, booking: Booking) {
        self.lock().insert(request, booking);
    }

    pub fn prefill_done(&self, request: RequestId) {
        if let Some(b) = self.lock().get_mut(&request) {
            b.prefill_tokens = 0;
        }
    }

    pub fn released(&self, request: RequestId) {
        self.lock().remove(&request);
    }

    pub fn snapshot(&self) -> Vec<(RequestId, Booking)> {
        let mut all: Vec<_> = self.lock().iter().map(|(r, b)| (*r, b.clone())).collect();
        all.sort_by_key(|(r, _)| *r);
        all
    }

    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<RequestId, Booking>> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
