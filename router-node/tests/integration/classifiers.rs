//! Request classifiers behind the HTTP frontend, in a disaggregated fleet (a node's prefill
//! and decode RouterActors on a `LocalBus`, simulated workers, real HTTP): a rule assigns a
//! class with a decode fraction to requests that carry no class header, and the prefill hop
//! (the only admission gate) gates on it; a client cannot promote itself by header unless the
//! matched rule allows that class; refusals answer with the rule's status and name it.

use crate::support::error_of;
use router_node::frontend::DisaggConvention;
use router_sim::Role;
use serde_json::{Value, json};

// Included once per module that uses it (with that module's `CONVENTION`), not by mistake.
#[allow(clippy::duplicate_mod)]
#[path = "../support/disagg.rs"]
#[allow(dead_code)]
mod disagg;

use disagg::*;

const CONVENTION: DisaggConvention = DisaggConvention::Vllm;

/// `open` (the default) has no thresholds; `guarded` may commit half a decode rank's KV;
/// tenant `acme` runs as `guarded` and may ask for `premium`.
const PROFILE: &str = r#"
default_class = "open"

[[classes]]
name = "open"
slo_ms = 20000
quantum = 100

[[classes]]
name = "guarded"
slo_ms = 20000
quantum = 100
prefill_busy_threshold = 100000
decode_busy_threshold_frac = 0.5

[[classes]]
name = "premium"
slo_ms = 20000
quantum = 100

[[classifiers]]
name = "too-long"
prompt_tokens = { min = 2000 }
refuse = { status = 413, message = "prompts over 2000 tokens are not served here" }

[[classifiers]]
name = "acme"
header = { name = "x-tenant", value = "acme" }
class = "guarded"
allow_header_override = ["premium"]
"#;

/// A fleet with `decode_kv` decode blocks behind the frontend, under [`PROFILE`].
async fn classified_fleet(decode_kv: usize) -> Frontend {
    let mut fleet = fleet_with(PROFILE).await;
    fleet.sim(PREFILL_ID, Role::Prefill, 16_384, 20.0).await;
    fleet.sim(DECODE_ID, Role::Decode, decode_kv, 0.5).await;
    fleet.frontend().await
}

/// Two requests of 20 prompt blocks and 60 output tokens from `tenant`, the second sent
/// once the first holds decode room; whether the second waited at the prefill gate.
async fn second_waits(fe: &Frontend, tenant: &str) -> bool {
    let send = |seed: u32| {
        let call = fe
            .post("/v1/completions")
            .header("x-tenant", tenant)
            .json(&json!({"model": "sim", "prompt": prompt(seed, 20), "max_tokens": 60}));
        tokio::spawn(async move { call.send().await.unwrap().status().as_u16() })
    };
    let first = send(1);
    let decode = fe.decode.clone();
    eventually("the first request holds decode room", || async {
        let d = ledger(&decode).await;
        d.bookings + d.reservations == 1
    })
    .await;
    let second = send(2);
    let (prefill, decode) = (fe.prefill.clone(), fe.decode.clone());
    eventually("the second request waits or holds decode room", || async {
        let d = ledger(&decode).await;
        prefill.observe().await.unwrap().waiting_replies == 1 || d.bookings + d.reservations == 2
    })
    .await;
    let waited = fe.prefill.observe().await.unwrap().waiting_replies == 1;
    assert_eq!(first.await.unwrap(), 200);
    assert_eq!(second.await.unwrap(), 200);
    fe.assert_idle().await;
    waited
}

async fn scrape(fe: &Frontend) -> String {
    let url = format!("{}/metrics", fe.admin_url);
    fe.http.get(url).send().await.unwrap().text().await.unwrap()
}

async fn debug_state(fe: &Frontend) -> Value {
    let url = format!("{}/debug/state", fe.admin_url);
    fe.http.get(url).send().await.unwrap().json().await.unwrap()
}

#[tokio::test]
async fn a_class_set_by_a_rule_gates_the_prefill_hop_on_decode_room() {
    // 64 decode blocks: `guarded` may commit 32; each request needs 20 + 4.
    let fe = classified_fleet(64).await;
    assert!(
        second_waits(&fe, "acme").await,
        "classified `guarded` without any class header: the second must wait"
    );
    let stats = fe.prefill.observe().await.unwrap().scheduler.stats;
    assert!(stats.queued >= 1, "{stats:?}");

    // Another tenant matches no rule: the default class, no decode fraction, no wait.
    assert!(!second_waits(&fe, "initech").await);

    let metrics = scrape(&fe).await;
    for line in [
        r#"switchyard_classified_requests_total{class="guarded",rule="acme"} 2"#,
        r#"switchyard_classified_requests_total{class="open",rule="none"} 2"#,
    ] {
        assert!(metrics.contains(line), "{line} in\n{metrics}");
    }
    let state = debug_state(&fe).await;
    assert_eq!(
        state["classifiers"]["acme"]["classified"]["guarded"], 2,
        "{state}"
    );
    assert_eq!(
        state["classifiers"]["none"]["classified"]["open"], 2,
        "{state}"
    );
}

#[tokio::test]
async fn a_client_cannot_promote_itself_unless_the_matched_rule_allows_it() {
    let fe = classified_fleet(16_384).await;
    let ask = |tenant: Option<&str>, class: &str| {
        let mut call = fe
            .post("/v1/completions")
            .header("x-policy-class", class)
            .json(&json!({"model": "sim", "prompt": prompt(3, 2), "max_tokens": 2}));
        if let Some(tenant) = tenant {
            call = call.header("x-tenant", tenant);
        }
        call.send()
    };

    let refused = ask(None, "premium").await.unwrap();
    assert_eq!(refused.status(), 403);
    let err = error_of(refused).await;
    assert_eq!(err["reason"], "class_not_permitted", "{err}");
    assert_eq!(err["class"], "premium", "{err}");

    let refused = ask(Some("acme"), "open").await.unwrap();
    assert_eq!(refused.status(), 403);
    let err = error_of(refused).await;
    assert_eq!(err["rule"], "acme", "{err}");

    let unknown = ask(Some("acme"), "platinum").await.unwrap();
    assert_eq!(unknown.status(), 400);
    assert_eq!(error_of(unknown).await["reason"], "unknown_class");

    let allowed = ask(Some("acme"), "premium").await.unwrap();
    assert_eq!(allowed.status(), 200);
    let metrics = scrape(&fe).await;
    let line = r#"switchyard_classified_requests_total{class="premium",rule="acme"} 1"#;
    assert!(metrics.contains(line), "{line} in\n{metrics}");
    fe.assert_idle().await;
}

#[tokio::test]
async fn a_refusing_rule_answers_its_status_and_names_itself() {
    let fe = classified_fleet(16_384).await;
    let response = fe
        .post("/v1/completions")
        .header("x-tenant", "acme")
        .json(&json!({"model": "sim", "prompt": prompt(4, 125), "max_tokens": 2}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 413);
    let err = error_of(response).await;
    assert_eq!(err["rule"], "too-long", "{err}");
    assert_eq!(err["reason"], "refused_by_rule", "{err}");
    assert_eq!(
        err["message"], "prompts over 2000 tokens are not served here",
        "{err}"
    );
    let state = debug_state(&fe).await;
    assert_eq!(state["classifiers"]["too-long"]["refused"], 1, "{state}");
    // Nothing reached either pool.
    let stats = fe.prefill.observe().await.unwrap().scheduler.stats;
    assert_eq!(stats.admitted, 0, "{stats:?}");
    fe.assert_idle().await;
}
