//! Reading a running fleet from outside, over HTTP, as an operator's tools would: a replica's
//! `/debug/state` and `/metrics`, a simulated worker's own `/load`, whether every ledger of
//! a replica is idle, and [`KvSampler`], a task that polls workers' `/load` on a period and
//! keeps each worker's peak of KV blocks in use (the engine's own count, not a router's
//! belief).

use serde_json::Value;
use std::collections::BTreeMap;
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// GET `url` as JSON; an error names the URL.
pub async fn get_json(http: &reqwest::Client, url: &str) -> Result<Value, String> {
    let response = http
        .get(url)
        .send()
        .await
        .map_err(|e| format!("GET {url}: {e}"))?;
    let status = response.status();
    let body = response
        .text()
        .await
        .map_err(|e| format!("GET {url}: {e}"))?;
    if !status.is_success() {
        return Err(format!("GET {url}: {status}: {body}"));
    }
    serde_json::from_str(&body).map_err(|e| format!("GET {url}: not JSON ({e}): {body}"))
}

/// GET `url` as text (a Prometheus `/metrics`).
pub async fn get_text(http: &reqwest::Client, url: &str) -> Result<String, String> {
    let response = http
        .get(url)
        .send()
        .await
        .map_err(|e| format!("GET {url}: {e}"))?;
    let status = response.status();
    let body = response
        .text()
        .await
        .map_err(|e| format!("GET {url}: {e}"))?;
    if status.is_success() {
        Ok(body)
    } else {
        Err(format!("GET {url}: {status}: {body}"))
    }
}

/// The status of GET `url`, 0 when it does not answer.
pub async fn status_of(http: &reqwest::Client, url: &str) -> u16 {
    match http.get(url).send().await {
        Ok(response) => response.status().as_u16(),
        Err(_) => 0,
    }
}

/// The sum of every sample of `name` (any labels) in a Prometheus text exposition; `None`
/// when there is no such sample.
pub fn metric_sum(text: &str, name: &str) -> Option<f64> {
    let mut found = None;
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some(rest) = line.strip_prefix(name) else {
            continue;
        };
        if !(rest.starts_with('{') || rest.starts_with(' ')) {
            continue;
        }
        let value = rest.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok());
        if let Some(value) = value {
            *found.get_or_insert(0.0) += value;
        }
    }
    found
}

/// The router snapshots of every pool of a replica's `/debug/state` (`node.routers`; the
/// admitting pool's top-level snapshot when the node part is missing).
pub fn router_snapshots(state: &Value) -> Vec<&Value> {
    match state["node"]["routers"].as_array() {
        Some(routers) if !routers.is_empty() => routers.iter().map(|r| &r["state"]).collect(),
        _ => vec![state],
    }
}

/// Whether a router snapshot's ledger holds nothing (no booking, no reservation, no load on
/// any rank) and its queue is empty.
pub fn router_idle(snapshot: &Value) -> bool {
    let scheduler = &snapshot["scheduler"];
    let ledger = &scheduler["ledger"];
    ledger["bookings"] == 0
        && ledger["reservations"] == 0
        && scheduler["queue"]["len"] == 0
        && ledger["ranks"].as_array().is_some_and(|ranks| {
            !ranks.is_empty()
                && ranks.iter().all(|r| {
                    [
                        "prefill_tokens",
                        "decode_blocks",
                        "reserved_blocks",
                        "requests",
                    ]
                    .iter()
                    .all(|k| r[*k] == 0)
                })
        })
}

/// Whether every pool's ledger of a replica is idle (see [`router_idle`]).
pub fn ledger_idle(state: &Value) -> bool {
    router_snapshots(state).into_iter().all(router_idle)
}

/// Each worker's peak of KV blocks in use while the sampler ran.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KvPeaks {
    /// Worker id → the largest `kv_used_blocks` its `/load` reported.
    pub peaks: BTreeMap<u64, u64>,
    /// Samples taken (each a `/load` of every worker).
    pub rounds: u64,
    /// `/load` reads that failed (the worker did not answer in time).
    pub misses: u64,
}

/// Polls `/load` of some workers every period in a task of its own; [`Self::finish`] stops
/// it and returns the peaks.
#[derive(Debug)]
pub struct KvSampler {
    stop: watch::Sender<bool>,
    task: JoinHandle<KvPeaks>,
}

impl KvSampler {
    /// Starts sampling `workers` (worker id, base URL) every `every`.
    pub fn start(http: reqwest::Client, workers: Vec<(u64, String)>, every: Duration) -> Self {
        let (stop, mut stopped) = watch::channel(false);
        let task = tokio::spawn(async move {
            let mut peaks = KvPeaks::default();
            for (id, _) in &workers {
                peaks.peaks.insert(*id, 0);
            }
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = tick.tick() => {}
                    _ = stopped.changed() => break,
                }
                let reads = workers.iter().map(|(id, url)| {
                    let http = http.clone();
                    let url = format!("{url}/load");
                    async move { (*id, get_json(&http, &url).await) }
                });
                for (id, load) in futures::future::join_all(reads).await {
                    match load.ok().and_then(|l| l["kv_used_blocks"].as_u64()) {
                        Some(used) => {
                            let peak = peaks.peaks.entry(id).or_insert(0);
                            *peak = (*peak).max(used);
                        }
                        None => peaks.misses += 1,
                    }
                }
                peaks.rounds += 1;
            }
            peaks
        });
        Self { stop, task }
    }

    /// Stops sampling and returns the peaks.
    pub async fn finish(self) -> KvPeaks {
        let _ = self.stop.send(true);
        self.task.await.unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn metric_sums_add_every_label_set_of_one_name_only() {
        let text = "# HELP x_total a counter\n\
                    x_total{class=\"a\"} 3\n\
                    x_total{class=\"b\"} 4.5\n\
                    x_total_other 100\n\
                    y 1\n";
        assert_eq!(metric_sum(text, "x_total"), Some(7.5));
        assert_eq!(metric_sum(text, "y"), Some(1.0));
        assert_eq!(metric_sum(text, "z"), None);
    }

    fn rank(decode_blocks: u64, reserved_blocks: u64) -> Value {
        json!({"prefill_tokens": 0, "decode_blocks": decode_blocks,
               "reserved_blocks": reserved_blocks, "requests": 0})
    }

    fn snapshot(bookings: u64, queued: u64, ranks: Vec<Value>) -> Value {
        json!({"scheduler": {"ledger": {"bookings": bookings, "reservations": 0, "ranks": ranks},
                             "queue": {"len": queued}}})
    }

    #[test]
    fn a_replica_is_idle_only_when_every_pool_is() {
        let idle = snapshot(0, 0, vec![rank(0, 0)]);
        let state = |decode: Value| {
            json!({"scheduler": idle["scheduler"].clone(),
                   "node": {"routers": [{"pool": "prefill", "state": idle.clone()},
                                        {"pool": "decode", "state": decode}]}})
        };
        assert!(ledger_idle(&state(idle.clone())));
        assert!(!ledger_idle(&state(snapshot(0, 0, vec![rank(0, 75)]))));
        assert!(!ledger_idle(&state(snapshot(1, 0, vec![rank(0, 0)]))));
        assert!(!ledger_idle(&state(snapshot(0, 2, vec![rank(0, 0)]))));
        // A pool that knows no rank yet is not idle: it has not seen the fleet.
        assert!(!ledger_idle(&state(snapshot(0, 0, vec![]))));
    }
}
