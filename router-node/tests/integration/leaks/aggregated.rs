//! The aggregated path: a request refused by a dead worker whose second placement finds the
//! node saturated.

use crate::support::{RefusingPort, error_of, spawn_node_profiled};
use router_core::{ClassId, Phase, RequestId, RouteRequest, WorkerId};
use router_node::frontend::Limits;
use router_tokenizer::Prompter;
use serde_json::json;
use std::time::Duration;

/// One class whose prefill gate closes on a rank with any prompt in flight (16 tokens).
const NARROW_PREFILL: &str = r#"
default_class = "interactive"
[[classes]]
name = "interactive"
slo_ms = 20000
quantum = 100
prefill_busy_threshold = 16
"#;

/// Both workers are dead. The request takes the node's one concurrency permit and waits at
/// the gate behind a booking the test holds on each worker; meanwhile the test queues for a
/// permit itself. Once the gate opens the request is refused: its guard gives the permit back,
/// which goes to the test, so its second placement (booked on the other worker) finds the
/// node saturated and the answer is a 429. The second booking is released with the first.
#[tokio::test]
async fn a_request_placed_again_on_a_saturated_node_leaves_the_ledger_idle() {
    let refusing = [RefusingPort::bind(), RefusingPort::bind()];
    let limits = Limits {
        max_concurrent_requests: 1,
        ..Limits::default()
    };
    let urls = [refusing[0].url.as_str(), refusing[1].url.as_str()];
    let node = spawn_node_profiled(&urls, limits, Prompter::default(), NARROW_PREFILL).await;
    let blockers = [RequestId::from_u128(7_001), RequestId::from_u128(7_002)];
    for (worker, id) in (1..).zip(blockers) {
        let tokens: Vec<u32> = (0..32).map(|t| worker * 1_000 + t).collect();
        let mut route = RouteRequest::new(
            id,
            ClassId(0),
            Phase::Aggregated,
            node.router.prompt(&tokens, router_core::HashScope::NONE),
        );
        route.eligibility.allowed_workers = Some(vec![WorkerId(u64::from(worker))]);
        assert!(node.router.route(route).await.is_ok());
    }
    let call = node
        .post("/v1/completions")
        .json(&json!({"model": "stand-in", "prompt": "hello there", "max_tokens": 4}))
        .send();
    let request = tokio::spawn(call);
    let permits = node.state.permits.clone();
    for _ in 0..2000 {
        let waiting = node.router.observe().await.unwrap().waiting_replies;
        if permits.available_permits() == 0 && waiting == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        permits.available_permits(),
        0,
        "the request holds the permit"
    );
    // In the semaphore's queue from now on: the next permit given back is the test's.
    let mut queued = Box::pin(permits.clone().acquire_owned());
    assert!(futures::poll!(&mut queued).is_pending());
    for id in blockers {
        node.router.release(id).unwrap();
    }

    let response = request.await.unwrap().unwrap();
    assert_eq!(response.status(), 429);
    let err = error_of(response).await;
    assert_eq!(err["reason"], "frontend_saturated", "{err}");
    let _permit = queued.await.unwrap();
    node.assert_idle().await;
}
