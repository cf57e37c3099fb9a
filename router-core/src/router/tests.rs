//! The pool router end to end: tokens in, a placement that follows the cached prefix out.

use super::*;
use crate::admission::{Phase, PoolRole, PrefixHit, RejectReason};
use crate::hashing::{HashScope, local_block_hashes, token_sequence_hashes};
use crate::ids::{ClassId, RankId, RouterId};
use crate::index::{ExternalHash, KvEventData, StoredBlock};
use std::time::Duration;
use uuid::Uuid;

const BS: u32 = 16;

fn router(prefix: PrefixMode) -> PoolRouter {
    router_leased(prefix, None)
}

/// [`router`], its own bookings leased for `lease`.
fn router_leased(prefix: PrefixMode, lease: Option<Duration>) -> PoolRouter {
    let profile = PolicyProfile::from_toml_str(
        "default_class = \"chat\"\n[[classes]]\nname = \"chat\"\nslo_ms = 1000\nquantum = 64\nprefill_busy_threshold = 100000\n",
    )
    .expect("valid profile");
    let mut scheduler = SchedulerConfig::new(PoolRole::Aggregated, RouterId(Uuid::from_u128(1)));
    scheduler.booking_lease = lease;
    let config = PoolRouterConfig {
        scheduler,
        block_size: BS,
        prefix,
    };
    let mut r = PoolRouter::new(config, profile);
    for w in 1..=4 {
        let mut spec = WorkerSpec::new(w, 1, 10_000, 8192);
        spec.block_size = BS;
        r.upsert_worker(spec).expect("valid worker");
    }
    r
}

fn tokens(seed: u32, n: u32) -> Vec<u32> {
    (0..n)
        .map(|i| seed.wrapping_mul(7919).wrapping_add(i))
        .collect()
}

fn stored(worker: u64, tokens: &[u32], namespace: Option<&str>) -> KvEvent {
    let locals = local_block_hashes(tokens, BS as usize, namespace);
    let blocks = locals
        .iter()
        .enumerate()
        .map(|(i, local)| StoredBlock {
            hash: ExternalHash(worker * 1_000_000 + i as u64),
            local: *local,
        })
        .collect();
    KvEvent {
        worker: WorkerId(worker),
        dp_rank: 0,
        event_id: 1,
        data: KvEventData::Stored {
            parent: None,
            blocks,
        },
    }
}

fn route(r: &mut PoolRouter, id: u128, prompt: Vec<u32>, lora: Option<&str>) -> Outcome {
    let mut req = RouteRequest::new(
        RequestId::from_u128(id),
        ClassId(0),
        Phase::Aggregated,
        Prompt::Tokens(prompt),
    );
    req.lora = lora.map(str::to_owned);
    r.route(req, Timestamp(0), Timestamp(0), None)
}

#[test]
fn a_request_follows_its_cached_prefix() {
    let mut r = router(PrefixMode::Events);
    let prompt = tokens(1, 256);
    assert_eq!(r.apply_kv_event(&stored(3, &prompt, None)), EventStatus::Ok);
    let out = route(&mut r, 1, prompt, None);
    assert_eq!(out.admitted().map(|a| a.rank), Some(RankId::new(3, 0)));
    let load = r.ledger().rank_snapshot(RankId::new(3, 0)).expect("rank");
    assert_eq!(load.decode_blocks, 16, "256 tokens are 16 blocks of 16");
}

#[test]
fn a_prompt_hashed_by_the_frontend_routes_as_its_tokens_would() {
    let prompt = tokens(5, 200);
    let (mut by_tokens, mut by_hashes) = (router(PrefixMode::Events), router(PrefixMode::Events));
    for r in [&mut by_tokens, &mut by_hashes] {
        assert_eq!(
            r.apply_kv_event(&stored(2, &prompt[..160], None)),
            EventStatus::Ok
        );
    }
    let a = route(&mut by_tokens, 1, prompt.clone(), None);
    let hashed = Prompt::hashed(&prompt, BS, HashScope::NONE);
    assert_eq!(hashed.tokens(), 200);
    let request = RouteRequest::new(
        RequestId::from_u128(1),
        ClassId(0),
        Phase::Aggregated,
        hashed,
    );
    let b = by_hashes.route(request, Timestamp(0), Timestamp(0), None);
    let (a, b) = (
        a.admitted().expect("admitted"),
        b.admitted().expect("admitted"),
    );
    assert_eq!((a.rank, a.prefix), (b.rank, b.prefix));
    assert_eq!(
        a.rank,
        RankId::new(2, 0),
        "both follow the 10 cached blocks"
    );
    assert_eq!(
        by_tokens.ledger().snapshot(),
        by_hashes.ledger().snapshot(),
        "the same booking"
    );
}

