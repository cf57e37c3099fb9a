//! `router-node bench` end to end: a trace replayed, and synthetic constant-rate load stopped
//! midway, over real HTTP against a router node in front of a simulated engine (`bench::run`
//! and `bench::run_until`, the library functions behind the command). The binary's exit codes
//! are tested with the whole-system tests (`tests/tests/bench_cli.rs`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::PathBuf;
use std::time::Duration;

use router_node::bench::{self, BenchOptions, BenchReport, ClassChoice, RecordOutcome, Synthetic};
use router_node::frontend::Limits;
use support::{spawn_node, spawn_sim_worker};

/// A fresh file holding `text` in its own temp folder, removed when this is dropped.
struct TempFile {
    dir: PathBuf,
    path: PathBuf,
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl std::ops::Deref for TempFile {
    type Target = std::path::Path;
    fn deref(&self) -> &std::path::Path {
        &self.path
    }
}

fn temp_file(name: &str, text: &str) -> TempFile {
    let dir = std::env::temp_dir().join(format!("switchyard-bench-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    TempFile { dir, path }
}

/// Six requests, 1 s apart in trace time; the last five share blocks 0 and 1 with the first.
const TRACE: &str = r#"{"timestamp": 0, "input_length": 96, "output_length": 5, "hash_ids": [0, 1, 2]}
{"timestamp": 1000, "input_length": 96, "output_length": 4, "hash_ids": [0, 1, 3]}
{"timestamp": 2000, "input_length": 80, "output_length": 900, "hash_ids": [0, 1, 4]}
{"timestamp": 3000, "input_length": 64, "output_length": 3, "hash_ids": [0, 1]}

{"timestamp": 4000, "input_length": 96, "output_length": 6, "hash_ids": [0, 1, 2]}
{"timestamp": 5000, "input_length": 70, "output_length": 2, "hash_ids": [0, 1, 5]}
"#;

#[tokio::test]
async fn a_replay_accounts_for_every_request_and_sees_the_shared_prefix() {
    let worker = spawn_sim_worker(20.0).await;
    let node = spawn_node(&[worker.endpoint()], Limits::default()).await;
    let trace = temp_file("trace.jsonl", TRACE);
    let json = trace.with_file_name("result.json");
    let opts = BenchOptions {
        speedup: 20.0,
        classes: ClassChoice::Fixed("interactive".to_owned()),
        max_output_tokens: 8,
        block_tokens: 32,
        json: Some(json.clone()),
        timeout: Duration::from_secs(30),
        ..BenchOptions::new(trace.to_path_buf(), format!("{}/", node.url))
    };
    let report = bench::run(&opts).await.unwrap();

    let all = &report.overall;
    assert_eq!(all.sent, 6, "{report:#?}");
    assert_eq!(all.ok + all.shed + all.errors, all.sent, "{report:#?}");
    assert_eq!(all.ok, 6, "{report:#?}");
    assert_eq!(report.classes.len(), 1);
    assert_eq!(report.classes[0].class, "interactive");
    assert_eq!(report.classes[0].sent, 6);
    // max_tokens = min(output_length, 8): 5 + 4 + 8 + 3 + 6 + 2.
    assert_eq!(all.output_tokens, 28, "{report:#?}");
    for p in [all.ttft_ms, all.e2e_ms] {
        assert_eq!(p.count, 6, "{p:?}");
        let (p50, p90, p99) = (p.p50.unwrap(), p.p90.unwrap(), p.p99.unwrap());
        assert!(0.0 < p50 && p50 <= p90 && p90 <= p99, "{p:?}");
    }
    assert!(all.ttft_ms.p50.unwrap() <= all.e2e_ms.p50.unwrap());
    // Every content chunk after a request's first gives one gap: 28 tokens - 6 firsts.
    assert_eq!(all.itl_ms.count, 22, "{report:#?}");
    assert!(all.request_rate > 0.0 && all.output_tokens_per_s > 0.0);
    // 6 x the prompt; from the second request on, blocks 0 and 1 (64 tokens) were cached.
    assert_eq!(all.prompt_tokens, 96 + 96 + 80 + 64 + 96 + 70);
    let hit = all
        .prefix_hit_pct
        .expect("the simulated engine reports cached tokens");
    assert!(hit > 0.0, "{report:#?}");
    assert!(all.cached_tokens >= 4 * 48, "{report:#?}");

    let written: BenchReport =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(written, report);
    let table = report.render_table();
    assert!(
        table.contains("interactive") && table.contains("ttft p50"),
        "{table}"
    );
    node.assert_idle().await;
}

#[tokio::test]
async fn synthetic_load_stopped_midway_lists_every_request_it_sent() {
    let worker = spawn_sim_worker(20.0).await;
    let node = spawn_node(&[worker.endpoint()], Limits::default()).await;
    let opts = BenchOptions {
        max_output_tokens: 4,
        timeout: Duration::from_secs(30),
        per_request: true,
        ..BenchOptions::synthetic(
            Synthetic {
                rate: 20.0,
                duration: None,
                prompt_tokens: 48,
            },
            node.url.clone(),
        )
    };
    // No duration: it sends until stopped, here after 1 s.
    let report = bench::run_until(&opts, tokio::time::sleep(Duration::from_secs(1)))
        .await
        .unwrap();
    assert!(report.interrupted, "{report:#?}");
    let all = &report.overall;
    assert!(
        (15..=22).contains(&all.sent),
        "about 20 in 1 s: {}",
        all.sent
    );
    assert_eq!(all.ok, all.sent, "{report:#?}");
    assert_eq!(all.output_tokens, 4 * all.sent);
    assert_eq!(all.prompt_tokens, 48 * all.sent);
    assert!(report.started_unix_ms > 1_600_000_000_000);
    assert!(report.trace.contains("synthetic"), "{}", report.trace);
    // One record per request, in send order, 50 ms apart.
    let records = &report.requests;
    assert_eq!(records.len() as u64, all.sent);
    for (i, r) in records.iter().enumerate() {
        assert_eq!(r.index, i as u64);
        assert_eq!(r.outcome, RecordOutcome::Ok, "{r:?}");
        assert_eq!(r.status, Some(200));
        assert_eq!(r.reason, None);
        assert!(r.ttft_ms.is_some_and(|t| t <= r.e2e_ms), "{r:?}");
        assert!(r.sent_ms < 1000.0, "{r:?}");
    }
    let gap = records[10].sent_ms - records[9].sent_ms;
    assert!((40.0..70.0).contains(&gap), "{gap}");
    node.assert_idle().await;
}
