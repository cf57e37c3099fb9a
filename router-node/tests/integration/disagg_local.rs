//! Conditional disaggregation through the frontend (vLLM convention): with the rule on, a
//! disaggregated request whose prompt is short, or mostly cached on a decode worker, or one
//! the prefill gate would make wait, goes straight to the decode worker, which prefills it
//! (the decode pool's class gate admits it); every other request takes a remote prefill. The
//! response says where (`x-switchyard-prefill`), and so does the metric.

use router_core::LocalPrefillRule;
use router_node::frontend::PREFILL_HEADER;
use router_sim::Role;
use serde_json::{Value, json};

// Included once per module that uses it (with that module's `CONVENTION`), not by mistake.
#[allow(clippy::duplicate_mod)]
#[path = "../support/disagg.rs"]
#[allow(dead_code)]
mod disagg;

use disagg::*;
const CONVENTION: router_node::frontend::DisaggConvention =
    router_node::frontend::DisaggConvention::Vllm;

/// Sends a completion of `prompt`; returns where its prefill ran.
async fn place_of(fe: &Frontend, prompt: &[u32]) -> String {
    let response = fe
        .post("/v1/completions")
        .json(&json!({"model": "sim", "prompt": prompt, "max_tokens": 4}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let place = response.headers()[PREFILL_HEADER]
        .to_str()
        .unwrap()
        .to_owned();
    let _: Value = response.json().await.unwrap();
    place
}

async fn requests(fe: &Frontend, id: u64) -> u64 {
    fe.load(id).await["requests"].as_u64().unwrap()
}

async fn metrics(fe: &Frontend) -> String {
    fe.http
        .get(format!("{}/metrics", fe.admin_url))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

#[tokio::test]
async fn short_or_mostly_cached_prompts_are_prefilled_by_the_decode_worker() {
    let mut fleet = fleet().await;
    fleet.sim(PREFILL_ID, Role::Prefill, 16_384, 20.0).await;
    fleet.sim(DECODE_ID, Role::Decode, 16_384, 20.0).await;
    // Fewer than 4 blocks (of 16 tokens) not cached on a decode worker: prefilled there.
    let fe = fleet
        .frontend_tuned(|state| {
            state.with_local_prefill(LocalPrefillRule {
                below_uncached_tokens: 64,
                when_prefill_waits: false,
            })
        })
        .await;

    assert_eq!(place_of(&fe, &prompt(1, 2)).await, "local");
    assert_eq!(requests(&fe, PREFILL_ID).await, 0, "no prefill leg");
    assert_eq!(requests(&fe, DECODE_ID).await, 1);

    let long = prompt(2, 20);
    assert_eq!(place_of(&fe, &long).await, "remote");
    assert_eq!(requests(&fe, PREFILL_ID).await, 1);

    // The decode worker now holds the long prompt (it pulled its KV): the same prompt with
    // two more blocks has 2 blocks not cached there.
    let mut longer = long.clone();
    longer.extend(prompt(3, 2));
    eventually("the decode worker's blocks are indexed", || async {
        let prompt = fe.decode.prompt(&longer, router_core::HashScope::NONE);
        fe.decode.cached_tokens(&prompt) >= 20 * 16
    })
    .await;
    assert_eq!(place_of(&fe, &longer).await, "local");
    assert_eq!(requests(&fe, PREFILL_ID).await, 1, "still one prefill leg");

    let text = metrics(&fe).await;
    for line in [
        r#"switchyard_disagg_prefills_total{place="local",reason="short_uncached"} 2"#,
        r#"switchyard_disagg_prefills_total{place="remote",reason="rule"} 1"#,
    ] {
        assert!(text.contains(line), "{line} missing:\n{text}");
    }
    fe.assert_idle().await;
}

/// A class whose prefill line is one request's worth: the second request would wait.
const BUSY_PROFILE: &str = r#"
default_class = "interactive"
[[classes]]
name = "interactive"
slo_ms = 20000
quantum = 100
prefill_busy_threshold = 100
decode_busy_threshold_frac = 0.5
"#;

#[tokio::test]
async fn a_request_the_prefill_gate_would_hold_goes_to_the_decode_gate() {
    let mut fleet = fleet_with(BUSY_PROFILE).await;
    // A slow prefill worker: the first request holds the prefill line a while.
    fleet.sim(PREFILL_ID, Role::Prefill, 16_384, 0.05).await;
    fleet.sim(DECODE_ID, Role::Decode, 16_384, 20.0).await;
    let fe = fleet
        .frontend_tuned(|state| {
            state.with_local_prefill(LocalPrefillRule {
                below_uncached_tokens: 0,
                when_prefill_waits: true,
            })
        })
        .await;
    let first = {
        let call = fe
            .post("/v1/completions")
            .json(&json!({"model": "sim", "prompt": prompt(4, 20), "max_tokens": 4}));
        tokio::spawn(async move {
            let response = call.send().await.unwrap();
            (
                response.status().as_u16(),
                response.headers()[PREFILL_HEADER]
                    .to_str()
                    .unwrap()
                    .to_owned(),
            )
        })
    };
    let prefill = fe.prefill.clone();
    eventually("the first request holds the prefill line", || async {
        ledger(&prefill).await.bookings == 1
    })
    .await;
    assert_eq!(place_of(&fe, &prompt(5, 20)).await, "local");
    assert_eq!(first.await.unwrap(), (200, "remote".to_owned()));
    let text = metrics(&fe).await;
    let line = r#"switchyard_disagg_prefills_total{place="local",reason="prefill_waits"} 1"#;
    assert!(text.contains(line), "{line} missing:\n{text}");
    fe.assert_idle().await;
}
