//! How the replicated router tier grows: 2 to 32 router nodes over one simulated fleet of a
//! few hundred workers, the same requests through each size, in simulated time. For every
//! size it reports what the tier spends per request on the bus (messages published, messages
//! delivered, bytes delivered, by kind: booking sync between routers, KV events, worker
//! announcements and load) and in CPU, and how well it still routes (prefix hit rate, and the
//! overshoot of the decode line that the replicas enforce together).
//!
//! One process, one thread, tokio's paused clock (time jumps ahead whenever every task
//! waits): `--replicas` aggregated nodes on one in-process bus, wrapped to count every
//! publish and every delivery; `--workers` announced workers of `--kv` blocks, each a small
//! engine model that publishes KV events for the blocks a request stores (chained as the
//! routers hash prompts, least recently used ones evicted with `Removed` events). Requests
//! are the Mooncake conversation trace's (its first `--requests`, prompts as token ids,
//! arrivals divided by `--speedup`), sent round robin over the replicas under one class
//! with a decode line (`decode_busy_threshold_frac` 0.9); each holds its rank for a prefill
//! (2 ms plus 50 µs per uncached token) and a decode (15 ms per output token) of simulated
//! time. The overshoot is measured on a ledger that books every admission of every replica
//! (the ground truth), as the largest excess over the class line on any rank at any time.
//!
//! ```text
//! cargo run --release -p router-tools --example replica_scaling -- --replicas 2,4,8,16,32
//! ```
//!
//! Options: `--replicas` (2,4,8,16,32), `--workers` (256), `--kv` (16384), `--requests`
//! (4000), `--speedup` (100), `--trace` (traces/conversation_trace.jsonl.gz).

use bytes::Bytes;
use futures::StreamExt as _;
use futures::future::BoxFuture;
use router_actors::bus::local::LocalBus;
use router_actors::bus::{Bus, BusError, Subscription};
use router_actors::wire::{Subjects, WorkerAnnounce};
use router_actors::{Node, NodeConfig, RouterHandle, Topology, WorkerLink};
use router_core::hashing::{LocalBlockHash, SequenceHash, local_block_hashes, sequence_hashes};
use router_core::ledger::Booking;
use router_core::{
    BookingKey, BookingLedger, ClassId, ExternalHash, KvEvent, KvEventData, Phase, PolicyProfile,
    PoolRole, Prompt, RequestId, RouteRequest, RouterId, StoredBlock, WorkerId, WorkerSpec,
};
use router_tools::bench::{Trace, prompt_tokens};
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const CLUSTER: &str = "scaling";
const BLOCK: usize = 16;
const PROFILE: &str = r#"
default_class = "interactive"
[[classes]]
name = "interactive"
slo_ms = 60000
quantum = 512
decode_busy_threshold_frac = 0.9
request_queue_limit_per_worker = 100000
"#;

#[derive(Debug, Clone)]
struct Args {
    replicas: Vec<usize>,
    workers: u64,
    kv: u64,
    requests: usize,
    speedup: f64,
    trace: String,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        replicas: vec![2, 4, 8, 16, 32],
        workers: 256,
        kv: 16_384,
        requests: 4000,
        speedup: 100.0,
        trace: "traces/conversation_trace.jsonl.gz".to_owned(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let number = || {
            value
                .parse::<u64>()
                .map_err(|e| format!("{flag} {value}: {e}"))
        };
        match flag.as_str() {
            "--replicas" => {
                args.replicas = value
                    .split(',')
                    .map(|n| {
                        n.trim()
                            .parse::<usize>()
                            .map_err(|e| format!("{flag}: {e}"))
                    })
                    .collect::<Result<_, _>>()?;
                if args.replicas.contains(&0) {
                    return Err(format!("{flag}: every size must be at least 1"));
                }
            }
            "--workers" => args.workers = number()?.max(1),
            "--kv" => args.kv = number()?.max(1),
            "--requests" => args.requests = usize::try_from(number()?.max(1)).unwrap_or(1),
            "--speedup" => {
                args.speedup = value
                    .parse::<f64>()
                    .ok()
                    .filter(|s| s.is_finite() && *s > 0.0)
                    .ok_or_else(|| format!("{flag} {value}: a positive number"))?;
            }
            "--trace" => args.trace = value,
            other => return Err(format!("unknown option {other}")),
        }
    }
    Ok(args)
}

/// The kinds of bus traffic counted apart, by subject: routers' booking deltas, heartbeats
/// and snapshots; room credits between routers; workers' KV events; workers' announcements
/// and load.
const KINDS: [&str; 4] = ["bookings", "credits", "kv events", "workers"];

