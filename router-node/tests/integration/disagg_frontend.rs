//! The frontend in front of a disaggregated fleet: a node's prefill and decode RouterActors
//! (`router_actors::Node` on a `LocalBus`), simulated workers announcing themselves in the
//! prefill and decode pools, and real HTTP. Every request runs a prefill leg and a decode leg
//! under one id; every test ends with both ledgers idle and no reservation left.

use crate::support::{Fault, error_of};
use router_core::PoolRole;
use router_sim::Role;
use serde_json::json;
use std::time::Duration;

// Included once per module that uses it (with that module's `CONVENTION`), not by mistake.
#[allow(clippy::duplicate_mod)]
#[path = "../support/disagg.rs"]
mod disagg;
#[allow(clippy::duplicate_mod)]
#[path = "../support/disagg_refused.rs"]
mod disagg_refused;

use disagg::*;
/// The harness serves the vLLM convention (`kv_transfer_params`).
const CONVENTION: router_node::frontend::DisaggConvention =
    router_node::frontend::DisaggConvention::Vllm;

#[tokio::test]
async fn completions_run_a_prefill_and_a_decode_leg_streaming_or_not() {
    both_legs_serve_a_completion_and_a_streamed_chat().await;
}

#[tokio::test]
async fn the_decode_reservation_is_taken_at_prefill_admission_and_converted_by_the_decode_booking()
{
    // A slow prefill (~0.4 s) and a slow decode (~0.5 s) so each phase can be observed.
    let fe = sim_fleet(16_384, 0.05, 0.5).await;
    let call = fe
        .post("/v1/completions")
        .json(&json!({"model": "sim", "prompt": prompt(2, 20), "max_tokens": 40}));
    let request = tokio::spawn(async move { call.send().await.unwrap().status().as_u16() });

    // Prefill leg: booked on the prefill pool, decode room reserved, nothing booked there.
    let (prefill, decode) = (fe.prefill.clone(), fe.decode.clone());
    eventually("the reservation during the prefill leg", || async {
        let (p, d) = (ledger(&prefill).await, ledger(&decode).await);
        p.bookings == 1 && d.reservations == 1 && d.bookings == 0
    })
    .await;
    let d = ledger(&decode).await;
    // 20 prompt blocks and 3 output blocks (40 tokens of 16).
    assert!(d.ranks[0].reserved_blocks >= 22, "{d:?}");
    assert_eq!(d.ranks[0].decode_blocks, 0, "{d:?}");

    // Decode leg: the booking took the reservation over; the prefill booking is gone.
    eventually("the decode booking converted the reservation", || async {
        let (p, d) = (ledger(&prefill).await, ledger(&decode).await);
        p.bookings == 0 && d.bookings == 1 && d.reservations == 0
    })
    .await;
    let d = ledger(&decode).await;
    assert_eq!(d.ranks[0].reserved_blocks, 0, "{d:?}");
    assert!(d.ranks[0].decode_blocks >= 20, "{d:?}");

    assert_eq!(request.await.unwrap(), 200);
    fe.assert_idle().await;
}

#[tokio::test]
async fn a_class_whose_decode_room_is_full_waits_at_the_prefill_gate() {
    // 64 decode blocks: the class may commit 32; each request needs 20 + 4.
    let fe = sim_fleet(64, 20.0, 0.5).await;
    let first = fe
        .post("/v1/completions")
        .json(&json!({"model": "sim", "prompt": prompt(3, 20), "max_tokens": 60}));
    let first = tokio::spawn(async move { call_status(first).await });
    let decode = fe.decode.clone();
    eventually("the first request holds decode room", || async {
        let d = ledger(&decode).await;
        d.bookings + d.reservations == 1
    })
    .await;

    let second = fe
        .post("/v1/completions")
        .json(&json!({"model": "sim", "prompt": prompt(4, 20), "max_tokens": 60}));
    let second = tokio::spawn(async move { call_status(second).await });
    let prefill = fe.prefill.clone();
    eventually("the second request waits at the prefill gate", || async {
        prefill.observe().await.unwrap().waiting_replies == 1
    })
    .await;
    assert!(!second.is_finished());
    assert!(!first.is_finished(), "the first must still hold its room");
    // One snapshot: a reservation may convert into a booking between two reads.
    let d = ledger(&fe.decode).await;
    assert_eq!(
        d.bookings + d.reservations,
        1,
        "never two requests on the decode pool"
    );

    assert_eq!(first.await.unwrap(), 200);
    assert_eq!(second.await.unwrap(), 200);
    let stats = fe.prefill.observe().await.unwrap().scheduler.stats;
    assert!(stats.queued >= 1, "{stats:?}");
    assert_eq!(stats.admitted, 2, "{stats:?}");
    fe.assert_idle().await;
}

