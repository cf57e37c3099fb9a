//! Behaviour tests of the event-fed indexes, run against both the reference and the concurrent
//! implementation, and a property test that random event streams leave both answering every
//! lookup identically.

use super::*;
use crate::hashing::{LocalBlockHash, SequenceHash, chain, sequence_hashes};
use crate::ids::{RankId, WorkerId};
use crate::worker::WorkerSpec;
use proptest::prelude::*;

/// What the tests need from an index, so each test runs on both implementations.
trait EventIndex: Default {
    fn add(&mut self, spec: &WorkerSpec);
    fn remove(&mut self, worker: WorkerId) -> bool;
    fn apply_event(&mut self, event: &KvEvent) -> EventStatus;
    fn find(&self, hashes: &[SequenceHash]) -> OverlapScores;
    fn snapshot(&self) -> IndexStats;
}

macro_rules! impl_event_index {
    ($t:ty) => {
        impl EventIndex for $t {
            fn add(&mut self, spec: &WorkerSpec) {
                assert_eq!(self.add_worker(spec), Ok(()));
            }
            fn remove(&mut self, worker: WorkerId) -> bool {
                self.remove_worker(worker)
            }
            fn apply_event(&mut self, event: &KvEvent) -> EventStatus {
                self.apply(event)
            }
            fn find(&self, hashes: &[SequenceHash]) -> OverlapScores {
                self.find_matches(hashes)
            }
            fn snapshot(&self) -> IndexStats {
                self.stats()
            }
        }
    };
}
impl_event_index!(ReferenceIndex);
impl_event_index!(KvIndexWriter);

fn local(i: u64) -> LocalBlockHash {
    LocalBlockHash(i.wrapping_mul(0x9E37_79B9_7F4A_7C15))
}

/// A Stored event whose block ids are the local ids themselves.
fn stored(worker: u64, dp_rank: u32, id: u64, parent: Option<u64>, blocks: &[u64]) -> KvEvent {
    KvEvent {
        worker: WorkerId(worker),
        dp_rank,
        event_id: id,
        data: KvEventData::Stored {
            parent: parent.map(ExternalHash),
            blocks: blocks
                .iter()
                .map(|&b| StoredBlock {
                    hash: ExternalHash(b),
                    local: local(b),
                })
                .collect(),
        },
    }
}

fn removed(worker: u64, id: u64, hashes: &[u64]) -> KvEvent {
    KvEvent {
        worker: WorkerId(worker),
        dp_rank: 0,
        event_id: id,
        data: KvEventData::Removed {
            hashes: hashes.iter().copied().map(ExternalHash).collect(),
        },
    }
}

fn cleared(worker: u64, id: u64) -> KvEvent {
    KvEvent {
        worker: WorkerId(worker),
        dp_rank: 0,
        event_id: id,
        data: KvEventData::Cleared,
    }
}

fn query(blocks: &[u64]) -> Vec<SequenceHash> {
    sequence_hashes(&blocks.iter().map(|&b| local(b)).collect::<Vec<_>>())
}

fn rank(w: u64) -> RankId {
    RankId::new(w, 0)
}

fn with_workers<I: EventIndex>(n: u64) -> I {
    let mut ix = I::default();
    for w in 1..=n {
        ix.add(&WorkerSpec::new(w, 1, 1_000, 8_192));
    }
    ix
}

