//! The engine task in paused tokio time: pass timing, prefix reuse, delivery coalescing when
//! a reader falls behind, and cancellation when a reader leaves.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::engine_task::{self, DELIVERY_CAPACITY, Delivery, EngineHandle};
use super::seq_request;
use crate::engine::{Engine, EngineConfig, Role};
use router_core::{RequestId, WorkerId};
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::time::Instant;

fn engine(role: Role) -> Engine {
    Engine::new(EngineConfig {
        worker_id: WorkerId(1),
        dp_rank: 0,
        block_size: 16,
        total_kv_blocks: 4096,
        max_num_batched_tokens: 8192,
        max_num_seqs: 64,
        speedup: 1.0,
        role,
        staging_timeout_us: 1_000_000,
        max_loras: 0,
    })
    .unwrap()
}

fn id(n: u128) -> RequestId {
    RequestId::from_u128(n)
}

async fn submit(h: &EngineHandle, n: u128, tokens: Vec<u32>, max: u32) -> mpsc::Receiver<Delivery> {
    h.submit(
        seq_request(id(n), tokens, max, Default::default(), None),
        false,
    )
    .await
    .unwrap()
    .unwrap()
}

/// Reads deliveries to the end: (tokens, finished).
async fn drain(rx: &mut mpsc::Receiver<Delivery>) -> (u32, bool) {
    let mut total = 0;
    while let Some(d) = rx.recv().await {
        total += d.tokens;
        if d.finished {
            return (total, true);
        }
    }
    (total, false)
}

#[tokio::test(start_paused = true)]
async fn a_repeated_prompt_finishes_sooner_in_engine_time() {
    let (h, _task) = engine_task::spawn(engine(Role::Agg), None, false);
    let prompt: Vec<u32> = (0..2048).collect();
    let start = Instant::now();
    let mut rx = submit(&h, 1, prompt.clone(), 4).await;
    assert_eq!(drain(&mut rx).await, (4, true));
    let first = start.elapsed();
    let start = Instant::now();
    let mut rx = submit(&h, 2, prompt, 4).await;
    assert_eq!(drain(&mut rx).await, (4, true));
    let second = start.elapsed();
    // 2048 uncached tokens take ~49 ms of prefill; a full hit recomputes one block (~17 ms).
    assert!(first >= Duration::from_millis(45), "{first:?}");
    assert!(
        second + Duration::from_millis(25) < first,
        "{second:?} vs {first:?}"
    );
    let load = h.load().await.unwrap();
    assert_eq!(load.prefill_tokens, 2048 + 16);
    assert_eq!(load.finished, 2);
    assert_eq!(load.engine.kv_used_blocks, 0);
    assert_eq!(load.peak_requests, 1, "one request at a time");
}

#[tokio::test(start_paused = true)]
async fn the_load_keeps_the_most_requests_held_at_once() {
    let (h, _task) = engine_task::spawn(engine(Role::Agg), None, false);
    let mut streams = Vec::new();
    for id in 1..=3 {
        streams.push(submit(&h, id, (0..512).map(|t| t + id as u32 * 1000).collect(), 2).await);
    }
    for rx in &mut streams {
        assert_eq!(drain(rx).await, (2, true));
    }
    let load = h.load().await.unwrap();
    assert_eq!((load.engine.waiting, load.engine.running), (0, 0));
    assert_eq!(load.peak_requests, 3);
}

#[tokio::test(start_paused = true)]
async fn a_slow_reader_gets_every_token_coalesced() {
    let (h, _task) = engine_task::spawn(engine(Role::Agg), None, false);
    let tokens = u32::try_from(DELIVERY_CAPACITY * 3).unwrap();
    let mut rx = submit(&h, 1, vec![7; 40], tokens).await;
    // Let the engine run the whole request without reading.
    loop {
        tokio::time::sleep(Duration::from_millis(50)).await;
        if h.load().await.unwrap().finished == 1 {
            break;
        }
    }
    // A few more ticks for the pending delivery to be retried.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(drain(&mut rx).await, (tokens, true));
    let load = h.load().await.unwrap();
    assert_eq!(load.cancelled, 0);
    assert_eq!(load.engine.kv_used_blocks, 0);
}

