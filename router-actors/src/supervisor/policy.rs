//! The restart policy: restart a failed child after a backoff that doubles with each failure
//! inside the window, up to a cap of restarts per window; past the cap, escalate.

use std::collections::VecDeque;
use std::time::Duration;
use tokio::time::Instant;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RestartPolicy {
    /// Restarts allowed within `window` before the supervisor escalates.
    pub max_restarts: u32,
    pub window: Duration,
    /// Delay before the first restart; doubles per failure inside the window.
    pub backoff: Duration,
    pub max_backoff: Duration,
}

impl Default for RestartPolicy {
    fn default() -> Self {
        Self {
            max_restarts: 5,
            window: Duration::from_secs(60),
            backoff: Duration::from_millis(50),
            max_backoff: Duration::from_secs(5),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RestartDecision {
    Restart { after: Duration },
    Escalate,
}

/// One child's failures inside the policy window.
#[derive(Debug, Clone)]
pub struct RestartBudget {
    policy: RestartPolicy,
    failures: VecDeque<Instant>,
    pub restarts: u64,
}

impl RestartBudget {
    pub fn new(policy: RestartPolicy) -> Self {
        Self {
            policy,
            failures: VecDeque::new(),
            restarts: 0,
        }
    }

    pub fn on_failure(&mut self, now: Instant) -> RestartDecision {
        while self
            .failures
            .front()
            .is_some_and(|t| now.saturating_duration_since(*t) > self.policy.window)
        {
            self.failures.pop_front();
        }
        self.failures.push_back(now);
        let n = self.failures.len() as u32;
        if n > self.policy.max_restarts {
            return RestartDecision::Escalate;
        }
        self.restarts += 1;
        let factor = 2u32.saturating_pow(n.saturating_sub(1));
        let after = self
            .policy
            .backoff
            .saturating_mul(factor)
            .min(self.policy.max_backoff);
        RestartDecision::Restart { after }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn backoff_doubles_inside_the_window_and_escalates_past_the_cap() {
        let policy = RestartPolicy {
            max_restarts: 3,
            window: Duration::from_secs(10),
            backoff: Duration::from_millis(100),
            max_backoff: Duration::from_millis(250),
        };
        let mut b = RestartBudget::new(policy);
        let t = Instant::now();
        assert_eq!(
            b.on_failure(t),
            RestartDecision::Restart {
                after: Duration::from_millis(100)
            }
        );
        assert_eq!(
            b.on_failure(t),
            RestartDecision::Restart {
                after: Duration::from_millis(200)
            }
        );
        assert_eq!(
            b.on_failure(t),
            RestartDecision::Restart {
                after: Duration::from_millis(250)
            }
        );
        assert_eq!(b.on_failure(t), RestartDecision::Escalate);
        // Old failures leave the window.
        let later = t + Duration::from_secs(11);
        assert_eq!(
            b.on_failure(later),
            RestartDecision::Restart {
                after: Duration::from_millis(100)
            }
        );
    }
}
