//! `router-node serve` and `print-config` as processes: a bad configuration exits 2 naming the
//! key (and the variable, when the environment set it), `print-config` prints the effective
//! configuration with credentials masked, `SWITCHYARD_CONFIG` names the file unless `--config`
//! does, `SWITCHYARD_<SECTION>__<KEY>` overrides a running node's keys, and a node on the
//! in-process bus serves `/health` until SIGTERM, then drains and exits 0.

use router_node::config::Config;
use switchyard_system_tests::support::{self, NodeBus, Proc, RouterNode, TempDir};

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

#[test]
fn switchyard_config_names_the_file_and_the_flag_wins() {
    let dir = TempDir::new("serve");
    let env_file = dir.write("env.toml", "[node]\ncluster = \"from-env-file\"\n");
    let flag_file = dir.write("flag.toml", "[node]\ncluster = \"from-flag-file\"\n");
    let print = |flag: Option<&std::path::Path>| {
        let mut command = support::router_node();
        command
            .arg("print-config")
            .env("SWITCHYARD_CONFIG", &env_file);
        if let Some(flag) = flag {
            command.arg("--config").arg(flag);
        }
        let out = command.output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let stdout = String::from_utf8(out.stdout).unwrap();
        Config::from_toml_str(&stdout, std::path::Path::new("stdout"))
            .unwrap()
            .node
            .cluster
    };
    assert_eq!(print(None), "from-env-file");
    assert_eq!(print(Some(&flag_file)), "from-flag-file");
}

#[test]
fn a_bad_environment_value_exits_2_naming_the_variable_and_the_key() {
    let cases = [
        (
            "SWITCHYARD_HTTP__BODY_LIMIT_BYTES",
            "lots",
            "http.body_limit_bytes",
        ),
        (
            "SWITCHYARD_HTTP__BODY_LIMT_BYTES",
            "1",
            "http.body_limt_bytes",
        ),
        ("SWITCHYARD_PEER_SYNC__LEASE_MS", "1", "peer_sync.lease_ms"),
    ];
    // The support strips exactly these variables from every child.
    assert_eq!(
        support::NODE_ENV_RULE,
        (
            router_node::config::ENV_PREFIX,
            router_node::config::ENV_SEPARATOR
        )
    );
    for (var, value, key) in cases {
        assert!(support::is_node_env(var), "{var}");
        for command in ["serve", "print-config"] {
            let out = support::router_node()
                .arg(command)
                .env(var, value)
                .output()
                .unwrap();
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(
                out.status.code(),
                Some(2),
                "{command} {var}={value}: {stderr}"
            );
            assert!(stderr.contains(var), "{command} {var}={value}: {stderr}");
            assert!(stderr.contains(key), "{command} {var}={value}: {stderr}");
        }
    }
}

/// A node whose file comes from `SWITCHYARD_CONFIG` and two keys from the environment: it
/// serves the models and enforces the body limit the variables set, not the file's.
#[cfg(unix)]
#[tokio::test]
async fn environment_overrides_take_effect_in_a_running_node() {
    let dir = TempDir::new("serve");
    let file = dir.write(
        "node.toml",
        "[http]\nlisten = \"127.0.0.1:0\"\nmodels = [\"from-file\"]\n\
         body_limit_bytes = 1048576\n[admin]\nlisten = \"127.0.0.1:0\"\n\
         [bus]\nkind = \"in-process\"\n\
         [telemetry]\nlog_format = \"json\"\n",
    );
    let mut command = support::router_node();
    command
        .arg("serve")
        .env("SWITCHYARD_CONFIG", &file)
        .env("SWITCHYARD_HTTP__MODELS", "alpha,beta")
        .env("SWITCHYARD_HTTP__BODY_LIMIT_BYTES", "1024");
    let mut proc = Proc::spawn_command("node", command);
    let url = RouterNode::wait_serving(&mut proc).url;
    let client = reqwest::Client::new();

    let models: serde_json::Value = client
        .get(format!("{url}/v1/models"))
        .send()
        .await
        .expect("GET /v1/models")
        .json()
        .await
        .expect("a JSON model list");
    let ids: Vec<&str> = models["data"]
        .as_array()
        .expect("data is a list")
        .iter()
        .filter_map(|m| m["id"].as_str())
        .collect();

    let completion = |prompt: String| {
        client
            .post(format!("{url}/v1/completions"))
            .json(&serde_json::json!({"model": "alpha", "prompt": prompt, "max_tokens": 4}))
            .send()
    };
    let big = completion("x".repeat(2000)).await.expect("a 2 KB request");
    let small = completion("hi".to_owned()).await.expect("a small request");
    let (big, small) = (big.status().as_u16(), small.status().as_u16());
    let stopped = proc.stop();
    assert_eq!(ids, ["alpha", "beta"], "{}", stopped.stderr);
    assert_eq!(
        big, 413,
        "over SWITCHYARD_HTTP__BODY_LIMIT_BYTES: {}",
        stopped.stderr
    );
    // No worker: refused for that, not for its size.
    assert_ne!(small, 413, "{}", stopped.stderr);
    assert_eq!(stopped.code, Some(0), "{}", stopped.stderr);
}