fn kind(subject: &str) -> usize {
    let mut tokens = subject.split('.').skip(1);
    match (tokens.next(), tokens.nth(1)) {
        (Some("kv"), _) => 2,
        (Some("workers"), _) => 3,
        (Some("router"), Some("credits")) => 1,
        _ => 0,
    }
}

/// Messages and bytes, published and delivered, by kind.
#[derive(Debug, Default)]
struct Counts {
    published: [AtomicU64; 4],
    published_bytes: [AtomicU64; 4],
    delivered: [AtomicU64; 4],
    delivered_bytes: [AtomicU64; 4],
}

/// A bus that counts what goes through it.
struct CountingBus {
    inner: Arc<dyn Bus>,
    counts: Arc<Counts>,
}

impl Bus for CountingBus {
    fn publish(&self, subject: String, payload: Bytes) -> BoxFuture<'_, Result<(), BusError>> {
        let k = kind(&subject);
        self.counts.published[k].fetch_add(1, Ordering::Relaxed);
        self.counts.published_bytes[k].fetch_add(payload.len() as u64, Ordering::Relaxed);
        self.inner.publish(subject, payload)
    }

    fn subscribe(&self, subject: String) -> BoxFuture<'_, Result<Subscription, BusError>> {
        let counts = self.counts.clone();
        Box::pin(async move {
            let inner = self.inner.subscribe(subject).await?;
            Ok(inner
                .inspect(move |m| {
                    let k = kind(&m.subject);
                    counts.delivered[k].fetch_add(1, Ordering::Relaxed);
                    counts.delivered_bytes[k].fetch_add(m.payload.len() as u64, Ordering::Relaxed);
                })
                .boxed())
        })
    }

    fn request(
        &self,
        subject: String,
        payload: Bytes,
        timeout: Duration,
    ) -> BoxFuture<'_, Result<Bytes, BusError>> {
        self.inner.request(subject, payload, timeout)
    }

    fn flush(&self) -> BoxFuture<'_, Result<(), BusError>> {
        self.inner.flush()
    }
}

/// One simulated engine's KV cache: which chained blocks it holds, least recently used
/// first, and the events that keep the routers' index in step.
struct EngineCache {
    worker: WorkerId,
    capacity: usize,
    held: HashMap<SequenceHash, u64>,
    order: VecDeque<(u64, SequenceHash)>,
    tick: u64,
    next_event: u64,
}

impl EngineCache {
    fn new(worker: WorkerId, capacity: u64) -> Self {
        Self {
            worker,
            capacity: usize::try_from(capacity).unwrap_or(usize::MAX),
            held: HashMap::new(),
            order: VecDeque::new(),
            tick: 0,
            next_event: 0,
        }
    }

    /// Stores a prompt's blocks: the ones it did not hold in one `Stored` event, then the
    /// least recently used ones evicted past its capacity in one `Removed` event.
    fn store(&mut self, seqs: &[SequenceHash], locals: &[LocalBlockHash]) -> Vec<KvEvent> {
        let mut events = Vec::new();
        let mut parent = None;
        let mut new = Vec::new();
        let mut new_parent = None;
        for (&seq, &local) in seqs.iter().zip(locals) {
            self.tick += 1;
            if self.held.insert(seq, self.tick).is_none() {
                if new.is_empty() {
                    new_parent = parent;
                }
                new.push(StoredBlock {
                    hash: ExternalHash(seq.0),
                    local,
                });
            }
            self.order.push_back((self.tick, seq));
            parent = Some(ExternalHash(seq.0));
        }
        if !new.is_empty() {
            events.push(self.event(KvEventData::Stored {
                parent: new_parent,
                blocks: new,
            }));
        }
        let mut evicted = Vec::new();
        while self.held.len() > self.capacity {
            let Some((tick, seq)) = self.order.pop_front() else {
                break;
            };
            // A block touched since is further back in the order.
            if self.held.get(&seq) == Some(&tick) {
                self.held.remove(&seq);
                evicted.push(ExternalHash(seq.0));
            }
        }
        if !evicted.is_empty() {
            events.push(self.event(KvEventData::Removed { hashes: evicted }));
        }
        events
    }

    fn event(&mut self, data: KvEventData) -> KvEvent {
        self.next_event += 1;
        KvEvent {
            worker: self.worker,
            dp_rank: 0,
            event_id: self.next_event,
            data,
        }
    }
}

/// One request of the trace, ready to send.
struct Request {
    at: Duration,
    tokens: Vec<u32>,
    output: u64,
}

