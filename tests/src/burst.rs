//! The burst of issue #15: does a replicated fleet hold a class's decode fraction when a
//! burst lands on every replica at once? And the same for the prefill pool's line
//! ([`BurstSpec::prefill_line`]): a class with `prefill_busy_threshold` and no decode
//! fraction, where what counts is how many prompts each prefill worker was given at once
//! (its own `peak_requests`).
//!
//! A disaggregated fleet over NATS ([`BurstSpec::cluster`]: 2 prefill and 2 decode simulated
//! workers, decode KV 1,024 blocks each, speedup 10, N replicas behind HAProxy round robin),
//! one class with `decode_busy_threshold_frac = 0.5` (512 blocks per decode worker) and a
//! queue wait long enough that nothing is shed. [`run_burst`] sends 120 streaming
//! `/v1/completions` requests through HAProxy all at once (a barrier releases them together),
//! each a unique prompt of 1,000 token ids with `max_tokens` 200, while a [`KvSampler`]
//! polls the decode workers' own `/load` every 20 ms. The [`BurstReport`] holds the peak KV
//! blocks each decode worker really used, the overshoot over the limit, the requests that
//! completed (200 and a stream that ended with a finish reason and `[DONE]`) and whether
//! every replica's ledger returned to idle.
//!
//! [`KvSampler`]: crate::support::observe::KvSampler

use crate::support::cluster::{Cluster, ClusterBuilder, Role};
use crate::support::observe::metric_sum;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The class line a burst tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BurstLine {
    /// `decode_busy_threshold_frac`: the decode KV the decode workers really use.
    Decode,
    /// `prefill_busy_threshold` (tokens): the prompts a prefill worker holds at once.
    Prefill,
}

/// The burst's shape. [`Default`] is issue #15's measurement.
#[derive(Debug, Clone)]
pub struct BurstSpec {
    pub line: BurstLine,
    /// The class's `prefill_busy_threshold` in prompt tokens ([`BurstLine::Prefill`]).
    pub prefill_busy_threshold: u64,
    pub replicas: usize,
    pub prefill_workers: usize,
    pub decode_workers: usize,
    /// KV blocks of each decode worker.
    pub decode_kv_blocks: u64,
    /// The class's `decode_busy_threshold_frac`.
    pub decode_frac: f64,
    pub speedup: f64,
    /// Concurrent requests of one burst.
    pub requests: usize,
    pub prompt_tokens: usize,
    pub max_tokens: u32,
    /// How often the decode workers' `/load` is read.
    pub sample_every: Duration,
    /// The class's queue-wait deadline: long enough that nothing is shed.
    pub slo_ms: u64,
    /// The overshoot allowed over the limit, as a fraction of a decode worker's capacity.
    pub bound_frac: f64,
    /// Workers' announcement and load period and the replicas' peer heartbeat.
    pub heartbeat_ms: u64,
    /// Replicas share the decode room through room credits (`[scheduler] room_credits`);
    /// false: each admits on its own view (the design before, for contrast).
    pub room_credits: bool,
    /// Prefill admissions hold decode room (`[scheduler] decode_reservations`).
    pub decode_reservations: bool,
}

impl Default for BurstSpec {
    fn default() -> Self {
        Self {
            line: BurstLine::Decode,
            prefill_busy_threshold: 3000,
            replicas: 1,
            prefill_workers: 2,
            decode_workers: 2,
            decode_kv_blocks: 1024,
            decode_frac: 0.5,
            speedup: 10.0,
            requests: 120,
            prompt_tokens: 1000,
            max_tokens: 200,
            sample_every: Duration::from_millis(20),
            slo_ms: 120_000,
            bound_frac: 0.01,
            heartbeat_ms: 200,
            room_credits: true,
            decode_reservations: true,
        }
    }
}

impl BurstSpec {
    /// The prefill line's burst: a class with a 3,000-token `prefill_busy_threshold` and no
    /// decode fraction, short answers (20 tokens) and decode workers with room for the whole
    /// burst, so only the prefill line holds requests back.
    pub fn prefill_line() -> Self {
        Self {
            line: BurstLine::Prefill,
            decode_kv_blocks: 16_384,
            max_tokens: 20,
            ..Self::default()
        }
    }

    /// The prompts a prefill worker may hold at once under the prefill line, as one router
    /// admits them: a worker takes prompts while its booked tokens are at or under the line,
    /// so the one that crosses it is admitted too (every prompt here is uncached).
    pub fn prefill_limit(&self) -> u64 {
        self.prefill_busy_threshold / (self.prompt_tokens.max(1) as u64) + 1
    }

