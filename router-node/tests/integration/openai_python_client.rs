//! The official `openai` Python client against a node: an in-process node (in-process bus,
//! a two-class policy profile) with two real simulated workers announced on the bus, driven
//! by `tests/python/openai_client.py` (chat and completions, streamed and not, the model
//! list, and a 400 for an unknown policy class), and, with API keys, by
//! `tests/python/openai_keys.py` (the client's `api_key=`; the errors it raises for a wrong
//! key, a class the key may not use and a key over its rate). Afterwards the router's ledger
//! is idle.
//!
//! The interpreter is `$SWITCHYARD_PYTHON`, else `.tools/py/bin/python` of the workspace;
//! `scripts/install-pytools.sh` installs it (`scripts/test.sh` runs it first). Without a
//! Python that imports `openai` the test fails, it does not skip.

use router_actors::bus::Bus;
use router_actors::bus::local::LocalBus;
use router_core::WorkerId;
use router_node::auth::{generate_key, hash_key, to_hex};
use router_node::config::{BusKind, Config};
use router_node::serve::{Listeners, ServeError, serve_with_bus};
use router_sim::{SimConfig, SimWorker};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::oneshot;

/// Two classes: a request naming any other class is a 400.
const PROFILE: &str = r#"
default_class = "interactive"
[[classes]]
name = "interactive"
slo_ms = 2000
quantum = 100
[[classes]]
name = "batch"
slo_ms = 10000
quantum = 10
"#;

const MODEL: &str = "sim";
const INSTALL_HINT: &str = "run scripts/install-pytools.sh";

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// The Python that runs the client: `$SWITCHYARD_PYTHON`, else the workspace's
/// `.tools/py/bin/python`; it must import `openai`. Panics (fails the test) otherwise.
fn python() -> PathBuf {
    let python = match std::env::var_os("SWITCHYARD_PYTHON") {
        Some(p) if !p.is_empty() => {
            let p = PathBuf::from(p);
            assert!(
                p.exists(),
                "SWITCHYARD_PYTHON={} does not exist; {INSTALL_HINT}",
                p.display()
            );
            p
        }
        _ => {
            let p = workspace_root().join(".tools/py/bin/python");
            assert!(
                p.exists(),
                "no Python with the openai client: SWITCHYARD_PYTHON is unset and {} does not \
                 exist; {INSTALL_HINT}",
                p.display()
            );
            p
        }
    };
    let probe = std::process::Command::new(&python)
        .args(["-c", "import openai; print(openai.__version__)"])
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}; {INSTALL_HINT}", python.display()));
    assert!(
        probe.status.success(),
        "{} cannot import openai: {}; {INSTALL_HINT}",
        python.display(),
        String::from_utf8_lossy(&probe.stderr).trim()
    );
    python
}

