//! Queue depth over a bench run, when the endpoint is a Switchyard node: its Prometheus
//! `/metrics` (`--metrics-url`, by default the endpoint's own) is read every
//! [`SAMPLE_EVERY`], and `switchyard_queue_depth` (requests waiting, by `pool` and `class`)
//! is summed per class into a [`QueueSample`].
//!
//! An endpoint that is not ours (no such metric, no `/metrics`, no answer) is left alone
//! after the first try, quietly: its run has no queue-depth plot. A later scrape that fails
//! (a node restarting under a fault) is skipped, and the sampling goes on.

use std::collections::BTreeMap;
use std::time::Duration;

use prom_text_format_parser::parse_scrape;
use serde::{Deserialize, Serialize};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::report::round;

/// How often `/metrics` is read.
pub const SAMPLE_EVERY: Duration = Duration::from_millis(500);
/// The metric read.
pub const QUEUE_DEPTH: &str = "switchyard_queue_depth";
/// Longest one scrape may take.
const SCRAPE_TIMEOUT: Duration = Duration::from_secs(2);

/// Requests waiting per class (summed over pools) at one moment of the run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QueueSample {
    /// When it was read, ms after the run's start.
    pub t_ms: f64,
    pub depth: BTreeMap<String, f64>,
}

/// `switchyard_queue_depth` per class in one scrape; `None` when the text has no such
/// metric (not a Switchyard node, or not Prometheus text).
pub fn read_queue_depth(text: &str) -> Option<BTreeMap<String, f64>> {
    let (metrics, _) = parse_scrape(text);
    let metric = metrics.iter().find(|m| m.name == QUEUE_DEPTH)?;
    let mut depth = BTreeMap::new();
    for sample in &metric.samples {
        let class = sample
            .labels
            .iter()
            .find(|l| l.key == "class")
            .map_or("default", |l| l.value.as_str());
        // The parser checked it is a number; `as_f64` would panic were it not.
        let value: Option<f64> = sample.value.value.parse().ok();
        if let Some(value) = value.filter(|v| v.is_finite()) {
            *depth.entry(class.to_owned()).or_insert(0.0) += value;
        }
    }
    Some(depth)
}

/// The sampling task; [`Sampler::stop`] ends it and hands back what it read.
#[derive(Debug)]
pub struct Sampler {
    stop: oneshot::Sender<()>,
    task: JoinHandle<Vec<QueueSample>>,
}

impl Sampler {
    /// Reads `url` now and every [`SAMPLE_EVERY`] until stopped; `start` is the run's start.
    pub fn start(client: reqwest::Client, url: String, start: Instant) -> Self {
        let (stop, mut stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let mut samples = Vec::new();
            let mut tick = tokio::time::interval(SAMPLE_EVERY);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    biased;
                    _ = &mut stopped => break,
                    _ = tick.tick() => {}
                }
                let t_ms = round(start.elapsed().as_secs_f64() * 1e3, 1);
                match scrape(&client, &url).await {
                    Some(depth) => samples.push(QueueSample { t_ms, depth }),
                    // Not ours: stop asking.
                    None if samples.is_empty() => return samples,
                    None => {}
                }
            }
            samples
        });
        Self { stop, task }
    }

    /// Stops sampling; the samples read so far (none when the endpoint is not ours).
    pub async fn stop(self) -> Vec<QueueSample> {
        let _ = self.stop.send(());
        self.task.await.unwrap_or_default()
    }
}

async fn scrape(client: &reqwest::Client, url: &str) -> Option<BTreeMap<String, f64>> {
    let response = client.get(url).timeout(SCRAPE_TIMEOUT).send().await.ok()?;
    if !response.status().is_success() {
        return None;
    }
    read_queue_depth(&response.text().await.ok()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_depth_is_summed_per_class_over_pools() {
        let text = "# HELP switchyard_queue_depth Requests waiting in a class queue.\n\
                    # TYPE switchyard_queue_depth gauge\n\
                    switchyard_queue_depth{pool=\"agg\",class=\"interactive\"} 3\n\
                    switchyard_queue_depth{pool=\"prefill\",class=\"interactive\"} 2\n\
                    switchyard_queue_depth{pool=\"agg\",class=\"batch\"} 0\n\
                    # HELP switchyard_queue_tokens Prompt tokens waiting.\n\
                    # TYPE switchyard_queue_tokens gauge\n\
                    switchyard_queue_tokens{pool=\"agg\",class=\"batch\"} 900\n";
        let depth = read_queue_depth(text).unwrap_or_else(|| panic!("a Switchyard scrape"));
        assert_eq!(
            depth,
            BTreeMap::from([("batch".to_owned(), 0.0), ("interactive".to_owned(), 5.0)])
        );
        let vllm = "# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting 4\n";
        assert_eq!(read_queue_depth(vllm), None);
        assert_eq!(read_queue_depth("<html>not metrics</html>"), None);
    }
}
