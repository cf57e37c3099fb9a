//! The cluster harness itself, on an aggregated fleet: two `serve` replicas and two simulated
//! workers on a real nats-server behind a real HAProxy. HAProxy's `/ready` checks pass on both
//! replicas, requests through it spread over both and every ledger ends idle; the workers'
//! own `/load` and the replicas' `/metrics` account for every request; a replica stopped
//! with SIGTERM is marked down by HAProxy's checks within 2 s, and requests sent after
//! that all succeed on the other one.

use serde_json::json;
use std::time::Duration;
use switchyard_system_tests::support::observe::metric_sum;
use switchyard_system_tests::support::{ClusterBuilder, Role};

const REQUESTS: usize = 8;

async fn send(http: &reqwest::Client, url: &str, n: usize) -> Vec<u16> {
    let mut statuses = Vec::new();
    for i in 0..n {
        let response = http
            .post(format!("{url}/v1/completions"))
            .json(
                &json!({"model": "sim", "prompt": format!("request {i} of the harness test"),
                          "max_tokens": 4}),
            )
            .send()
            .await;
        statuses.push(response.map_or(0, |r| r.status().as_u16()));
    }
    statuses
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_aggregated_fleet_behind_haproxy_serves_and_loses_a_replica_cleanly() {
    let _fleet = crate::one_fleet_at_a_time().await;
    let mut cluster = ClusterBuilder::new()
        .replicas(2)
        .workers(Role::Agg, 2, 4096)
        .speedup(50.0)
        .start()
        .await;
    cluster.wait_ready(Duration::from_secs(60)).await;
    let http = reqwest::Client::new();
    let url = cluster.url();

    let statuses = send(&http, &url, REQUESTS).await;
    assert!(statuses.iter().all(|s| *s == 200), "{statuses:?}");
    cluster
        .wait_ledgers_idle(Duration::from_secs(10))
        .await
        .unwrap();
    let per_replica: Vec<f64> = cluster
        .metrics()
        .await
        .into_iter()
        .map(|m| metric_sum(&m.unwrap(), "switchyard_http_requests_total").unwrap_or(0.0))
        .collect();
    assert_eq!(
        per_replica,
        vec![(REQUESTS / 2) as f64; 2],
        "round robin over both replicas"
    );
    let finished: u64 = cluster
        .worker_loads()
        .await
        .into_iter()
        .map(|(_, load)| load.unwrap()["finished"].as_u64().unwrap())
        .sum();
    assert_eq!(finished, REQUESTS as u64, "every request ran on a worker");

    // Stop replica 1: HAProxy's checks (every 200 ms, down after 2) take it out.
    let stopped = cluster.replicas.remove(1).stop();
    assert_eq!(stopped.code, Some(0), "{}", stopped.stderr);
    let haproxy = cluster.haproxy.as_ref().expect("a load balancer");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(2);
    loop {
        let servers = haproxy.servers(&http).await.unwrap();
        if servers[1].status == "DOWN" {
            assert!(servers[0].checked_up(), "{servers:?}");
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "haproxy still sees the stopped replica: {servers:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let statuses = send(&http, &url, REQUESTS).await;
    assert!(statuses.iter().all(|s| *s == 200), "{statuses:?}");
    cluster
        .wait_ledgers_idle(Duration::from_secs(10))
        .await
        .unwrap();

    cluster.stop_cleanly();
}
