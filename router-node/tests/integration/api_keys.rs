//! API keys at the HTTP frontend, over real HTTP: a reqwest client against the app on
//! 127.0.0.1:0 with a real RouterActor and a stand-in worker, keys generated as
//! `router-node keys new` makes them. 401 without a key or with a wrong one (the worker never
//! sees such a request), 200 with a good one, 403 for a class the key may not use (from the
//! header, or chosen by a classifier), the key's default class, 429 with `Retry-After` over
//! the requests and the tokens rates, 413 over the tokens burst, a node without keys open
//! as before, and what metrics and `/debug/state` show (names, never keys).

use crate::support;
use crate::support::{Node, PROFILE, StandInWorker, error_of, spawn_node_tuned, spawn_worker};
use router_core::PolicyProfile;
use router_node::auth::{KeyStore, generate_key, hash_key, to_hex};
use router_node::frontend::Limits;
use router_tokenizer::Prompter;
use serde_json::{Value, json};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// A key's `[[keys]]` entry: `rest` is its classes, default class and limits.
fn entry(name: &str, key: &str, rest: &str) -> String {
    format!(
        "[[keys]]\nname = \"{name}\"\nsha256 = \"{}\"\n{rest}\n",
        to_hex(&hash_key(key))
    )
}

/// A node over one stand-in worker, under `profile`, requiring the keys of `keys_file`.
async fn keyed_node(profile: &str, keys_file: &str) -> (Node, StandInWorker) {
    let worker = spawn_worker(2, Duration::from_millis(1)).await;
    let policy = Arc::new(PolicyProfile::from_toml_str(profile).unwrap());
    let keys = KeyStore::from_text(Path::new("keys.toml"), keys_file, policy).unwrap();
    let node = spawn_node_tuned(
        &[&worker.url],
        Limits::default(),
        Prompter::default(),
        profile,
        |state| state.with_auth(Arc::new(keys)),
    )
    .await;
    (node, worker)
}

fn completion(node: &Node, key: Option<&str>, body: Value) -> reqwest::RequestBuilder {
    let call = node.post("/v1/completions").json(&body);
    match key {
        Some(key) => call.bearer_auth(key),
        None => call,
    }
}

/// Sends `body` to `/v1/completions` with `key`.
async fn send(node: &Node, key: Option<&str>, body: Value) -> reqwest::Response {
    completion(node, key, body).send().await.unwrap()
}

/// A 429's `Retry-After`, in seconds.
fn retry_after(response: &reqwest::Response) -> u64 {
    response.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap()
}

fn small() -> Value {
    json!({"model": "m", "prompt": "hello", "max_tokens": 4})
}

async fn metrics(node: &Node) -> String {
    node.admin_get("/metrics").await.text().await.unwrap()
}

