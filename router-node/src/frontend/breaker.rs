//! The frontend's side of the worker circuit breaker (`router_core::breaker`): outcomes of
//! connections to workers go in, the workers to keep requests away from come out, on the
//! process's own clock (tokio time).

use router_core::breaker::{Breaker, BreakerConfig, Tripped, WorkerHealthSnapshot};
use router_core::{Timestamp, WorkerId};
use std::sync::{Mutex, PoisonError};
use tokio::time::Instant;

#[derive(Debug)]
pub struct WorkerBreaker {
    started: Instant,
    breaker: Mutex<Breaker>,
}

impl Default for WorkerBreaker {
    fn default() -> Self {
        Self::new(BreakerConfig::default())
    }
}

impl WorkerBreaker {
    pub fn new(config: BreakerConfig) -> Self {
        Self {
            started: Instant::now(),
            breaker: Mutex::new(Breaker::new(config)),
        }
    }

    fn now(&self) -> Timestamp {
        let us = u64::try_from(self.started.elapsed().as_micros()).unwrap_or(u64::MAX);
        Timestamp::from_micros(us)
    }

    fn with<R>(&self, f: impl FnOnce(&mut Breaker) -> R) -> R {
        let mut breaker = self.breaker.lock().unwrap_or_else(PoisonError::into_inner);
        f(&mut breaker)
    }

    /// A connection to `worker` failed.
    pub fn failed(&self, worker: WorkerId) -> Tripped {
        let now = self.now();
        let tripped = self.with(|b| b.failure(worker, now));
        if let Tripped::Ejected { .. } = tripped {
            tracing::warn!(%worker, "worker ejected: it keeps refusing connections");
        }
        tripped
    }

    /// A request reached `worker`.
    pub fn reached(&self, worker: WorkerId) {
        self.with(|b| b.success(worker));
    }

    /// Workers ejected now.
    pub fn ejected(&self) -> Vec<WorkerId> {
        let now = self.now();
        self.with(|b| b.ejected(now))
    }

    pub fn snapshot(&self) -> Vec<WorkerHealthSnapshot> {
        let now = self.now();
        self.with(|b| b.snapshot(now))
    }
}
