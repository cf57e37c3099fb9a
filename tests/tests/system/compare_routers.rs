//! `compare-routers` as a user runs it. The fast tests (usage errors, the shared tokenizer)
//! run with the workspace's tests; the comparisons themselves start fleets of processes and
//! are ignored by default: `scripts/test-compare.sh` runs them after the fast suites (the
//! SGLang gateway one only when the peers are installed, `scripts/install-peers.sh`).
//!
//! The smoke comparison replays a synthesised trace with heavy prefix sharing through HAProxy
//! round robin and one Switchyard replica over the same fresh fleet: every request of each is
//! ok, Switchyard's prefix hit rate is at least round robin's, a peer that is not installed is
//! a row saying so, and the results (table, summary, combined plot, each bench JSON) are in
//! the out dir.

use router_tokenizer::{Prompter, Tokenizer};
use router_tools::bench::prompt::WORDS;
use serde_json::Value;
use std::path::Path;
use std::process::{Command, Output};
use switchyard_system_tests::support::{self, TempDir, workspace_root};

fn compare(args: &[&str], env: &[(&str, &Path)]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_compare-routers"));
    command.args(args);
    for (name, value) in env {
        command.env(name, value);
    }
    command.output().expect("compare-routers runs")
}

/// The smoke run: the first 60 lines of `trace` (64 positions per hash id) at speedup 2, 16
/// output tokens each, through `routers`.
fn smoke(trace: &str, routers: &str, out: &Path, env: &[(&str, &Path)]) -> Output {
    smoke_with(trace, routers, out, env, &[])
}

/// [`smoke`] with more flags.
fn smoke_with(
    trace: &str,
    routers: &str,
    out: &Path,
    env: &[(&str, &Path)],
    more: &[&str],
) -> Output {
    let out = out.to_str().expect("a UTF-8 temporary path");
    let mut args = vec![
        "--trace",
        trace,
        "--block-tokens",
        "64",
        "--speedup",
        "2",
        "--max-requests",
        "60",
        "--max-output-tokens",
        "16",
        "--routers",
        routers,
        "--out",
        out,
    ];
    args.extend_from_slice(more);
    compare(&args, env)
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn bad_flags_exit_2_naming_the_flag() {
    let dir = TempDir::new("compare-usage");
    let out = dir.path().join("out");
    let out = out.to_str().unwrap();
    let not_toml = dir.write("not.toml", "[selection\noverlap_credit = 1\n");
    let not_toml = not_toml.to_str().unwrap();
    for (args, flag) in [
        (vec!["--routers", "haproxy-rr,nginx"], "--routers"),
        (vec!["--routers", ","], "--routers"),
        (vec!["--speedup", "0"], "--speedup"),
        (vec!["--trace", "/no/such/trace.jsonl"], "--trace"),
        (vec!["--workers", "0"], "--workers"),
        (vec!["--model-dir", "/no/such/dir"], "--model-dir"),
        (vec!["--repeat", "0"], "--repeat"),
        (
            vec!["--switchyard-config", "/no/such.toml"],
            "--switchyard-config",
        ),
        (vec!["--switchyard-config", not_toml], "--switchyard-config"),
    ] {
        let mut all = args.clone();
        all.extend(["--out", out]);
        let run = compare(&all, &[]);
        let stderr = text(&run.stderr);
        assert_eq!(run.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(flag), "{args:?} names {flag}: {stderr}");
    }
    let unknown = compare(&["--routers", "nginx", "--out", out], &[]);
    assert!(
        text(&unknown.stderr).contains("haproxy-rr, sglang-gateway, vllm-router, dynamo"),
        "the known routers are listed: {}",
        text(&unknown.stderr)
    );
    assert!(!Path::new(out).exists(), "nothing written on a usage error");
}

#[test]
fn the_shared_tokenizer_has_one_token_per_word_of_bench_text_prompts() {
    let dir = workspace_root().join("tests/data/word-tokenizer");
    let listed = std::fs::read_to_string(dir.join("words.txt")).unwrap();
    let listed: Vec<&str> = listed.lines().collect();
    assert_eq!(
        listed, WORDS,
        "words.txt is bench's list (remake the model dir with scripts/make-word-tokenizer.py)"
    );
    let tokenizer = Tokenizer::huggingface(&dir.join("tokenizer.json")).unwrap();
    let prompt = WORDS.join(" ");
    let ids = tokenizer.encode(&prompt);
    assert_eq!(ids.len(), WORDS.len(), "one token per word");
    let mut distinct = ids.clone();
    distinct.sort_unstable();
    distinct.dedup();
    assert_eq!(distinct.len(), WORDS.len(), "a token of its own per word");
    assert!(!ids.contains(&0), "no word is unknown ([UNK] is id 0)");
    // Dynamo reads the same directory as a model directory; so can a node.
    let model = Prompter::from_model_dir(&dir).unwrap();
    assert_eq!(model.encode(&prompt), ids);
}

/// A trace where most prompt tokens are shared: 2 system prompts of 4 blocks, sessions of 4
/// turns under each, 64 tokens a block.
fn shared_prefix_trace(dir: &Path) -> String {
    let trace = dir.join("shared.jsonl");
    let trace = trace.to_str().unwrap().to_owned();
    let synth = support::run_tools(&[
        "trace",
        "synth",
        "-o",
        &trace,
        "--system-prompts",
        "2",
        "--system-prompt-blocks",
        "4",
        "--sessions-per-prompt",
        "8",
        "--turns",
        "4",
        "--user-tokens",
        "uniform:16:64",
        "--output-tokens",
        "16",
        "--block-tokens",
        "64",
        "--rate",
        "20",
        "--concurrent-sessions",
        "8",
    ]);
    assert!(synth.status.success(), "{}", text(&synth.stderr));
    trace
}

fn rows(out: &Path) -> Vec<Value> {
    let summary = std::fs::read_to_string(out.join("summary.json")).unwrap();
    let summary: Value = serde_json::from_str(&summary).unwrap();
    summary["rows"].as_array().unwrap().clone()
}

fn row<'a>(rows: &'a [Value], router: &str) -> &'a Value {
    rows.iter()
        .find(|r| r["router"] == router)
        .unwrap_or_else(|| panic!("no row for {router} in {rows:?}"))
}

