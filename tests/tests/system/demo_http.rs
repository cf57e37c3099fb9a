//! End-to-end tests of `router-tools demo` over HTTP (the default): the real binary starts a
//! node and simulated engines in one process, sends the built-in workload through its own
//! OpenAI endpoint and prints a summary that accounts for every request exactly once, with
//! an idle ledger afterwards; without `--once` it keeps serving until SIGTERM; bad command
//! lines exit 2 with a message; `--disagg` runs a prefill and a decode pool; a serving demo
//! keeps serving a client that started beside it.

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::TcpStream;
use std::process::{Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::Value;
use switchyard_system_tests::support::router_tools_bin;

fn router_node(args: &[&str]) -> Output {
    Command::new(router_tools_bin())
        .args(args)
        .output()
        .expect("the router-node binary runs")
}

fn u(v: &Value) -> u64 {
    v.as_u64()
        .unwrap_or_else(|| panic!("an unsigned integer: {v}"))
}

#[test]
fn the_http_demo_accounts_for_every_request_and_ends_idle() {
    let out = router_node(&[
        "demo",
        "--once",
        "--listen",
        "127.0.0.1:0",
        "--requests",
        "60",
        "--workers",
        "2",
        "--json",
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    let report: Value = serde_json::from_str(&stdout).expect("the summary is JSON");
    assert_eq!(report["requests"], 60);
    assert_eq!(report["workers"], 2);
    assert_eq!(report["ledgers_idle"], true, "{report}");
    assert_eq!(report["every_request_accounted"], true, "{report}");
    let classes = report["classes"].as_array().expect("classes");
    let names: Vec<&str> = classes.iter().filter_map(|c| c["class"].as_str()).collect();
    assert_eq!(names, ["interactive", "batch"]);
    let mut requests = 0;
    for c in classes {
        let (admitted, rejected) = (u(&c["admitted"]), u(&c["rejected"]));
        assert_eq!(admitted + rejected, u(&c["requests"]), "{c}");
        let by_reason: u64 = c["rejected_by_reason"]
            .as_object()
            .expect("reasons")
            .values()
            .map(u)
            .sum();
        assert_eq!(by_reason, rejected, "{c}");
        assert!(u(&c["completed"]) <= admitted);
        if admitted > 0 {
            assert!(c["ttft_ms"]["p50"].as_f64().is_some(), "{c}");
            assert!(c["e2e_ms"]["p99"].as_f64().is_some(), "{c}");
        }
        requests += u(&c["requests"]);
    }
    assert_eq!(requests, 60);
    let totals = &report["totals"];
    assert_eq!(u(&totals["admitted"]) + u(&totals["rejected"]), 60);
    assert!(u(&totals["admitted"]) > 0, "{report}");
    // The router admitted what the clients saw admitted; shared system prompts were reused.
    assert_eq!(
        u(&report["router_stats"]["admitted"]),
        u(&totals["admitted"])
    );
    assert!(report["prefix_cache"]["hit_pct"].as_f64().expect("hit") > 0.0);
}

/// Without `--once` the summary table is followed by the URL, and the node keeps serving
/// until SIGTERM, then exits 0.
#[test]
fn without_once_the_node_keeps_serving_until_sigterm() {
    let (mut child, rx) = serving_demo("127.0.0.1:0", 12);
    let mut seen = Vec::new();
    let (url, admin) = loop {
        let Ok(line) = rx.recv_timeout(Duration::from_secs(60)) else {
            let _ = child.kill();
            panic!("no serving line; output so far:\n{}", seen.join("\n"));
        };
        if let Some(rest) = line.split("serving the OpenAI API at ").nth(1) {
            let url = rest
                .split_whitespace()
                .next()
                .unwrap_or_default()
                .to_owned();
            let admin = line
                .split("/debug/state at ")
                .nth(1)
                .and_then(|rest| rest.split_whitespace().next())
                .unwrap_or_default()
                .trim_end_matches('.')
                .to_owned();
            seen.push(line);
            break (url, admin);
        }
        seen.push(line);
    };
    assert!(seen.iter().any(|l| l == "ledgers idle: yes"), "{seen:?}");

    let addr = url.trim_start_matches("http://");
    let body = r#"{"model":"sim","prompt":"hello there","max_tokens":4,"stream":true}"#;
    let mut conn = TcpStream::connect(addr).expect("the node still listens");
    conn.set_read_timeout(Some(Duration::from_secs(20)))
        .expect("timeout");
    write!(
        conn,
        "POST /v1/completions HTTP/1.1\r\nHost: {addr}\r\ncontent-type: application/json\r\n\
         x-policy-class: batch\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
    .expect("request sent");
    let mut answer = String::new();
    let _ = conn.read_to_string(&mut answer);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.contains("data: [DONE]"), "{answer}");

    // The node's state is on its admin listener, not on the public one.
    let get_state = |addr: &str| {
        let mut conn = TcpStream::connect(addr).expect("the node listens");
        conn.set_read_timeout(Some(Duration::from_secs(20)))
            .expect("timeout");
        write!(
            conn,
            "GET /debug/state HTTP/1.1\r\nHost: {addr}\r\nconnection: close\r\n\r\n"
        )
        .expect("request sent");
        let mut answer = String::new();
        let _ = conn.read_to_string(&mut answer);
        answer
    };
    let state = get_state(admin.trim_start_matches("http://"));
    assert!(state.starts_with("HTTP/1.1 200"), "{admin}: {state}");
    assert!(state.contains("\"scheduler\""), "{state}");
    assert!(get_state(addr).starts_with("HTTP/1.1 404"));

    assert_eq!(sigterm_and_wait(&mut child).code(), Some(0));
}

#[test]
fn the_disaggregated_http_demo_accounts_for_every_request_and_ends_idle() {
    let out = router_node(&[
        "demo",
        "--disagg",
        "--once",
        "--listen",
        "127.0.0.1:0",
        "--requests",
        "40",
        "--workers",
        "1",
        "--json",
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    let report: Value = serde_json::from_str(&stdout).expect("the summary is JSON");
    // One prefill and one decode engine.
    assert_eq!(report["mode"], "disaggregated");
    assert_eq!(report["workers"], 2);
    assert_eq!(report["ledgers_idle"], true, "{report}");
    assert_eq!(report["every_request_accounted"], true, "{report}");
    let totals = &report["totals"];
    assert_eq!(u(&totals["admitted"]) + u(&totals["rejected"]), 40);
    assert!(u(&totals["admitted"]) > 0, "{report}");
}

#[test]
fn bad_demo_command_lines_exit_2_with_a_message() {
    for args in [
        &["demo", "--listen", "nowhere"][..],
        &["demo", "--listen", "127.0.0.1:99999"][..],
        &["demo", "--offline", "--listen", "127.0.0.1:0"][..],
        &["demo", "--requests", "0"][..],
        &["demo", "--once=yes"][..],
    ] {
        let out = router_node(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("error"), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
}

#[test]
fn a_listen_address_in_use_exits_1_with_a_message() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = taken.local_addr().expect("addr").to_string();
    let out = router_node(&["demo", "--once", "--listen", &addr]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("cannot bind"), "{err}");
}

/// One streamed completion sent to `addr` with plain HTTP/1.1; the whole answer.
fn stream_once(addr: &str, max_tokens: u32) -> std::io::Result<String> {
    let body = format!(
        r#"{{"model":"sim","prompt":"a client beside the demo","max_tokens":{max_tokens},"stream":true}}"#
    );
    let mut conn = TcpStream::connect(addr)?;
    conn.set_read_timeout(Some(Duration::from_secs(20)))?;
    write!(
        conn,
        "POST /v1/completions HTTP/1.1\r\nHost: {addr}\r\ncontent-type: application/json\r\n\
         x-policy-class: batch\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )?;
    let mut answer = String::new();
    conn.read_to_string(&mut answer)?;
    Ok(answer)
}

/// A client (a bench, say) sending requests while the demo runs its own workload keeps the
/// ledgers busy when the demo checks them: a serving demo says so and keeps serving (it used
/// to exit 1 under the client's feet).
#[test]
fn a_serving_demo_survives_a_client_that_started_beside_it() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let addr = format!("127.0.0.1:{port}");
    let (mut child, rx) = serving_demo(&addr, 40);
    // Four clients streaming back to back from the moment the port answers until the demo
    // has printed its report (and a little after).
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let clients: Vec<_> = (0..4)
        .map(|_| {
            let (addr, done) = (addr.clone(), done.clone());
            std::thread::spawn(move || {
                let mut ok = 0u32;
                while !done.load(std::sync::atomic::Ordering::Relaxed) {
                    match stream_once(&addr, 200) {
                        Ok(a) if a.starts_with("HTTP/1.1 200") && a.contains("[DONE]") => ok += 1,
                        // Not listening yet, or the demo's own admission said no: try again.
                        _ => std::thread::sleep(Duration::from_millis(20)),
                    }
                }
                ok
            })
        })
        .collect();
    let mut seen = Vec::new();
    loop {
        let Ok(line) = rx.recv_timeout(Duration::from_secs(60)) else {
            let _ = child.kill();
            panic!("no serving line; output so far:\n{}", seen.join("\n"));
        };
        let serving = line.contains("serving the OpenAI API at ");
        seen.push(line);
        if serving {
            break;
        }
    }
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    let served: u32 = clients.into_iter().map(|c| c.join().expect("client")).sum();
    assert!(served > 0, "the clients were never served: {seen:?}");
    assert_eq!(
        child.try_wait().expect("wait"),
        None,
        "the demo exited: {seen:?}"
    );
    let answer = stream_once(&addr, 4).expect("the node still answers");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.contains("data: [DONE]"), "{answer}");
    assert_eq!(sigterm_and_wait(&mut child).code(), Some(0));
}

/// SIGTERM to a running demo, then its exit status (within 20 s, or the test fails).
fn sigterm_and_wait(child: &mut std::process::Child) -> std::process::ExitStatus {
    let killed = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(killed.success());
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            return status;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("the demo did not stop after SIGTERM");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `router-tools demo` serving on `listen` after `requests` built-in requests on one worker,
/// and its stdout line by line.
fn serving_demo(listen: &str, requests: u32) -> (std::process::Child, mpsc::Receiver<String>) {
    let requests = requests.to_string();
    let mut child = Command::new(router_tools_bin())
        .args([
            "demo",
            "--listen",
            listen,
            "--requests",
            &requests,
            "--workers",
            "1",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("the router-node binary runs");
    let stdout = child.stdout.take().expect("stdout");
    let (tx, rx) = mpsc::channel::<String>();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    (child, rx)
}