fn stored_blocks_are_matched_by_consecutive_prefix<I: EventIndex>() {
    let mut ix: I = with_workers(2);
    assert_eq!(
        ix.apply_event(&stored(1, 0, 1, None, &[1, 2, 3])),
        EventStatus::Ok
    );
    assert_eq!(
        ix.apply_event(&stored(2, 0, 1, None, &[1, 2])),
        EventStatus::Ok
    );
    // Continuing worker 2's sequence from its block 2.
    assert_eq!(
        ix.apply_event(&stored(2, 0, 2, Some(2), &[7])),
        EventStatus::Ok
    );
    let m = ix.find(&query(&[1, 2, 3, 4]));
    assert_eq!((m.get(rank(1)), m.get(rank(2))), (3, 2));
    assert_eq!(ix.find(&query(&[1, 2, 7])).get(rank(2)), 3);
    assert!(
        ix.find(&query(&[2, 3])).is_empty(),
        "block 2 alone is a different prefix"
    );
    let s = ix.snapshot();
    assert_eq!(
        (s.blocks, s.rank_blocks, s.events.stored, s.statuses.ok),
        (4, 6, 3, 3)
    );
}

fn removed_blocks_cut_the_match_at_the_hole<I: EventIndex>() {
    let mut ix: I = with_workers(1);
    ix.apply_event(&stored(1, 0, 1, None, &[1, 2, 3]));
    assert_eq!(ix.apply_event(&removed(1, 2, &[2])), EventStatus::Ok);
    assert_eq!(ix.find(&query(&[1, 2, 3])).get(rank(1)), 1);
    assert_eq!(ix.snapshot().rank_blocks, 2);
}

fn cleared_and_removed_workers_drop_everything_they_held<I: EventIndex>() {
    let mut ix: I = with_workers(2);
    ix.apply_event(&stored(1, 0, 1, None, &[1, 2]));
    ix.apply_event(&stored(2, 0, 1, None, &[1, 2]));
    assert_eq!(ix.apply_event(&cleared(1, 2)), EventStatus::Ok);
    let m = ix.find(&query(&[1, 2]));
    assert_eq!((m.get(rank(1)), m.get(rank(2))), (0, 2));
    assert!(ix.remove(WorkerId(2)));
    assert!(!ix.remove(WorkerId(2)));
    assert!(ix.find(&query(&[1, 2])).is_empty());
    let s = ix.snapshot();
    assert_eq!(
        (s.blocks, s.rank_blocks, s.workers, s.events.cleared),
        (0, 0, 1, 1)
    );
    // Events of a removed worker are refused.
    assert_eq!(
        ix.apply_event(&stored(2, 0, 2, None, &[1])),
        EventStatus::UnknownWorker
    );
}

fn bad_events_are_counted_and_change_nothing_they_should_not<I: EventIndex>() {
    let mut ix: I = with_workers(1);
    ix.apply_event(&stored(1, 0, 1, None, &[1, 2]));
    let before = ix.find(&query(&[1, 2, 3]));
    assert_eq!(
        ix.apply_event(&stored(9, 0, 1, None, &[5])),
        EventStatus::UnknownWorker
    );
    assert_eq!(
        ix.apply_event(&stored(1, 3, 2, None, &[5])),
        EventStatus::UnknownRank
    );
    assert_eq!(
        ix.apply_event(&stored(1, 0, 3, Some(77), &[3])),
        EventStatus::ParentNotFound
    );
    assert_eq!(
        ix.apply_event(&removed(1, 4, &[42])),
        EventStatus::BlockNotFound
    );
    assert_eq!(ix.find(&query(&[1, 2, 3])), before);
    // A duplicate id is skipped but the rest of the event lands.
    assert_eq!(
        ix.apply_event(&stored(1, 0, 5, Some(1), &[2, 3])),
        EventStatus::DuplicateBlock
    );
    assert_eq!(ix.find(&query(&[1, 2, 3])).get(rank(1)), 3);
    let s = ix.snapshot();
    assert_eq!(s.statuses.unknown_worker, 1);
    assert_eq!(s.statuses.unknown_rank, 1);
    assert_eq!(s.statuses.parent_not_found, 1);
    assert_eq!(s.statuses.block_not_found, 1);
    assert_eq!(s.statuses.duplicate_block, 1);
    assert_eq!(s.statuses.ok, 1);
    assert_eq!((s.blocks, s.rank_blocks), (3, 3));
}

