//! The sharing properties of `trace synth`: turns extend their session's prefix, sessions
//! under one system prompt share exactly its blocks, arrivals follow the process asked for,
//! and the output reads back as a trace.

use std::collections::{BTreeMap, HashSet};

use super::*;
use crate::bench::trace::Trace;

fn params() -> SynthParams {
    SynthParams {
        seed: 11,
        system_prompts: 3,
        system_prompt_blocks: 2,
        sessions_per_prompt: 5,
        turns: Dist::Uniform(2, 5),
        user_tokens: Dist::Uniform(10, 90),
        output_tokens: Dist::Uniform(5, 60),
        block_tokens: 16,
        rate: 20.0,
        concurrent_sessions: 4,
        max_input_tokens: 100_000,
        ..SynthParams::default()
    }
}

fn generated(p: &SynthParams) -> Vec<SynthRequest> {
    generate(p).unwrap_or_else(|e| panic!("{e}"))
}

fn by_session(trace: &[SynthRequest]) -> BTreeMap<u32, Vec<&SynthRequest>> {
    let mut out: BTreeMap<u32, Vec<&SynthRequest>> = BTreeMap::new();
    for r in trace {
        out.entry(r.session).or_default().push(r);
    }
    out
}

#[test]
fn each_turn_extends_the_previous_turns_prompt() {
    let trace = generated(&params());
    let sessions = by_session(&trace);
    assert_eq!(sessions.len(), 15, "3 system prompts x 5 sessions");
    for turns in sessions.values() {
        assert!((2..=5).contains(&turns.len()), "{}", turns.len());
        for (k, pair) in turns.windows(2).enumerate() {
            let (prev, next) = (&pair[0].record, &pair[1].record);
            assert_eq!(pair[1].turn as usize, k + 1);
            assert!(next.hash_ids.starts_with(&prev.hash_ids), "turn {k}");
            assert!(next.hash_ids.len() > prev.hash_ids.len());
            // The previous prompt (padded to whole blocks), its answer and a new message.
            let base = prev.hash_ids.len() as u64 * 16;
            let new = next.input_length - base;
            assert!(new > prev.output_length, "{new}");
            assert!((10..=90).contains(&(new - prev.output_length)));
            assert!(next.timestamp >= prev.timestamp);
        }
        for r in turns {
            let rec = &r.record;
            assert_eq!(rec.hash_ids.len() as u64, rec.input_length.div_ceil(16));
        }
    }
}

#[test]
fn sessions_under_one_system_prompt_share_exactly_its_blocks() {
    let trace = generated(&params());
    let firsts: Vec<&SynthRequest> = trace.iter().filter(|r| r.turn == 0).collect();
    assert_eq!(firsts.len(), 15);
    for a in &firsts {
        for b in &firsts {
            if a.session == b.session {
                continue;
            }
            let (ha, hb) = (&a.record.hash_ids, &b.record.hash_ids);
            let shared = ha.iter().zip(hb).take_while(|(x, y)| x == y).count();
            let want = if a.system_prompt == b.system_prompt {
                2
            } else {
                0
            };
            assert_eq!(shared, want, "sessions {} and {}", a.session, b.session);
        }
    }
    // Past the system prompt, no two sessions have a block in common.
    let mut owner: BTreeMap<u64, u32> = BTreeMap::new();
    for r in &trace {
        for &h in r.record.hash_ids.iter().skip(2) {
            let first = *owner.entry(h).or_insert(r.session);
            assert_eq!(first, r.session, "block {h}");
        }
    }
    // System prompt p is blocks 2p and 2p+1.
    for r in &firsts {
        let p = u64::from(r.system_prompt);
        assert_eq!(r.record.hash_ids[..2], [2 * p, 2 * p + 1]);
    }
}

#[test]
fn the_same_seed_gives_the_same_trace_and_another_seed_another() {
    let p = params();
    assert_eq!(generated(&p), generated(&p));
    let other = generated(&SynthParams { seed: 12, ..p });
    assert_ne!(generated(&params()), other);
}