#[tokio::test(start_paused = true)]
async fn a_reader_that_leaves_cancels_its_sequence() {
    let (h, _task) = engine_task::spawn(engine(Role::Agg), None, false);
    let mut rx = submit(&h, 1, vec![7; 100], 1000).await;
    let first = rx.recv().await.unwrap();
    assert!(first.tokens >= 1 && !first.finished);
    drop(rx);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let load = h.load().await.unwrap();
    assert_eq!(load.cancelled, 1);
    assert_eq!(load.engine.running, 0);
    assert_eq!(load.engine.kv_used_blocks, 0);
    // Explicit cancels of unknown or finished requests are no-ops.
    h.cancel(id(1));
    h.cancel(id(99));
    assert_eq!(h.load().await.unwrap().cancelled, 1);
}

#[tokio::test(start_paused = true)]
async fn staged_kv_expires_on_tokio_time() {
    let (h, _task) = engine_task::spawn(engine(Role::Prefill), None, false);
    let mut rx = h
        .submit(
            seq_request(id(1), vec![3; 64], 10, Default::default(), None),
            true,
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(drain(&mut rx).await, (1, true));
    let load = h.load().await.unwrap();
    assert_eq!((load.engine.staged, load.stranded), (1, 0));
    tokio::time::sleep(Duration::from_millis(900)).await;
    assert_eq!(h.load().await.unwrap().engine.staged, 1);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let load = h.load().await.unwrap();
    assert_eq!(
        (
            load.engine.staged,
            load.stranded,
            load.engine.kv_used_blocks
        ),
        (0, 1, 0)
    );
    assert!(!h.release(id(1)).await.unwrap());
}

#[tokio::test(start_paused = true)]
async fn an_instant_engine_takes_no_tokio_time() {
    let prompt: Vec<u32> = (0..2048).collect();
    // Modelled: ~49 ms of prefill, then decode passes of at least 1 ms each.
    let (h, _task) = engine_task::spawn(engine(Role::Agg), None, false);
    let start = Instant::now();
    let mut rx = submit(&h, 1, prompt.clone(), 8).await;
    assert_eq!(drain(&mut rx).await, (8, true));
    assert!(start.elapsed() >= Duration::from_millis(45));

    // Instant: same scheduling and tokens, no time passes (the paused clock would otherwise
    // auto-advance to each pass's end).
    let (h, _task) = engine_task::spawn(engine(Role::Agg), None, true);
    let start = Instant::now();
    let mut rx = submit(&h, 1, prompt, 8).await;
    assert_eq!(drain(&mut rx).await, (8, true));
    assert_eq!(start.elapsed(), Duration::ZERO);
    let load = h.load().await.unwrap();
    assert_eq!((load.finished, load.output_tokens), (1, 8));
    assert!(load.passes >= 8, "{load:?}");
    assert_eq!(load.engine.kv_used_blocks, 0);
}

/// The final delivery says how many prompt tokens were already in the prefix cache: none
/// the first time, every full block but the last token's the second time.
#[tokio::test(start_paused = true)]
async fn the_final_delivery_reports_the_cached_prompt_tokens() {
    let (h, _task) = engine_task::spawn(engine(Role::Agg), None, false);
    let prompt: Vec<u32> = (0..100).collect();
    let last = |mut rx: mpsc::Receiver<Delivery>| async move {
        let mut last = Delivery::default();
        while let Some(d) = rx.recv().await {
            last = d;
        }
        last
    };
    let first = last(submit(&h, 1, prompt.clone(), 2).await).await;
    assert!(first.finished);
    assert_eq!(first.cached_tokens, 0);
    let second = last(submit(&h, 2, prompt, 2).await).await;
    assert!(second.finished);
    // 100 tokens = 6 full blocks of 16; all six were cached.
    assert_eq!(second.cached_tokens, 96);
}
