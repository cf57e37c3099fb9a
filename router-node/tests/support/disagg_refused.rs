//! Refused connections on the disaggregated path, shared by `disagg_frontend.rs` (vLLM
//! convention) and `disagg_sglang.rs` (SGLang): a worker of the prefill or the decode pool
//! announced at a port nobody listens on. A leg placed on it is placed once more on the
//! other worker of its pool, so every request succeeds; after three refusals the breaker
//! ejects it and no leg goes near it; both ledgers end idle.

use super::disagg::*;
use crate::support::RefusingPort;
use router_core::{PoolRole, WorkerId};
use router_sim::Role;
use serde_json::{Value, json};

/// The sum of `switchyard_http_retries_total` over its classes, read from the node's
/// metrics registry as a scrape would.
async fn retries(fe: &Frontend) -> f64 {
    fe.state
        .metrics
        .scrape()
        .await
        .lines()
        .filter(|l| l.starts_with("switchyard_http_retries_total"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// One request, streamed or not, that must succeed with all its tokens.
async fn completes(fe: &Frontend, n: u32) {
    let stream = n.is_multiple_of(2);
    let response = fe
        .post("/v1/completions")
        .json(
            &json!({"model": "sim", "prompt": prompt(100 + n, 2), "max_tokens": 3,
                      "stream": stream}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200, "request {n}");
    let text = response.text().await.unwrap();
    if stream {
        assert_eq!(text.matches(r#""text":"tok ""#).count(), 3, "{text}");
        assert!(text.trim_end().ends_with("data: [DONE]"), "{text}");
    } else {
        let body: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(body["choices"][0]["text"], "tok tok tok ", "{body}");
    }
}

/// Sends requests until the dead worker has refused three legs (each refused leg placed
/// again, every request succeeding), then checks it is ejected and avoided.
async fn refused_three_times_then_ejected(fe: &Frontend, dead: u64) {
    let mut sent = 0;
    while retries(fe).await < 3.0 {
        completes(fe, sent).await;
        sent += 1;
        assert!(sent < 100, "the dead worker was never picked three times");
    }
    let breaker = fe.state.breaker.snapshot();
    let health = breaker.iter().find(|h| h.worker == WorkerId(dead));
    assert!(health.is_some_and(|h| h.ejected), "{breaker:?}");
    // Ejected: no leg goes near it (no more retries) while its ejection lasts.
    for n in 0..10 {
        completes(fe, 1000 + n).await;
    }
    assert_eq!(retries(fe).await, 3.0);
    fe.assert_idle().await;
}

/// Prefill pool: a dead worker (1) and a simulated one (2); one simulated decode worker.
pub(crate) async fn a_refused_prefill_leg_is_placed_on_the_other_prefill_worker() {
    let mut fleet = fleet().await;
    let refusing = RefusingPort::bind();
    fleet
        .announce(PREFILL_ID, PoolRole::Prefill, &refusing.url)
        .await;
    fleet.sim(PREFILL_ID + 1, Role::Prefill, 16_384, 20.0).await;
    fleet.sim(DECODE_ID, Role::Decode, 16_384, 20.0).await;
    let fe = fleet.frontend().await;
    refused_three_times_then_ejected(&fe, PREFILL_ID).await;
    // Every prompt was computed by the live prefill worker and its KV pulled from there.
    let load = fe.load(PREFILL_ID + 1).await;
    assert_eq!(load["stranded"], 0, "{load}");
    assert_eq!(fe.load(DECODE_ID).await["pull_failures"], 0);
}

/// Decode pool: a dead worker (11) and a simulated one (12); one simulated prefill worker.
pub(crate) async fn a_refused_decode_leg_is_placed_on_the_other_decode_worker() {
    let mut fleet = fleet().await;
    fleet.sim(PREFILL_ID, Role::Prefill, 16_384, 20.0).await;
    let refusing = RefusingPort::bind();
    fleet
        .announce(DECODE_ID, PoolRole::Decode, &refusing.url)
        .await;
    fleet.sim(DECODE_ID + 1, Role::Decode, 16_384, 20.0).await;
    let fe = fleet.frontend().await;
    refused_three_times_then_ejected(&fe, DECODE_ID).await;
    // The live decode worker pulled every prompt's KV from the prefill worker.
    let decode = fe.load(DECODE_ID + 1).await;
    assert_eq!(decode["pull_failures"], 0, "{decode}");
    assert_eq!(decode["prefill_tokens"], 0, "{decode}");
    assert_eq!(fe.load(PREFILL_ID).await["stranded"], 0);
}
