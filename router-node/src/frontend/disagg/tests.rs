//! The vLLM convention's bodies: the prefill leg's request and the transfer parameters it
//! must answer with.

use super::prefill::{prefill_body, transfer_params};
use super::*;
use router_core::Endpoint;
use serde_json::json;

#[test]
fn the_prefill_body_asks_for_one_token_and_a_remote_decode() {
    let request = ParsedRequest::parse(
        Endpoint::Chat,
        br#"{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true,
            "stream_options":{"include_usage":true},"max_completion_tokens":50,"x":1}"#,
    )
    .expect("valid");
    let body: Value = serde_json::from_slice(&prefill_body(&request)).expect("json");
    assert_eq!(body["stream"], false);
    assert_eq!(body["max_tokens"], 1);
    assert_eq!(body["max_completion_tokens"], 1);
    assert_eq!(body["x"], 1);
    assert!(body.get("stream_options").is_none());
    assert_eq!(body[KV_TRANSFER], json!({"do_remote_decode": true}));
}

#[test]
fn transfer_params_must_be_an_object_asking_for_a_remote_prefill() {
    let ok = br#"{"kv_transfer_params":{"do_remote_prefill":true,"remote_port":1}}"#;
    assert_eq!(
        transfer_params(ok).expect("ok")["remote_port"],
        1,
        "params kept"
    );
    for bad in [
        &b"data: {}"[..],
        br#"[1]"#,
        br#"{"choices":[]}"#,
        br#"{"kv_transfer_params":"x"}"#,
        br#"{"kv_transfer_params":{"do_remote_prefill":false}}"#,
    ] {
        assert!(
            transfer_params(bad).is_err(),
            "{}",
            String::from_utf8_lossy(bad)
        );
    }
}