    /// The decode blocks a worker may hold under the class's fraction.
    pub fn limit(&self) -> u64 {
        (self.decode_frac * self.decode_kv_blocks as f64).floor() as u64
    }

    /// The overshoot allowed over [`Self::limit`], in blocks (1 % of 1,024 = 10).
    pub fn bound_blocks(&self) -> u64 {
        (self.bound_frac * self.decode_kv_blocks as f64).floor() as u64
    }

    /// The one class every request runs under.
    pub fn policy(&self) -> String {
        let line = match self.line {
            BurstLine::Decode => format!("decode_busy_threshold_frac = {}", self.decode_frac),
            BurstLine::Prefill => {
                format!("prefill_busy_threshold = {}", self.prefill_busy_threshold)
            }
        };
        format!(
            "default_class = \"interactive\"\n\n[[classes]]\nname = \"interactive\"\n\
             slo_ms = {}\nquantum = 1024\n{line}\n",
            self.slo_ms
        )
    }

    /// The fleet: prefill and decode pools, the replicas, HAProxy in front.
    pub fn cluster(&self) -> ClusterBuilder {
        ClusterBuilder::new()
            .replicas(self.replicas)
            .workers(Role::Prefill, self.prefill_workers, 16_384)
            .workers(Role::Decode, self.decode_workers, self.decode_kv_blocks)
            .speedup(self.speedup)
            .heartbeat_ms(self.heartbeat_ms)
            .policy(&self.policy())
            .extra(&format!(
                "[scheduler]\nroom_credits = {}\ndecode_reservations = {}\n",
                self.room_credits, self.decode_reservations
            ))
    }
}

/// What one burst did.
#[derive(Debug, Clone)]
pub struct BurstReport {
    pub replicas: usize,
    /// KV blocks of each decode worker.
    pub capacity: u64,
    /// [`BurstSpec::limit`].
    pub limit: u64,
    /// Decode worker id → the most KV blocks it reported in use.
    pub peaks: BTreeMap<u64, u64>,
    /// [`BurstSpec::prefill_limit`].
    pub prefill_limit: u64,
    /// Prefill worker id → the most requests it held at once since it started (its own
    /// `peak_requests`; over every burst sent to the fleet so far).
    pub prefill_peaks: BTreeMap<u64, u64>,
    /// Sampling rounds, and `/load` reads that failed.
    pub samples: u64,
    pub sample_misses: u64,
    pub sent: usize,
    pub ok: usize,
    /// Why each failed request failed (the first few).
    pub failures: Vec<String>,
    pub failed: usize,
    /// Requests each replica received during the burst (its `switchyard_http_requests_total`).
    pub per_replica: Vec<u64>,
    /// Requests the decode workers preempted for want of KV during the burst (their own
    /// `preemptions` counters): what an overshoot to a full KV costs.
    pub preemptions: u64,
    /// From the release of the burst to the end of its last stream.
    pub wall: Duration,
    /// Whether every replica's ledger returned to idle (the error says what was held).
    pub ledgers_idle: Result<(), String>,
}

impl BurstReport {
    /// The largest peak over the decode workers.
    pub fn peak(&self) -> u64 {
        self.peaks.values().copied().max().unwrap_or(0)
    }

    /// Blocks above the limit at the worst peak (0 when it held).
    pub fn overshoot_blocks(&self) -> u64 {
        self.peak().saturating_sub(self.limit)
    }

    /// [`Self::overshoot_blocks`] in % of a decode worker's capacity.
    pub fn overshoot_pct(&self) -> f64 {
        100.0 * self.overshoot_blocks() as f64 / self.capacity.max(1) as f64
    }

    /// The worst peak over the limit (1.0: exactly at the line).
    pub fn utilisation(&self) -> f64 {
        self.peak() as f64 / self.limit.max(1) as f64
    }

    /// The peaks as `a / b`.
    pub fn peaks_text(&self) -> String {
        let peaks: Vec<String> = self.peaks.values().map(u64::to_string).collect();
        peaks.join(" / ")
    }

    /// The most prompts a prefill worker held at once.
    pub fn prefill_peak(&self) -> u64 {
        self.prefill_peaks.values().copied().max().unwrap_or(0)
    }

    /// The prefill peaks as `a / b`.
    pub fn prefill_peaks_text(&self) -> String {
        let peaks: Vec<String> = self.prefill_peaks.values().map(u64::to_string).collect();
        peaks.join(" / ")
    }

