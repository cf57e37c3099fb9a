//! Time a node did not run is not silence.
//!
//! Leases (a worker's in the registry, a peer's in peer sync) end when nothing was heard from
//! their holder for a while. That silence is evidence only if this node was listening. A node
//! that was stopped (a paused or migrated VM, SIGSTOP, a machine so starved that nothing ran
//! for seconds) wakes up with every lease overdue and the holders' messages still unread in
//! its socket: without care it expires the whole fleet and every peer at once, then learns
//! them back a moment later, dropping their bookings and index entries on the way.
//!
//! A [`Vigil`] notices such a stop. Its actor wakes at least every `every` (a timer it keeps
//! armed); when the actor runs again after a longer gap than that, the excess is time in which
//! it could hear nothing, and the actor adds it to every lease it holds: leases count the time
//! the node was listening. An ordinary late wake-up (a busy mailbox, scheduling noise) stays
//! under [`Vigil::TOLERANCE`] and changes nothing.
//!
//! The same holds for a wait on an actor's answer ([`within_running`]): a node stopped while a
//! request waited for its admission wakes up with the wait's deadline passed and the answer
//! not computed yet. Only the time the node ran counts against the wait.

use std::future::Future;
use std::time::Duration;
use tokio::time::Instant;

/// How often a lease-holding actor wakes at least, to notice a stop soon after it ends.
pub const VIGIL_EVERY: Duration = Duration::from_millis(250);

/// When an actor last ran, and how often it is woken at least.
#[derive(Debug, Clone, Copy)]
pub struct Vigil {
    every: Duration,
    last: Instant,
}

impl Vigil {
    /// A gap this much longer than `every` is taken for a stop; shorter ones are ordinary
    /// delays (a backed-up mailbox, a busy runtime).
    pub const TOLERANCE: Duration = Duration::from_millis(250);

    /// An actor woken at least every `every` (zero: never woken on its own, so gaps mean
    /// nothing and no stop is ever reported), running first at `now`.
    pub fn new(every: Duration, now: Instant) -> Self {
        Self { every, last: now }
    }

    /// The actor runs at `now` (any message). Returns how long it was stopped since it last
    /// ran, beyond its wake-up period: time to add to every lease. `None` after an ordinary
    /// gap.
    pub fn ran(&mut self, now: Instant) -> Option<Duration> {
        let gap = now.saturating_duration_since(self.last);
        self.last = self.last.max(now);
        if self.every.is_zero() {
            return None;
        }
        let unheard = gap.saturating_sub(self.every);
        (unheard > Self::TOLERANCE).then_some(unheard)
    }

    /// [`Self::ran`] for an actor holding `held` leases of `what` (`"worker"`, `"peer"`): a
    /// stop is reported (and logged) only while it holds any.
    pub fn ran_holding(
        &mut self,
        now: Instant,
        held: usize,
        what: &'static str,
    ) -> Option<Duration> {
        let stopped = self.ran(now).filter(|_| held > 0)?;
        tracing::warn!(
            stopped_ms = u64::try_from(stopped.as_millis()).unwrap_or(u64::MAX),
            leases = what,
            held,
            "this node did not run for a while (a paused VM or process, a starved machine): \
             leases extended by that long, not run out"
        );
        Some(stopped)
    }
}

/// Awaits `fut` for at most `budget` of the time this node ran: a stop of the node while
/// waiting (see the module) does not use the budget up, since what was awaited could not make
/// progress either. `None` when the budget ran out first. Wakes every [`VIGIL_EVERY`] while it
/// waits, to notice a stop.
pub async fn within_running<F: Future>(budget: Duration, fut: F) -> Option<F::Output> {
    let mut fut = std::pin::pin!(fut);
    let start = Instant::now();
    let mut vigil = Vigil::new(VIGIL_EVERY, start);
    let mut deadline = start + budget;
    loop {
        let wake = deadline.min(Instant::now() + VIGIL_EVERY);
        if let Ok(out) = tokio::time::timeout_at(wake, fut.as_mut()).await {
            return Some(out);
        }
        let now = Instant::now();
        if let Some(stopped) = vigil.ran(now) {
            deadline += stopped;
        }
        if now >= deadline {
            return None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn only_a_gap_well_past_the_wake_up_period_is_a_stop() {
        let every = Duration::from_millis(200);
        let mut vigil = Vigil::new(every, Instant::now());
        // Woken on time, early, or a little late: nothing to make up for.
        for wait in [200, 10, 0, 200 + 250] {
            tokio::time::advance(Duration::from_millis(wait)).await;
            assert_eq!(vigil.ran(Instant::now()), None, "after {wait} ms");
        }
        // Nothing ran for 10 s: all of it but one period was unheard.
        tokio::time::advance(Duration::from_secs(10)).await;
        assert_eq!(
            vigil.ran(Instant::now()),
            Some(Duration::from_millis(9_800))
        );
        // The burst of overdue messages right after the stop is not another stop.
        assert_eq!(vigil.ran(Instant::now()), None);
        // An instant older than the last run (read before a message was queued) is no gap.
        let before = Instant::now();
        tokio::time::advance(Duration::from_millis(50)).await;
        assert_eq!(vigil.ran(Instant::now()), None);
        assert_eq!(vigil.ran(before), None);
    }

    #[tokio::test(start_paused = true)]
    async fn an_actor_without_a_wake_up_timer_never_reports_a_stop() {
        let mut vigil = Vigil::new(Duration::ZERO, Instant::now());
        tokio::time::advance(Duration::from_secs(60)).await;
        assert_eq!(vigil.ran(Instant::now()), None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_wait_counts_only_the_time_the_node_ran() {
        let (answer, answered) = tokio::sync::oneshot::channel::<u32>();
        let waiting = tokio::spawn(within_running(Duration::from_secs(2), answered));
        tokio::task::yield_now().await;
        // The machine stops for 10 s: on waking, every timer is overdue and the answer is not
        // there yet (the actor has not run either); it comes a moment later.
        tokio::time::advance(Duration::from_secs(10)).await;
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        assert!(!waiting.is_finished(), "the wait ran out during the stop");
        answer
            .send(7)
            .unwrap_or_else(|_| panic!("the wait gave up"));
        assert_eq!(waiting.await.ok().flatten().and_then(Result::ok), Some(7));
    }

    #[tokio::test(start_paused = true)]
    async fn a_wait_on_nothing_ends_when_its_running_time_is_spent() {
        let started = Instant::now();
        let never = std::future::pending::<()>();
        assert_eq!(within_running(Duration::from_secs(2), never).await, None);
        assert_eq!(started.elapsed(), Duration::from_secs(2));
    }
}
