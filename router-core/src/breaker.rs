//! A circuit breaker over workers: a worker that refuses connections several times in a row
//! is ejected for a while (requests are placed elsewhere), then given another chance. Pure:
//! time comes in as [`Timestamp`]s; callers record outcomes and ask which workers are out.

use crate::ids::WorkerId;
use crate::time::Timestamp;
use rustc_hash::FxHashMap;
use serde::Serialize;
use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct BreakerConfig {
    /// Consecutive connection failures that eject a worker.
    pub failures_to_eject: u32,
    /// How long an ejected worker gets no requests.
    pub eject_for: Duration,
}

impl Default for BreakerConfig {
    fn default() -> Self {
        Self {
            failures_to_eject: 3,
            eject_for: Duration::from_secs(10),
        }
    }
}

/// What a failure did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "outcome")]
pub enum Tripped {
    /// Counted; the worker stays in.
    Counted { consecutive: u32 },
    /// The worker is out until then.
    Ejected { until: Timestamp },
}

#[derive(Debug, Clone, Default)]
struct WorkerHealth {
    consecutive: u32,
    ejected_until: Option<Timestamp>,
    ejections: u64,
}

/// One worker as `Observe` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WorkerHealthSnapshot {
    pub worker: WorkerId,
    pub consecutive_failures: u32,
    pub ejected: bool,
    pub ejections: u64,
}

#[derive(Debug, Clone, Default)]
pub struct Breaker {
    config: BreakerConfig,
    workers: FxHashMap<WorkerId, WorkerHealth>,
}

impl Breaker {
    pub fn new(config: BreakerConfig) -> Self {
        Self {
            config,
            workers: FxHashMap::default(),
        }
    }

    /// A connection to `worker` failed at `now`.
    pub fn failure(&mut self, worker: WorkerId, now: Timestamp) -> Tripped {
        let threshold = self.config.failures_to_eject.max(1);
        let health = self.workers.entry(worker).or_default();
        health.consecutive = health.consecutive.saturating_add(1);
        if health.consecutive < threshold {
            return Tripped::Counted {
                consecutive: health.consecutive,
            };
        }
        let until = now + self.config.eject_for;
        health.ejected_until = Some(until);
        health.ejections += 1;
        // After the ejection it gets one try: one more failure ejects it again.
        health.consecutive = threshold - 1;
        Tripped::Ejected { until }
    }

    /// A request reached `worker`: its failures are forgiven.
    pub fn success(&mut self, worker: WorkerId) {
        if let Some(health) = self.workers.get_mut(&worker) {
            health.consecutive = 0;
            health.ejected_until = None;
        }
    }

    /// Workers ejected at `now`.
    pub fn ejected(&self, now: Timestamp) -> Vec<WorkerId> {
        let mut out: Vec<WorkerId> = self
            .workers
            .iter()
            .filter(|(_, h)| h.ejected_until.is_some_and(|until| now < until))
            .map(|(w, _)| *w)
            .collect();
        out.sort_unstable();
        out
    }

    pub fn snapshot(&self, now: Timestamp) -> Vec<WorkerHealthSnapshot> {
        let mut out: Vec<WorkerHealthSnapshot> = self
            .workers
            .iter()
            .map(|(w, h)| WorkerHealthSnapshot {
                worker: *w,
                consecutive_failures: h.consecutive,
                ejected: h.ejected_until.is_some_and(|until| now < until),
                ejections: h.ejections,
            })
            .collect();
        out.sort_by_key(|s| s.worker);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn three_failures_in_a_row_eject_a_worker_for_a_while_and_one_success_forgives() {
        let mut b = Breaker::new(BreakerConfig::default());
        let (w, other) = (WorkerId(1), WorkerId(2));
        let t = Timestamp::from_millis(1_000);
        assert_eq!(b.failure(w, t), Tripped::Counted { consecutive: 1 });
        assert_eq!(b.failure(w, t), Tripped::Counted { consecutive: 2 });
        assert!(b.ejected(t).is_empty());
        assert_eq!(
            b.failure(w, t),
            Tripped::Ejected {
                until: Timestamp::from_millis(11_000)
            }
        );
        assert_eq!(b.ejected(t), vec![w]);
        b.failure(other, t);
        assert_eq!(b.ejected(t), vec![w], "one failure does not eject");
        // Back in after the ejection, on probation: one more failure ejects it again.
        let later = Timestamp::from_millis(11_000);
        assert!(b.ejected(later).is_empty());
        assert!(matches!(b.failure(w, later), Tripped::Ejected { .. }));
        b.success(w);
        assert!(b.ejected(later).is_empty());
        assert_eq!(b.failure(w, later), Tripped::Counted { consecutive: 1 });
        assert_eq!(b.snapshot(later)[0].ejections, 2);
    }
}
