//! The HTTP frontend when things go wrong, over real HTTP: a busy pool for a never-queue
//! class, clients that go away (mid-stream or while queued), workers that fail, cannot be
//! reached or break mid-stream, a worker that keeps refusing connections (each refused
//! request placed again elsewhere, the worker ejected after three), the node's concurrency
//! limit, and a node whose supervisor gave up or whose router is gone and not restarted
//! (`/health` fails naming it). Every booking is released: after every test the router's
//! ledger is idle.

use crate::support;
use crate::support::{
    Fault, RefusingPort, error_of, occupy, spawn_faulty_worker, spawn_node, spawn_worker,
};
use futures::StreamExt;
use router_node::frontend::Limits;
use serde_json::json;
use std::time::Duration;

const MS: Duration = Duration::from_millis(1);

#[tokio::test]
async fn a_never_queue_class_on_a_busy_pool_is_a_429_with_retry_after() {
    // The first request holds 300 prefill tokens until its first chunk (after 1 s).
    let worker = spawn_worker(1, 1000 * MS).await;
    let node = spawn_node(&[&worker.url], Limits::default()).await;
    let first = occupy(&node).await;
    let response = node
        .post("/v1/completions")
        .header("x-policy-class", "realtime")
        .json(&json!({"model": "m", "prompt": [7, 8, 9]}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 429);
    assert_eq!(response.headers()["retry-after"], "1");
    let err = error_of(response).await;
    assert_eq!(err["reason"], "would_queue");
    assert_eq!(err["class"], "realtime");
    assert_eq!(err["stage"], "admission");
    assert_eq!(err["type"], "rate_limit_error");
    assert!(err["message"].is_string());
    assert_eq!(first.await.unwrap(), 200);
    node.assert_idle().await;
}

#[tokio::test]
async fn a_client_that_disconnects_mid_stream_releases_the_booking() {
    let worker = spawn_worker(200, 20 * MS).await;
    let node = spawn_node(&[&worker.url], Limits::default()).await;
    let response = node
        .call(
            "/v1/completions",
            json!({"model": "m", "prompt": "a long answer", "stream": true}),
        )
        .await;
    assert_eq!(response.status(), 200);
    let mut body = response.bytes_stream();
    let first = body.next().await.unwrap().unwrap();
    assert!(!first.is_empty());
    assert_eq!(node.bookings().await, 1);
    assert_eq!(node.state.metrics.inflight(), 1);
    drop(body);
    node.wait_bookings(0).await;
    node.assert_idle().await;
}

#[tokio::test]
async fn a_failing_worker_is_a_502_and_its_booking_is_released() {
    let worker = spawn_faulty_worker(3, MS, Fault::Status(500)).await;
    let node = spawn_node(&[&worker.url], Limits::default()).await;
    let response = node
        .call("/v1/completions", json!({"model": "m", "prompt": [1, 2]}))
        .await;
    assert_eq!(response.status(), 502);
    let err = error_of(response).await;
    assert_eq!(err["reason"], "upstream_status");
    assert!(
        err["message"].as_str().unwrap().contains("engine says no"),
        "{err}"
    );
    node.assert_idle().await;
}

#[tokio::test]
async fn a_worker_redirect_is_not_followed_but_answered_as_a_502_naming_it() {
    let worker = spawn_faulty_worker(3, MS, Fault::Redirect).await;
    let node = spawn_node(&[&worker.url], Limits::default()).await;
    let response = node
        .call("/v1/completions", json!({"model": "m", "prompt": [1, 2]}))
        .await;
    assert_eq!(response.status(), 502);
    let err = error_of(response).await;
    assert_eq!(err["reason"], "upstream_status");
    assert!(err["message"].as_str().unwrap().contains("307"), "{err}");
    assert_eq!(
        worker.seen.lock().unwrap().len(),
        1,
        "one call, no follow-up"
    );
    node.assert_idle().await;
}

#[tokio::test]
async fn a_worker_client_error_keeps_its_status() {
    let worker = spawn_faulty_worker(3, MS, Fault::Status(422)).await;
    let node = spawn_node(&[&worker.url], Limits::default()).await;
    let response = node
        .call(
            "/v1/chat/completions",
            json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]}),
        )
        .await;
    assert_eq!(response.status(), 422);
    assert_eq!(error_of(response).await["type"], "invalid_request_error");
    node.assert_idle().await;
}

