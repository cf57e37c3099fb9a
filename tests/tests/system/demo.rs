//! End-to-end tests of the `router-node` binary: the offline demo (`demo --offline`, simulated
//! time) finishes in both modes with every request admitted or rejected exactly once and
//! idle ledgers, a seed gives identical JSON, and bad command lines exit non-zero with a
//! message instead of panicking. The HTTP demo is tested in `demo_http.rs`.

use std::process::{Command, Output};

use serde_json::Value;
use switchyard_system_tests::support::router_tools_bin;

fn router_node(args: &[&str]) -> Output {
    Command::new(router_tools_bin())
        .args(args)
        .output()
        .expect("the router-node binary runs")
}

fn demo_json(extra: &[&str]) -> (Value, String) {
    let mut args = vec!["demo", "--offline", "--json"];
    args.extend_from_slice(extra);
    let out = router_node(&args);
    let stdout = String::from_utf8(out.stdout).expect("utf-8 output");
    assert!(
        out.status.success(),
        "demo {extra:?} failed: {}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    (serde_json::from_str(&stdout).expect("JSON report"), stdout)
}

fn u(v: &Value) -> u64 {
    v.as_u64().expect("an unsigned integer")
}

/// Every request is admitted or rejected exactly once, per class and in total, every
/// admitted request completed, rejections add up by reason, and the ledgers end idle.
fn assert_accounted(report: &Value, requests: u64) {
    let totals = &report["totals"];
    assert_eq!(u(&totals["requests"]), requests);
    assert_eq!(u(&totals["admitted"]) + u(&totals["rejected"]), requests);
    assert_eq!(u(&totals["completed"]), u(&totals["admitted"]));
    let classes = report["classes"].as_array().expect("classes");
    assert_eq!(classes.len(), 2);
    let mut sum = 0;
    for c in classes {
        let (admitted, rejected) = (u(&c["admitted"]), u(&c["rejected"]));
        assert_eq!(admitted + rejected, u(&c["requests"]), "{c}");
        assert_eq!(
            u(&c["admitted_direct"]) + u(&c["admitted_after_queue"]),
            admitted
        );
        let by_reason: u64 = c["rejected_by_reason"]
            .as_object()
            .expect("reasons")
            .values()
            .map(u)
            .sum();
        assert_eq!(by_reason, rejected);
        sum += u(&c["requests"]);
    }
    assert_eq!(sum, requests);
    assert_eq!(report["anomalies"], 0);
    assert_eq!(report["every_request_accounted"], true);
    assert_eq!(report["ledgers_idle"], true);
    // The gate never books decode KV past the highest class line (90 %).
    let peak = report["peak_decode_kv_pct"].as_f64().expect("peak");
    assert!(peak > 0.0 && peak <= 90.0, "peak {peak}");
}

#[test]
fn aggregated_demo_accounts_for_every_request_and_ends_idle() {
    let (report, _) = demo_json(&["--requests", "2000"]);
    assert_eq!(report["mode"], "aggregated");
    assert_accounted(&report, 2000);
    // The default workload overloads the fleet: requests queue and some are shed at their
    // deadline.
    let classes = report["classes"].as_array().expect("classes");
    assert!(classes.iter().any(|c| u(&c["admitted_after_queue"]) > 0));
    assert!(
        classes
            .iter()
            .any(|c| c["rejected_by_reason"].get("deadline_passed").is_some())
    );
}

#[test]
fn disaggregated_demo_accounts_for_every_request_and_ends_idle() {
    let (report, _) = demo_json(&["--disagg", "--workers", "3", "--requests", "800"]);
    assert_eq!(report["mode"], "disaggregated");
    assert_accounted(&report, 800);
    let decode = &report["decode_stats"];
    assert_eq!(
        u(&decode["admitted_upstream"]),
        u(&report["totals"]["admitted"])
    );
    assert!(u(&report["gate_stats"]["room_queries"]) > 0);
}

#[test]
fn small_and_odd_fleets_finish_too() {
    for args in [
        &["--workers", "1", "--requests", "1"][..],
        &["--workers", "1", "--requests", "300", "--disagg"][..],
        &["--workers", "16", "--requests", "500", "--seed", "0"][..],
    ] {
        let (report, _) = demo_json(args);
        let n = u(&report["requests"]);
        assert_accounted_loose(&report, n);
    }
}

/// Like `assert_accounted` without the peak bound (one request may commit nothing on a
/// busy line, and tiny runs need not overload anything).
fn assert_accounted_loose(report: &Value, requests: u64) {
    let totals = &report["totals"];
    assert_eq!(u(&totals["admitted"]) + u(&totals["rejected"]), requests);
    assert_eq!(u(&totals["completed"]), u(&totals["admitted"]));
    assert_eq!(report["ledgers_idle"], true);
    assert_eq!(report["every_request_accounted"], true);
}

#[test]
fn a_seed_gives_identical_json_and_another_seed_differs() {
    let args = ["--requests", "600", "--seed", "42"];
    let (_, a) = demo_json(&args);
    let (_, b) = demo_json(&args);
    assert_eq!(a, b);
    let (_, c) = demo_json(&["--requests", "600", "--seed", "43"]);
    assert_ne!(a, c);
    let disagg = ["--disagg", "--requests", "600", "--seed", "42"];
    assert_eq!(demo_json(&disagg).1, demo_json(&disagg).1);
}

#[test]
fn the_table_ends_with_the_idle_line() {
    let out = router_node(&["demo", "--offline", "--requests", "300"]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).expect("utf-8");
    assert!(text.contains("interactive"), "{text}");
    assert!(text.contains("wait p99"), "{text}");
    assert_eq!(text.lines().last(), Some("ledgers idle: yes"));
}

#[test]
fn bad_command_lines_exit_non_zero_with_a_message() {
    for args in [
        &["frobnicate"][..],
        &[][..],
        &["demo", "--bogus"][..],
        &["demo", "--workers", "0"][..],
        &["demo", "--workers", "65"][..],
        &["demo", "--requests", "100001"][..],
        &["demo", "--workers", "many"][..],
        &["demo", "--requests", "-5"][..],
        &["demo", "--seed", "99999999999999999999999"][..],
    ] {
        let out = router_node(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("error") || err.contains("Usage"),
            "{args:?}: {err}"
        );
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
}

#[test]
fn help_and_version_succeed() {
    for args in [&["--help"][..], &["demo", "--help"][..], &["--version"][..]] {
        let out = router_node(args);
        assert!(out.status.success(), "{args:?}");
        assert!(!out.stdout.is_empty());
    }
}
