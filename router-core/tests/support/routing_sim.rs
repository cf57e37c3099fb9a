//! Routing-quality simulation over the Mooncake conversation trace, shared by
//! `examples/routing_quality.rs` (full trace, prints the table) and `tests/routing_quality.rs`
//! (a prefix of the trace, asserts the ordering of the policies). Both include this file with
//! `#[path = ...] mod sim;`.
//!
//! # Model
//!
//! - **Blocks.** The pool block size is 512 tokens, one trace `hash_id` per block. Every id
//!   counts as a block, the partial last one included, as in the reference's block-level
//!   method (hit rate = hit blocks / all blocks; 36.6 % ideal for one infinite cache).
//! - **Hashes.** The index chains `local` hashes itself (`seq = xxh3(parent_seq ‖ local)`), so
//!   no `LocalBlockHash` can make a sequence hash equal to a trace id. Instead each trace id
//!   is used as its block's *local* hash: a worker's `Stored` event names the block
//!   `ExternalHash(id)` with `local = LocalBlockHash(id)`, and the request is routed with
//!   `Prompt::Hashes` carrying `hashing::sequence_hashes` of those locals. Trace ids are
//!   chained (equal id ⇒ equal prefix), so this is a one-to-one renaming of the trace ids,
//!   and the index is fed through the real event path with no library change.
//! - **Workers.** Each simulated worker (one dp rank) has an LRU cache of `capacity_blocks`.
//!   At placement it touches the request's blocks tail first (the root ends up most recent,
//!   so eviction is leaf first, as in vLLM), evicts what it must, and publishes `Removed`
//!   for the evicted blocks and one `Stored` for the blocks it did not hold. Caches change at
//!   placement: the prefix is resident by the next arrival.
//! - **Hit.** The leading run of the request's ids already in the chosen worker's cache at
//!   placement. Every placement also checks that the index's overlap for every worker equals
//!   that worker's own cache (`index_disagreements`).
//! - **Time.** A discrete-event replay on a simulated clock (no waiting). A worker computes
//!   one prefill at a time at `prefill_tokens_per_ms` (uncached tokens only), first come
//!   first served: a request's first token comes when the prefills placed before it on the
//!   same worker and its own are done (its TTFT). Decode then takes `output tokens × decode
//!   time`, whatever else runs. `prefill_done` fires at the first token, `release` at the
//!   end, each followed by `drain`. Arrivals can be compressed by `speedup`.
//! - **Admission.** The fallback profile (one class, never queues, no thresholds), so every
//!   request is admitted at once and only placement differs between policies.
//! - **Policies.** Round robin and seeded random pin their rank (`eligibility.pinned`); the
//!   cost selector chooses freely with `SimConfig::selection` (the defaults unless changed).

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use router_core::hashing::sequence_hashes;
use router_core::{
    ClassId, EventStatus, ExternalHash, KvEvent, KvEventData, LocalBlockHash, Phase, PolicyProfile,
    PoolRole, PoolRouter, PoolRouterConfig, PrefixMode, Prompt, RankId, RequestId, RouteRequest,
    RouterId, SchedulerConfig, SelectionConfig, StoredBlock, Timestamp, WorkerId, WorkerSpec,
};
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap, HashSet};
use std::fmt;
use std::path::{Path, PathBuf};

/// Tokens per trace `hash_id`, and the pool's block size.
pub const TRACE_BLOCK_TOKENS: u32 = 512;

/// Where the trace ships, relative to the repository's root (gzip; see `traces/README.md`).
const TRACE_RELATIVE: &str = "traces/conversation_trace.jsonl.gz";

/// One line of the trace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceRequest {
    pub timestamp_ms: u64,
    pub input_length: u64,
    pub output_length: u64,
    pub hash_ids: Vec<u64>,
}

#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLine {
    timestamp: u64,
    input_length: u64,
    output_length: u64,
    hash_ids: Vec<u64>,
}

/// Why the trace could not be used; `line` is 1-based.
#[derive(Debug)]
pub enum TraceError {
    NotFound {
        tried: Vec<PathBuf>,
    },
    Io {
        path: PathBuf,
        error: std::io::Error,
    },
    BadLine {
        line: usize,
        message: String,
    },
}

impl fmt::Display for TraceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TraceError::NotFound { tried } => {
                write!(f, "Mooncake conversation trace not found; tried:")?;
                for p in tried {
                    write!(f, " {}", p.display())?;
                }
                write!(f, " (it ships with the repository: {TRACE_RELATIVE})")
            }
            TraceError::Io { path, error } => write!(f, "reading {}: {error}", path.display()),
            TraceError::BadLine { line, message } => write!(f, "trace line {line}: {message}"),
        }
    }
}

