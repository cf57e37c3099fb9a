//! The target of the HTTP overhead benchmark (`scripts/bench-http.sh`): instant simulated
//! workers and one router node with its OpenAI frontend, all on one in-process bus.
//!
//! ```sh
//! cargo run --release -p router-tools --example overhead_target -- --workers 2 --listen 127.0.0.1:18080
//! ```
//!
//! - Workers: [`SimWorker`]s with [`SimConfig::instant`] (every engine pass takes no time), on
//!   `127.0.0.1` ports picked by the OS (or `--worker-port`, `--worker-port + 1`, ...).
//! - Router: `serve_with_bus` with the default configuration except: in-process bus, the
//!   fallback policy profile (one class, never queues), `http.listen = --listen`.
//! - Telemetry: the defaults of `router-node serve` (text logs at `info`, no trace export), as
//!   a deployed node runs; `--no-telemetry` installs no subscriber at all.
//! - Admission with peers: `--policy FILE` loads a policy profile (a class with a decode or
//!   prefill line makes admissions take room credits), `--replicas N` starts N router nodes on
//!   the same in-process bus (the first is the one measured; the others are its peers and own
//!   their share of the ranks, so the measured one asks them for credits), `--no-credits`
//!   turns room credits off for the contrast.
//! - The floor: `--bare-proxy ADDR` also serves a bare reverse proxy in front of the same
//!   workers (the body passed through with the router's HTTP client, nothing else), so that
//!   one process shows what any proxy costs here next to what the router costs.
//!
//! Prints one line per address, then `ready` once the router answers `/ready` (it follows
//! the workers' announcements):
//!
//! ```text
//! worker 1 http://127.0.0.1:41235
//! worker 2 http://127.0.0.1:40111
//! router http://127.0.0.1:18080
//! admin 127.0.0.1:37635
//! pid 12345
//! bare http://127.0.0.1:18090      (with --bare-proxy 127.0.0.1:18090)
//! ready
//! ```
//!
//! Serves until SIGINT or SIGTERM, then drains and exits 0.

use router_actors::bus::Bus;
use router_actors::bus::local::LocalBus;
use router_core::WorkerId;
use router_node::config::{BusKind, Config};
use router_node::serve::{Listeners, serve_with_bus, shutdown_signal};
use router_node::telemetry;
use router_sim::{SimConfig, SimWorker};
use std::io::Write as _;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::watch;

/// The same allocator as the `router-node` binary.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The benchmark target: instant simulated workers behind one router node.
#[derive(Debug, clap::Parser)]
struct Args {
    /// Instant simulated workers to start.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u64).range(1..))]
    workers: u64,
    /// The router's OpenAI endpoint.
    #[arg(long, default_value = "127.0.0.1:18080")]
    listen: String,
    /// First worker port (then +1, +2, ...); the OS picks when absent.
    #[arg(long)]
    worker_port: Option<u16>,
    /// Install no tracing subscriber at all.
    #[arg(long = "no-telemetry", action = clap::ArgAction::SetFalse)]
    telemetry: bool,
    /// Router nodes on the bus: the first listens on `--listen`, the others (its peers) on
    /// ports the OS picks.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=16))]
    replicas: u64,
    /// A policy profile for every router (default: one class that never queues).
    #[arg(long)]
    policy: Option<std::path::PathBuf>,
    /// Room credits off (`[scheduler] room_credits = false`).
    #[arg(long)]
    no_credits: bool,
    /// Also serve, on this address, a bare reverse proxy in front of the same workers: each
    /// request's body passed as it is to the next worker in turn and the answer passed back,
    /// with the router's HTTP client and nothing else (no parsing, admission, streaming or
    /// metrics). What any proxy in front of these workers pays on this machine: the floor
    /// under the router's own work.
    #[arg(long, value_name = "ADDR")]
    bare_proxy: Option<String>,
}

fn main() -> ExitCode {
    let args = <Args as clap::Parser>::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("cannot start the runtime: {e}");
            return ExitCode::from(1);
        }
    };
    match runtime.block_on(run(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("overhead_target: {e}");
            ExitCode::from(1)
        }
    }
}