/// What one size of the tier gave.
#[derive(Debug, Default)]
struct Outcome {
    replicas: usize,
    requests: u64,
    admitted: u64,
    prompt_tokens: u64,
    cached_tokens: u64,
    /// Largest excess over the class's decode line on any rank, as a share of the line.
    overshoot: f64,
    published: [u64; 4],
    delivered: [u64; 4],
    delivered_bytes: [u64; 4],
    cpu_s: f64,
    simulated_s: f64,
}

/// The process's user and system CPU seconds (Linux `/proc/self/stat`, 1/100 s ticks).
fn cpu_seconds() -> f64 {
    let text = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let rest = text.rfind(')').map_or("", |i| &text[i + 1..]);
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let tick = |n: usize| {
        fields
            .get(n - 3)
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0)
    };
    (tick(14) + tick(15)) as f64 / 100.0
}

async fn requests(args: &Args) -> Result<Vec<Request>, String> {
    let text = router_tools::bench::trace::read_text(std::path::Path::new(&args.trace))
        .await
        .map_err(|e| format!("{}: {e}", args.trace))?;
    let trace = Trace::parse(&text, Some(args.requests)).map_err(|e| e.to_string())?;
    Ok(trace
        .records
        .iter()
        .map(|(line, record)| Request {
            at: Duration::from_secs_f64(record.timestamp as f64 / 1000.0 / args.speedup),
            tokens: prompt_tokens(record, *line, 512),
            output: record.output_length.min(1024),
        })
        .collect())
}