#[test]
fn an_admission_says_how_much_of_its_prompt_the_chosen_rank_holds() {
    let mut r = router(PrefixMode::Events);
    let cached = tokens(1, 160);
    r.apply_kv_event(&stored(3, &cached, None));
    // The 160 cached tokens (10 blocks), then 100 more: 16 full blocks and 4 tokens over.
    let mut prompt = cached.clone();
    prompt.extend(tokens(2, 100));
    let out = route(&mut r, 1, prompt, None);
    let a = out.admitted().expect("admitted");
    assert_eq!(a.rank, RankId::new(3, 0));
    assert_eq!(
        a.prefix,
        PrefixHit {
            prompt_blocks: 16,
            matched_blocks: 10,
            cached_tokens: 160,
        }
    );
    // Nothing cached anywhere: no hit.
    let out = route(&mut r, 2, tokens(9, 40), None);
    let a = out.admitted().expect("admitted");
    assert_eq!(
        (
            a.prefix.prompt_blocks,
            a.prefix.matched_blocks,
            a.prefix.cached_tokens
        ),
        (2, 0, 0)
    );
}

#[test]
fn an_adapter_does_not_reuse_the_base_model_prefix() {
    let mut r = router(PrefixMode::Events);
    let prompt = tokens(1, 256);
    r.apply_kv_event(&stored(3, &prompt, None));
    // Same tokens under a LoRA: different hashes, so worker 3 has no advantage.
    let out = route(&mut r, 1, prompt, Some("sql"));
    assert_ne!(out.admitted().map(|a| a.rank), Some(RankId::new(3, 0)));
}

#[test]
fn a_class_outside_the_profile_is_rejected_not_a_fallback() {
    let mut r = router(PrefixMode::Events);
    let req = RouteRequest::new(
        RequestId::from_u128(1),
        ClassId(7),
        Phase::Aggregated,
        Prompt::Tokens(tokens(1, 32)),
    );
    let out = r.route(req, Timestamp(0), Timestamp(0), None);
    assert_eq!(out.rejection(), Some(&RejectReason::UnknownClass));
    assert_eq!(r.ledger().booking_count(), 0);
}

#[test]
fn approximate_mode_learns_from_its_own_placements() {
    let mut r = router(PrefixMode::Approximate(ApproxConfig {
        ttl: Duration::from_secs(60),
        capacity_blocks: 1000,
    }));
    let prompt = tokens(9, 512);
    let first = route(&mut r, 1, prompt.clone(), None)
        .admitted()
        .map(|a| a.rank)
        .expect("admitted");
    r.release(RequestId::from_u128(1));
    let second = route(&mut r, 2, prompt, None)
        .admitted()
        .map(|a| a.rank)
        .expect("admitted");
    assert_eq!(first, second, "the learned prefix attracts the repeat");
}

#[test]
fn workers_without_events_are_learnt_from_placements_beside_the_event_index() {
    // Events mode; worker 4 announces it publishes no KV events.
    let mut r = router(PrefixMode::Events);
    let mut spec = WorkerSpec::new(4, 1, 10_000, 8192);
    spec.block_size = BS;
    spec.kv_events = false;
    r.upsert_worker(spec.clone()).expect("valid worker");
    // Worker 3 holds prompt A by its events.
    let a = tokens(1, 256);
    r.apply_kv_event(&stored(3, &a, None));
    // Prompt B goes wherever it goes; once placed on worker 4 it is learnt there. Route B
    // until one lands on 4 (ties break by seed), releasing each.
    let b = tokens(2, 256);
    let mut on_four = false;
    for id in 10..40 {
        let rank = route(&mut r, id, b.clone(), None)
            .admitted()
            .map(|a| a.rank)
            .expect("admitted");
        r.release(RequestId::from_u128(id));
        if rank == RankId::new(4, 0) {
            on_four = true;
            break;
        }
    }
    assert!(on_four, "some request of B reached worker 4");
    // From now on B follows its learnt prefix to 4, and A its published one to 3.
    for id in 100..105 {
        let rank = route(&mut r, id, b.clone(), None)
            .admitted()
            .map(|a| a.rank);
        assert_eq!(rank, Some(RankId::new(4, 0)), "learnt prefix");
        r.release(RequestId::from_u128(id));
    }
    let rank = route(&mut r, 200, a, None).admitted().map(|a| a.rank);
    assert_eq!(rank, Some(RankId::new(3, 0)), "published prefix");
    r.release(RequestId::from_u128(200));
    // An event-publishing worker is never learnt from placements.
    let c = tokens(3, 256);
    let mut placed = Vec::new();
    for id in 300..302 {
        placed.push(
            route(&mut r, id, c.clone(), None)
                .admitted()
                .map(|a| a.rank),
        );
        r.release(RequestId::from_u128(id));
    }
    if placed[0] != Some(RankId::new(4, 0)) {
        let rank = placed[0].expect("admitted");
        let hashes = token_sequence_hashes(&c, BS as usize, HashScope::NONE);
        assert_eq!(
            r.overlap(&hashes, Timestamp(0)).get(rank),
            0,
            "no learnt prefix on an event-publishing worker"
        );
    }
    // The worker starts publishing events: what was learnt about it is dropped.
    spec.kv_events = true;
    r.upsert_worker(spec).expect("valid worker");
    let hashes = token_sequence_hashes(&b, BS as usize, HashScope::NONE);
    assert_eq!(r.overlap(&hashes, Timestamp(0)).get(RankId::new(4, 0)), 0);
}