fn event_id_gaps_and_reordering_are_counted_per_rank<I: EventIndex>() {
    let mut ix: I = I::default();
    ix.add(&WorkerSpec::new(1, 2, 1_000, 8_192));
    ix.apply_event(&stored(1, 0, 10, None, &[1]));
    ix.apply_event(&stored(1, 1, 500, None, &[1])); // another rank: its own sequence
    ix.apply_event(&stored(1, 0, 11, Some(1), &[2]));
    ix.apply_event(&stored(1, 0, 15, Some(2), &[3])); // 12..=14 lost
    ix.apply_event(&stored(1, 0, 13, Some(3), &[4])); // late
    let ids = ix.snapshot().event_ids;
    assert_eq!((ids.gaps, ids.missed_events, ids.out_of_order), (1, 3, 1));
    let m = ix.find(&query(&[1, 2, 3, 4]));
    assert_eq!((m.get(RankId::new(1, 0)), m.get(RankId::new(1, 1))), (4, 1));
}

fn two_engine_ids_for_one_sequence_keep_it_until_both_are_removed<I: EventIndex>() {
    let mut ix: I = with_workers(1);
    let ev = |id, ext| KvEvent {
        worker: WorkerId(1),
        dp_rank: 0,
        event_id: id,
        data: KvEventData::Stored {
            parent: None,
            blocks: vec![StoredBlock {
                hash: ExternalHash(ext),
                local: local(1),
            }],
        },
    };
    ix.apply_event(&ev(1, 100));
    ix.apply_event(&ev(2, 200));
    assert_eq!(ix.snapshot().rank_blocks, 1);
    ix.apply_event(&removed(1, 3, &[100]));
    assert_eq!(ix.find(&query(&[1])).get(rank(1)), 1);
    ix.apply_event(&removed(1, 4, &[200]));
    assert!(ix.find(&query(&[1])).is_empty());
    // Cleared with two ids for one sequence counts the block once.
    ix.apply_event(&ev(5, 100));
    ix.apply_event(&ev(6, 200));
    ix.apply_event(&cleared(1, 7));
    let s = ix.snapshot();
    assert_eq!((s.blocks, s.rank_blocks, s.statuses.ok), (0, 0, 7));
}

fn shrinking_a_workers_ranks_drops_the_ranks_it_lost<I: EventIndex>() {
    let mut ix: I = I::default();
    ix.add(&WorkerSpec::new(1, 2, 1_000, 8_192));
    ix.apply_event(&stored(1, 1, 1, None, &[1]));
    ix.add(&WorkerSpec::new(1, 1, 1_000, 8_192));
    assert!(ix.find(&query(&[1])).is_empty());
    assert_eq!(ix.snapshot().ranks, 1);
}

