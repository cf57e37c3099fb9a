//! `router-tools bench` end to end: a trace replayed, synthetic constant-rate load stopped
//! midway, a `trace synth` trace sent as chat text with its plots drawn, and each API and
//! prompt format as the worker receives it, over real HTTP against a router node in front of
//! a simulated engine or a stand-in worker (`bench::run` and `bench::run_until`, the library
//! functions behind the command). The binary's exit codes, and the queue-depth plot of a
//! `serve` node, are tested with the whole-system tests (`tests/tests/system/bench_cli.rs`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

// The router node's own test support: a node in process, a simulated engine, a stand-in
// worker (one copy, shared with router-node's tests).
#[path = "../../router-node/tests/support/mod.rs"]
mod support;

use std::path::PathBuf;
use std::time::Duration;

use router_node::frontend::Limits;
use router_tools::bench::synth::{self, ArrivalProcess, Dist, SynthParams};
use router_tools::bench::{
    self, Api, BenchOptions, BenchReport, ClassChoice, PlotTarget, PromptFormat, RecordOutcome,
    Synthetic,
};
use support::{spawn_node, spawn_sim_worker, spawn_worker};

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

/// The SVG `path` parsed: its `<text>` contents (trimmed) and the point counts of its lines.
fn read_svg(path: &std::path::Path) -> (Vec<String>, Vec<usize>) {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    let doc = roxmltree::Document::parse(&text).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    assert_eq!(doc.root_element().tag_name().name(), "svg");
    let texts = doc
        .descendants()
        .filter(|n| n.has_tag_name("text"))
        .filter_map(|n| n.text())
        .map(|t| t.trim().to_owned())
        .collect();
    let lines = doc
        .descendants()
        .filter(|n| n.has_tag_name("polyline"))
        .filter_map(|n| n.attribute("points"))
        .map(|p| p.split_whitespace().count())
        .collect();
    (texts, lines)
}

#[tokio::test]
async fn a_synthetic_trace_sent_as_chat_text_keeps_its_prefixes_and_draws_its_plots() {
    let worker = spawn_sim_worker(20.0).await;
    let node = spawn_node(&[worker.endpoint()], Limits::default()).await;
    let params = SynthParams {
        seed: 5,
        system_prompts: 2,
        system_prompt_blocks: 2,
        sessions_per_prompt: 3,
        turns: Dist::Fixed(3),
        user_tokens: Dist::Uniform(16, 48),
        output_tokens: Dist::Uniform(2, 6),
        block_tokens: 32,
        arrival: ArrivalProcess::Constant,
        rate: 10.0,
        concurrent_sessions: 3,
        max_input_tokens: 4096,
    };
    let generated = synth::generate(&params).unwrap();
    assert_eq!(generated.len(), 18, "2 x 3 sessions of 3 turns");
    let reusable = synth::summarize(&generated, 32).reusable_pct;
    let trace = temp_file("synth.jsonl", &synth::to_jsonl(&generated).unwrap());
    let plots = trace.with_file_name("plots");
    let opts = BenchOptions {
        api: Api::Chat,
        block_tokens: 32,
        max_output_tokens: 8,
        speedup: 2.0,
        classes: ClassChoice::Fixed("interactive".to_owned()),
        slo: vec![("interactive".to_owned(), 60_000.0)],
        plots: Some(PlotTarget::in_dir(&plots)),
        per_request: true,
        // The node's tokenizer loads at the first text prompt (most of a second in a debug
        // build): without a warm-up the first turns would all arrive together, uncached.
        warmup: 1,
        timeout: Duration::from_secs(30),
        ..BenchOptions::new(trace.to_path_buf(), node.url.clone())
    };
    let report = bench::run(&opts).await.unwrap();
    let all = &report.overall;
    assert_eq!(
        (all.sent, all.ok),
        (18, 18),
        "the warm-up is left out: {report:#?}"
    );
    // Text prompts tokenized by the node still share the trace's prefixes.
    let hit = all.prefix_hit_pct.expect("cached tokens reported");
    assert!(
        hit > reusable * 0.85,
        "hit {hit} %, a cache that never evicts: {reusable} %"
    );
    let interactive = &report.classes[0];
    assert_eq!(interactive.slo_ttft_ms, Some(60_000.0));
    assert_eq!(interactive.slo_attainment_pct, Some(100.0));
    assert!(report.render_table().contains("slo ok %"));
    for r in &report.requests {
        assert!(
            r.output_tokens.is_some_and(|t| (1..=8).contains(&t)),
            "{r:?}"
        );
        assert!(
            r.prompt_tokens.is_some() && r.cached_tokens.is_some(),
            "{r:?}"
        );
    }

    // Plots: no queue depth (this node exports no node metrics), the rest with their lines.
    assert!(report.queue_depth.is_empty());
    let mut names: Vec<String> = report
        .plots
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "e2e-cdf.svg",
            "hit-rate.svg",
            "requests.svg",
            "throughput.svg",
            "ttft-cdf.svg"
        ]
    );
    let (texts, lines) = read_svg(&plots.join("ttft-cdf.svg"));
    assert!(texts.iter().any(|t| t == "interactive"), "{texts:?}");
    assert!(
        lines.iter().any(|&n| n >= 10),
        "one point per distinct TTFT: {lines:?}"
    );
    let (texts, lines) = read_svg(&plots.join("requests.svg"));
    assert!(texts.iter().any(|t| t == "ok"), "{texts:?}");
    assert!(
        !texts.iter().any(|t| t == "shed"),
        "nothing shed: {texts:?}"
    );
    assert!(lines.iter().any(|&n| n >= 2), "{lines:?}");
    node.assert_idle().await;
}

#[tokio::test]
async fn chat_and_text_prompts_reach_the_worker_as_the_api_asks() {
    let worker = spawn_worker(2, Duration::from_millis(1)).await;
    let node = spawn_node(&[&worker.url], Limits::default()).await;
    let synthetic = Synthetic {
        rate: 50.0,
        duration: None,
        prompt_tokens: 12,
    };
    for (api, format) in [
        (Api::Chat, PromptFormat::Tokens),
        (Api::Completions, PromptFormat::Text),
        (Api::Completions, PromptFormat::Tokens),
    ] {
        let opts = BenchOptions {
            api,
            prompt_format: format,
            max_requests: Some(2),
            max_output_tokens: 2,
            timeout: Duration::from_secs(30),
            ..BenchOptions::synthetic(synthetic.clone(), node.url.clone())
        };
        let report = bench::run(&opts).await.unwrap();
        assert_eq!(report.overall.ok, 2, "{api:?} {format:?}: {report:#?}");
    }
    let seen = worker.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 6);
    let words = |text: &str| {
        let w: Vec<&str> = text.split(' ').collect();
        w.len() == 12 && w.iter().all(|w| bench::prompt::WORDS.contains(w))
    };
    for s in &seen[..2] {
        assert_eq!(s.path, "/v1/chat/completions");
        assert_eq!(s.body["messages"][0]["role"], "user", "{}", s.body);
        let content = s.body["messages"][0]["content"]
            .as_str()
            .unwrap_or_default();
        assert!(words(content), "chat sends text: {content:?}");
    }
    for s in &seen[2..4] {
        assert_eq!(s.path, "/v1/completions");
        assert!(
            words(s.body["prompt"].as_str().unwrap_or_default()),
            "{}",
            s.body
        );
    }
    for s in &seen[4..] {
        assert_eq!(
            s.body["prompt"].as_array().map(Vec::len),
            Some(12),
            "{}",
            s.body
        );
    }
    node.assert_idle().await;
}
