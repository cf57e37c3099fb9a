//! `router-tools worker` as a process: usage errors exit 2 with a message, an unreachable NATS
//! exits 1, a standalone worker serves until SIGTERM and then exits 0, and a worker whose
//! nats-server went away still stops at SIGTERM.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;
use switchyard_system_tests::support::router_tools_bin;

fn run(args: &[&str]) -> (i32, String) {
    let out = Command::new(router_tools_bin())
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn usage_errors_exit_2_with_a_message() {
    let (code, err) = run(&["worker"]);
    assert_eq!(code, 2);
    assert!(err.contains("--sim"), "{err}");
    let (code, err) = run(&["worker", "--sim"]);
    assert_eq!(code, 2);
    assert!(
        err.contains("--standalone") && err.contains("--nats"),
        "{err}"
    );
    let (code, err) = run(&["worker", "--sim", "--standalone", "--speedup=0"]);
    assert_eq!(code, 2);
    assert!(err.contains("speedup"), "{err}");
    let (code, _) = run(&["worker", "--sim", "--standalone", "--role", "both"]);
    assert_eq!(code, 2);
    let (code, _) = run(&["worker", "--sim", "--standalone", "--kv-blocks", "0"]);
    assert_eq!(code, 2);
}

#[test]
fn startup_failures_exit_1() {
    let (code, err) = run(&["worker", "--sim", "--nats", "nats://127.0.0.1:1"]);
    assert_eq!(code, 1);
    assert!(err.contains("nats://127.0.0.1:1"), "{err}");
    let (code, err) = run(&[
        "worker",
        "--sim",
        "--standalone",
        "--listen",
        "127.0.0.1:0",
        "--cluster",
        "two words",
    ]);
    assert_eq!(code, 1);
    assert!(err.contains("subject"), "{err}");
}

/// Starts `router-tools worker --sim` with `args` and returns it with the URL it printed.
async fn start_worker(args: &[&str]) -> (std::process::Child, String) {
    let mut child = Command::new(router_tools_bin())
        .args(["worker", "--sim", "--listen", "127.0.0.1:0"])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let line = tokio::task::spawn_blocking(move || {
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).unwrap();
        line
    })
    .await
    .unwrap();
    let url = line
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .expect("the worker prints its URL")
        .to_owned();
    (child, url)
}

/// Sends SIGTERM and waits (at most 10 s) for the exit status; a worker still running then
/// is killed and the test fails.
async fn terminate(mut child: std::process::Child) -> std::process::ExitStatus {
    let killed = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    for _ in 0..200 {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let _ = child.kill();
    let _ = child.wait();
    panic!("the worker did not stop within 10 s of SIGTERM");
}

#[tokio::test]
async fn a_standalone_worker_serves_until_sigterm() {
    let (child, url) = start_worker(&["--standalone", "--speedup", "50"]).await;
    let body: serde_json::Value = reqwest::Client::new()
        .post(format!("{url}/v1/completions"))
        .json(&serde_json::json!({"model": "sim", "prompt": "hi", "max_tokens": 2}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(body["choices"][0]["text"], "tok tok ");
    assert_eq!(terminate(child).await.code(), Some(0));
}

#[tokio::test]
async fn a_worker_whose_nats_server_is_gone_still_stops_at_sigterm() {
    let nats = router_actors::testkit::NatsServer::start()
        .await
        .expect("nats-server starts");
    let (child, _url) = start_worker(&["--nats", nats.url(), "--speedup", "50"]).await;
    drop(nats); // kills the server: the worker's bus is down from here on
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(terminate(child).await.code(), Some(0));
}

#[test]
fn a_tokenizer_config_that_cannot_be_used_exits_2_naming_the_key() {
    let dir = std::env::temp_dir().join(format!("sy-worker-tok-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let node = dir.join("node.toml");
    std::fs::write(
        &node,
        "[tokenizer]\nkind = \"huggingface\"\npath = \"missing.json\"\n",
    )
    .unwrap();
    let (code, err) = run(&[
        "worker",
        "--sim",
        "--standalone",
        "--tokenizer-config",
        node.to_str().unwrap(),
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("tokenizer.path"), "{err}");
    let (code, err) = run(&[
        "worker",
        "--sim",
        "--standalone",
        "--tokenizer-config",
        "/nonexistent/node.toml",
    ]);
    assert_eq!(code, 2, "{err}");
    std::fs::remove_dir_all(&dir).ok();
}