#[tokio::test]
async fn an_unreachable_or_unknown_worker_is_an_error_and_releases_the_booking() {
    // Nothing listens there.
    let refusing = RefusingPort::bind();
    let node = spawn_node(&[&refusing.url], Limits::default()).await;
    let response = node
        .call("/v1/completions", json!({"model": "m", "prompt": [1]}))
        .await;
    assert_eq!(response.status(), 502);
    assert_eq!(error_of(response).await["reason"], "upstream_connect");
    node.assert_idle().await;

    let node = spawn_node(&[], Limits::default()).await;
    node.router
        .upsert_worker(router_core::WorkerSpec::new(9, 1, 1000, 2000))
        .unwrap();
    let response = node
        .call("/v1/completions", json!({"model": "m", "prompt": [1]}))
        .await;
    assert_eq!(response.status(), 503);
    assert_eq!(error_of(response).await["reason"], "no_endpoint");
    node.assert_idle().await;
}

#[tokio::test]
async fn a_worker_that_left_between_admission_and_dispatch_is_not_a_failed_request() {
    // Worker 1 answers; worker 9 is still in the router's ledger but gone from the directory
    // (it left the fleet after the router chose it): its requests go to worker 1 instead.
    let live = spawn_worker(1, MS).await;
    let node = spawn_node(&[&live.url], Limits::default()).await;
    node.router
        .upsert_worker(router_core::WorkerSpec::new(9, 1, 1000, 2000))
        .unwrap();
    succeed_until_three_retries(&node, "worker 9").await;
    // A worker that left is not a failing one: the breaker holds nothing against it.
    let state: serde_json::Value = node.admin_get("/debug/state").await.json().await.unwrap();
    assert_eq!(state["worker_breaker"], json!([]), "{state}");
    node.assert_idle().await;
}