impl std::error::Error for TraceError {}

/// The shipped trace, found from the crate's manifest directory (the crate sits in the
/// repository's root).
pub fn trace_path() -> Result<PathBuf, TraceError> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(TRACE_RELATIVE);
    if path.is_file() {
        Ok(path.canonicalize().unwrap_or(path))
    } else {
        Err(TraceError::NotFound { tried: vec![path] })
    }
}

/// Reads and parses at most `limit` requests from `path`, gunzipping a `.gz` file.
#[allow(
    clippy::disallowed_methods,
    reason = "test and example support reads the trace file; router-core's own code does no I/O"
)]
pub fn load_trace(path: &Path, limit: Option<usize>) -> Result<Vec<TraceRequest>, TraceError> {
    let io = |error| TraceError::Io {
        path: path.to_path_buf(),
        error,
    };
    let bytes = std::fs::read(path).map_err(io)?;
    let text = if path.extension().is_some_and(|e| e == "gz") {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut flate2::read::GzDecoder::new(&bytes[..]), &mut text)
            .map_err(io)?;
        text
    } else {
        String::from_utf8(bytes)
            .map_err(|e| io(std::io::Error::new(std::io::ErrorKind::InvalidData, e)))?
    };
    parse_trace(&text, limit)
}

/// Parses JSON lines (blank lines skipped). Each line must have `hash_ids` non-empty and
/// exactly `ceil(input_length / 512)` long, and timestamps must not go backwards.
pub fn parse_trace(text: &str, limit: Option<usize>) -> Result<Vec<TraceRequest>, TraceError> {
    let mut out = Vec::new();
    let mut last_ts = 0;
    for (i, line) in text.lines().enumerate() {
        if limit.is_some_and(|l| out.len() >= l) {
            break;
        }
        let line_no = i + 1;
        if line.trim().is_empty() {
            continue;
        }
        let bad = |message: String| TraceError::BadLine {
            line: line_no,
            message,
        };
        let raw: RawLine = serde_json::from_str(line).map_err(|e| bad(e.to_string()))?;
        let blocks = raw.input_length.div_ceil(u64::from(TRACE_BLOCK_TOKENS));
        if raw.hash_ids.is_empty() || raw.hash_ids.len() as u64 != blocks {
            return Err(bad(format!(
                "{} hash_ids for input_length {} (expected {blocks})",
                raw.hash_ids.len(),
                raw.input_length
            )));
        }
        if raw.timestamp < last_ts {
            return Err(bad(format!(
                "timestamp {} before the previous {last_ts}",
                raw.timestamp
            )));
        }
        last_ts = raw.timestamp;
        out.push(TraceRequest {
            timestamp_ms: raw.timestamp,
            input_length: raw.input_length,
            output_length: raw.output_length,
            hash_ids: raw.hash_ids,
        });
    }
    Ok(out)
}

/// Hit blocks and all blocks for one infinite cache shared by everything (the ideal).
pub fn ideal(trace: &[TraceRequest]) -> HitCount {
    let mut seen = HashSet::new();
    let mut count = HitCount::default();
    for r in trace {
        let hit = r
            .hash_ids
            .iter()
            .take_while(|id| seen.contains(*id))
            .count();
        count.add(hit, r.hash_ids.len());
        seen.extend(r.hash_ids.iter().copied());
    }
    count
}

/// Hit blocks and all blocks for one LRU cache of `capacity_blocks` shared by everything
/// (the pooled reference for a fleet of total capacity `capacity_blocks`).
pub fn pooled_lru(trace: &[TraceRequest], capacity_blocks: usize) -> HitCount {
    let mut cache = LruCache::new(capacity_blocks);
    let mut count = HitCount::default();
    for r in trace {
        let placed = cache.place(&r.hash_ids);
        count.add(placed.hit, r.hash_ids.len());
    }
    count
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HitCount {
    pub hit_blocks: u64,
    pub total_blocks: u64,
}

impl HitCount {
    fn add(&mut self, hit: usize, total: usize) {
        self.hit_blocks += hit as u64;
        self.total_blocks += total as u64;
    }

    /// In percent.
    pub fn rate(&self) -> f64 {
        if self.total_blocks == 0 {
            0.0
        } else {
            100.0 * self.hit_blocks as f64 / self.total_blocks as f64
        }
    }
}

/// What one placement did to a worker's cache.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placed {
    /// Leading blocks already held.
    pub hit: usize,
    /// Blocks evicted to make room (leaves first).
    pub evicted: Vec<u64>,
    /// `ids[hit..stored_to]` were stored (a request longer than the cache keeps its head).
    pub stored_to: usize,
}

