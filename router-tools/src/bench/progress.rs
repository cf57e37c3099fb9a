//! The live view of a bench run on stderr (stdout stays the report): counters the client
//! tasks bump as they send and finish ([`Live`]), and a display that reads them
//! ([`Progress`]).
//!
//! On a terminal the display is an `indicatif` progress bar (done of total when the total is
//! known, a spinner when it is not) with sent, ok / shed / errors and the recent request and
//! output-token rates; elsewhere (a CI log, a pipe) it is one plain line a second, starting
//! `bench: sent`, and a `bench: started` line first either way. Rates are over the last
//! [`RATE_WINDOW`] (the whole run until then).

use std::collections::VecDeque;
use std::io::IsTerminal as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::record::{RecordOutcome, bucket, output_tokens};
use crate::loadgen::Outcome;

/// How often a plain progress line is printed.
const LINE_EVERY: Duration = Duration::from_secs(1);
/// How often the bar is redrawn.
const BAR_EVERY: Duration = Duration::from_millis(200);
/// The live rates are over this much of the recent run.
pub const RATE_WINDOW: Duration = Duration::from_secs(5);

/// What the client tasks have done so far.
#[derive(Debug, Default)]
pub struct Live {
    sent: AtomicU64,
    done: AtomicU64,
    ok: AtomicU64,
    shed: AtomicU64,
    errors: AtomicU64,
    output_tokens: AtomicU64,
}

/// A reading of [`Live`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    pub sent: u64,
    pub done: u64,
    pub ok: u64,
    pub shed: u64,
    pub errors: u64,
    pub output_tokens: u64,
}

impl Live {
    /// One more request on its way.
    pub fn sent(&self) {
        self.sent.fetch_add(1, Ordering::Relaxed);
    }

    /// One request ended with `outcome`.
    pub fn finished(&self, outcome: &Outcome) {
        let counter = match bucket(outcome).0 {
            RecordOutcome::Ok => &self.ok,
            RecordOutcome::Shed => &self.shed,
            RecordOutcome::Error => &self.errors,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        self.output_tokens
            .fetch_add(output_tokens(outcome), Ordering::Relaxed);
        self.done.fetch_add(1, Ordering::Relaxed);
    }

    pub fn counts(&self) -> Counts {
        let read = |c: &AtomicU64| c.load(Ordering::Relaxed);
        Counts {
            sent: read(&self.sent),
            done: read(&self.done),
            ok: read(&self.ok),
            shed: read(&self.shed),
            errors: read(&self.errors),
            output_tokens: read(&self.output_tokens),
        }
    }
}

/// Ok requests and output tokens per second over the readings in `window` (oldest first).
pub fn rates(window: &VecDeque<(Instant, Counts)>) -> (f64, f64) {
    match (window.front(), window.back()) {
        (Some((t0, c0)), Some((t1, c1))) if t1 > t0 => {
            let secs = (*t1 - *t0).as_secs_f64();
            (
                c1.ok.saturating_sub(c0.ok) as f64 / secs,
                c1.output_tokens.saturating_sub(c0.output_tokens) as f64 / secs,
            )
        }
        _ => (0.0, 0.0),
    }
}

/// One plain progress line (`of_total`: `/N` when the total is known).
pub fn line(c: &Counts, of_total: &str, rates: (f64, f64)) -> String {
    format!(
        "bench: sent {}{of_total}, done {}{of_total} (ok {}, shed {}, errors {}), {:.1} req/s, \
         {:.0} out tok/s",
        c.sent, c.done, c.ok, c.shed, c.errors, rates.0, rates.1
    )
}

/// The bar's message after its counter.
fn bar_message(c: &Counts, rates: (f64, f64)) -> String {
    format!(
        "sent {} · ok {} shed {} err {} · {:.1} req/s · {:.0} out tok/s",
        c.sent, c.ok, c.shed, c.errors, rates.0, rates.1
    )
}

/// The running display; [`Progress::finish`] prints the last reading and stops it.
#[derive(Debug)]
pub struct Progress {
    live: Arc<Live>,
    bar: Option<ProgressBar>,
    of_total: String,
    task: JoinHandle<()>,
}

impl Progress {
    /// Prints the start line and starts the bar (stderr is a terminal) or the plain lines.
    pub fn start(live: Arc<Live>, total: Option<u64>, what: &str, url: &str) -> Self {
        eprintln!("bench: started, sending {what} to {url}");
        let of_total = total.map_or_else(String::new, |t| format!("/{t}"));
        let bar = std::io::stderr().is_terminal().then(|| new_bar(total));
        let task = tokio::spawn(refresh(live.clone(), bar.clone(), of_total.clone()));
        Self {
            live,
            bar,
            of_total,
            task,
        }
    }