    pub fn to_json(&self) -> Value {
        json!({
            "replicas": self.replicas,
            "capacity_blocks": self.capacity,
            "limit_blocks": self.limit,
            "peaks": self.peaks.iter().map(|(w, p)| json!({"worker": w, "peak_blocks": p})).collect::<Vec<_>>(),
            "peak_blocks": self.peak(),
            "overshoot_blocks": self.overshoot_blocks(),
            "overshoot_pct_of_capacity": self.overshoot_pct(),
            "utilisation_of_limit": self.utilisation(),
            "prefill_limit_requests": self.prefill_limit,
            "prefill_peaks": self.prefill_peaks.iter().map(|(w, p)| json!({"worker": w, "peak_requests": p})).collect::<Vec<_>>(),
            "samples": self.samples,
            "sample_misses": self.sample_misses,
            "sent": self.sent,
            "ok": self.ok,
            "failed": self.failed,
            "failures": self.failures,
            "requests_per_replica": self.per_replica,
            "decode_preemptions": self.preemptions,
            "wall_ms": self.wall.as_millis() as u64,
            "ledgers_idle": self.ledgers_idle.is_ok(),
        })
    }
}

/// Sends one burst through `cluster` (ready, idle) while sampling its decode workers; `seed`
/// makes the prompts (use another one for every burst on the same cluster, so no prompt is
/// cached).
pub async fn run_burst(cluster: &Cluster, spec: &BurstSpec, seed: u64) -> BurstReport {
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(300))
        .build()
        .expect("an HTTP client");
    let url = format!("{}/v1/completions", cluster.url());
    let before = requests_per_replica(cluster).await;
    let preempted_before = decode_preemptions(cluster, &cluster.worker_loads().await);
    let sampler = cluster.sample_decode_kv(spec.sample_every);
    let barrier = Arc::new(tokio::sync::Barrier::new(spec.requests + 1));
    let tasks: Vec<_> = (0..spec.requests)
        .map(|i| {
            let body = json!({
                "model": "sim",
                "prompt": prompt(seed, i as u64, spec.prompt_tokens),
                "max_tokens": spec.max_tokens,
                "stream": true,
            });
            let (http, url, barrier) = (http.clone(), url.clone(), Arc::clone(&barrier));
            tokio::spawn(async move {
                barrier.wait().await;
                stream(&http, &url, &body).await
            })
        })
        .collect();
    barrier.wait().await;
    let started = Instant::now();
    let mut failures = Vec::new();
    let mut ok = 0;
    for (i, task) in tasks.into_iter().enumerate() {
        match task.await {
            Ok(Ok(())) => ok += 1,
            Ok(Err(why)) => failures.push(format!("request {i}: {why}")),
            Err(e) => failures.push(format!("request {i}: task: {e}")),
        }
    }
    let wall = started.elapsed();
    let kv = sampler.finish().await;
    let ledgers_idle = cluster.wait_ledgers_idle(Duration::from_secs(20)).await;
    // The workers' own counters after the burst, read once for both figures.
    let loads = cluster.worker_loads().await;
    let preemptions = decode_preemptions(cluster, &loads).saturating_sub(preempted_before);
    let per_replica = requests_per_replica(cluster)
        .await
        .iter()
        .zip(&before)
        .map(|(after, before)| after.saturating_sub(*before))
        .collect();
    let failed = failures.len();
    failures.truncate(5);
    BurstReport {
        replicas: cluster.replicas.len(),
        capacity: spec.decode_kv_blocks,
        limit: spec.limit(),
        peaks: kv.peaks,
        prefill_limit: spec.prefill_limit(),
        prefill_peaks: prefill_peaks(cluster, &loads),
        samples: kv.rounds,
        sample_misses: kv.misses,
        sent: spec.requests,
        ok,
        failures,
        failed,
        per_replica,
        preemptions,
        wall,
        ledgers_idle,
    }
}

/// The workers' `/load` answers, by worker id, as [`Cluster::worker_loads`] reads them.
type Loads = [(u64, Result<Value, String>)];

/// The decode workers' `preemptions` counters in `loads`, summed (a worker that did not
/// answer counts 0).
fn decode_preemptions(cluster: &Cluster, loads: &Loads) -> u64 {
    let decode: Vec<u64> = cluster.decode_workers().iter().map(|w| w.id).collect();
    loads
        .iter()
        .filter(|(id, _)| decode.contains(id))
        .filter_map(|(_, load)| load.as_ref().ok()?["preemptions"].as_u64())
        .sum()
}

