//! hyper's timer for the node's listeners (the header read timeout, keep-alive): a deadline
//! that passed while the node was not running (a paused VM, a runtime stalled for seconds)
//! gets one short grace before it counts, so that what waited in the socket meanwhile (the
//! request a client sent just before the stop) is read first. A client that really sent
//! nothing is still cut off, one grace later. The same rule as the leases and the waits on
//! actors in `router_actors` (its `vigil` module): time the node did not run is not the
//! client's fault.

use hyper::rt::{Sleep, Timer};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::{Duration, Instant};

/// A deadline that fires this much later than it was set for is taken for a stop of the node,
/// and the grace it then gets: the vigil's tolerance, so one rule says what a stop is.
pub const GRACE: Duration = router_actors::vigil::Vigil::TOLERANCE;

/// hyper's [`Timer`] on tokio's clock, with a grace for deadlines that passed during a stop.
#[derive(Debug, Clone, Copy, Default)]
pub struct GraceTimer;

impl Timer for GraceTimer {
    fn sleep(&self, duration: Duration) -> Pin<Box<dyn Sleep>> {
        Box::pin(GraceSleep::new(tokio::time::sleep(duration)))
    }

    fn sleep_until(&self, deadline: Instant) -> Pin<Box<dyn Sleep>> {
        let deadline = tokio::time::Instant::from_std(deadline);
        Box::pin(GraceSleep::new(tokio::time::sleep_until(deadline)))
    }

    /// tokio's clock (the same as the system's, unless a test pauses it).
    fn now(&self) -> Instant {
        tokio::time::Instant::now().into_std()
    }
}

/// One deadline: fires when due, or a grace after waking up late.
struct GraceSleep {
    sleep: Pin<Box<tokio::time::Sleep>>,
    graced: bool,
}

impl GraceSleep {
    fn new(sleep: tokio::time::Sleep) -> Self {
        Self {
            sleep: Box::pin(sleep),
            graced: false,
        }
    }
}

impl Future for GraceSleep {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        ready!(self.sleep.as_mut().poll(cx));
        let now = tokio::time::Instant::now();
        let late = now.saturating_duration_since(self.sleep.deadline());
        if self.graced || late <= GRACE {
            return Poll::Ready(());
        }
        self.graced = true;
        self.sleep.as_mut().reset(now + GRACE);
        self.sleep.as_mut().poll(cx)
    }
}

impl Sleep for GraceSleep {}

#[cfg(test)]
mod tests {
    use super::*;

    async fn settle() {
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_deadline_fires_when_due() {
        let started = tokio::time::Instant::now();
        GraceTimer.sleep(Duration::from_secs(10)).await;
        assert_eq!(started.elapsed(), Duration::from_secs(10));
        let until = GraceTimer.now() + Duration::from_secs(3);
        GraceTimer.sleep_until(until).await;
        assert_eq!(started.elapsed(), Duration::from_secs(13));
    }

    #[tokio::test(start_paused = true)]
    async fn a_deadline_that_passed_during_a_stop_gets_a_grace() {
        let sleeping = tokio::spawn(GraceTimer.sleep(Duration::from_secs(10)));
        settle().await;
        // The machine stops for 30 s: on waking the deadline is 20 s overdue, and the bytes
        // that waited in the socket must get a chance to be read.
        tokio::time::advance(Duration::from_secs(30)).await;
        settle().await;
        assert!(!sleeping.is_finished(), "fired at once after the stop");
        tokio::time::advance(GRACE).await;
        settle().await;
        assert!(sleeping.is_finished(), "no end after the grace");
    }
}