    /// Stops the display and leaves the final counts on stderr.
    pub fn finish(self, interrupted: bool) {
        self.task.abort();
        let c = self.live.counts();
        let why = if interrupted { " (stopped early)" } else { "" };
        match self.bar {
            Some(bar) => {
                bar.set_position(c.done);
                bar.finish_with_message(format!(
                    "sent {} · ok {} shed {} err {}{why}",
                    c.sent, c.ok, c.shed, c.errors
                ));
            }
            None => {
                let of = &self.of_total;
                eprintln!(
                    "bench: sent {}{of}, done {}{of} (ok {}, shed {}, errors {}){why}",
                    c.sent, c.done, c.ok, c.shed, c.errors
                );
            }
        }
    }
}

fn new_bar(total: Option<u64>) -> ProgressBar {
    let (bar, template) = match total {
        Some(n) => (
            ProgressBar::new(n),
            "{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} done · {msg}",
        ),
        None => (
            ProgressBar::new_spinner(),
            "{spinner} [{elapsed_precise}] {pos} done · {msg}",
        ),
    };
    // The templates are constants; a broken one would fall back to indicatif's default.
    if let Ok(style) = ProgressStyle::with_template(template) {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.set_draw_target(ProgressDrawTarget::stderr());
    bar
}

/// Redraws the bar, or prints a line, until aborted.
async fn refresh(live: Arc<Live>, bar: Option<ProgressBar>, of_total: String) {
    let every = if bar.is_some() { BAR_EVERY } else { LINE_EVERY };
    let mut tick = tokio::time::interval(every);
    let mut window: VecDeque<(Instant, Counts)> = VecDeque::new();
    loop {
        let now = tick.tick().await;
        let counts = live.counts();
        window.push_back((now, counts));
        while window
            .front()
            .is_some_and(|(t, _)| now.duration_since(*t) > RATE_WINDOW)
        {
            window.pop_front();
        }
        let rates = rates(&window);
        match &bar {
            Some(bar) => {
                bar.set_position(counts.done);
                bar.set_message(bar_message(&counts, rates));
            }
            // The first tick is at the start: nothing to say yet.
            None if window.len() > 1 => eprintln!("{}", line(&counts, &of_total, rates)),
            None => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::loadgen::Streamed;

    #[test]
    fn counters_follow_outcomes_and_rates_cover_the_window() {
        let live = Live::default();
        for _ in 0..3 {
            live.sent();
        }
        live.finished(&Outcome::Admitted(Streamed {
            completed: true,
            completion_tokens: Some(12),
            ..Streamed::default()
        }));
        live.finished(&Outcome::Rejected {
            status: Some(429),
            reason: "rate_limited".to_owned(),
        });
        let c = live.counts();
        assert_eq!(
            c,
            Counts {
                sent: 3,
                done: 2,
                ok: 1,
                shed: 1,
                errors: 0,
                output_tokens: 12
            }
        );
        let t0 = Instant::now();
        let mut window = VecDeque::from([(t0, Counts::default())]);
        assert_eq!(rates(&window), (0.0, 0.0), "one reading: no rate yet");
        window.push_back((t0 + Duration::from_secs(2), c));
        assert_eq!(rates(&window), (0.5, 6.0));
        let text = line(&c, "/10", rates(&window));
        assert_eq!(
            text,
            "bench: sent 3/10, done 2/10 (ok 1, shed 1, errors 0), 0.5 req/s, 6 out tok/s"
        );
    }
}
