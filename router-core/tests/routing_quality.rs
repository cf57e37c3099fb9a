//! Routing quality on the first requests of the Mooncake conversation trace: the cost selector
//! must beat round robin and seeded random on prefix hits at 4, 8 and 16 capacity-bound
//! workers, come close to one cache of the fleet's total size, give first tokens sooner than
//! round robin, and not pile everything onto the worker that holds the shared root block; no
//! policy may beat one infinite cache. The simulation (shared with
//! `examples/routing_quality.rs`) is described in `support/routing_sim.rs`.
//!
//! The trace is not optional: when it cannot be found the test fails and says where it looked.

#[path = "support/routing_sim.rs"]
mod sim;

use router_core::KvEventData;
use sim::{LruCache, Policy, SimConfig, SimReport, TraceRequest};

/// A prefix of the trace keeps the debug-build run short (the full trace is the example's).
const REQUESTS: usize = 4_000;

fn trace() -> Vec<TraceRequest> {
    let path = sim::trace_path().unwrap_or_else(|e| panic!("{e}"));
    let trace = sim::load_trace(&path, Some(REQUESTS)).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        trace.len(),
        REQUESTS,
        "{} is shorter than expected",
        path.display()
    );
    trace
}

fn assert_sound(r: &SimReport) {
    let what = format!("{} workers, {}", r.workers, r.policy.name());
    assert_eq!(
        r.index_disagreements, 0,
        "{what}: index and worker caches disagree"
    );
    assert_eq!(r.event_errors, 0, "{what}: KV events refused by the index");
    assert_eq!(r.not_admitted, 0, "{what}: requests not admitted at once");
    assert_eq!(r.bookings_left, 0, "{what}: bookings left after the replay");
    assert_eq!(r.per_worker.len(), r.workers as usize);
}

#[test]
fn cost_selector_beats_hash_blind_routing_at_every_fleet_size() {
    let trace = trace();
    let ideal = sim::ideal(&trace);
    assert!(ideal.total_blocks > 0 && ideal.hit_blocks > 0);
    let mut table = Vec::new();
    for workers in [4, 8, 16] {
        let config = SimConfig::new(workers);
        let [rr, random, cost] = Policy::ALL.map(|p| sim::simulate(&trace, &config, p));
        for r in [&rr, &random, &cost] {
            assert_sound(r);
            assert_eq!(r.hits.total_blocks, ideal.total_blocks);
            assert!(
                r.hits.hit_blocks <= ideal.hit_blocks,
                "{} workers, {}: {:.2} % is above the ideal {:.2} %",
                workers,
                r.policy.name(),
                r.hits.rate(),
                ideal.rate()
            );
        }
        table.push(format!(
            "{workers:>2} workers: round robin {:.1} %, random {:.1} %, cost {:.1} % (max share {:.0} %), ideal {:.1} %",
            rr.hits.rate(),
            random.hits.rate(),
            cost.hits.rate(),
            cost.max_share(),
            ideal.rate()
        ));
        for baseline in [&rr, &random] {
            assert!(
                cost.hits.hit_blocks > baseline.hits.hit_blocks,
                "{workers} workers: cost selector {:.2} % does not beat {} {:.2} %\n{}",
                cost.hits.rate(),
                baseline.policy.name(),
                baseline.hits.rate(),
                table.join("\n")
            );
            assert!(
                cost.uncached_token_pct < baseline.uncached_token_pct,
                "{workers} workers: cost selector computes more prompt tokens than {}",
                baseline.policy.name()
            );
        }
        // Close to what one cache of the fleet's total size would hit (the bar is
        // 90 % on the whole trace; this prefix reaches 90-97 %).
        let pooled = sim::pooled_lru(&trace, config.capacity_blocks * workers as usize);
        assert!(
            cost.hits.rate() >= 0.88 * pooled.rate(),
            "{workers} workers: cost selector {:.2} % is under 88 % of the pooled cache's {:.2} %",
            cost.hits.rate(),
            pooled.rate()
        );
        // Reuse must not cost queueing: the first token comes sooner than round robin's.
        for q in [0.5, 0.99] {
            assert!(
                cost.ttft_ms(q) < rr.ttft_ms(q),
                "{workers} workers: TTFT p{} {:.0} ms is not below round robin's {:.0} ms",
                q * 100.0,
                cost.ttft_ms(q),
                rr.ttft_ms(q)
            );
        }
        // The block-0 trap: every request shares the root block, so pure affinity would send
        // everything to whichever worker cached it first.
        let limit = if workers == 4 {
            60.0
        } else {
            100.0 / f64::from(workers) * 2.5
        };
        assert!(
            cost.max_share() <= limit,
            "{workers} workers: one worker got {:.1} % of the requests {:?}",
            cost.max_share(),
            cost.per_worker
        );
        assert!(
            cost.per_worker.iter().all(|&n| n > 0),
            "{workers} workers: an idle worker {:?}",
            cost.per_worker
        );
    }
    println!("{}", table.join("\n"));
}

