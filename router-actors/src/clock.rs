//! The node's clock: tokio time (paused in tests) turned into router-core `Timestamp`s, µs
//! since the node started. Callers read it before sending a request to an actor, so mailbox
//! backlog counts against the class deadline.

use router_core::Timestamp;
use tokio::time::Instant;

#[derive(Debug, Clone, Copy)]
pub struct Clock {
    epoch: Instant,
}

impl Clock {
    pub fn start() -> Self {
        Self {
            epoch: Instant::now(),
        }
    }

    pub fn now(&self) -> Timestamp {
        Timestamp(u64::try_from(self.epoch.elapsed().as_micros()).unwrap_or(u64::MAX))
    }

    /// The tokio instant of a timestamp (to arm timers).
    pub fn instant(&self, at: Timestamp) -> Instant {
        self.epoch + std::time::Duration::from_micros(at.0)
    }
}