/// Every request of `router` was sent and ok, and it reported a hit rate (returned).
fn ran_clean(rows: &[Value], router: &str, requests: u64) -> f64 {
    let r = row(rows, router);
    assert_eq!(r["outcome"], "ran", "{r}");
    assert_eq!(r["sent"], requests, "{r}");
    assert_eq!(r["ok"], requests, "{r}");
    assert_eq!(r["errors"], 0, "{r}");
    assert_eq!(r["shed"], 0, "{r}");
    assert!(r["ttft_p50_ms"].as_f64().is_some_and(|t| t > 0.0), "{r}");
    r["prefix_hit_pct"].as_f64().expect("a hit rate")
}

#[test]
#[ignore = "starts two fleets; scripts/test-compare.sh runs it"]
fn switchyard_hits_at_least_round_robin_and_a_missing_peer_is_a_row() {
    let dir = TempDir::new("compare");
    let trace = shared_prefix_trace(dir.path());
    let out = dir.path().join("out");
    let no_peers = dir.path().join("no-peers");
    let run = smoke(
        &trace,
        "haproxy-rr,sglang-gateway,switchyard-1",
        &out,
        &[("SWITCHYARD_PEERS_DIR", &no_peers)],
    );
    let (stdout, stderr) = (text(&run.stdout), text(&run.stderr));
    assert_eq!(run.status.code(), Some(0), "{stdout}\n{stderr}");
    let rows = rows(&out);
    let names: Vec<&str> = rows.iter().filter_map(|r| r["router"].as_str()).collect();
    assert_eq!(names, ["haproxy-rr", "sglang-gateway", "switchyard-1"]);

    let round_robin = ran_clean(&rows, "haproxy-rr", 60);
    let switchyard = ran_clean(&rows, "switchyard-1", 60);
    assert!(
        switchyard >= round_robin,
        "switchyard {switchyard} % below round robin {round_robin} %\n{stdout}"
    );
    assert_eq!(row(&rows, "sglang-gateway")["outcome"], "not installed");
    assert!(
        stdout.contains("| sglang-gateway | not installed (scripts/install-peers.sh) |"),
        "{stdout}"
    );
    let table = std::fs::read_to_string(out.join("table.md")).unwrap();
    assert_eq!(table, stdout, "the table printed is the one written");
    for router in ["haproxy-rr", "switchyard-1"] {
        assert!(
            stdout.contains(&format!("| {router} | 60 | 60 | ")),
            "{stdout}"
        );
        assert!(out.join(format!("{router}.json")).is_file());
    }
    let plot = std::fs::read_to_string(out.join("ttft-cdf.svg")).unwrap();
    assert!(plot.contains("haproxy-rr") && plot.contains("switchyard-1"));
    assert!(
        !plot.contains("sglang-gateway"),
        "no line for a router that did not run"
    );
}