/// A worker's KV cache: LRU over blocks, blocks touched tail first so a parent is always
/// more recent than its children and eviction only ever takes leaves.
#[derive(Debug)]
pub struct LruCache {
    capacity: usize,
    stamp_of: HashMap<u64, u64>,
    by_stamp: BTreeMap<u64, u64>,
    clock: u64,
}

impl LruCache {
    pub fn new(capacity: usize) -> Self {
        Self {
            capacity,
            stamp_of: HashMap::new(),
            by_stamp: BTreeMap::new(),
            clock: 0,
        }
    }

    pub fn len(&self) -> usize {
        self.stamp_of.len()
    }

    pub fn contains(&self, id: u64) -> bool {
        self.stamp_of.contains_key(&id)
    }

    /// Leading blocks of `ids` held.
    pub fn prefix_hit(&self, ids: &[u64]) -> usize {
        ids.iter().take_while(|id| self.contains(**id)).count()
    }

    fn touch(&mut self, id: u64) {
        self.clock += 1;
        if let Some(old) = self.stamp_of.insert(id, self.clock) {
            self.by_stamp.remove(&old);
        }
        self.by_stamp.insert(self.clock, id);
    }

    /// Places a request's blocks: protects the held prefix, evicts the least recently used
    /// blocks to make room for the rest, then touches everything stored tail first.
    pub fn place(&mut self, ids: &[u64]) -> Placed {
        let hit = self.prefix_hit(ids);
        let stored_to = ids.len().min(self.capacity).max(hit);
        // The held prefix becomes the most recent, so the evictions below never take it
        // (hit + new blocks <= capacity).
        for &id in ids[..hit].iter().rev() {
            self.touch(id);
        }
        let need = (self.len() + (stored_to - hit)).saturating_sub(self.capacity);
        let mut evicted = Vec::with_capacity(need);
        for _ in 0..need {
            let Some((_, id)) = self.by_stamp.pop_first() else {
                break;
            };
            self.stamp_of.remove(&id);
            evicted.push(id);
        }
        for &id in ids[..stored_to].iter().rev() {
            self.touch(id);
        }
        Placed {
            hit,
            evicted,
            stored_to,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Policy {
    RoundRobin,
    Random,
    Cost,
}

impl Policy {
    pub const ALL: [Policy; 3] = [Policy::RoundRobin, Policy::Random, Policy::Cost];

    pub fn name(self) -> &'static str {
        match self {
            Policy::RoundRobin => "round robin",
            Policy::Random => "random",
            Policy::Cost => "cost selector",
        }
    }
}

/// The fleet and the completion model.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SimConfig {
    pub workers: u32,
    /// KV blocks (of 512 tokens) per worker.
    pub capacity_blocks: usize,
    /// Uncached prompt tokens computed per simulated ms (10 = 10K tokens/s).
    pub prefill_tokens_per_ms: f64,
    /// Simulated ms per output token.
    pub decode_ms_per_token: f64,
    /// Arrival timestamps are divided by this (1 = the trace's own pace).
    pub speedup: f64,
    /// Seed of the random policy and of the scheduler's tie-breaks.
    pub seed: u64,
    /// The cost selector's settings.
    pub selection: SelectionConfig,
}

impl SimConfig {
    /// 4096 blocks (2M tokens) per worker, 10K prefill tokens/s, 30 ms per output token, the
    /// trace's own pace.
    pub fn new(workers: u32) -> Self {
        Self {
            workers,
            capacity_blocks: 4096,
            prefill_tokens_per_ms: 10.0,
            decode_ms_per_token: 30.0,
            speedup: 1.0,
            seed: 7,
            selection: SelectionConfig::default(),
        }
    }
}

/// The result of one replay.
#[derive(Debug, Clone, PartialEq)]
pub struct SimReport {
    pub policy: Policy,
    pub workers: u32,
    pub hits: HitCount,
    /// Requests placed on each worker.
    pub per_worker: Vec<u64>,
    /// Placements where the index's overlap for some worker differed from its cache.
    pub index_disagreements: u64,
    /// KV events the index did not accept as `Ok`.
    pub event_errors: u64,
    /// Requests queued or rejected (none expected under the fallback profile).
    pub not_admitted: u64,
    /// Bookings still in the ledger after every request finished (none expected).
    pub bookings_left: usize,
    /// Uncached prompt tokens over all prompt tokens, in percent.
    pub uncached_token_pct: f64,
    /// Prompt blocks the best-holding worker had cached at each placement: what placement
    /// could have hit, against what it did (`hits`).
    pub reachable_hit_blocks: u64,
    /// Time to first token of every placed request, µs (prefill queued per worker).
    pub ttft_us: Vec<u64>,
}

impl SimReport {
    /// The `q` quantile (0..=1) of the time to first token, in ms.
    pub fn ttft_ms(&self, q: f64) -> f64 {
        let mut sorted = self.ttft_us.clone();
        sorted.sort_unstable();
        let Some(last) = sorted.len().checked_sub(1) else {
            return 0.0;
        };
        let at = ((last as f64) * q.clamp(0.0, 1.0)).round() as usize;
        sorted[at.min(last)] as f64 / 1000.0
    }