async fn call_status(call: reqwest::RequestBuilder) -> u16 {
    call.send().await.unwrap().status().as_u16()
}

#[tokio::test]
async fn a_failing_prefill_worker_is_a_502_and_releases_both_pools() {
    let (failing, fe) = stand_in_prefill(Fault::Status(500), 20.0).await;
    let response = fe
        .post("/v1/completions")
        .json(&json!({"model": "sim", "prompt": prompt(5, 4), "max_tokens": 5}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 502);
    let err = error_of(response).await;
    assert_eq!(err["reason"], "prefill_status", "{err}");
    assert!(
        err["message"].as_str().unwrap().contains("engine says no"),
        "{err}"
    );
    fe.assert_idle().await;
    // The prefill worker was asked for one token and a remote decode.
    let seen = failing.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].body["max_tokens"], 1);
    assert_eq!(seen[0].body["stream"], false);
    assert_eq!(seen[0].body["kv_transfer_params"]["do_remote_decode"], true);
    // The decode worker never saw the request.
    assert_eq!(fe.load(DECODE_ID).await["requests"], 0);
}

#[tokio::test]
async fn a_prefill_worker_refusing_the_request_passes_its_4xx_on_and_releases_both_pools() {
    let (_refusing, fe) = stand_in_prefill(Fault::Status(400), 20.0).await;
    let response = fe
        .post("/v1/completions")
        .json(&json!({"model": "sim", "prompt": prompt(12, 2)}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 400);
    let err = error_of(response).await;
    assert_eq!(err["reason"], "prefill_status", "{err}");
    assert_eq!(err["type"], "invalid_request_error", "{err}");
    fe.assert_idle().await;
}

#[tokio::test]
async fn a_prefill_answer_without_transfer_params_is_a_502_and_releases_both_pools() {
    // This stand-in streams SSE whatever it is asked: no JSON, no `kv_transfer_params`.
    let (_confused, fe) = stand_in_prefill(Fault::None, 20.0).await;
    for stream in [false, true] {
        let response = fe
            .post("/v1/completions")
            .json(&json!({"model": "sim", "prompt": prompt(6, 2), "stream": stream}))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 502);
        assert_eq!(error_of(response).await["reason"], "prefill_bad_params");
        fe.assert_idle().await;
    }
}

#[tokio::test]
async fn an_unreachable_decode_worker_is_an_error_and_releases_both_pools() {
    let mut fleet = fleet().await;
    fleet.sim(PREFILL_ID, Role::Prefill, 16_384, 20.0).await;
    // Nothing listens on port 1.
    fleet
        .announce(DECODE_ID, PoolRole::Decode, "http://127.0.0.1:1")
        .await;
    let fe = fleet.frontend().await;
    for stream in [false, true] {
        let response = fe
            .post("/v1/completions")
            .json(
                &json!({"model": "sim", "prompt": prompt(7, 4), "max_tokens": 5,
                          "stream": stream}),
            )
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 502);
        assert_eq!(error_of(response).await["reason"], "upstream_connect");
        fe.assert_idle().await;
    }
    let stats = fe.decode.observe().await.unwrap().scheduler.stats;
    assert_eq!(stats.admitted_upstream, 2, "the decode legs were booked");
}