#[test]
fn a_worker_with_another_block_size_is_refused() {
    let mut r = router(PrefixMode::Events);
    let mut spec = WorkerSpec::new(9, 1, 100, 100);
    spec.block_size = 32;
    assert_eq!(
        r.upsert_worker(spec),
        Err(WorkerError::BlockSize {
            worker: WorkerId(9),
            announced: 32,
            pool: BS
        })
    );
}

#[test]
fn removing_a_worker_drops_its_prefix_and_bookings() {
    let mut r = router(PrefixMode::Events);
    let prompt = tokens(1, 256);
    r.apply_kv_event(&stored(3, &prompt, None));
    route(&mut r, 1, prompt.clone(), None);
    r.remove_worker(WorkerId(3));
    assert_eq!(r.ledger().booking_count(), 0);
    let out = route(&mut r, 2, prompt, None);
    assert!(out.admitted().is_some_and(|a| a.rank != RankId::new(3, 0)));
    assert!(!matches!(out.rejection(), Some(RejectReason::NoWorkers)));
}

#[test]
fn events_applied_through_the_shared_index_reach_lookups_that_never_take_its_lock() {
    let mut r = router(PrefixMode::Events);
    let index = r.kv_index().expect("events mode").clone();
    let prompt = tokens(2, 256);
    assert_eq!(index.apply_all(&[stored(2, &prompt, None)]), 0, "refused");
    // Another owner holds the writer (a burst of events being applied) while this router
    // routes: the lookup reads the lock-free side and finishes. (Were it to take the lock,
    // the routing thread would block and the answer would not come back.)
    let (held_tx, held_rx) = std::sync::mpsc::channel();
    let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
    let holder = {
        let index = index.clone();
        std::thread::spawn(move || {
            let _writer = index.write();
            held_tx.send(()).expect("test alive");
            let _ = release_rx.recv();
        })
    };
    held_rx.recv().expect("the holder took the lock");
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    let routing = std::thread::spawn(move || {
        let out = route(&mut r, 1, prompt, None);
        let _ = done_tx.send(out.admitted().map(|a| a.rank));
    });
    let routed = done_rx.recv_timeout(Duration::from_secs(30));
    release_tx.send(()).expect("holder alive");
    holder.join().expect("holder");
    assert_eq!(
        routed,
        Ok(Some(RankId::new(2, 0))),
        "routed to the prefix while the writer was held"
    );
    routing.join().expect("routing");
}

#[test]
fn peer_changes_say_when_capacity_freed_and_own_echoes_change_nothing() {
    use crate::ledger::{Booking, BookingDelta};
    let mut r = router(PrefixMode::Events);
    let peer = RouterId(Uuid::from_u128(9));
    let request = RequestId::from_u128(40);
    let booking = Booking {
        rank: RankId::new(2, 0),
        block_hashes: vec![1, 2, 3],
        prefill_tokens: 48,
        extra_blocks: 1,
    };
    let book = BookingDelta::Book {
        request,
        booking: booking.clone(),
    };
    let own = r.scheduler().owner();
    assert_eq!(
        r.apply_peer(own, book.clone(), Timestamp(0)),
        Applied::Nothing
    );
    assert_eq!(
        r.ledger().booking_count(),
        0,
        "an own echo is not booked twice"
    );
    assert_eq!(r.apply_peer(peer, book, Timestamp(0)), Applied::Added);
    let release = BookingDelta::Release { request };
    assert_eq!(
        r.apply_peer(peer, release.clone(), Timestamp(0)),
        Applied::Freed
    );
    assert_eq!(r.apply_peer(peer, release, Timestamp(0)), Applied::Nothing);
    assert_eq!(r.ledger().booking_count(), 0);

    // A restarted router books its own in-flight requests again; an unknown rank waits.
    let lost = Booking {
        rank: RankId::new(99, 0),
        ..booking.clone()
    };
    let pending = r.restore(
        vec![
            (RequestId::from_u128(41), booking),
            (RequestId::from_u128(42), lost),
        ],
        Timestamp(0),
    );
    assert_eq!(pending.len(), 1);
    assert_eq!(pending[0].0, RequestId::from_u128(42));
    assert_eq!(r.holdings(own, Timestamp(0)).bookings.len(), 1);
    assert_eq!(r.peer_gone(own), Applied::Nothing, "never drops its own");
}