#[test]
fn arrivals_follow_the_rate_and_the_process() {
    let constant = generated(&SynthParams {
        arrival: ArrivalProcess::Constant,
        turns: Dist::Fixed(4),
        ..params()
    });
    assert_eq!(constant.len(), 60);
    for (i, r) in constant.iter().enumerate() {
        assert_eq!(r.record.timestamp, i as u64 * 50, "20 per second");
    }
    let poisson = generated(&SynthParams {
        system_prompts: 10,
        sessions_per_prompt: 50,
        turns: Dist::Fixed(4),
        ..params()
    });
    let n = poisson.len() as f64;
    let span = poisson.last().map_or(0, |r| r.record.timestamp) as f64 / 1e3;
    let rate = (n - 1.0) / span;
    assert!((18.0..22.0).contains(&rate), "{rate} per second");
    let gaps: HashSet<u64> = poisson
        .windows(2)
        .map(|w| w[1].record.timestamp - w[0].record.timestamp)
        .collect();
    assert!(gaps.len() > 20, "exponential gaps vary");
}

#[test]
fn open_sessions_interleave_and_a_long_session_stops_at_the_cap() {
    let trace = generated(&SynthParams {
        concurrent_sessions: 1,
        ..params()
    });
    let order: Vec<u32> = trace.iter().map(|r| r.session).collect();
    let mut sorted = order.clone();
    sorted.sort_unstable();
    assert_eq!(order, sorted, "one session at a time: no interleaving");
    let interleaved = generated(&params());
    let order: Vec<u32> = interleaved.iter().map(|r| r.session).collect();
    assert!(order.windows(2).any(|w| w[1] < w[0]), "{order:?}");

    let capped = generated(&SynthParams {
        turns: Dist::Fixed(50),
        max_input_tokens: 400,
        ..params()
    });
    assert!(capped.iter().all(|r| r.record.input_length <= 400));
    let sessions = by_session(&capped);
    assert!(sessions.values().all(|t| t.len() < 50));
    assert_eq!(
        sessions.len(),
        15,
        "every session still has its turns up to the cap"
    );
}

#[test]
fn bad_parameters_name_their_flag() {
    for (p, flag) in [
        (
            SynthParams {
                rate: 0.0,
                ..params()
            },
            "--rate",
        ),
        (
            SynthParams {
                system_prompts: 0,
                ..params()
            },
            "--system-prompts",
        ),
        (
            SynthParams {
                sessions_per_prompt: 0,
                ..params()
            },
            "--sessions-per-prompt",
        ),
        (
            SynthParams {
                concurrent_sessions: 0,
                ..params()
            },
            "--concurrent-sessions",
        ),
        (
            SynthParams {
                block_tokens: 0,
                ..params()
            },
            "--block-tokens",
        ),
        (
            SynthParams {
                max_input_tokens: 32,
                ..params()
            },
            "--max-input-tokens",
        ),
    ] {
        let err = generate(&p).err().map(|e| e.flag);
        assert_eq!(err, Some(flag), "{p:?}");
    }
}

#[test]
fn the_jsonl_reads_back_as_a_trace_and_the_summary_counts_reuse() {
    let trace = generated(&params());
    let text = to_jsonl(&trace).unwrap_or_else(|e| panic!("{e}"));
    let read = Trace::parse(&text, None).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(read.records.len(), trace.len());
    for ((_, rec), r) in read.records.iter().zip(&trace) {
        assert_eq!(rec, &r.record);
    }
    let first = text.lines().next().unwrap_or_default();
    let keys: Vec<String> = serde_json::from_str::<serde_json::Value>(first)
        .ok()
        .and_then(|v| v.as_object().map(|o| o.keys().cloned().collect()))
        .unwrap_or_default();
    assert_eq!(
        keys,
        ["hash_ids", "input_length", "output_length", "timestamp"],
        "the four Mooncake fields"
    );

    let s = summarize(&trace, 16);
    assert_eq!((s.requests, s.sessions), (trace.len(), 15));
    assert!(s.reusable_pct > 30.0 && s.reusable_pct < 100.0, "{s:?}");
    // Without a system prompt and with one turn, nothing is reused.
    let lone = generated(&SynthParams {
        system_prompt_blocks: 0,
        turns: Dist::Fixed(1),
        ..params()
    });
    assert_eq!(summarize(&lone, 16).reusable_pct, 0.0);
}