fn write_profile() -> (PathBuf, PathBuf) {
    let dir = std::env::temp_dir().join(format!("switchyard-pyclient-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("policy.toml");
    std::fs::write(&path, PROFILE).unwrap();
    (dir, path)
}

fn node_config(policy: &Path) -> Config {
    let mut config = Config::default();
    config.node.cluster = format!("pyclient-{}", uuid::Uuid::new_v4().simple());
    config.bus.kind = BusKind::InProcess;
    config.http.listen = "127.0.0.1:0".to_owned();
    config.admin.listen = "127.0.0.1:0".to_owned();
    config.http.drain_timeout_ms = 5_000;
    config.http.models = vec![MODEL.to_owned()];
    config.policy.path = Some(policy.to_path_buf());
    config.peer_sync.heartbeat_ms = 50;
    config.peer_sync.lease_ms = 300;
    config.peer_sync.snapshot_window_ms = 100;
    config.scheduler.recheck_ms = 50;
    config.validate().unwrap();
    let profile = config.policy_profile().unwrap();
    assert_eq!(profile.classes().len(), 2, "the profile has two classes");
    assert!(!profile.is_fallback());
    config
}

async fn sim_worker(bus: Arc<dyn Bus>, cluster: &str, id: u64) -> SimWorker {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let cfg = SimConfig {
        worker_id: WorkerId(id),
        speedup: 50.0,
        model: MODEL.to_owned(),
        cluster: cluster.to_owned(),
        heartbeat: Duration::from_millis(100),
        lease: Duration::from_secs(2),
        prompts: Arc::new(router_tokenizer::Prompter::default()),
        ..SimConfig::default()
    };
    SimWorker::start(listener, bus, cfg).await.unwrap()
}

async fn get_json(http: &reqwest::Client, url: &str) -> (u16, Value) {
    let response = http.get(url).send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// A rank's load in `/debug/state` (`router_core`'s `LedgerSnapshot::is_idle` reads these).
const RANK_LOAD: [&str; 4] = [
    "prefill_tokens",
    "decode_blocks",
    "reserved_blocks",
    "requests",
];

/// The ledger of `/debug/state`: nothing booked or reserved, no load on any rank.
fn ledger_is_idle(state: &Value) -> bool {
    let ledger = &state["scheduler"]["ledger"];
    ledger["bookings"] == 0
        && ledger["reservations"] == 0
        && ledger["ranks"]
            .as_array()
            .is_some_and(|ranks| ranks.iter().all(|r| RANK_LOAD.iter().all(|k| r[*k] == 0)))
}

/// A node serving `config` on an in-process bus with two simulated workers announced on it.
struct Fleet {
    url: String,
    /// The node's admin listener (`/debug/state`).
    admin: String,
    http: reqwest::Client,
    stop: oneshot::Sender<()>,
    served: tokio::task::JoinHandle<Result<(), ServeError>>,
    workers: [SimWorker; 2],
}

impl Fleet {
    /// Starts it and waits until the node is ready with both workers in its pool.
    async fn start(config: Config) -> Self {
        let cluster = config.node.cluster.clone();
        let bus: Arc<dyn Bus> = Arc::new(LocalBus::new());
        let listeners = Listeners::bind(&config).await.unwrap();
        let url = format!("http://{}", listeners.public.local_addr().unwrap());
        let admin = format!("http://{}", listeners.admin.local_addr().unwrap());
        let (stop, stopped) = oneshot::channel::<()>();
        let served = tokio::spawn(serve_with_bus(config, listeners, bus.clone(), async {
            let _ = stopped.await;
        }));
        let workers = [
            sim_worker(bus.clone(), &cluster, 1).await,
            sim_worker(bus.clone(), &cluster, 2).await,
        ];
        let http = reqwest::Client::new();
        let mut ranks = 0;
        for _ in 0..1000 {
            let ready = http.get(format!("{url}/ready")).send().await.unwrap();
            if ready.status() == 200 {
                let (_, state) = get_json(&http, &format!("{admin}/debug/state")).await;
                ranks = state["scheduler"]["ledger"]["ranks"]
                    .as_array()
                    .map_or(0, Vec::len);
                if ranks == 2 {
                    break;
                }
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(ranks, 2, "the node never became ready with both workers");
        Self {
            url,
            admin,
            http,
            stop,
            served,
            workers,
        }
    }

    /// Runs `script` with `args` after the base URL and the model; its stdout, once it
    /// exited 0.
    async fn run_client(&self, python: &Path, script: &str, args: &[&str]) -> String {
        let script = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/python")
            .join(script);
        assert!(script.exists(), "{}", script.display());
        let run = tokio::process::Command::new(python)
            .arg(&script)
            .arg(format!("{}/v1", self.url))
            .arg(MODEL)
            .args(args)
            .env("PYTHONUNBUFFERED", "1")
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .kill_on_drop(true)
            .output();
        let out = tokio::time::timeout(Duration::from_secs(120), run)
            .await
            .expect("the Python client finishes within 120 s")
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success(),
            "{} {} exited with {}\n--- stdout\n{stdout}\n--- stderr\n{stderr}",
            python.display(),
            script.display(),
            out.status
        );
        println!("{stdout}");
        stdout
    }

    /// Waits (bounded) until every booking was released, then stops the node and workers.
    async fn finish(self) {
        let admin = &self.admin;
        let mut state = Value::Null;
        for _ in 0..300 {
            let (status, s) = get_json(&self.http, &format!("{admin}/debug/state")).await;
            assert_eq!(status, 200);
            state = s;
            if ledger_is_idle(&state) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(
            ledger_is_idle(&state),
            "router not idle: {}",
            state["scheduler"]["ledger"]
        );
        let _ = self.stop.send(());
        let result: Result<(), ServeError> =
            tokio::time::timeout(Duration::from_secs(10), self.served)
                .await
                .expect("serve returns after its shutdown")
                .unwrap();
        result.unwrap();
        for worker in self.workers {
            worker.shutdown().await.unwrap();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_openai_python_client_works_against_a_node() {
    // First, so that a missing client fails before anything starts.
    let python = python();
    let (dir, policy) = write_profile();
    let fleet = Fleet::start(node_config(&policy)).await;
    let stdout = fleet.run_client(&python, "openai_client.py", &[]).await;
    assert!(stdout.contains("ok unknown-class"), "{stdout}");
    fleet.finish().await;
    let _ = std::fs::remove_dir_all(dir);
}

/// With `[auth] keys_file`: the client's `api_key=` is the key. A good key gets its answers,
/// a wrong one `AuthenticationError`, a class the key may not use `PermissionDeniedError`,
/// and a key over its request rate `RateLimitError` with `Retry-After`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_openai_python_client_sends_its_api_key() {
    let python = python();
    let (dir, policy) = write_profile();
    let (good, slow) = (generate_key().unwrap(), generate_key().unwrap());
    let entry = |name: &str, key: &str, rest: &str| {
        format!(
            "[[keys]]\nname = \"{name}\"\nsha256 = \"{}\"\nclasses = [\"interactive\"]\n{rest}\n",
            to_hex(&hash_key(key))
        )
    };
    let keys = dir.join("keys.toml");
    let text = entry("team-a", &good, "") + &entry("slow", &slow, "requests_per_s = 0.05");
    std::fs::write(&keys, text).unwrap();
    let mut config = node_config(&policy);
    config.auth.keys_file = Some(keys);
    let fleet = Fleet::start(config).await;
    let wrong = generate_key().unwrap();
    let stdout = fleet
        .run_client(&python, "openai_keys.py", &[&good, &wrong, &slow])
        .await;
    assert!(stdout.contains("all 6 checks passed"), "{stdout}");
    assert!(!stdout.contains("FAIL"), "{stdout}");
    fleet.finish().await;
    let _ = std::fs::remove_dir_all(dir);
}
