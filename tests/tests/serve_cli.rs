//! `router-node serve` and `print-config` as processes: a bad configuration exits 2 naming the
//! key, `print-config` prints the effective configuration with credentials masked, and a
//! node on the in-process bus serves `/health` until SIGTERM, then drains and exits 0.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use router_node::config::Config;
use switchyard_system_tests::support::{self, NodeBus, RouterNode, TempDir};

#[test]
fn a_config_error_exits_non_zero_naming_the_key() {
    let cases = [
        (
            "[selection]\ntemperature = -0.5\n",
            "selection.temperature must be >= 0",
        ),
        ("[http]\nlisen = \"127.0.0.1:1\"\n", "lisen"),
        ("[node]\nblock_size = 0\n", "node.block_size"),
        ("[policy]\npath = \"missing.yaml\"\n", "policy.path"),
        (
            "[policy]\npath = \"policy.json\"\n",
            "unsupported extension",
        ),
    ];
    for (text, expected) in cases {
        let dir = TempDir::new("serve");
        let path = dir.write("node.toml", text);
        let out = support::run(&["serve", "--config", path.to_str().unwrap()]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{text:?}: {stderr}");
        assert!(stderr.contains(expected), "{text:?}: {stderr}");
    }
}

#[test]
fn print_config_prints_the_effective_config() {
    let dir = TempDir::new("serve");
    let path = dir.write("node.toml", "[node]\ncluster = \"from-file\"\n");
    let out = support::router_node()
        .args(["print-config", "--config"])
        .arg(&path)
        .env("SWITCHYARD_HTTP_LISTEN", "127.0.0.1:7777")
        .env("SWITCHYARD_NATS_URL", "nats://user:secret@nats:4222")
        .output()
        .unwrap();
    assert!(out.status.success());
    let stdout = String::from_utf8(out.stdout).unwrap();
    let printed = Config::from_toml_str(&stdout, std::path::Path::new("stdout")).unwrap();
    assert_eq!(printed.node.cluster, "from-file");
    assert_eq!(printed.http.listen, "127.0.0.1:7777");
    assert_eq!(printed.bus.nats_url, "nats://***@nats:4222");
    assert!(!stdout.contains("secret"));
}

/// The binary on the in-process bus: serves `/health`, and exits 0 on SIGTERM.
#[cfg(unix)]
#[tokio::test]
async fn the_binary_serves_and_exits_cleanly_on_sigterm() {
    let node = RouterNode::start("node", "bin-test", &NodeBus::InProcess, "");
    let health = reqwest::get(format!("{}/health", node.url())).await;
    let health = health.map(|r| r.status().as_u16());
    let stopped = node.stop();
    assert_eq!(health.ok(), Some(200), "{}", stopped.stderr);
    assert_eq!(stopped.code, Some(0), "{}", stopped.stderr);
    // JSON logs: one object per line, the drain announced.
    assert!(
        stopped
            .stderr
            .lines()
            .any(|l| l.starts_with('{') && l.contains("shutting down")),
        "{}",
        stopped.stderr
    );
}