#[test]
fn lru_evicts_leaves_first_and_publishes_what_changed() {
    let mut cache = LruCache::new(4);
    let a = cache.place(&[0, 1, 2]);
    assert_eq!((a.hit, a.stored_to, a.evicted.len()), (0, 3, 0));
    // Shares the root, needs 2 new blocks: the oldest leaf (2) goes, never the shared root.
    let b = cache.place(&[0, 3, 4]);
    assert_eq!((b.hit, b.stored_to), (1, 3));
    assert_eq!(b.evicted, vec![2]);
    assert_eq!(cache.prefix_hit(&[0, 1, 2]), 2);
    let events = sim::worker_events(&[0, 3, 4], &b);
    assert_eq!(events.len(), 2);
    assert!(matches!(&events[0], KvEventData::Removed { hashes } if hashes.len() == 1));
    match &events[1] {
        KvEventData::Stored { parent, blocks } => {
            assert_eq!(parent.map(|p| p.0), Some(0));
            assert_eq!(blocks.iter().map(|b| b.hash.0).collect::<Vec<_>>(), [3, 4]);
        }
        other => panic!("expected Stored, got {other:?}"),
    }
    // A full hit stores nothing and evicts nothing.
    let c = cache.place(&[0, 3]);
    assert_eq!((c.hit, c.stored_to), (2, 2));
    assert!(sim::worker_events(&[0, 3], &c).is_empty());
    // A request longer than the cache keeps its head.
    let d = cache.place(&[9, 8, 7, 6, 5, 4]);
    assert_eq!((d.hit, d.stored_to, d.evicted.len()), (0, 4, 4));
    assert_eq!(cache.len(), 4);
}

#[test]
fn an_infinite_pooled_cache_is_the_ideal_and_bad_lines_name_their_line() {
    let text = "{\"timestamp\": 0, \"input_length\": 1000, \"output_length\": 5, \"hash_ids\": [0, 1]}\n\
                {\"timestamp\": 3, \"input_length\": 1100, \"output_length\": 5, \"hash_ids\": [0, 1, 2]}\n\
                \n\
                {\"timestamp\": 3, \"input_length\": 600, \"output_length\": 5, \"hash_ids\": [0, 3]}\n";
    let trace = sim::parse_trace(text, None).unwrap_or_else(|e| panic!("{e}"));
    let ideal = sim::ideal(&trace);
    assert_eq!((ideal.hit_blocks, ideal.total_blocks), (3, 7));
    assert_eq!(sim::pooled_lru(&trace, usize::MAX), ideal);
    assert_eq!(
        sim::pooled_lru(&trace, 2).hit_blocks,
        3,
        "[0,1]: 0; [0,1,2]: 2 (block 2 does not fit); [0,3]: 1 (the root survives)"
    );

    let wrong_len = text.replace("[0, 3]", "[0]");
    let err = sim::parse_trace(&wrong_len, None)
        .map(|_| ())
        .expect_err("a bad line must be refused");
    assert!(err.to_string().starts_with("trace line 4:"), "{err}");
    let not_json =
        "{\"timestamp\": 0, \"input_length\": 1, \"output_length\": 1, \"hash_ids\": [0]}\nnope\n";
    let err = sim::parse_trace(not_json, None)
        .map(|_| ())
        .expect_err("a bad line must be refused");
    assert!(err.to_string().starts_with("trace line 2:"), "{err}");
    let backwards = text.replace(
        "\"timestamp\": 3, \"input_length\": 600",
        "\"timestamp\": 1, \"input_length\": 600",
    );
    let err = sim::parse_trace(&backwards, None)
        .map(|_| ())
        .expect_err("a bad line must be refused");
    assert!(err.to_string().contains("before the previous"), "{err}");
    assert_eq!(
        sim::parse_trace(text, Some(1)).map(|t| t.len()).ok(),
        Some(1)
    );
}