#[tokio::test]
async fn without_a_valid_key_the_api_is_401_and_the_probes_stay_open() {
    let key = generate_key().unwrap();
    let (node, worker) = keyed_node(
        PROFILE,
        &entry("team-a", &key, "classes = [\"interactive\"]"),
    )
    .await;
    let wrong = generate_key().unwrap();
    let cases = [
        (None, "missing_api_key", "Bearer"),
        (Some(format!("Basic {key}")), "missing_api_key", "Bearer"),
        (Some("Bearer ".to_owned()), "missing_api_key", "Bearer"),
        (
            Some(format!("Bearer {wrong}")),
            "invalid_api_key",
            r#"Bearer error="invalid_token""#,
        ),
        (
            Some(format!("Bearer {key}x")),
            "invalid_api_key",
            r#"Bearer error="invalid_token""#,
        ),
    ];
    for (authorization, reason, challenge) in cases {
        let mut call = completion(&node, None, small());
        if let Some(value) = &authorization {
            call = call.header("authorization", value);
        }
        let response = call.send().await.unwrap();
        assert_eq!(response.status(), 401, "{authorization:?}");
        assert_eq!(response.headers()["www-authenticate"], challenge);
        // Refused before its body was read: the connection is not reused (a client that
        // reused it would find it closed under its next request).
        assert_eq!(
            response.headers()["connection"],
            "close",
            "{authorization:?}"
        );
        let text = response.text().await.unwrap();
        assert!(!text.contains(&key) && !text.contains(&wrong), "{text}");
        let error: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(error["error"]["type"], "authentication_error", "{text}");
        assert_eq!(error["error"]["reason"], reason, "{text}");
    }
    assert!(worker.seen.lock().unwrap().is_empty());
    // The model list needs the key too; the probes and operational routes do not.
    assert_eq!(node.get("/v1/models").await.status(), 401);
    let models = node
        .http
        .get(format!("{}/v1/models", node.url))
        .bearer_auth(&key)
        .send()
        .await
        .unwrap();
    assert_eq!(models.status(), 200);
    assert_eq!(node.get("/health").await.status(), 200);
    assert_eq!(node.admin_get("/metrics").await.status(), 200);
    assert_eq!(node.admin_get("/debug/state").await.status(), 200);
    let _ = node.ready.send(true);
    assert_eq!(node.get("/ready").await.status(), 200);
    let text = metrics(&node).await;
    assert!(
        text.contains(r#"switchyard_auth_requests_total{key="none",outcome="unauthenticated"} 6"#),
        "{text}"
    );
    node.assert_idle().await;
}

#[tokio::test]
async fn a_good_key_gets_its_answer_and_a_class_it_may_not_use_is_403() {
    let key = generate_key().unwrap();
    let (node, worker) = keyed_node(
        PROFILE,
        &entry("team-a", &key, "classes = [\"interactive\", \"realtime\"]"),
    )
    .await;
    let ok = send(
        &node,
        Some(&key),
        json!({"model": "m", "prompt": "hi", "stream": true}),
    )
    .await;
    assert_eq!(ok.status(), 200);
    assert_eq!(
        ok.text().await.unwrap().matches(r#""text":"tok""#).count(),
        2
    );
    // Another class by header: refused before the worker, naming the class and the key.
    let denied = completion(&node, Some(&key), small())
        .header("x-policy-class", "batch")
        .send()
        .await
        .unwrap();
    assert_eq!(denied.status(), 403);
    let error = error_of(denied).await;
    assert_eq!(error["reason"], "class_not_entitled");
    assert_eq!(error["class"], "batch");
    let message = error["message"].as_str().unwrap();
    assert!(
        message.contains("`batch`") && message.contains("`team-a`"),
        "{message}"
    );
    assert!(message.contains("interactive, realtime"), "{message}");
    // A listed class by header runs; an unknown one is still a 400.
    let listed = completion(&node, Some(&key), small())
        .header("x-policy-class", "realtime")
        .send()
        .await
        .unwrap();
    assert_eq!(listed.status(), 200);
    // The client's key stays at the router: workers get neither it nor an Authorization.
    for seen in worker.seen.lock().unwrap().iter() {
        assert_eq!(seen.authorization, None);
        assert!(!seen.body.to_string().contains(&key));
    }
    let unknown = completion(&node, Some(&key), small())
        .header("x-policy-class", "gold")
        .send()
        .await
        .unwrap();
    assert_eq!(unknown.status(), 400);
    assert_eq!(worker.seen.lock().unwrap().len(), 2);
    let text = metrics(&node).await;
    for line in [
        r#"switchyard_auth_requests_total{key="team-a",outcome="ok"} 3"#,
        r#"switchyard_auth_requests_total{key="team-a",outcome="forbidden"} 1"#,
        r#"switchyard_http_rejections_total{class="batch",reason="class_not_entitled"} 1"#,
        "switchyard_auth_keys 1",
    ] {
        assert!(text.contains(line), "{line} missing:\n{text}");
    }
    assert!(!text.contains(&key) && !text.contains(&to_hex(&hash_key(&key))));
    node.assert_idle().await;
}

#[tokio::test]
async fn a_key_that_names_its_models_may_use_only_those() {
    let key = generate_key().unwrap();
    let (node, worker) = keyed_node(
        PROFILE,
        &entry(
            "sql-team",
            &key,
            "classes = [\"interactive\"]\nmodels = [\"m\", \"sql\"]",
        ),
    )
    .await;
    assert_eq!(send(&node, Some(&key), small()).await.status(), 200);
    let other = json!({"model": "big-model", "prompt": "hello", "max_tokens": 4});
    let refused = send(&node, Some(&key), other).await;
    assert_eq!(refused.status(), 403);
    let error = error_of(refused).await;
    assert_eq!(error["reason"], "model_not_entitled", "{error}");
    let message = error["message"].as_str().unwrap();
    assert!(
        message.contains("big-model") && message.contains("sql-team"),
        "{message}"
    );
    assert_eq!(
        worker.seen.lock().unwrap().len(),
        1,
        "the refused one never reached it"
    );
    node.assert_idle().await;
}

#[tokio::test]
async fn the_keys_default_class_runs_requests_that_name_none() {
    let key = generate_key().unwrap();
    let (node, _worker) = keyed_node(
        PROFILE,
        &entry(
            "nightly",
            &key,
            "classes = [\"interactive\", \"batch\"]\ndefault_class = \"batch\"",
        ),
    )
    .await;
    let plain = send(&node, Some(&key), small()).await;
    assert_eq!(plain.status(), 200);
    let named = completion(&node, Some(&key), small())
        .header("x-policy-class", "interactive")
        .send()
        .await
        .unwrap();
    assert_eq!(named.status(), 200);
    let text = metrics(&node).await;
    for line in [
        r#"switchyard_http_requests_total{endpoint="completions",class="batch"} 1"#,
        r#"switchyard_http_requests_total{endpoint="completions",class="interactive"} 1"#,
    ] {
        assert!(text.contains(line), "{line} missing:\n{text}");
    }
    node.assert_idle().await;
}

#[tokio::test]
async fn over_the_request_rate_is_429_with_the_wait_in_retry_after() {
    let (slow, other) = (generate_key().unwrap(), generate_key().unwrap());
    // One request per 20 s: the second comes long before the bucket refills.
    let keys = entry(
        "slow",
        &slow,
        "classes = [\"interactive\"]\nrequests_per_s = 0.05",
    ) + &entry("other", &other, "classes = [\"interactive\"]");
    let (node, worker) = keyed_node(PROFILE, &keys).await;
    let first = send(&node, Some(&slow), small()).await;
    assert_eq!(first.status(), 200);
    let second = send(&node, Some(&slow), small()).await;
    assert_eq!(second.status(), 429);
    let after: u64 = retry_after(&second);
    assert!((15..=20).contains(&after), "Retry-After {after}");
    let error = error_of(second).await;
    assert_eq!(error["reason"], "key_requests_rate");
    let message = error["message"].as_str().unwrap();
    assert!(
        message.contains("`slow`") && message.contains("0.05 requests/s"),
        "{message}"
    );
    // Another key has its own bucket.
    let third = send(&node, Some(&other), small()).await;
    assert_eq!(third.status(), 200);
    assert_eq!(worker.seen.lock().unwrap().len(), 2);
    let text = metrics(&node).await;
    assert!(
        text.contains(r#"switchyard_auth_requests_total{key="slow",outcome="requests_limited"} 1"#),
        "{text}"
    );
    node.assert_idle().await;
}

#[tokio::test]
async fn over_the_token_rate_is_429_and_over_the_burst_413() {
    let key = generate_key().unwrap();
    let (node, worker) = keyed_node(
        PROFILE,
        &entry(
            "tokens",
            &key,
            "classes = [\"interactive\"]\ntokens_per_s = 1\ntokens_burst = 100",
        ),
    )
    .await;
    // 50 prompt tokens + 10 output: 60 of the 100.
    let prompt: Vec<u32> = (1..=50).collect();
    let body = json!({"model": "m", "prompt": prompt, "max_tokens": 10});
    let first = send(&node, Some(&key), body.clone()).await;
    assert_eq!(first.status(), 200);
    // 40 left, 60 needed: about 20 s at 1 token/s.
    let second = send(&node, Some(&key), body).await;
    assert_eq!(second.status(), 429);
    let after: u64 = retry_after(&second);
    assert!((15..=20).contains(&after), "Retry-After {after}");
    assert_eq!(error_of(second).await["reason"], "key_tokens_rate");
    // More than the burst can never pass: 413, and nothing was taken.
    let long: Vec<u32> = (1..=200).collect();
    let too_big = send(
        &node,
        Some(&key),
        json!({"model": "m", "prompt": long, "max_tokens": 1}),
    )
    .await;
    assert_eq!(too_big.status(), 413);
    let error = error_of(too_big).await;
    assert_eq!(error["reason"], "key_tokens_burst");
    let message = error["message"].as_str().unwrap();
    assert!(message.contains("200 prompt + 1 output"), "{message}");
    let fits = send(
        &node,
        Some(&key),
        json!({"model": "m", "prompt": [1, 2, 3], "max_tokens": 30}),
    )
    .await;
    assert_eq!(fits.status(), 200);
    assert_eq!(worker.seen.lock().unwrap().len(), 2);
    let text = metrics(&node).await;
    assert!(
        text.contains(r#"switchyard_auth_requests_total{key="tokens",outcome="tokens_limited"} 2"#),
        "{text}"
    );
    node.assert_idle().await;
}

#[tokio::test]
async fn a_class_a_classifier_picks_must_be_one_the_key_may_use() {
    let profile = format!(
        "{PROFILE}\n[[classifiers]]\nname = \"nightly-jobs\"\nkey = \"nightly\"\nclass = \"batch\"\n\n\
         [[classifiers]]\nname = \"long\"\nprompt_tokens = {{ min = 100 }}\nclass = \"batch\"\n"
    );
    let (nightly, team) = (generate_key().unwrap(), generate_key().unwrap());
    let keys = entry("nightly", &nightly, "classes = [\"batch\"]")
        + &entry("team-a", &team, "classes = [\"interactive\"]");
    let (node, worker) = keyed_node(&profile, &keys).await;
    assert_eq!(send(&node, Some(&nightly), small()).await.status(), 200);
    assert_eq!(send(&node, Some(&team), small()).await.status(), 200);
    // A long prompt is batch by rule, which team-a may not use.
    let long: Vec<u32> = (1..=150).collect();
    let denied = send(&node, Some(&team), json!({"model": "m", "prompt": long})).await;
    assert_eq!(denied.status(), 403);
    let error = error_of(denied).await;
    assert_eq!(error["reason"], "class_not_entitled");
    assert_eq!(error["class"], "batch");
    assert_eq!(worker.seen.lock().unwrap().len(), 2);
    let text = metrics(&node).await;
    for line in [
        r#"switchyard_classified_requests_total{class="batch",rule="nightly-jobs"} 1"#,
        r#"switchyard_classified_requests_total{class="interactive",rule="none"} 1"#,
    ] {
        assert!(text.contains(line), "{line} missing:\n{text}");
    }
    node.assert_idle().await;
}

#[tokio::test]
async fn debug_state_names_the_keys_and_their_classes_but_no_secret() {
    let key = generate_key().unwrap();
    let (node, _worker) = keyed_node(
        PROFILE,
        &entry(
            "team-a",
            &key,
            "classes = [\"interactive\"]\nrequests_per_s = 3",
        ),
    )
    .await;
    let text = node.admin_get("/debug/state").await.text().await.unwrap();
    assert!(!text.contains(&key) && !text.contains(&to_hex(&hash_key(&key))));
    let state: Value = serde_json::from_str(&text).unwrap();
    let auth = &state["auth"];
    assert_eq!(auth["mode"], "keys", "{auth}");
    assert_eq!(auth["keys"][0]["name"], "team-a", "{auth}");
    assert_eq!(auth["keys"][0]["classes"], json!(["interactive"]), "{auth}");
    assert_eq!(auth["keys"][0]["requests"]["burst"], 3, "{auth}");
}

#[tokio::test]
async fn without_keys_the_node_is_open_as_before() {
    let worker = spawn_worker(1, Duration::from_millis(1)).await;
    let node = support::spawn_node(&[&worker.url], Limits::default()).await;
    let plain = node.call("/v1/completions", small()).await;
    assert_eq!(plain.status(), 200);
    let with_any = send(&node, Some("anything"), small()).await;
    assert_eq!(with_any.status(), 200);
    assert_eq!(node.get("/v1/models").await.status(), 200);
    let state: Value = node.admin_get("/debug/state").await.json().await.unwrap();
    assert_eq!(state["auth"]["mode"], "open");
    let text = metrics(&node).await;
    assert!(text.contains("switchyard_auth_keys 0"), "{text}");
    assert!(!text.contains("switchyard_auth_requests_total{"), "{text}");
    node.assert_idle().await;
}