macro_rules! for_both {
    ($($name:ident),* $(,)?) => {
        mod reference_index {
            use super::*;
            $( #[test] fn $name() { super::$name::<ReferenceIndex>() } )*
        }
        mod concurrent_index {
            use super::*;
            $( #[test] fn $name() { super::$name::<KvIndexWriter>() } )*
        }
    };
}

for_both!(
    stored_blocks_are_matched_by_consecutive_prefix,
    removed_blocks_cut_the_match_at_the_hole,
    cleared_and_removed_workers_drop_everything_they_held,
    bad_events_are_counted_and_change_nothing_they_should_not,
    event_id_gaps_and_reordering_are_counted_per_rank,
    two_engine_ids_for_one_sequence_keep_it_until_both_are_removed,
    shrinking_a_workers_ranks_drops_the_ranks_it_lost,
);

#[test]
fn events_survive_a_json_round_trip() {
    let ev = stored(3, 1, 9, Some(4), &[5, 6]);
    let json = serde_json::to_string(&ev).unwrap_or_default();
    assert_eq!(serde_json::from_str::<KvEvent>(&json).ok(), Some(ev));
    let stats = serde_json::to_value(IndexStats::default()).unwrap_or_default();
    assert!(
        stats
            .get("statuses")
            .and_then(|s| s.get("parent_not_found"))
            .is_some()
    );
}

#[test]
fn readers_on_other_threads_see_the_writers_blocks() {
    let mut w = KvIndexWriter::new();
    let reader = w.reader();
    fn assert_send_sync<T: Send + Sync + Clone>(_: &T) {}
    assert_send_sync(&reader);
    assert_eq!(w.add_worker(&WorkerSpec::new(1, 1, 10, 10)), Ok(()));
    let q = query(&[1, 2, 3]);
    let handle = {
        let reader = reader.clone();
        let q = q.clone();
        std::thread::spawn(move || {
            // Spin until the writer's blocks show up; depth only ever grows here.
            let mut last = 0;
            while last < 3 {
                let d = reader.find_matches(&q).get(rank(1));
                assert!(d >= last);
                last = d;
                std::thread::yield_now();
            }
        })
    };
    w.apply(&stored(1, 0, 1, None, &[1]));
    w.apply(&stored(1, 0, 2, Some(1), &[2, 3]));
    assert!(handle.join().is_ok());
    assert_eq!(reader.holders(q[2]), vec![rank(1)]);
    assert_eq!(reader.block_count(), 3);
}

#[test]
fn thousands_of_blocks_stored_and_evicted_match_the_reference_through_table_rebuilds() {
    let mut reference = ReferenceIndex::new();
    let mut concurrent = KvIndexWriter::new();
    let reader = concurrent.reader();
    for w in 1..=3 {
        let spec = WorkerSpec::new(w, 1, 10_000, 100);
        assert!(reference.add_worker(&spec).is_ok() && concurrent.add_worker(&spec).is_ok());
    }
    // 300 documents of 10 blocks, each stored on one or two workers; every third one evicted
    // again leaf first, so the tables fill with tombstones and are rebuilt several times.
    let doc = |d: u64| (d * 10..d * 10 + 10).collect::<Vec<u64>>();
    let mut id = 0;
    let mut both = |ev: &KvEvent| {
        assert_eq!(reference.apply(ev), concurrent.apply(ev));
    };
    for d in 0..300u64 {
        for w in [1 + d % 3, 1 + (d * 7) % 3] {
            id += 1;
            both(&stored(w, 0, id, None, &doc(d)));
            if d % 3 == 0 {
                id += 1;
                let mut gone = doc(d);
                gone.reverse();
                both(&removed(w, id, &gone[..6]));
            }
        }
    }
    for d in 0..300u64 {
        let q = query(&doc(d));
        let expected = reference.find_matches(&q);
        assert!(!expected.is_empty());
        assert_eq!(reader.find_matches(&q), expected);
        assert_eq!(reader.holders(q[9]), reference.holders(q[9]));
    }
    assert_eq!(reference.stats(), concurrent.stats());
    assert_eq!(reader.block_count() as u64, reference.stats().blocks);
}

#[test]
fn a_reader_never_sees_blocks_of_a_rank_that_does_not_hold_them_while_the_writer_churns() {
    // Worker 1 holds `kept` throughout. Worker 2 holds it too, then is removed and worker 3
    // takes its slot without ever storing `kept`. Meanwhile worker 1 stores and evicts
    // thousands of other blocks, so the tables are rebuilt and republished under the reader.
    let mut w = KvIndexWriter::new();
    for id in 1..=2 {
        assert_eq!(w.add_worker(&WorkerSpec::new(id, 1, 100_000, 100)), Ok(()));
    }
    let kept: Vec<u64> = (1..=8).collect();
    w.apply(&stored(1, 0, 1, None, &kept));
    w.apply(&stored(2, 0, 1, None, &kept));
    let reader = w.reader();
    let q = query(&kept);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let handle = {
        let (reader, q, stop) = (reader.clone(), q.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut lookups = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) || lookups < 100 {
                let scores = reader.find_matches(&q);
                assert_eq!(scores.get(rank(1)), 8, "{scores:?}");
                assert_eq!(scores.get(rank(3)), 0, "{scores:?}");
                assert!(
                    scores
                        .iter()
                        .all(|(r, d)| r == rank(2) && d == 8 || r == rank(1))
                );
                lookups += 1;
            }
        })
    };
    assert!(w.remove_worker(WorkerId(2)));
    assert_eq!(w.add_worker(&WorkerSpec::new(3, 1, 100_000, 100)), Ok(()));
    let mut id = 1;
    for round in 0..20u64 {
        let blocks: Vec<u64> = (0..500).map(|b| 1_000 + round * 1_000 + b).collect();
        for chunk in blocks.chunks(10) {
            id += 1;
            w.apply(&stored(1, 0, id, None, chunk));
            id += 1;
            w.apply(&stored(3, 0, id, None, chunk));
        }
        for chunk in blocks.chunks(10) {
            id += 1;
            w.apply(&removed(1, id, chunk));
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    assert!(handle.join().is_ok());
    assert_eq!(
        reader.find_matches(&q).iter().collect::<Vec<_>>(),
        vec![(rank(1), 8)]
    );
}

/// One step of a random workload over 3 workers × 2 ranks and a small block alphabet, so
/// sequences share prefixes, parents go missing and ids repeat.
#[derive(Debug, Clone)]
enum Step {
    Store {
        w: u64,
        r: u32,
        parent: Option<u64>,
        blocks: Vec<u64>,
    },
    Remove {
        w: u64,
        r: u32,
        hashes: Vec<u64>,
    },
    Clear {
        w: u64,
        r: u32,
    },
    RemoveWorker {
        w: u64,
    },
    AddWorker {
        w: u64,
    },
}

/// Sequences the workload stores pieces of and looks up, so lookups match deep prefixes.
/// A and B share their first two blocks.
const DOCS: [&[u64]; 3] = [&[0, 1, 2, 3, 4, 5], &[0, 1, 6, 7], &[8, 9, 10, 11]];

/// Stores a run of one document, continuing from the block before it.
fn doc_store(w: u64, r: u32, doc: usize, start: usize, len: usize) -> Step {
    let d = DOCS[doc % DOCS.len()];
    let start = start % d.len();
    let end = (start + len).min(d.len());
    Step::Store {
        w,
        r,
        parent: start.checked_sub(1).map(|p| d[p]),
        blocks: d[start..end].to_vec(),
    }
}

/// Steps over workers of `dp_size` ranks (rank `dp_size` does not exist).
fn step(dp_size: u32) -> impl Strategy<Value = Step> {
    let w = 1u64..=4; // worker 4 is never registered at first
    let r = 0u32..dp_size + 1;
    prop_oneof![
        12 => (w.clone(), r.clone(), 0usize..3, prop_oneof![Just(0usize), 0usize..6], 1usize..5)
            .prop_map(|(w, r, doc, start, len)| doc_store(w, r, doc, start, len)),
        2 => (w.clone(), r.clone(), proptest::option::of(0u64..12), proptest::collection::vec(0u64..12, 0..5))
            .prop_map(|(w, r, parent, blocks)| Step::Store { w, r, parent, blocks }),
        3 => (w.clone(), r.clone(), proptest::collection::vec(0u64..12, 0..4))
            .prop_map(|(w, r, hashes)| Step::Remove { w, r, hashes }),
        1 => (w.clone(), r).prop_map(|(w, r)| Step::Clear { w, r }),
        1 => w.clone().prop_map(|w| Step::RemoveWorker { w }),
        1 => w.prop_map(|w| Step::AddWorker { w }),
    ]
}

/// Applies `steps` to both indexes (three workers of `dp_size` ranks registered at first) and
/// checks after every step that both answer every query alike.
fn check_same_answers(
    dp_size: u32,
    steps: Vec<Step>,
    random_queries: Vec<Vec<u64>>,
) -> Result<(), TestCaseError> {
    let queries: Vec<Vec<u64>> = DOCS
        .iter()
        .map(|d| d.to_vec())
        .chain(random_queries)
        .collect();
    let mut reference = ReferenceIndex::new();
    let mut concurrent = KvIndexWriter::new();
    let reader = concurrent.reader();
    for w in 1..=3 {
        let spec = WorkerSpec::new(w, dp_size, 100, 100);
        prop_assert!(reference.add_worker(&spec).is_ok() && concurrent.add_worker(&spec).is_ok());
    }
    for (id, s) in steps.into_iter().enumerate() {
        let id = id as u64;
        let (a, b) = match s {
            Step::Store {
                w,
                r,
                parent,
                blocks,
            } => {
                let ev = stored(w, r, id, parent, &blocks);
                (Some(reference.apply(&ev)), Some(concurrent.apply(&ev)))
            }
            Step::Remove { w, r, hashes } => {
                let mut ev = removed(w, id, &hashes);
                ev.dp_rank = r;
                (Some(reference.apply(&ev)), Some(concurrent.apply(&ev)))
            }
            Step::Clear { w, r } => {
                let mut ev = cleared(w, id);
                ev.dp_rank = r;
                (Some(reference.apply(&ev)), Some(concurrent.apply(&ev)))
            }
            Step::RemoveWorker { w } => {
                prop_assert_eq!(
                    reference.remove_worker(WorkerId(w)),
                    concurrent.remove_worker(WorkerId(w))
                );
                (None, None)
            }
            Step::AddWorker { w } => {
                let spec = WorkerSpec::new(w, dp_size, 100, 100);
                prop_assert!(
                    reference.add_worker(&spec).is_ok() && concurrent.add_worker(&spec).is_ok()
                );
                (None, None)
            }
        };
        prop_assert_eq!(a, b);
        for q in &queries {
            let hashes = query(q);
            let expected = reference.find_matches(&hashes);
            prop_assert_eq!(&concurrent.find_matches(&hashes), &expected);
            prop_assert_eq!(&reader.find_matches(&hashes), &expected);
        }
    }
    prop_assert_eq!(reference.stats(), concurrent.stats());
    // Every held block is reachable: its holders agree too.
    for q in &queries {
        for h in query(q) {
            prop_assert_eq!(reference.holders(h), reader.holders(h));
        }
    }
    Ok(())
}

proptest! {
    #[test]
    fn random_event_streams_give_identical_matches_on_both_indexes(
        steps in proptest::collection::vec(step(2), 1..60),
        random_queries in proptest::collection::vec(proptest::collection::vec(0u64..12, 1..6), 3),
    ) {
        check_same_answers(2, steps, random_queries)?;
    }

    /// 3 × 40 ranks: holder sets span two 64-slot words, and removed workers' slots go to
    /// other workers.
    #[test]
    fn fleets_of_over_64_ranks_give_identical_matches_on_both_indexes(
        steps in proptest::collection::vec(step(40), 1..80),
        random_queries in proptest::collection::vec(proptest::collection::vec(0u64..12, 1..6), 3),
    ) {
        check_same_answers(40, steps, random_queries)?;
    }
}

#[test]
fn chain_matches_the_index_key_of_a_stored_child() {
    // The key of block b stored under parent a is chain(seq(a), local(b)).
    let mut ix = ReferenceIndex::new();
    assert_eq!(ix.add_worker(&WorkerSpec::new(1, 1, 10, 10)), Ok(()));
    ix.apply(&stored(1, 0, 1, None, &[1]));
    ix.apply(&stored(1, 0, 2, Some(1), &[2]));
    let key = chain(Some(SequenceHash(local(1).0)), local(2));
    assert_eq!(ix.holders(key), vec![rank(1)]);
}