#[test]
#[ignore = "starts four fleets; scripts/test-compare.sh runs it"]
fn two_rounds_keep_each_round_and_rank_the_routers_by_medians() {
    let dir = TempDir::new("compare-rounds");
    let trace = shared_prefix_trace(dir.path());
    let out = dir.path().join("out");
    let config = dir.write("selection.toml", "[selection]\noverlap_credit = 2.0\n");
    let config = config.to_str().unwrap();
    let run = smoke_with(
        &trace,
        "haproxy-rr,switchyard-1",
        &out,
        &[],
        &["--repeat", "2", "--switchyard-config", config],
    );
    let (stdout, stderr) = (text(&run.stdout), text(&run.stderr));
    assert_eq!(run.status.code(), Some(0), "{stdout}\n{stderr}");
    // Each round's own results, the order rotated in the second.
    for (round, first) in [(1, "haproxy-rr"), (2, "switchyard-1")] {
        let dir = out.join(format!("round-{round}"));
        let rows = rows(&dir);
        assert_eq!(rows[0]["router"], first, "round {round}: {rows:?}");
        ran_clean(&rows, "haproxy-rr", 60);
        ran_clean(&rows, "switchyard-1", 60);
        assert!(dir.join("switchyard-1.json").is_file());
    }
    // One table of medians over both rounds.
    assert!(stdout.starts_with("Medians over 2 rounds"), "{stdout}");
    for router in ["haproxy-rr", "switchyard-1"] {
        assert!(stdout.contains(&format!("| {router} | 2 | ")), "{stdout}");
    }
    let table = std::fs::read_to_string(out.join("table.md")).unwrap();
    assert_eq!(table, stdout, "the table printed is the one written");
    let summary: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    assert_eq!(summary["rounds"], 2, "{summary}");
    assert_eq!(summary["per_round"].as_array().map(Vec::len), Some(2));
    for r in summary["routers"].as_array().unwrap() {
        assert_eq!(r["runs"], 2, "{r}");
        let (lo, hi) = (&r["ttft_p99_ms_range"][0], &r["ttft_p99_ms_range"][1]);
        assert!(lo.as_f64() <= hi.as_f64(), "{r}");
        let rounds_won = r["lowest_ttft_p50_rounds"].as_u64().unwrap();
        assert!(rounds_won <= 2, "{r}");
    }
    assert!(out.join("ttft-cdf.svg").is_file());
}

#[test]
#[ignore = "needs SGLang's gateway (scripts/install-peers.sh); scripts/test-compare.sh runs it"]
fn the_sglang_gateway_runs_on_the_same_fleet() {
    let dir = TempDir::new("compare-sglang");
    let trace = shared_prefix_trace(dir.path());
    let out = dir.path().join("out");
    let run = smoke(&trace, "sglang-gateway", &out, &[]);
    let (stdout, stderr) = (text(&run.stdout), text(&run.stderr));
    assert_eq!(run.status.code(), Some(0), "{stdout}\n{stderr}");
    let hit = ran_clean(&rows(&out), "sglang-gateway", 60);
    assert!(
        hit > 0.0,
        "the gateway's engines reported cached tokens: {stdout}"
    );
}
