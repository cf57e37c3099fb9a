//! `router-node link` as a process: usage errors exit 2 naming the flag, an unreachable NATS
//! exits 1, and a link in front of an engine that is not up yet waits for it and stops cleanly
//! at SIGTERM, also when its NATS server has gone away. (The link with real engines:
//! `real_vllm.rs`.)

use std::process::Command;
use std::time::Duration;
use switchyard_system_tests::support::{LinkSidecar, NatsServer, router_node_bin};

fn run(args: &[&str]) -> (i32, String) {
    let out = Command::new(router_node_bin())
        .args(args)
        .env_remove("SWITCHYARD_NATS_URL")
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn usage_errors_exit_2_naming_the_flag() {
    let base = ["link", "--engine", "vllm", "--nats", "nats://127.0.0.1:1"];
    let (code, err) = run(&[&base[..], &["--url", "127.0.0.1:8000"]].concat());
    assert_eq!(code, 2);
    assert!(err.contains("--url must be http"), "{err}");
    let (code, err) = run(&[
        &base[..],
        &[
            "--url",
            "http://127.0.0.1:8000",
            "--kv-events",
            "127.0.0.1:5557",
        ],
    ]
    .concat());
    assert_eq!(code, 2);
    assert!(err.contains("--kv-events must be tcp"), "{err}");
    let (code, err) = run(&[
        &base[..],
        &[
            "--url",
            "http://127.0.0.1:8000",
            "--poll-ms",
            "1000",
            "--lease-ms",
            "500",
        ],
    ]
    .concat());
    assert_eq!(code, 2);
    assert!(err.contains("--lease-ms"), "{err}");
    let (code, _) = run(&[
        "link",
        "--engine",
        "tgi",
        "--url",
        "http://a:1",
        "--nats",
        "nats://a:1",
    ]);
    assert_eq!(code, 2);
    let (code, err) = run(&["link", "--engine", "vllm", "--url", "http://a:1"]);
    assert_eq!(code, 2, "--nats is required: {err}");
}

#[test]
fn an_unreachable_nats_exits_1() {
    let (code, err) = run(&[
        "link",
        "--engine",
        "vllm",
        "--url",
        "http://127.0.0.1:9",
        "--nats",
        "nats://127.0.0.1:1",
    ]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("NATS"), "{err}");
}

/// A link in front of an engine that is not up: nothing listens on port 9, the link keeps
/// asking.
fn link_without_engine(nats: &NatsServer) -> LinkSidecar {
    LinkSidecar::start(
        "link",
        &[
            "--engine",
            "vllm",
            "--url",
            "http://127.0.0.1:9",
            "--nats",
            nats.url(),
            "--poll-ms",
            "50",
        ],
    )
}

#[tokio::test]
async fn a_link_waits_for_its_engine_and_stops_at_sigterm() {
    let nats = NatsServer::start().await.unwrap();
    let link = link_without_engine(&nats);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let stopped = link.stop();
    assert_eq!(stopped.code, Some(0), "{}", stopped.stderr);
    assert!(
        stopped.stdout.contains("joins when it answers /health"),
        "{}",
        stopped.stdout
    );
}

#[tokio::test]
async fn a_link_stops_at_sigterm_while_nats_is_down() {
    let mut nats = NatsServer::start().await.unwrap();
    let link = link_without_engine(&nats);
    tokio::time::sleep(Duration::from_millis(300)).await;
    nats.stop();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let started = std::time::Instant::now();
    let stopped = link.stop();
    let took = started.elapsed();
    println!("link stopped {took:?} after SIGTERM, NATS down");
    assert_eq!(stopped.code, Some(0), "{}", stopped.stderr);
    assert!(took < Duration::from_secs(10), "{took:?}");
}
