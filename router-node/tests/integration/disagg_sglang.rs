//! The disaggregated frontend with the SGLang convention (`[disagg] convention = "sglang"`):
//! a node's prefill and decode RouterActors on a `LocalBus`, simulated workers in the prefill
//! and decode pools, and real HTTP. Both legs are booked, then sent at once with
//! `bootstrap_host` / `bootstrap_port` / `bootstrap_room`; the decode worker pulls the KV
//! from the prefill worker's bootstrap room. Every test ends with both ledgers idle and no
//! reservation left.

use crate::support::{Fault, error_of, spawn_faulty_worker};
use futures::StreamExt;
use router_core::{PoolRole, WorkerId};
use router_node::frontend::DisaggConvention;
use router_sim::Role;
use serde_json::{Value, json};
use std::time::Duration;

// Included once per module that uses it (with that module's `CONVENTION`), not by mistake.
#[allow(clippy::duplicate_mod)]
#[path = "../support/disagg.rs"]
mod disagg;
#[allow(clippy::duplicate_mod)]
#[path = "../support/disagg_refused.rs"]
mod disagg_refused;

use disagg::*;

/// The harness serves the SGLang convention (bootstrap fields on both legs at once).
const CONVENTION: DisaggConvention = DisaggConvention::Sglang;

#[tokio::test]
async fn completions_run_both_legs_at_once_streaming_or_not() {
    both_legs_serve_a_completion_and_a_streamed_chat().await;
}

