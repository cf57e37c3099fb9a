//! `router-tools bench` as a process: usage errors and malformed traces exit 2 with a message
//! naming what is wrong, an unreachable endpoint exits 1 after trying every request (of a
//! trace, or of synthetic load, each listed with `--per-request`), the trace that ships
//! with the project (`traces/conversation_trace.jsonl.gz`) is read as it is, and `trace
//! synth`'s usage errors name their flag. A synthesised trace replayed through a `serve` node
//! is `../fleet/bench_serve.rs` (a fleet: kept out of this file's timing-sensitive tests).

use std::process::Output;

use router_tools::bench::BenchReport;
use switchyard_system_tests::support::{self, TempDir};

fn router_tools(args: &[&str]) -> Output {
    support::run_tools(args)
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
        let out = router_tools(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
    // A trace that cannot be written is not a usage error.
    let out = router_tools(&["trace", "synth", "--output", "/nonexistent/dir/t.jsonl"]);
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
    let out = router_tools(&[
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
    let out = router_tools(&[
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
    let out = router_tools(&[
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
