//! Bookings that must not leak on the disaggregated path, shared by both conventions
//! (`tests/integration/disagg_leaks.rs` includes it once with each `CONVENTION`): a prefill
//! worker gone from the directory between its admission and its dispatch, and a decode leg
//! refused by a dead worker whose second placement finds the node saturated. Each request
//! fails with its own error, and both ledgers end idle.

use super::disagg::*;
use crate::support::{RefusingPort, error_of};
use router_core::{ClassId, Phase, PoolRole, RequestId, RouteRequest, WorkerId};
use router_sim::Role;
use serde_json::json;

/// One class whose prefill gate closes with any prompt in flight (its line is 16 tokens).
const NARROW_PREFILL: &str = r#"
default_class = "interactive"
[[classes]]
name = "interactive"
slo_ms = 20000
quantum = 100
prefill_busy_threshold = 16
decode_busy_threshold_frac = 0.5
"#;

/// The prefill worker is in its pool but the frontend's directory no longer names it (it left
/// between its admission and its dispatch): each placement fails before anything is sent, the
/// answer is a 503 `no_endpoint`, and nothing stays booked (under SGLang the decode leg was
/// booked before the prefill worker's address was looked up).
pub(crate) async fn a_prefill_worker_gone_from_the_directory_leaves_both_pools_idle() {
    let mut fleet = fleet().await;
    fleet.sim(PREFILL_ID, Role::Prefill, 16_384, 20.0).await;
    fleet.sim(DECODE_ID, Role::Decode, 16_384, 20.0).await;
    fleet.directory.remove(&WorkerId(PREFILL_ID));
    let fe = fleet.frontend().await;
    for stream in [false, true] {
        let response = fe
            .post("/v1/completions")
            .json(
                &json!({"model": "sim", "prompt": prompt(3, 2), "max_tokens": 4,
                          "stream": stream}),
            )
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 503);
        let err = error_of(response).await;
        assert_eq!(err["reason"], "no_endpoint", "{err}");
        fe.assert_idle().await;
    }
    for router in [&fe.prefill, &fe.decode] {
        assert_eq!(ledger(router).await.reservations, 0);
    }
}

/// Both decode workers are dead (their ports refuse connections). The request takes the
/// node's last concurrency permit and waits at the prefill gate behind a booking the test
/// holds; meanwhile the test queues for a permit itself. Once the gate opens, the decode leg
/// is refused: its guard gives the permit back, which goes to the test, so the leg's second
/// placement (booked on the other decode worker) finds the node saturated and the answer is
/// a 429. The second booking is released with the first.
pub(crate) async fn a_decode_leg_placed_again_on_a_saturated_node_leaves_both_pools_idle() {
    let mut fleet = fleet_with(NARROW_PREFILL).await;
    fleet.sim(PREFILL_ID, Role::Prefill, 16_384, 20.0).await;
    let refusing = [RefusingPort::bind(), RefusingPort::bind()];
    for (id, port) in (DECODE_ID..).zip(&refusing) {
        fleet.announce(id, PoolRole::Decode, &port.url).await;
    }
    let fe = fleet.frontend().await;

    // A booking of the test's own closes the prefill gate.
    let blocker = RequestId::from_u128(7_000);
    let route = RouteRequest::new(
        blocker,
        ClassId(0),
        Phase::Prefill,
        fe.prefill
            .prompt(&prompt(70, 2), router_core::HashScope::NONE),
    );
    assert!(fe.prefill.route(route).await.is_ok());
    let permits = fe.state.permits.clone();
    let others = u32::try_from(permits.available_permits() - 1).unwrap();
    let _hog = permits.clone().acquire_many_owned(others).await.unwrap();

    let call = fe
        .post("/v1/completions")
        .json(&json!({"model": "sim", "prompt": prompt(4, 2), "max_tokens": 4}))
        .send();
    let request = tokio::spawn(call);
    let prefill = fe.prefill.clone();
    eventually(
        "the request holds the last permit and waits at the gate",
        || {
            let prefill = prefill.clone();
            let permits = permits.clone();
            async move {
                permits.available_permits() == 0
                    && prefill.observe().await.unwrap().waiting_replies == 1
            }
        },
    )
    .await;
    // In the semaphore's queue from now on: the next permit given back is the test's.
    let mut queued = Box::pin(permits.clone().acquire_owned());
    assert!(futures::poll!(&mut queued).is_pending());
    fe.prefill.release(blocker).unwrap();
    fe.decode.unreserve(blocker).unwrap();

    let response = request.await.unwrap().unwrap();
    assert_eq!(response.status(), 429);
    let err = error_of(response).await;
    assert_eq!(err["reason"], "frontend_saturated", "{err}");
    let _permit = queued.await.unwrap();
    fe.assert_idle().await;
    for router in [&fe.prefill, &fe.decode] {
        assert_eq!(ledger(router).await.reservations, 0);
    }
}
