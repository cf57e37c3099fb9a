//! The admin listener of `serve`: `/metrics` and `/debug/state` are served there and are 404s
//! on the public listener, which keeps the OpenAI API, `/health` and `/ready`; with
//! `admin.token_file` every admin request needs the token (401 without it, counted), and a
//! token file that cannot be used stops the node with an error naming the key.

use router_actors::bus::Bus;
use router_actors::bus::local::LocalBus;
use router_node::config::{BusKind, Config};
use router_node::serve::{Listeners, ServeError, serve_with_bus};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::oneshot;

const TOKEN: &str = "4f1c0e7a9b2d48c3a6e5f7091b3c5d7e";

fn config(token_file: Option<PathBuf>) -> Config {
    let mut config = Config::default();
    config.node.cluster = format!("admin-test-{}", uuid::Uuid::new_v4().simple());
    config.bus.kind = BusKind::InProcess;
    config.http.listen = "127.0.0.1:0".to_owned();
    config.admin.listen = "127.0.0.1:0".to_owned();
    config.admin.token_file = token_file;
    config.http.models = vec!["m".to_owned()];
    config.peer_sync.snapshot_window_ms = 100;
    config.validate().unwrap();
    config
}

struct Served {
    public: String,
    admin: String,
    http: reqwest::Client,
    stop: oneshot::Sender<()>,
    done: tokio::task::JoinHandle<Result<(), ServeError>>,
}

async fn start(config: Config) -> Served {
    let bus: Arc<dyn Bus> = Arc::new(LocalBus::new());
    let listeners = Listeners::bind(&config).await.unwrap();
    let public = format!("http://{}", listeners.public.local_addr().unwrap());
    let admin = format!("http://{}", listeners.admin.local_addr().unwrap());
    let (stop, stopped) = oneshot::channel::<()>();
    let done = tokio::spawn(serve_with_bus(config, listeners, bus, async {
        let _ = stopped.await;
    }));
    Served {
        public,
        admin,
        http: reqwest::Client::new(),
        stop,
        done,
    }
}

impl Served {
    async fn status(&self, url: String, token: Option<&str>) -> u16 {
        let mut get = self.http.get(url);
        if let Some(token) = token {
            get = get.bearer_auth(token);
        }
        get.send().await.unwrap().status().as_u16()
    }

    async fn stop(self) {
        let _ = self.stop.send(());
        let done = tokio::time::timeout(Duration::from_secs(10), self.done)
            .await
            .expect("serve returns after its shutdown");
        assert!(done.unwrap().is_ok());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operational_endpoints_are_on_the_admin_listener_only() {
    let node = start(config(None)).await;
    for path in ["/metrics", "/debug/state"] {
        let public = node.status(format!("{}{path}", node.public), None).await;
        assert_eq!(public, 404, "{path} on the public listener");
        let admin = node.status(format!("{}{path}", node.admin), None).await;
        assert_eq!(admin, 200, "{path} on the admin listener");
    }
    // Probes work on both; the OpenAI API only on the public one.
    for base in [&node.public, &node.admin] {
        assert_eq!(node.status(format!("{base}/health"), None).await, 200);
    }
    assert_eq!(
        node.status(format!("{}/v1/models", node.public), None)
            .await,
        200
    );
    assert_eq!(
        node.status(format!("{}/v1/models", node.admin), None).await,
        404
    );
    let state: serde_json::Value = node
        .http
        .get(format!("{}/debug/state", node.admin))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(state["node"]["routers"].is_array(), "{state}");
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_token_file_admin_requests_need_the_token() {
    let dir = std::env::temp_dir().join(format!("sy-admin-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    let token_file = dir.join("admin.token");
    std::fs::write(&token_file, format!("{TOKEN}\n")).unwrap();
    let node = start(config(Some(token_file))).await;
    for path in ["/metrics", "/debug/state", "/health"] {
        let url = format!("{}{path}", node.admin);
        assert_eq!(node.status(url.clone(), None).await, 401, "{path}");
        assert_eq!(node.status(url.clone(), Some("wrong")).await, 401, "{path}");
        assert_eq!(node.status(url, Some(TOKEN)).await, 200, "{path}");
    }
    let denied = node
        .http
        .get(format!("{}/metrics", node.admin))
        .send()
        .await
        .unwrap();
    assert_eq!(denied.headers()["www-authenticate"], "Bearer");
    let body: serde_json::Value = denied.json().await.unwrap();
    assert_eq!(body["error"]["reason"], "unauthorized", "{body}");
    let metrics = node
        .http
        .get(format!("{}/metrics", node.admin))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics
            .contains(r#"switchyard_http_refused_total{listener="admin",reason="unauthorized"} 7"#),
        "{metrics}"
    );
    // The public listener asks for no admin token.
    assert_eq!(
        node.status(format!("{}/health", node.public), None).await,
        200
    );
    node.stop().await;

    // A token file that is missing or too short stops the node, naming the key.
    for content in [None, Some("short\n")] {
        let path = dir.join(format!("bad-{}", content.is_some()));
        if let Some(content) = content {
            std::fs::write(&path, content).unwrap();
        }
        let config = config(Some(path));
        let listeners = Listeners::bind(&config).await.unwrap();
        let bus: Arc<dyn Bus> = Arc::new(LocalBus::new());
        let err = serve_with_bus(config, listeners, bus, async {})
            .await
            .expect_err("an unusable token file");
        assert!(err.to_string().contains("admin.token_file"), "{err}");
        assert_eq!(err.exit_code(), std::process::ExitCode::from(2));
    }
    let _ = std::fs::remove_dir_all(dir);
}