#[tokio::test]
async fn both_legs_get_the_bootstrap_fields_and_the_prefill_leg_one_token() {
    // Stand-ins record what each leg was sent.
    let prefill = spawn_faulty_worker(1, MS, Fault::None).await;
    let decode = spawn_faulty_worker(3, MS, Fault::None).await;
    let mut fleet = fleet().await;
    fleet
        .announce(PREFILL_ID, PoolRole::Prefill, &prefill.url)
        .await;
    fleet
        .announce(DECODE_ID, PoolRole::Decode, &decode.url)
        .await;
    let fe = fleet.frontend().await;
    let response = fe
        .post("/v1/completions")
        .json(&json!({"model": "sim", "prompt": prompt(2, 2), "max_tokens": 7, "stream": true}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let _ = response.text().await.unwrap();
    fe.assert_idle().await;
    let p = prefill.seen.lock().unwrap().clone();
    let d = decode.seen.lock().unwrap().clone();
    assert_eq!((p.len(), d.len()), (1, 1));
    let (p, d) = (&p[0].body, &d[0].body);
    assert_eq!(p["max_tokens"], 1, "{p}");
    assert_eq!(p["stream"], false, "{p}");
    assert!(p.get("kv_transfer_params").is_none(), "{p}");
    assert_eq!(d["max_tokens"], 7, "{d}");
    let url = reqwest::Url::parse(&prefill.url).unwrap();
    for body in [p, d] {
        assert_eq!(body["bootstrap_host"], url.host_str().unwrap(), "{body}");
        assert_eq!(body["bootstrap_port"], url.port().unwrap(), "{body}");
        assert!(body["bootstrap_room"].is_u64(), "{body}");
    }
    assert_eq!(p["bootstrap_room"], d["bootstrap_room"]);
}

#[tokio::test]
async fn a_failing_prefill_worker_is_an_error_cancels_the_decode_leg_and_releases_both_pools() {
    // A slow decode worker: it waits for the room's KV, then would decode slowly.
    let (_failing, fe) = stand_in_prefill(Fault::Status(500), 0.5).await;
    let response = fe
        .post("/v1/completions")
        .json(&json!({"model": "sim", "prompt": prompt(5, 4), "max_tokens": 50}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 502);
    let err = error_of(response).await;
    assert_eq!(err["reason"], "prefill_status", "{err}");
    fe.assert_idle().await;
    for router in [&fe.prefill, &fe.decode] {
        assert_eq!(ledger(router).await.reservations, 0);
    }
    // The decode leg was dropped: nothing runs on the decode worker.
    eventually("the decode worker holds nothing", || async {
        let load = fe.load(DECODE_ID).await;
        load["running"] == 0 && load["waiting"] == 0 && load["kv_used_blocks"] == 0
    })
    .await;
}

#[tokio::test]
async fn a_client_that_disconnects_mid_stream_releases_both_pools() {
    a_client_leaving_mid_stream_releases_both_pools().await;
}

#[tokio::test]
async fn a_client_that_disconnects_while_both_legs_run_releases_both_pools() {
    // A very slow prefill (seconds for 20 blocks); the decode leg waits for its KV.
    let fe = sim_fleet(16_384, 0.002, 20.0).await;
    let (prefill, decode) = (fe.prefill.clone(), fe.decode.clone());
    let call = fe
        .post("/v1/completions")
        .timeout(Duration::from_secs(5))
        .json(&json!({"model": "sim", "prompt": prompt(9, 20), "max_tokens": 5}));
    let request = tokio::spawn(async move { call.send().await });
    // Both bookings exist while the prefill runs; the reservation is converted already.
    eventually("both legs are booked", || async {
        let (p, d) = (ledger(&prefill).await, ledger(&decode).await);
        p.bookings == 1 && d.bookings == 1 && d.reservations == 0
    })
    .await;
    eventually("the prefill worker runs the prefill leg", || async {
        let load = fe.load(PREFILL_ID).await;
        load["requests"] == 1 && load["finished"] == 0
    })
    .await;
    request.abort();
    let _ = request.await;
    fe.assert_idle().await;
    eventually("the prefill worker dropped the request", || async {
        let load = fe.load(PREFILL_ID).await;
        load["running"] == 0 && load["staged"] == 0 && load["kv_used_blocks"] == 0
    })
    .await;
}

#[tokio::test]
async fn an_unpulled_room_is_stranded_and_a_decode_worker_without_its_kv_recomputes() {
    let mut fleet = fleet().await;
    fleet.sim_staging(PREFILL_ID, Role::Prefill, 300 * MS).await;
    fleet.sim(DECODE_ID, Role::Decode, 16_384, 20.0).await;
    let fe = fleet.frontend().await;
    let prefill = fe._fleet.directory[&WorkerId(PREFILL_ID)].clone();
    let decode = fe._fleet.directory[&WorkerId(DECODE_ID)].clone();
    let url = reqwest::Url::parse(&prefill).unwrap();

    // A prefill leg alone: its KV is staged in room 42, then stranded.
    let response = fe
        .http
        .post(format!("{prefill}/v1/completions"))
        .json(
            &json!({"model": "sim", "prompt": prompt(20, 2), "max_tokens": 1,
                      "bootstrap_room": 42}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(fe.load(PREFILL_ID).await["staged"], 1);
    eventually("the room's KV is stranded", || async {
        let load = fe.load(PREFILL_ID).await;
        load["stranded"] == 1 && load["staged"] == 0
    })
    .await;
    let response = fe
        .http
        .post(format!("{prefill}/v1/kv/bootstrap/42"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 404);

    // A decode leg whose room never fills: it waits (bounded), then recomputes the prompt.
    let started = std::time::Instant::now();
    let body: Value = fe
        .http
        .post(format!("{decode}/v1/completions"))
        .json(
            &json!({"model": "sim", "prompt": prompt(21, 2), "max_tokens": 2,
                      "bootstrap_host": url.host_str().unwrap(),
                      "bootstrap_port": url.port().unwrap(), "bootstrap_room": 43}),
        )
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(body["usage"]["completion_tokens"], 2, "{body}");
    assert!(started.elapsed() >= Duration::from_millis(1500));
    let load = fe.load(DECODE_ID).await;
    assert_eq!(load["pull_failures"], 1, "{load}");
    assert_eq!(load["prefill_tokens"], 32, "{load}");

    // A bootstrap room without host and port is a 400 on a decode worker.
    let response = fe
        .http
        .post(format!("{decode}/v1/completions"))
        .json(&json!({"model": "sim", "prompt": "hi", "bootstrap_room": 44}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 400);
}

#[tokio::test]
async fn a_prefill_leg_failing_after_the_decode_stream_began_cuts_it_and_releases_both_pools() {
    // The prefill stand-in answers 200 and breaks its body after 300 ms; the decode stand-in
    // streams at once, a chunk every 20 ms.
    let prefill = spawn_faulty_worker(5, 300 * MS, Fault::BreakAfter(0)).await;
    let decode = spawn_faulty_worker(200, 20 * MS, Fault::None).await;
    let mut fleet = fleet().await;
    fleet
        .announce(PREFILL_ID, PoolRole::Prefill, &prefill.url)
        .await;
    fleet
        .announce(DECODE_ID, PoolRole::Decode, &decode.url)
        .await;
    let fe = fleet.frontend().await;
    let response = fe
        .post("/v1/completions")
        .json(&json!({"model": "sim", "prompt": prompt(30, 2), "stream": true}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let mut body = response.bytes_stream();
    let mut text = Vec::new();
    let mut broken = false;
    while let Some(chunk) = body.next().await {
        match chunk {
            Ok(chunk) => text.extend_from_slice(&chunk),
            Err(_) => {
                broken = true;
                break;
            }
        }
    }
    let text = String::from_utf8_lossy(&text);
    assert!(broken || !text.contains("[DONE]"), "{text}");
    assert!(text.contains("tok"), "the decode stream had begun: {text}");
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