#[test]
fn a_booking_never_released_expires_at_its_lease_end_and_a_released_one_does_not() {
    use crate::ledger::Booking;
    let lease = Duration::from_secs(60);
    let mut r = router_leased(PrefixMode::Events, Some(lease));
    let (kept, leaked) = (RequestId::from_u128(1), RequestId::from_u128(2));
    for id in [1, 2] {
        assert!(
            route(&mut r, id, tokens(id as u32, 64), None)
                .admitted()
                .is_some()
        );
    }
    assert_eq!(r.next_deadline(), Some(Timestamp(0) + lease));
    assert!(r.release(kept));
    assert_eq!(r.expire_leases(Timestamp(59_999_999)), vec![]);
    assert_eq!(r.ledger().booking_count(), 1, "not yet due");
    assert_eq!(r.expire_leases(Timestamp(60_000_000)), vec![leaked]);
    assert_eq!(r.ledger().booking_count(), 0);
    assert_eq!(r.next_deadline(), None);
    assert!(!r.release(leaked), "already released by its lease");

    // A restored booking's lease runs from its restore; one on a removed worker holds none.
    let booking = Booking {
        rank: RankId::new(2, 0),
        block_hashes: vec![1, 2, 3],
        prefill_tokens: 48,
        extra_blocks: 1,
    };
    let on_three = Booking {
        rank: RankId::new(3, 0),
        ..booking.clone()
    };
    let restored = vec![
        (RequestId::from_u128(3), booking),
        (RequestId::from_u128(4), on_three),
    ];
    assert!(r.restore(restored, Timestamp(70_000_000)).is_empty());
    r.remove_worker(WorkerId(3));
    assert_eq!(r.expire_leases(Timestamp(129_999_999)), vec![]);
    assert_eq!(
        r.expire_leases(Timestamp(130_000_000)),
        vec![RequestId::from_u128(3)]
    );
    assert_eq!(r.ledger().booking_count(), 0);
}

#[test]
fn an_adapters_request_prefers_where_it_runs_over_a_free_slot_over_a_wait() {
    use crate::adapters::AdapterResidency;
    let mut r = router(PrefixMode::Events);
    for w in 1..=4 {
        let mut spec = WorkerSpec::new(w, 1, 10_000, 8192);
        spec.block_size = BS;
        spec.loras = vec!["sql".into(), "chat".into(), "code".into()];
        r.upsert_worker(spec).expect("valid worker");
    }
    let slots = |running: &[&str]| AdapterResidency {
        running: running.iter().map(|s| (*s).to_owned()).collect(),
        slots: Some(2),
    };
    // Worker 1: both slots taken by other adapters; 2: one free; 3 and 4: `sql` runs (their
    // slots full).
    r.set_adapters(WorkerId(1), slots(&["chat", "code"]));
    r.set_adapters(WorkerId(2), slots(&["chat"]));
    r.set_adapters(WorkerId(3), slots(&["sql", "chat"]));
    r.set_adapters(WorkerId(4), slots(&["sql", "chat"]));
    let out = route(&mut r, 2, tokens(10, 64), Some("sql"));
    let chosen = out.admitted().map(|a| a.rank.worker);
    assert!(
        chosen == Some(WorkerId(3)) || chosen == Some(WorkerId(4)),
        "where `sql` runs: {chosen:?}"
    );
    // Nowhere running: a free slot beats a wait.
    let out = route(&mut r, 3, tokens(11, 64), Some("code"));
    assert_eq!(
        out.admitted().map(|a| a.rank.worker),
        Some(WorkerId(1)),
        "code runs on 1"
    );
    r.set_adapters(WorkerId(1), slots(&["chat", "sql"]));
    let out = route(&mut r, 4, tokens(12, 64), Some("code"));
    assert_eq!(
        out.admitted().map(|a| a.rank.worker),
        Some(WorkerId(2)),
        "2 has a free slot"
    );
    // Without a report (the engine says nothing of its slots) load alone decides, as before.
    r.set_adapters(WorkerId(2), AdapterResidency::default());
    assert_eq!(
        r.ledger().adapter_fit(WorkerId(2), "code"),
        crate::adapters::AdapterFit::Unknown
    );
}