#[tokio::test]
async fn a_client_that_disconnects_mid_stream_releases_both_pools() {
    a_client_leaving_mid_stream_releases_both_pools().await;
}

#[tokio::test]
async fn a_client_that_disconnects_during_the_prefill_leg_releases_both_pools() {
    // A very slow prefill (~1 s for 20 blocks).
    let fe = sim_fleet(16_384, 0.02, 20.0).await;
    let (prefill, decode) = (fe.prefill.clone(), fe.decode.clone());
    let call = fe
        .post("/v1/completions")
        .timeout(Duration::from_secs(3))
        .json(&json!({"model": "sim", "prompt": prompt(9, 20), "max_tokens": 5}));
    let request = tokio::spawn(async move { call.send().await });
    eventually("the prefill leg is under way", || async {
        ledger(&prefill).await.bookings == 1 && ledger(&decode).await.reservations == 1
    })
    .await;
    request.abort();
    let _ = request.await;
    fe.assert_idle().await;
    assert_eq!(fe.load(DECODE_ID).await["requests"], 0, "no decode leg");
}

/// Router-wide: a decode rank is over when more than 10 % of its KV is booked.
const OVERLOAD_PROFILE: &str = r#"
default_class = "interactive"
[reject_thresholds]
decode_blocks_frac = 0.1
[[classes]]
name = "interactive"
slo_ms = 20000
quantum = 100
prefill_busy_threshold = 100000
decode_busy_threshold_frac = 0.9
"#;

#[tokio::test]
async fn a_decode_leg_refused_by_the_reject_thresholds_releases_both_pools() {
    let mut fleet = fleet_with(OVERLOAD_PROFILE).await;
    fleet.sim(PREFILL_ID, Role::Prefill, 16_384, 20.0).await;
    fleet.sim(DECODE_ID, Role::Decode, 64, 0.5).await;
    let fe = fleet.frontend().await;
    // The first request books 24 of 64 decode blocks for a while: the rank is over.
    let first = fe
        .post("/v1/completions")
        .json(&json!({"model": "sim", "prompt": prompt(10, 20), "max_tokens": 60}));
    let first = tokio::spawn(async move { call_status(first).await });
    let decode = fe.decode.clone();
    eventually("the decode rank is over its reject threshold", || async {
        ledger(&decode).await.ranks[0].over_reject_threshold
    })
    .await;
    let response = fe
        .post("/v1/completions")
        .json(&json!({"model": "sim", "prompt": prompt(11, 2), "max_tokens": 5}))
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let err = error_of(response).await;
    assert_eq!(status, 429, "{err}");
    assert_eq!(err["reason"], "all_workers_overloaded", "{err}");
    assert_eq!(err["stage"], "admission", "{err}");
    assert!(!first.is_finished());
    let d = ledger(&fe.decode).await;
    assert_eq!((d.bookings, d.reservations), (1, 0), "{d:?}");
    // The prefill gate admitted it; its staged decode leg was the one refused.
    let stats = fe.prefill.observe().await.unwrap().scheduler.stats;
    assert_eq!(stats.admitted, 2, "{stats:?}");
    let stats = fe.decode.observe().await.unwrap().scheduler.stats;
    assert_eq!(
        (stats.admitted_upstream, stats.rejected),
        (1, 1),
        "{stats:?}"
    );
    assert_eq!(first.await.unwrap(), 200);
    fe.assert_idle().await;
}

#[tokio::test]
async fn a_refused_prefill_leg_is_placed_again_and_the_worker_ejected() {
    disagg_refused::a_refused_prefill_leg_is_placed_on_the_other_prefill_worker().await;
}

#[tokio::test]
async fn a_refused_decode_leg_is_placed_again_and_the_worker_ejected() {
    disagg_refused::a_refused_decode_leg_is_placed_on_the_other_decode_worker().await;
}