    /// Largest share of requests any worker received, in percent.
    pub fn max_share(&self) -> f64 {
        let total: u64 = self.per_worker.iter().sum();
        let max = self.per_worker.iter().copied().max().unwrap_or(0);
        if total == 0 {
            0.0
        } else {
            100.0 * max as f64 / total as f64
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Step {
    PrefillDone,
    Release,
}

fn rank_of(worker: usize) -> RankId {
    RankId::new(worker as u64 + 1, 0)
}

fn ms_to_us(ms: f64) -> u64 {
    if ms.is_finite() && ms > 0.0 {
        (ms * 1000.0).round() as u64
    } else {
        0
    }
}

fn new_router(config: &SimConfig) -> PoolRouter {
    let mut scheduler = SchedulerConfig::new(
        PoolRole::Aggregated,
        RouterId(uuid::Uuid::from_u128(0x5157)),
    );
    scheduler.selection = config.selection;
    scheduler.seed = config.seed;
    let mut router = PoolRouter::new(
        PoolRouterConfig {
            scheduler,
            block_size: TRACE_BLOCK_TOKENS,
            prefix: PrefixMode::Events,
        },
        PolicyProfile::fallback(),
    );
    for w in 0..config.workers as usize {
        let mut spec = WorkerSpec::new(
            rank_of(w).worker.0,
            1,
            config.capacity_blocks as u64,
            16_384,
        );
        spec.block_size = TRACE_BLOCK_TOKENS;
        if let Err(e) = router.upsert_worker(spec) {
            unreachable!("a fixed, valid worker spec was refused: {e}");
        }
    }
    router
}

/// Replays `trace` through a [`PoolRouter`] with `config.workers` simulated workers.
pub fn simulate(trace: &[TraceRequest], config: &SimConfig, policy: Policy) -> SimReport {
    let n = config.workers.max(1) as usize;
    let mut router = new_router(config);
    let Some(reader) = router.index_reader() else {
        unreachable!("events mode has an index reader");
    };
    let mut caches: Vec<LruCache> = (0..n)
        .map(|_| LruCache::new(config.capacity_blocks))
        .collect();
    let mut event_ids = vec![0u64; n];
    let mut rng = SmallRng::seed_from_u64(config.seed);
    // (time µs, order, step, request index)
    let mut pending: BinaryHeap<Reverse<(u64, u64, Step, usize)>> = BinaryHeap::new();
    let mut order = 0u64;
    let mut report = SimReport {
        policy,
        workers: config.workers,
        hits: HitCount::default(),
        per_worker: vec![0; n],
        index_disagreements: 0,
        event_errors: 0,
        not_admitted: 0,
        bookings_left: 0,
        uncached_token_pct: 0.0,
        ttft_us: Vec::with_capacity(trace.len()),
        reachable_hit_blocks: 0,
    };
    // When each worker's prefill queue is next free, µs.
    let mut prefill_free_at = vec![0u64; n];
    let (mut input_tokens, mut uncached_tokens) = (0u64, 0u64);
    let speedup = if config.speedup.is_finite() && config.speedup > 0.0 {
        config.speedup
    } else {
        1.0
    };

    let finish_until = |router: &mut PoolRouter,
                        pending: &mut BinaryHeap<Reverse<(u64, u64, Step, usize)>>,
                        until: u64| {
        while let Some(Reverse((at, _, step, i))) = pending.peek().copied() {
            if at > until {
                break;
            }
            pending.pop();
            let id = RequestId::from_u128(i as u128 + 1);
            let changed = match step {
                Step::PrefillDone => router.prefill_done(id),
                Step::Release => router.release(id),
            };
            if changed {
                router.drain(Timestamp(at), None);
            }
        }
    };

    for (i, request) in trace.iter().enumerate() {
        let now = ms_to_us(request.timestamp_ms as f64 / speedup);
        finish_until(&mut router, &mut pending, now);

        let locals: Vec<LocalBlockHash> = request
            .hash_ids
            .iter()
            .map(|&id| LocalBlockHash(id))
            .collect();
        let seqs = sequence_hashes(&locals);

        // The index must see exactly what each worker's cache holds.
        let overlap = reader.find_matches(&seqs);
        report.reachable_hit_blocks +=
            (0..n).map(|w| overlap.get(rank_of(w))).max().unwrap_or(0) as u64;
        for (w, cache) in caches.iter().enumerate() {
            if overlap.get(rank_of(w)) as usize != cache.prefix_hit(&request.hash_ids) {
                report.index_disagreements += 1;
                break;
            }
        }

        let pinned = match policy {
            Policy::RoundRobin => Some(rank_of(i % n)),
            Policy::Random => Some(rank_of(rng.random_range(0..n))),
            Policy::Cost => None,
        };
        let mut route = RouteRequest::new(
            RequestId::from_u128(i as u128 + 1),
            ClassId(0),
            Phase::Aggregated,
            Prompt::Hashes {
                block_hashes: seqs.iter().map(|s| s.0).collect(),
                prompt_tokens: request.input_length,
            },
        );
        route.expected_output_tokens = request.output_length;
        route.eligibility.pinned = pinned;
        let outcome = router.route(route, Timestamp(now), Timestamp(now), None);
        let Some(rank) = outcome.admitted().map(|a| a.rank) else {
            report.not_admitted += 1;
            continue;
        };
        let w = (rank.worker.0 as usize).wrapping_sub(1);
        let Some(cache) = caches.get_mut(w) else {
            unreachable!("placed on {rank}, which is not a simulated worker");
        };
        report.per_worker[w] += 1;

        let placed = cache.place(&request.hash_ids);
        report.hits.add(placed.hit, request.hash_ids.len());
        let cached = (placed.hit as u64 * u64::from(TRACE_BLOCK_TOKENS)).min(request.input_length);
        input_tokens += request.input_length;
        uncached_tokens += request.input_length - cached;

        for data in worker_events(&request.hash_ids, &placed) {
            event_ids[w] += 1;
            let event = KvEvent {
                worker: WorkerId(rank.worker.0),
                dp_rank: 0,
                event_id: event_ids[w],
                data,
            };
            if router.apply_kv_event(&event) != EventStatus::Ok {
                report.event_errors += 1;
            }
        }

        let prefill_us =
            ms_to_us((request.input_length - cached) as f64 / config.prefill_tokens_per_ms);
        let decode_us = ms_to_us(request.output_length as f64 * config.decode_ms_per_token);
        // Prefills run one after another on a worker: this one starts when the worker's
        // earlier prefills are done.
        let first_token_at = prefill_free_at[w].max(now) + prefill_us;
        prefill_free_at[w] = first_token_at;
        report.ttft_us.push(first_token_at - now);
        pending.push(Reverse((first_token_at, order, Step::PrefillDone, i)));
        pending.push(Reverse((
            first_token_at + decode_us,
            order + 1,
            Step::Release,
            i,
        )));
        order += 2;
    }
    finish_until(&mut router, &mut pending, u64::MAX);
    report.bookings_left = router.ledger().booking_count();
    report.uncached_token_pct = if input_tokens == 0 {
        0.0
    } else {
        100.0 * uncached_tokens as f64 / input_tokens as f64
    };
    report
}

/// The events a worker publishes for one placement: `Removed` for what it evicted, then one
/// `Stored` for the blocks it did not hold, chained to the last block it did.
pub fn worker_events(ids: &[u64], placed: &Placed) -> Vec<KvEventData> {
    let mut events = Vec::with_capacity(2);
    if !placed.evicted.is_empty() {
        events.push(KvEventData::Removed {
            hashes: placed.evicted.iter().map(|&id| ExternalHash(id)).collect(),
        });
    }
    let new = &ids[placed.hit..placed.stored_to];
    if !new.is_empty() {
        events.push(KvEventData::Stored {
            parent: placed.hit.checked_sub(1).map(|p| ExternalHash(ids[p])),
            blocks: new
                .iter()
                .map(|&id| StoredBlock {
                    hash: ExternalHash(id),
                    local: LocalBlockHash(id),
                })
                .collect(),
        });
    }
    events
}
