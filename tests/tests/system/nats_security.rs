//! The bus locked down: a real nats-server that requires TLS with client certificates and
//! authenticates users (a password for the router, an nkey for workers), certificates made at
//! test time, and the least-privilege subject permissions SECURITY.md recommends.
//! `router-node serve` with the right `[bus.auth]` / `[bus.tls]` connects and
//! becomes ready, a simulated worker joins with its own nkey and TLS flags, requests are
//! served, and a worker announcing an endpoint outside `registry.allowed_endpoints` is refused,
//! logged and counted. With wrong settings the node exits at once with a message that says
//! what failed: authentication, TLS (no CA, the wrong CA, no client certificate), or a missing
//! secret file named by its key.

use std::path::Path;
use std::time::{Duration, Instant};
use switchyard_system_tests::support::certs::TestPki;
use switchyard_system_tests::support::observe::{get_text, metric_sum, status_of};
use switchyard_system_tests::support::{NatsServer, NodeBus, Proc, RouterNode, SimWorker, TempDir};

const CLUSTER: &str = "locked";
/// SECURITY.md's least privilege, for cluster `locked`: a router uses the cluster's subjects,
/// its flush round trips and request inboxes; a worker only publishes its announcements, load
/// and KV events (and its flush round trips).
const ROUTER_PERMISSIONS: &str = "{ publish: [\"locked.>\", \"_SWITCHYARD_SYNC.>\", \"_INBOX.>\"], \
     subscribe: [\"locked.>\", \"_SWITCHYARD_SYNC.>\", \"_INBOX.>\"] }";
const WORKER_PERMISSIONS: &str = "{ publish: [\"locked.workers.*.announce\", \"locked.workers.*.load\", \
     \"locked.kv.*.events\", \"_SWITCHYARD_SYNC.>\"], subscribe: [\"_SWITCHYARD_SYNC.>\"] }";
const PASSWORD: &str = "correct-horse-battery";
/// A failing node must say why within this long (the client's connect timeout is 5 s).
const FAIL_FAST: Duration = Duration::from_secs(12);

struct Fixture {
    dir: TempDir,
    pki: TestPki,
    nats: NatsServer,
    worker_seed: String,
}

fn path(p: &Path) -> &str {
    p.to_str().expect("UTF-8 temp path")
}

async fn fixture() -> Fixture {
    let dir = TempDir::new("nats-tls");
    let pki = TestPki::generate(&dir);
    let worker = nkeys::KeyPair::new_user();
    let seed = dir.write("worker.nk", &format!("{}\n", worker.seed().expect("seed")));
    let config = format!(
        "tls {{\n  cert_file: \"{}\"\n  key_file: \"{}\"\n  ca_file: \"{}\"\n  verify: true\n  timeout: 2\n}}\n\
         authorization {{\n  users = [\n    {{ user: \"router\", password: \"{PASSWORD}\", permissions: {ROUTER_PERMISSIONS} }}\n    \
         {{ nkey: \"{}\", permissions: {WORKER_PERMISSIONS} }}\n  ]\n}}\n",
        path(&pki.server_cert),
        path(&pki.server_key),
        path(&pki.ca),
        worker.public_key(),
    );
    let nats = NatsServer::start_with_config(&config)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(nats.url().starts_with("tls://"), "{}", nats.url());
    Fixture {
        worker_seed: path(&seed).to_owned(),
        dir,
        pki,
        nats,
    }
}

impl Fixture {
    /// The node's `[bus.auth]` and `[bus.tls]` with the right settings, changed by `edit`.
    fn bus_tables(&self, password_file: &Path, edit: impl Fn(String) -> String) -> String {
        edit(format!(
            "[bus.auth]\nuser = \"router\"\npassword_file = \"{}\"\n\n\
             [bus.tls]\nrequired = true\nca_file = \"{}\"\ncert_file = \"{}\"\nkey_file = \"{}\"\n",
            path(password_file),
            path(&self.pki.ca),
            path(&self.pki.client_cert),
            path(&self.pki.client_key),
        ))
    }

    fn worker_args<'a>(&'a self, id: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
        let mut args = vec![
            "--nats",
            self.nats.url(),
            "--cluster",
            CLUSTER,
            "--worker-id",
            id,
            "--heartbeat-ms",
            "200",
            "--nats-nkey-seed",
            &self.worker_seed,
            "--nats-tls-ca",
            path(&self.pki.ca),
            "--nats-tls-cert",
            path(&self.pki.client_cert),
            "--nats-tls-key",
            path(&self.pki.client_key),
        ];
        args.extend_from_slice(extra);
        args
    }
}