/// Each prefill worker's `peak_requests` in `loads` (a worker that did not answer is left
/// out).
fn prefill_peaks(cluster: &Cluster, loads: &Loads) -> BTreeMap<u64, u64> {
    let prefill: Vec<u64> = cluster.prefill_workers().iter().map(|w| w.id).collect();
    loads
        .iter()
        .filter(|(id, _)| prefill.contains(id))
        .filter_map(|(id, load)| Some((*id, load.as_ref().ok()?["peak_requests"].as_u64()?)))
        .collect()
}

/// Each replica's `switchyard_http_requests_total` (0 when it does not answer).
async fn requests_per_replica(cluster: &Cluster) -> Vec<u64> {
    cluster
        .metrics()
        .await
        .into_iter()
        .map(|m| {
            m.ok()
                .and_then(|text| metric_sum(&text, "switchyard_http_requests_total"))
                .unwrap_or(0.0) as u64
        })
        .collect()
}

/// `len` token ids of request `index` of burst `seed` (splitmix64: no two requests share a
/// block), in o200k's ordinary range.
pub fn prompt(seed: u64, index: u64, len: usize) -> Vec<u32> {
    let mut state = seed
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .wrapping_add(index.wrapping_mul(0xD1B5_4A32_D192_ED03));
    (0..len)
        .map(|_| {
            state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^= z >> 31;
            1_000 + (z % 100_000) as u32
        })
        .collect()
}

/// One streaming request to its end: Ok when it answered 200 and the stream carried a
/// finish reason and `[DONE]`.
async fn stream(http: &reqwest::Client, url: &str, body: &Value) -> Result<(), String> {
    let mut response = http
        .post(url)
        .json(body)
        .send()
        .await
        .map_err(|e| format!("send: {e}"))?;
    let status = response.status();
    if status != reqwest::StatusCode::OK {
        let text = response.text().await.unwrap_or_default();
        return Err(format!("{status}: {text}"));
    }
    let mut buffer = Vec::new();
    let mut finish: Option<String> = None;
    let mut done = false;
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|e| format!("stream cut: {e}"))?
    {
        buffer.extend_from_slice(&chunk);
        while let Some(end) = buffer.windows(2).position(|w| w == b"\n\n") {
            let event: Vec<u8> = buffer.drain(..end + 2).collect();
            let event = String::from_utf8_lossy(&event);
            for data in event.lines().filter_map(|l| l.strip_prefix("data: ")) {
                if data == "[DONE]" {
                    done = true;
                    continue;
                }
                let value: Value =
                    serde_json::from_str(data).map_err(|e| format!("bad event {data:?}: {e}"))?;
                if !value["error"].is_null() {
                    return Err(format!("error event: {}", value["error"]));
                }
                if let Some(reason) = value["choices"][0]["finish_reason"].as_str() {
                    finish = Some(reason.to_owned());
                }
            }
        }
    }
    match (finish, done) {
        (Some(_), true) => Ok(()),
        (finish, done) => Err(format!(
            "stream ended without its end (finish reason {finish:?}, [DONE] {done})"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prompts_are_unique_per_request_and_per_seed_and_repeatable() {
        let a = prompt(1, 0, 1000);
        assert_eq!(a.len(), 1000);
        assert_eq!(a, prompt(1, 0, 1000));
        assert_ne!(a[..16], prompt(1, 1, 1000)[..16]);
        assert_ne!(a[..16], prompt(2, 0, 1000)[..16]);
        assert!(a.iter().all(|t| (1_000..101_000).contains(t)));
    }

    #[test]
    fn the_overshoot_is_the_worst_peak_above_the_limit() {
        let spec = BurstSpec::default();
        assert_eq!((spec.limit(), spec.bound_blocks()), (512, 10));
        let report = |peaks: &[u64]| BurstReport {
            replicas: 3,
            capacity: 1024,
            limit: 512,
            peaks: peaks
                .iter()
                .enumerate()
                .map(|(i, p)| (i as u64, *p))
                .collect(),
            prefill_limit: 4,
            prefill_peaks: BTreeMap::new(),
            samples: 1,
            sample_misses: 0,
            sent: 1,
            ok: 1,
            failures: Vec::new(),
            failed: 0,
            per_replica: Vec::new(),
            preemptions: 0,
            wall: Duration::ZERO,
            ledgers_idle: Ok(()),
        };
        let under = report(&[436, 437]);
        assert_eq!(under.overshoot_blocks(), 0);
        assert!((under.utilisation() - 437.0 / 512.0).abs() < 1e-9);
        let over = report(&[700, 611]);
        assert_eq!(over.overshoot_blocks(), 188);
        assert!((over.overshoot_pct() - 18.359375).abs() < 1e-9);
        assert_eq!(over.peaks_text(), "700 / 611");
    }
}