async fn run(args: &Args, replicas: usize, load: &[Request]) -> Result<Outcome, String> {
    let counts = Arc::new(Counts::default());
    let bus: Arc<dyn Bus> = Arc::new(CountingBus {
        inner: Arc::new(LocalBus::new()),
        counts: counts.clone(),
    });
    let profile = PolicyProfile::from_toml_str(PROFILE).map_err(|e| e.to_string())?;
    let mut nodes = Vec::new();
    for id in 1..=replicas {
        let mut config = NodeConfig::new(
            CLUSTER,
            RouterId(uuid::Uuid::from_u128(id as u128)),
            Topology::Aggregated,
            profile.clone(),
        );
        config.block_size = BLOCK as u32;
        nodes.push(
            Node::start(config, bus.clone())
                .await
                .map_err(|e| e.to_string())?,
        );
    }
    let subjects = Subjects::new(CLUSTER);
    let mut truth = BookingLedger::new(&profile);
    let mut links = Vec::new();
    let mut caches = Vec::new();
    for id in 1..=args.workers {
        let mut spec = WorkerSpec::new(id, 1, args.kv, 8192);
        spec.block_size = BLOCK as u32;
        truth
            .upsert_worker(spec.clone())
            .map_err(|e| e.to_string())?;
        let announce = WorkerAnnounce {
            spec,
            pool: PoolRole::Aggregated,
            endpoint: format!("http://127.0.0.1:1/{id}"),
            heartbeat_ms: 0,
            lease_ms: 10_000,
            leaving: false,
        };
        let link = WorkerLink::start(bus.clone(), &subjects, announce, Duration::from_secs(1))
            .await
            .map_err(|e| e.to_string())?;
        links.push(Arc::new(link));
        caches.push(Arc::new(Mutex::new(EngineCache::new(
            WorkerId(id),
            args.kv,
        ))));
    }
    for node in &nodes {
        let mut ready = node.ready();
        tokio::time::timeout(Duration::from_secs(30), ready.wait_for(|r| *r))
            .await
            .map_err(|_| "a node did not become ready".to_owned())?
            .map_err(|e| e.to_string())?;
    }
    let routers: Vec<RouterHandle> = nodes
        .iter()
        .map(|n| n.router(PoolRole::Aggregated).cloned().ok_or("no pool"))
        .collect::<Result<_, _>>()?;
    // Every replica has heard every worker before the first request.
    tokio::time::sleep(Duration::from_secs(2)).await;

    let before = cpu_seconds();
    let started = tokio::time::Instant::now();
    let truth = Arc::new(Mutex::new(truth));
    let tally = Arc::new(Mutex::new(Outcome::default()));
    let mut tasks = Vec::with_capacity(load.len());
    for (i, request) in load.iter().enumerate() {
        let router = routers[i % replicas].clone();
        let owner = RouterId(uuid::Uuid::from_u128((i % replicas + 1) as u128));
        let (truth, tally, links, caches) =
            (truth.clone(), tally.clone(), links.clone(), caches.clone());
        let tokens = request.tokens.clone();
        let (at, output) = (request.at, request.output);
        tasks.push(tokio::spawn(async move {
            tokio::time::sleep_until(started + at).await;
            let id = RequestId::from_u128(i as u128 + 1);
            let prompt = router.prompt(&tokens, router_core::HashScope::NONE);
            let Prompt::Hashes { block_hashes, .. } = &prompt else {
                return;
            };
            let block_hashes = block_hashes.clone();
            let mut route = RouteRequest::new(id, ClassId(0), Phase::Aggregated, prompt);
            route.expected_output_tokens = output;
            let admission = router.route(route).await;
            let Ok(admission) = admission else {
                tally.lock().map(|mut t| t.requests += 1).ok();
                return;
            };
            let rank = admission.rank;
            let key = BookingKey::new(owner, id);
            let output_blocks = output.div_ceil(BLOCK as u64);
            {
                let mut truth = truth.lock().unwrap_or_else(|e| e.into_inner());
                truth.book(
                    key,
                    Booking {
                        rank,
                        block_hashes: block_hashes.clone(),
                        prefill_tokens: 0,
                        extra_blocks: output_blocks,
                    },
                );
                if let Some((Some(line), committed)) = truth.rank_decode_room(ClassId(0), rank)
                    && committed > line
                    && line > 0
                {
                    let over = (committed - line) as f64 / line as f64;
                    let mut t = tally.lock().unwrap_or_else(|e| e.into_inner());
                    t.overshoot = t.overshoot.max(over);
                }
            }
            {
                let mut t = tally.lock().unwrap_or_else(|e| e.into_inner());
                t.requests += 1;
                t.admitted += 1;
                t.prompt_tokens += tokens.len() as u64;
                t.cached_tokens += admission.prefix.cached_tokens;
            }
            let uncached = (tokens.len() as u64).saturating_sub(admission.prefix.cached_tokens);
            tokio::time::sleep(Duration::from_micros(2000 + 50 * uncached)).await;
            let worker = (rank.worker.0 - 1) as usize;
            let locals = local_block_hashes(&tokens, BLOCK, None);
            let seqs = sequence_hashes(&locals);
            let events = caches[worker]
                .lock()
                .map(|mut c| c.store(&seqs, &locals))
                .unwrap_or_default();
            if !events.is_empty() {
                let _ = links[worker].publish_kv_events(events).await;
            }
            let _ = router.prefill_done(id);
            tokio::time::sleep(Duration::from_millis(15 * output.max(1))).await;
            let _ = router.release(id);
            truth.lock().map(|mut t| t.release(&key)).ok();
        }));
    }
    for task in tasks {
        let _ = task.await;
    }
    let simulated = started.elapsed();
    let cpu = cpu_seconds() - before;
    let mut outcome = std::mem::take(&mut *tally.lock().unwrap_or_else(|e| e.into_inner()));
    outcome.replicas = replicas;
    outcome.cpu_s = cpu;
    outcome.simulated_s = simulated.as_secs_f64();
    for k in 0..4 {
        outcome.published[k] = counts.published[k].load(Ordering::Relaxed);
        outcome.delivered[k] = counts.delivered[k].load(Ordering::Relaxed);
        outcome.delivered_bytes[k] = counts.delivered_bytes[k].load(Ordering::Relaxed);
    }
    drop(links);
    for node in nodes {
        node.shutdown().await;
    }
    Ok(outcome)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = parse_args()?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()?;
    let load = runtime.block_on(requests(&args))?;
    println!(
        "{} workers x {} blocks, {} requests of {} at {}x, one thread, simulated time\n",
        args.workers, args.kv, args.requests, args.trace, args.speedup
    );
    println!(
        "| replicas | admitted | prefix hit | overshoot | published / request | delivered / request \
         (bookings, credits, kv, workers) | KB delivered / request | CPU / request |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|");
    for &replicas in &args.replicas {
        let o = runtime.block_on(run(&args, replicas, &load))?;
        let per = |v: u64| v as f64 / o.requests.max(1) as f64;
        println!(
            "| {} | {} of {} | {:.1} % | {:.2} % | {:.1} | {:.1} ({:.1}, {:.1}, {:.1}, {:.1}) | {:.1} | {:.0} µs |",
            o.replicas,
            o.admitted,
            o.requests,
            100.0 * o.cached_tokens as f64 / o.prompt_tokens.max(1) as f64,
            100.0 * o.overshoot,
            per(o.published.iter().sum()),
            per(o.delivered.iter().sum()),
            per(o.delivered[0]),
            per(o.delivered[1]),
            per(o.delivered[2]),
            per(o.delivered[3]),
            per(o.delivered_bytes.iter().sum()) / 1024.0,
            1e6 * o.cpu_s / o.requests.max(1) as f64,
        );
        eprintln!(
            "replica_scaling: {replicas} replicas: {:.1} s simulated, {:.1} s of CPU",
            o.simulated_s, o.cpu_s
        );
    }
    println!("\nKinds: {}", KINDS.join(", "));
    Ok(())
}