/// Runs `serve` with `tables` after a NATS `[bus]` on `url`; it must exit within
/// [`FAIL_FAST`]. Returns its exit code and stderr.
async fn serve_fails(url: &str, tables: &str) -> (Option<i32>, String) {
    let dir = TempDir::new("nats-fail");
    let config = dir.write(
        "node.toml",
        &format!(
            "[node]\ncluster = \"{CLUSTER}\"\n[http]\nlisten = \"127.0.0.1:0\"\n\
             [admin]\nlisten = \"127.0.0.1:0\"\n\
             [bus]\nkind = \"nats\"\nnats_url = \"{url}\"\n\n{tables}"
        ),
    );
    let started = Instant::now();
    let mut proc = Proc::spawn("failing node", &["serve", "--config", path(&config)]);
    while proc.exited().is_none() {
        assert!(
            started.elapsed() < FAIL_FAST,
            "the node did not give up within {FAIL_FAST:?}:\n{tables}\n{}",
            proc.output()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let stopped = proc.kill();
    (stopped.code, stopped.stderr)
}

#[tokio::test]
async fn a_node_and_a_worker_connect_with_tls_and_credentials_and_foreign_endpoints_are_refused() {
    let f = fixture().await;
    let password = f.dir.write("router.password", &format!("{PASSWORD}\n"));
    let tables = f.bus_tables(&password, |t| t)
        + "\n[registry]\nallowed_endpoints = [\"127.0.0.1\", \"localhost\"]\n";
    let node = RouterNode::start(
        "node",
        CLUSTER,
        &NodeBus::Nats(f.nats.url().into()),
        &tables,
    );
    let worker = SimWorker::start("worker 1", &f.worker_args("1", &[]));
    let http = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while status_of(&http, &format!("{}/ready", node.url())).await != 200 {
        assert!(
            Instant::now() < deadline,
            "not ready over TLS:\n{}\n{}",
            node.output(),
            worker.output()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let answer = http
        .post(format!("{}/v1/completions", node.url()))
        .json(&serde_json::json!({"model": "sim", "prompt": "hello", "max_tokens": 4}))
        .send()
        .await
        .expect("the node answers");
    assert_eq!(answer.status(), 200, "{}", node.output());

    // A worker on the same (authenticated) bus announcing a host outside the list.
    let foreign = SimWorker::start(
        "worker 2",
        &f.worker_args("2", &["--advertise", "http://192.0.2.7:8000"]),
    );
    let series =
        r#"switchyard_registry_announcements_refused_total{reason="endpoint_not_allowed"}"#;
    let deadline = Instant::now() + Duration::from_secs(20);
    let metrics = loop {
        let text = get_text(&http, &format!("{}/metrics", node.admin_url()))
            .await
            .expect("metrics");
        if metric_sum(&text, series).is_some_and(|v| v >= 2.0) {
            break text;
        }
        assert!(Instant::now() < deadline, "not counted:\n{text}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(
        metric_sum(
            &metrics,
            r#"switchyard_registered_workers{pool="aggregated"}"#
        ),
        Some(1.0),
        "only the allowed worker is registered:\n{metrics}"
    );
    let log = node.output();
    let warning = log
        .lines()
        .find(|l| l.contains("endpoint not allowed"))
        .unwrap_or_else(|| panic!("no warning:\n{log}"));
    assert!(
        warning.contains("\"WARN\"")
            && warning.contains("192.0.2.7")
            && warning.contains("worker-2"),
        "{warning}"
    );
    assert_eq!(
        log.matches("endpoint not allowed").count(),
        1,
        "logged once per worker and endpoint, not at every heartbeat"
    );
    // Everything still goes to worker 1.
    for _ in 0..5 {
        let answer = http
            .post(format!("{}/v1/completions", node.url()))
            .json(&serde_json::json!({"model": "sim", "prompt": "again", "max_tokens": 2}))
            .send()
            .await
            .expect("the node answers");
        assert_eq!(answer.status(), 200);
    }
    assert!(
        !log.contains(PASSWORD),
        "the password never reaches the log"
    );
    assert_eq!(foreign.stop().code, Some(0));
    assert_eq!(worker.stop().code, Some(0));
    assert_eq!(node.stop().code, Some(0));
}

#[tokio::test]
async fn wrong_settings_fail_fast_and_say_what_failed() {
    let f = fixture().await;
    let url = f.nats.url();
    let good = f.dir.write("good.password", PASSWORD);
    let wrong = f.dir.write("wrong.password", "hunter2\n");

    let (code, err) = serve_fails(url, &f.bus_tables(&wrong, |t| t)).await;
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("authentication failed"), "{err}");
    assert!(!err.contains("hunter2"), "{err}");

    let no_ca = |t: String| {
        t.lines()
            .filter(|l| !l.starts_with("ca_file"))
            .collect::<Vec<_>>()
            .join("\n")
    };
    let (code, err) = serve_fails(url, &f.bus_tables(&good, no_ca)).await;
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("TLS failed"), "without the CA: {err}");

    let other_ca = |t: String| t.replace(path(&f.pki.ca), path(&f.pki.other_ca));
    let (code, err) = serve_fails(url, &f.bus_tables(&good, other_ca)).await;
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("TLS failed"), "with another CA: {err}");

    let no_client_cert = |t: String| {
        t.lines()
            .filter(|l| !l.starts_with("cert_file") && !l.starts_with("key_file"))
            .collect::<Vec<_>>()
            .join("\n")
    };
    let (code, err) = serve_fails(url, &f.bus_tables(&good, no_client_cert)).await;
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("TLS failed"),
        "without a client certificate: {err}"
    );

    let missing = f.dir.path().join("no-such.password");
    let (code, err) = serve_fails(url, &f.bus_tables(&missing, |t| t)).await;
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("bus.auth.password_file") && err.contains("does not exist"),
        "{err}"
    );

    // A worker with an nkey the server does not know.
    let stranger = nkeys::KeyPair::new_user();
    let seed = f.dir.write("stranger.nk", &stranger.seed().expect("seed"));
    let mut args = vec!["worker", "--sim", "--listen", "127.0.0.1:0"];
    let worker_args = f.worker_args("9", &[]);
    let at = worker_args
        .iter()
        .position(|a| *a == "--nats-nkey-seed")
        .expect("flag");
    let mut worker_args = worker_args.clone();
    worker_args[at + 1] = path(&seed);
    args.extend_from_slice(&worker_args);
    let out = switchyard_system_tests::support::run_tools(&args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("authentication failed"), "{err}");
}