#[tokio::test]
async fn a_worker_that_breaks_mid_stream_ends_the_stream_with_an_error_event() {
    let worker = spawn_faulty_worker(5, MS, Fault::BreakAfter(2)).await;
    let node = spawn_node(&[&worker.url], Limits::default()).await;
    let streamed = node
        .call(
            "/v1/completions",
            json!({"model": "m", "prompt": [1], "stream": true}),
        )
        .await;
    assert_eq!(streamed.status(), 200);
    let text = streamed.text().await.unwrap();
    assert_eq!(text.matches(r#""text":"tok""#).count(), 2, "{text}");
    assert!(text.contains(r#""reason":"upstream_stream""#), "{text}");
    let full = node
        .call("/v1/completions", json!({"model": "m", "prompt": [1]}))
        .await;
    assert_eq!(full.status(), 502);
    assert_eq!(error_of(full).await["reason"], "upstream_stream");
    node.assert_idle().await;
}

#[tokio::test]
async fn a_client_that_gives_up_while_queued_is_never_booked() {
    let worker = spawn_worker(1, 1000 * MS).await;
    let node = spawn_node(&[&worker.url], Limits::default()).await;
    let first = occupy(&node).await;
    let gave_up = node
        .post("/v1/completions")
        .header("x-policy-class", "batch")
        .timeout(150 * MS)
        .json(&json!({"model": "m", "prompt": [1, 2, 3]}))
        .send()
        .await;
    assert!(gave_up.is_err_and(|e| e.is_timeout()));
    // The server notices the closed connection and drops the waiting route call.
    let mut waiting = usize::MAX;
    for _ in 0..100 {
        waiting = node.router.observe().await.unwrap().waiting_replies;
        if waiting == 0 {
            break;
        }
        tokio::time::sleep(5 * MS).await;
    }
    assert_eq!(waiting, 0, "the queued request is still waiting");
    assert_eq!(first.await.unwrap(), 200);
    node.assert_idle().await;
    let counters = node.router.observe().await.unwrap().counters;
    assert_eq!(counters.rolled_back, 0, "{counters:?}");
    assert_eq!(worker.seen.lock().unwrap().len(), 1, "never forwarded");
}

#[tokio::test]
async fn requests_beyond_the_concurrency_limit_are_a_429() {
    let worker = spawn_worker(1, 800 * MS).await;
    let limits = Limits {
        max_concurrent_requests: 1,
        ..Limits::default()
    };
    let node = spawn_node(&[&worker.url], limits).await;
    let first = occupy(&node).await;
    let response = node
        .call("/v1/completions", json!({"model": "m", "prompt": [1]}))
        .await;
    assert_eq!(response.status(), 429);
    assert_eq!(response.headers()["retry-after"], "1");
    assert_eq!(error_of(response).await["reason"], "frontend_saturated");
    assert_eq!(first.await.unwrap(), 200);
    node.assert_idle().await;
    let again = node
        .call("/v1/completions", json!({"model": "m", "prompt": [1]}))
        .await;
    assert_eq!(again.status(), 200, "the permit came back");
    node.assert_idle().await;
}

/// `/health` follows the node's supervisor: 200 while it runs, 503 once it gave up on a child
/// that kept failing (here: the first failure, with no restart allowed).
#[tokio::test]
async fn health_fails_once_the_nodes_supervisor_has_escalated() {
    use router_actors::bus::local::LocalBus;
    use router_actors::supervisor::RestartPolicy;
    use router_actors::{Node, NodeConfig, RouterMsg, Topology};
    use router_core::{PolicyProfile, PoolRole, RouterId};
    use router_node::frontend::{AppState, StaticDirectory, serve};
    use std::sync::Arc;

    let mut config = NodeConfig::new(
        "health-test",
        RouterId(uuid::Uuid::from_u128(1)),
        Topology::Aggregated,
        PolicyProfile::fallback(),
    );
    config.restart = RestartPolicy {
        max_restarts: 0,
        ..RestartPolicy::default()
    };
    let node = Node::start(config, Arc::new(LocalBus::new()))
        .await
        .unwrap();
    let router = node.router(PoolRole::Aggregated).unwrap().clone();
    let state = AppState::new(
        router.clone(),
        Arc::new(StaticDirectory::default()),
        PolicyProfile::fallback(),
        Limits::default(),
        node.ready(),
    )
    .with_alive(node.alive());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/health", listener.local_addr().unwrap());
    let (_stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(serve(listener, state, async {
        let _ = stopped.await;
    }));
    let http = reqwest::Client::new();
    assert_eq!(http.get(&url).send().await.unwrap().status(), 200);

    router
        .cast(RouterMsg::InjectFault("past the restart budget".into()))
        .unwrap();
    let mut status = 0;
    for _ in 0..200 {
        status = http.get(&url).send().await.unwrap().status().as_u16();
        if status == 503 {
            break;
        }
        tokio::time::sleep(10 * MS).await;
    }
    assert_eq!(status, 503);
    let body: serde_json::Value = http.get(&url).send().await.unwrap().json().await.unwrap();
    assert_eq!(body["status"], "failed");
    let reason = body["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("router-agg"), "names the child: {body}");
    assert!(!node.is_alive());
    node.shutdown().await;
}

/// `/health` also fails when a required actor is gone and not being restarted: here the
/// supervisor hangs restarting another child, so the router that fails meanwhile stays gone.
/// Within the liveness grace `/health` still answers 200 (a restart may be on its way); past
/// it, 503 with a reason naming the router.
#[tokio::test]
async fn health_fails_naming_a_required_actor_that_is_gone_and_not_restarted() {
    use router_actors::bus::local::LocalBus;
    use router_actors::testkit::StuckChild;
    use router_actors::{Node, NodeConfig, RouterMsg, Topology};
    use router_core::{PolicyProfile, PoolRole, RouterId};
    use router_node::frontend::{AppState, StaticDirectory, serve};
    use std::sync::Arc;

    let mut config = NodeConfig::new(
        "health-gone-test",
        RouterId(uuid::Uuid::from_u128(2)),
        Topology::Aggregated,
        PolicyProfile::fallback(),
    );
    let (spec, stuck) = StuckChild::spec("engine-link-0");
    config.extra_children.push(spec);
    config.liveness_grace = 600 * MS;
    let node = Node::start(config, Arc::new(LocalBus::new()))
        .await
        .unwrap();
    let router = node.router(PoolRole::Aggregated).unwrap().clone();
    let state = AppState::new(
        router.clone(),
        Arc::new(StaticDirectory::default()),
        PolicyProfile::fallback(),
        Limits::default(),
        node.ready(),
    )
    .with_alive(node.alive());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/health", listener.local_addr().unwrap());
    let (_stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(serve(listener, state, async {
        let _ = stopped.await;
    }));
    let http = reqwest::Client::new();
    assert_eq!(http.get(&url).send().await.unwrap().status(), 200);

    stuck.stop();
    router
        .cast(RouterMsg::InjectFault("gone for good".into()))
        .unwrap();
    let gone_at = std::time::Instant::now();
    let body = loop {
        let response = http.get(&url).send().await.unwrap();
        if response.status() == 503 {
            break response.json::<serde_json::Value>().await.unwrap();
        }
        assert!(gone_at.elapsed() < 10 * 1000 * MS, "/health still 200");
        tokio::time::sleep(20 * MS).await;
    };
    // Not before the grace (past the restart's 50 ms backoff) has run out.
    assert!(gone_at.elapsed() >= 600 * MS, "{:?}", gone_at.elapsed());
    assert_eq!(body["status"], "failed");
    let reason = body["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("actor router-agg gone"), "{body}");
    assert!(reason.contains("not restarted"), "{body}");
    node.kill().await;
}

#[tokio::test]
async fn a_worker_that_refuses_connections_is_avoided_then_ejected_and_no_request_fails() {
    // Worker 1 is a port nobody listens on; worker 2 answers.
    let refusing = RefusingPort::bind();
    let live = spawn_worker(1, MS).await;
    let node = spawn_node(&[&refusing.url, &live.url], Limits::default()).await;
    // Until the dead worker has refused three connections (placement picks it about half the
    // time), every request still succeeds: each refused one is placed again on worker 2.
    succeed_until_three_retries(&node, "the dead worker").await;
    let state: serde_json::Value = node.admin_get("/debug/state").await.json().await.unwrap();
    let breaker = &state["worker_breaker"];
    assert_eq!(breaker[0]["worker"], 1, "{breaker}");
    assert_eq!(breaker[0]["ejected"], true, "{breaker}");
    // Ejected: no request goes near it (no more retries) for its ejection.
    for n in 0..10 {
        let response = node
            .call(
                "/v1/completions",
                json!({"model": "m", "prompt": [1000 + n]}),
            )
            .await;
        assert_eq!(response.status(), 200);
    }
    let metrics = node.admin_get("/metrics").await.text().await.unwrap();
    assert_eq!(retries(&metrics), 3.0, "{metrics}");
    node.assert_idle().await;
}

/// `switchyard_http_retries_total`, summed over classes.
fn retries(metrics: &str) -> f64 {
    metrics
        .lines()
        .filter(|l| l.starts_with("switchyard_http_retries_total"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Sends requests, each answered 200, until the node has placed three of them a second time
/// (`worker` was picked three times; placement picks it about half the time).
async fn succeed_until_three_retries(node: &support::Node, worker: &str) {
    let mut sent = 0;
    loop {
        let response = node
            .call("/v1/completions", json!({"model": "m", "prompt": [sent]}))
            .await;
        assert_eq!(response.status(), 200, "request {sent}");
        sent += 1;
        let metrics = node.admin_get("/metrics").await.text().await.unwrap();
        if retries(&metrics) >= 3.0 {
            return;
        }
        assert!(sent < 100, "{worker} was never picked three times");
    }
}
