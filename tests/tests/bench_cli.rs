//! `router-node bench` as a process: usage errors and malformed traces exit 2 with a message
//! naming what is wrong, an unreachable endpoint exits 1 after trying every request (of a
//! trace, or of synthetic load, each listed with `--per-request`), the trace that ships
//! with the project (`traces/conversation_trace.jsonl.gz`) is read as it is, and a trace from
//! `router-node trace synth` replayed as text through a `serve` node (a real nats-server and
//! simulated worker) draws its plots, the node's queue depth included.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Output;
use std::time::Duration;

use router_node::bench::BenchReport;
use switchyard_system_tests::support::{self, ClusterBuilder, Role, TempDir};

fn router_node(args: &[&str]) -> Output {
    support::run(args)
}

#[test]
fn usage_and_trace_errors_exit_2_with_a_message() {
    let dir = TempDir::new("bench");
    let bad = dir.write(
        "bad.jsonl",
        "{\"timestamp\": 0, \"input_length\": 5, \"output_length\": 1, \"hash_ids\": [1]}\n{oops\n",
    );
    let bad = bad.to_str().unwrap();
    // Fine at any sane speedup; its second arrival overflows at an absurd one.
    let late = dir.write(
        "late.jsonl",
        "{\"timestamp\": 0, \"input_length\": 5, \"output_length\": 1, \"hash_ids\": [1]}\n\
         {\"timestamp\": 10, \"input_length\": 5, \"output_length\": 1, \"hash_ids\": [1]}\n",
    );
    let late = late.to_str().unwrap();
    let url = "http://127.0.0.1:1";
    for (args, needle) in [
        (vec!["bench", "--url", url], "--trace"),
        (vec!["bench", "--trace", bad, "--url", url], "trace line 2"),
        (
            vec!["bench", "--trace", "/nonexistent/t.jsonl", "--url", url],
            "cannot read",
        ),
        (
            vec!["bench", "--trace", bad, "--url", "localhost:8080"],
            "http://",
        ),
        (
            vec!["bench", "--trace", bad, "--url", url, "--speedup", "0"],
            "speedup",
        ),
        (vec!["bench", "--rate", "0", "--url", url], "--rate"),
        (
            vec![
                "bench",
                "--rate",
                "5",
                "--url",
                url,
                "--api",
                "chat",
                "--prompt-format",
                "tokens",
            ],
            "chat sends text",
        ),
        (
            vec!["bench", "--rate", "5", "--url", url, "--api", "grpc"],
            "--api",
        ),
        (
            vec![
                "bench",
                "--rate",
                "5",
                "--url",
                url,
                "--metrics-url",
                "http://127.0.0.1:1/metrics",
            ],
            "--plots",
        ),
        (
            vec![
                "bench",
                "--rate",
                "5",
                "--url",
                url,
                "--plots",
                "/tmp",
                "--no-plots",
            ],
            "cannot be used with",
        ),
        (
            vec![
                "bench",
                "--rate",
                "5",
                "--url",
                url,
                "--slo",
                "interactive=0",
            ],
            "--slo",
        ),
        (vec!["trace", "synth", "--rate", "0"], "--rate"),
        (
            vec!["trace", "synth", "--turns", "normal:3:1"],
            "uniform:MIN:MAX",
        ),
        (
            vec!["trace", "synth", "--system-prompts", "0"],
            "--system-prompts",
        ),
        (
            vec!["bench", "--rate", "5", "--duration", "0", "--url", url],
            "--duration",
        ),
        (
            vec!["bench", "--rate", "5", "--trace", bad, "--url", url],
            "cannot be used with",
        ),
        (
            vec!["bench", "--rate", "5", "--per-request", "--url", url],
            "--json",
        ),
        (
            vec!["bench", "--trace", bad, "--url", url, "--classes", "a=1,b"],
            "name=weight",
        ),
        (
            vec![
                "bench",
                "--trace",
                late,
                "--url",
                url,
                "--speedup",
                "1e-300",
            ],
            "trace line 2: timestamp 10 ms at --speedup 1e-300 is out of range",
        ),
        (
            vec![
                "bench",
                "--trace",
                bad,
                "--url",
                url,
                "--class",
                "a",
                "--classes",
                "a=1",
            ],
            "cannot be used with",
        ),
    ] {
        let out = router_node(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
    // A trace that cannot be written is not a usage error.
    let out = router_node(&["trace", "synth", "--output", "/nonexistent/dir/t.jsonl"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("cannot write the trace to /nonexistent/dir/t.jsonl"),
        "{err}"
    );
}

#[test]
fn an_unreachable_endpoint_exits_1_after_trying_every_request() {
    let dir = TempDir::new("bench");
    let trace = dir.write(
        "trace.jsonl",
        "{\"timestamp\": 0, \"input_length\": 5, \"output_length\": 1, \"hash_ids\": [1]}\n\
         {\"timestamp\": 10, \"input_length\": 5, \"output_length\": 1, \"hash_ids\": [1]}\n",
    );
    let json = trace.with_file_name("result.json");
    let out = router_node(&[
        "bench",
        "--trace",
        trace.to_str().unwrap(),
        "--url",
        "http://127.0.0.1:1",
        "--json",
        json.to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("every request failed"), "{err}");
    let report: BenchReport =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(report.overall.sent, 2);
    assert_eq!(report.overall.transport_failures, 2);
}

#[test]
fn the_shipped_gzipped_trace_is_read_and_replayed() {
    let trace = support::workspace_root().join("traces/conversation_trace.jsonl.gz");
    let dir = TempDir::new("bench");
    let json = dir.path().join("result.json");
    let out = router_node(&[
        "bench",
        "--trace",
        trace.to_str().unwrap(),
        "--max-requests",
        "3",
        "--url",
        "http://127.0.0.1:1",
        "--json",
        json.to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    // Read and parsed (a trace error would exit 2); every request then fails in transport.
    assert_eq!(out.status.code(), Some(1), "{err}");
    let report: BenchReport =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(report.overall.sent, 3);
}

#[test]
fn synthetic_load_against_an_unreachable_endpoint_lists_every_failed_request() {
    let dir = TempDir::new("bench");
    let json = dir.path().join("result.json");
    let out = router_node(&[
        "bench",
        "--rate",
        "10",
        "--duration",
        "0.5",
        "--prompt-tokens",
        "16",
        "--url",
        "http://127.0.0.1:1",
        "--json",
        json.to_str().unwrap(),
        "--per-request",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("bench: started"), "{err}");
    let report: BenchReport =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(report.overall.sent, 5, "10 per second for half a second");
    assert_eq!(report.requests.len(), 5);
    for (i, r) in report.requests.iter().enumerate() {
        assert_eq!(r.index, i as u64);
        assert_eq!(r.status, None, "no response: {r:?}");
        assert_eq!(r.reason.as_deref(), Some("transport_error"), "{r:?}");
        assert!((r.sent_ms - 100.0 * i as f64).abs() < 60.0, "{r:?}");
    }
}

/// Interactive is protected; batch waits as soon as a worker has any prefill booked.
const PROFILE: &str = r#"
default_class = "interactive"

[[classes]]
name = "interactive"
slo_ms = 5000
quantum = 512

[[classes]]
name = "batch"
slo_ms = 60000
quantum = 128
prefill_busy_threshold = 1
"#;

/// The `<text>` contents (trimmed) and the point counts of the lines of the SVG at `path`.
fn read_svg(path: &std::path::Path) -> (Vec<String>, Vec<usize>) {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    let doc = roxmltree::Document::parse(&text).unwrap_or_else(|e| panic!("{path:?}: {e}"));
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_synthesised_trace_replayed_through_a_serve_node_plots_its_queue_depth() {
    let dir = TempDir::new("bench");
    let trace = dir.path().join("synth.jsonl");
    let synth = router_node(&[
        "trace",
        "synth",
        "--output",
        trace.to_str().unwrap(),
        "--system-prompts",
        "2",
        "--system-prompt-blocks",
        "2",
        "--sessions-per-prompt",
        "6",
        "--turns",
        "uniform:2:4",
        "--user-tokens",
        "uniform:32:128",
        "--output-tokens",
        "uniform:8:24",
        "--block-tokens",
        "64",
        "--rate",
        "25",
        "--concurrent-sessions",
        "6",
        "--seed",
        "3",
    ]);
    let err = String::from_utf8_lossy(&synth.stderr);
    assert_eq!(synth.status.code(), Some(0), "{err}");
    assert!(err.contains("in 12 sessions"), "{err}");
    let lines = std::fs::read_to_string(&trace).unwrap().lines().count();
    assert!((24..=48).contains(&lines), "{lines} requests");

    let cluster = ClusterBuilder::new()
        .workers(Role::Agg, 1, 4096)
        .speedup(2.0)
        .policy(PROFILE)
        .without_haproxy()
        .start()
        .await;
    cluster.wait_ready(Duration::from_secs(30)).await;
    let url = cluster.url();
    let json = dir.path().join("run.json");
    let args: Vec<String> = [
        "bench",
        "--trace",
        trace.to_str().unwrap(),
        "--url",
        &url,
        "--block-tokens",
        "64",
        "--prompt-format",
        "text",
        "--classes",
        "interactive=1,batch=1",
        "--slo",
        "interactive=5000",
        "--json",
        json.to_str().unwrap(),
        "--timeout-secs",
        "60",
    ]
    .map(str::to_owned)
    .to_vec();
    let out = tokio::task::spawn_blocking(move || {
        router_node(&args.iter().map(String::as_str).collect::<Vec<_>>())
    })
    .await
    .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    let table = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{err}\n{table}");
    assert!(table.contains("slo ok %"), "{table}");
    assert!(err.contains("bench: plots in"), "{err}");

    let report: BenchReport =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let all = &report.overall;
    assert_eq!(all.sent as usize, lines);
    assert_eq!(all.ok, all.sent, "{table}");
    assert!(all.prefix_hit_pct.is_some_and(|h| h > 0.0), "{table}");
    // The node's /metrics was read during the run: every class, and batch waited.
    assert!(report.queue_depth.len() >= 2, "{:?}", report.queue_depth);
    assert!(
        report
            .queue_depth
            .iter()
            .all(|s| s.depth.contains_key("interactive") && s.depth.contains_key("batch")),
        "{:?}",
        report.queue_depth
    );
    let batch_waited = report.queue_depth.iter().any(|s| s.depth["batch"] > 0.0);
    // The plots sit beside the JSON, named after it, each with its lines.
    for (file, names) in [
        ("run-ttft-cdf.svg", &["interactive", "batch", "all"][..]),
        ("run-e2e-cdf.svg", &["interactive", "batch", "all"][..]),
        ("run-throughput.svg", &["interactive", "batch", "all"][..]),
        ("run-hit-rate.svg", &["interactive", "batch", "all"][..]),
        ("run-requests.svg", &["ok"][..]),
        ("run-queue-depth.svg", &["batch", "interactive"][..]),
    ] {
        let path = dir.path().join(file);
        assert!(report.plots.contains(&path), "{file}: {:?}", report.plots);
        let (texts, lines) = read_svg(&path);
        for name in names {
            assert!(
                texts.iter().any(|t| t == name),
                "{file}: {name} in {texts:?}"
            );
        }
        assert!(
            lines.iter().filter(|&&n| n >= 2).count() >= names.len(),
            "{file}: {lines:?}"
        );
    }
    assert!(batch_waited, "batch never queued: {:?}", report.queue_depth);
}
