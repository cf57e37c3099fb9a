//! `router-tools trace synth` and `router-tools bench` as processes against a `serve` node (a
//! real nats-server, one simulated worker, a two-class profile): the synthesised trace is
//! replayed as text after a warm-up, every request is ok with a prefix hit, the SLO columns
//! show, the node's queue depth is sampled for every class (batch waits), and every SVG plot
//! is beside the JSON, naming its series. In the `fleet` test binary, not beside
//! `bench_cli.rs`: the fleet's load stays away from that file's timing assertions.

use std::process::Output;
use std::time::Duration;

use router_tools::bench::BenchReport;
use switchyard_system_tests::support::{self, ClusterBuilder, Role, TempDir};

fn router_tools(args: &[&str]) -> Output {
    support::run_tools(args)
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
    let _fleet = crate::one_fleet_at_a_time().await;
    let dir = TempDir::new("bench");
    let trace = dir.path().join("synth.jsonl");
    let synth = router_tools(&[
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
    // The node serves /metrics on its admin listener, not beside the OpenAI API.
    let metrics_url = format!("{}/metrics", cluster.replicas[0].admin_url());
    let json = dir.path().join("run.json");
    let args: Vec<String> = [
        "bench",
        "--trace",
        trace.to_str().unwrap(),
        "--url",
        &url,
        "--metrics-url",
        &metrics_url,
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
        "--warmup",
        "2",
    ]
    .map(str::to_owned)
    .to_vec();
    let out = tokio::task::spawn_blocking(move || {
        router_tools(&args.iter().map(String::as_str).collect::<Vec<_>>())
    })
    .await
    .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    let table = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{err}\n{table}");
    assert!(table.contains("slo ok %"), "{table}");
    assert!(err.contains("bench: plots in"), "{err}");
    assert!(err.contains("bench: warm-up: 2 of 2 requests ok"), "{err}");

    let report: BenchReport =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let all = &report.overall;
    assert_eq!(all.sent as usize, lines, "the warm-up is left out");
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