async fn run(args: Args) -> Result<(), Box<dyn std::error::Error>> {
    let mut config = Config::default();
    config.node.cluster = "overhead".to_owned();
    config.bus.kind = BusKind::InProcess;
    config.http.listen = args.listen.clone();
    config.http.models = vec!["sim".to_owned()];
    config.policy.path = args.policy.clone();
    config.scheduler.room_credits = !args.no_credits;
    config.validate()?;
    let guard = if args.telemetry {
        Some(telemetry::init(&config.telemetry)?)
    } else {
        None
    };

    let bus: Arc<dyn Bus> = Arc::new(LocalBus::new());
    let mut workers = Vec::new();
    for n in 1..=args.workers {
        let port = match args.worker_port {
            Some(base) => base
                .checked_add(u16::try_from(n - 1)?)
                .ok_or("--worker-port + --workers overflows")?,
            None => 0,
        };
        let listener = TcpListener::bind(("127.0.0.1", port)).await?;
        let cfg = SimConfig {
            worker_id: WorkerId(n),
            instant: true,
            cluster: config.node.cluster.clone(),
            ..router_tools::worker::sim_config()
        };
        let worker = SimWorker::start(listener, bus.clone(), cfg).await?;
        println!("worker {n} {}", worker.endpoint());
        workers.push(worker);
    }

    let listener = TcpListener::bind(&config.http.listen).await?;
    let router_url = format!("http://{}", listener.local_addr()?);
    println!("router {router_url}");
    // The admin endpoints (/metrics, /debug/state) of each replica on a loopback port of its own.
    let admin = TcpListener::bind("127.0.0.1:0").await?;
    println!("admin {}", admin.local_addr()?);
    println!("pid {}", std::process::id());
    std::io::stdout().flush()?;

    let (stop_tx, stop_rx) = watch::channel(false);
    let mut served = Vec::new();
    let mut urls = vec![router_url.clone()];
    let mut bare_served = None;
    if let Some(addr) = &args.bare_proxy {
        let listener = TcpListener::bind(addr).await?;
        let url = format!("http://{}", listener.local_addr()?);
        println!("bare {url}");
        urls.push(url);
        let endpoints = workers.iter().map(|w| w.endpoint().to_owned()).collect();
        let mut stop_rx = stop_rx.clone();
        let bare = bare::serve(listener, endpoints, async move {
            let _ = stop_rx.wait_for(|s| *s).await;
        });
        bare_served = Some(tokio::spawn(bare));
    }
    for n in 1..args.replicas {
        let peer = Listeners {
            public: TcpListener::bind("127.0.0.1:0").await?,
            admin: TcpListener::bind("127.0.0.1:0").await?,
        };
        let url = format!("http://{}", peer.public.local_addr()?);
        println!("peer {n} {url}");
        urls.push(url);
        let mut peer_config = config.clone();
        peer_config.node.router_id = None;
        let mut stop_rx = stop_rx.clone();
        served.push(tokio::spawn(serve_with_bus(
            peer_config,
            peer,
            bus.clone(),
            async move {
                let _ = stop_rx.wait_for(|s| *s).await;
            },
        )));
    }
    served.push(tokio::spawn(serve_with_bus(
        config,
        Listeners {
            public: listener,
            admin,
        },
        bus,
        async move {
            let mut stop_rx = stop_rx;
            let _ = stop_rx.wait_for(|s| *s).await;
        },
    )));
    for url in &urls {
        wait_ready(url).await?;
    }
    if args.replicas > 1 {
        // Rank ownership settles for two heartbeats once replicas see each other.
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    println!("ready");
    std::io::stdout().flush()?;

    shutdown_signal().await;
    let _ = stop_tx.send(true);
    for served in served {
        served.await??;
    }
    if let Some(bare) = bare_served {
        bare.await??;
    }
    for worker in workers {
        worker.shutdown().await?;
    }
    if let Some(guard) = guard {
        guard.shutdown().await;
    }
    Ok(())
}

/// Polls `GET /ready` for up to 30 s.
async fn wait_ready(router_url: &str) -> Result<(), Box<dyn std::error::Error>> {
    let http = reqwest::Client::new();
    let url = format!("{router_url}/ready");
    for _ in 0..300 {
        if let Ok(response) = http.get(&url).send().await
            && response.status().is_success()
        {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err("the router did not become ready within 30 s".into())
}

/// The bare reverse proxy of `--bare-proxy`: the floor under the router's own work.
mod bare {
    use axum::body::{Body, Bytes};
    use axum::extract::State;
    use axum::http::{Request, StatusCode, header};
    use axum::response::{IntoResponse, Response};
    use http_body_util::Full;
    use hyper_util::client::legacy::Client;
    use hyper_util::client::legacy::connect::HttpConnector;
    use hyper_util::rt::TokioExecutor;
    use std::future::Future;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::net::TcpListener;

    struct Proxy {
        client: Client<HttpConnector, Full<Bytes>>,
        endpoints: Vec<String>,
        next: AtomicUsize,
    }

    /// Serves `POST /v1/completions` (passed to `endpoints` in turn) and `GET /ready` on
    /// `listener` until `stop` completes.
    pub async fn serve(
        listener: TcpListener,
        endpoints: Vec<String>,
        stop: impl Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        let proxy = Arc::new(Proxy {
            client: Client::builder(TokioExecutor::new()).build(connector),
            endpoints,
            next: AtomicUsize::new(0),
        });
        let app = axum::Router::new()
            .route("/v1/completions", axum::routing::post(forward))
            .route("/ready", axum::routing::get(|| async { "ready" }))
            .with_state(proxy);
        let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
            let _ = tcp.set_nodelay(true);
        });
        axum::serve(listener, app)
            .with_graceful_shutdown(stop)
            .await
    }

    async fn forward(State(proxy): State<Arc<Proxy>>, body: Bytes) -> Response {
        let n = proxy.next.fetch_add(1, Ordering::Relaxed) % proxy.endpoints.len();
        let url = format!("{}/v1/completions", proxy.endpoints[n]);
        let request = match Request::post(url)
            .header(header::CONTENT_TYPE, "application/json")
            .body(Full::new(body))
        {
            Ok(request) => request,
            Err(e) => return (StatusCode::BAD_GATEWAY, e.to_string()).into_response(),
        };
        match proxy.client.request(request).await {
            Ok(answer) => answer.map(Body::new).into_response(),
            Err(e) => (StatusCode::BAD_GATEWAY, e.to_string()).into_response(),
        }
    }
}
