//! Prefill/decode KV hand-over over HTTP (see the module doc of `worker`): reading a
//! request's `kv_transfer_params` (vLLM) and bootstrap fields (SGLang), the pull routes a
//! prefill worker serves, and the pulls a decode worker makes before it decodes.

use super::{Refusal, WorkerState, bad, engine_gone, error};
use crate::engine::Role;
use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use router_core::RequestId;
use serde_json::{Map, Value, json};

/// SGLang convention: how long a decode worker waits for the room's KV to be staged (both
/// legs start at once), at most its pull timeout.
pub(super) const BOOTSTRAP_WAIT: std::time::Duration = std::time::Duration::from_secs(2);
/// Between two bootstrap pulls answered "not staged (yet)".
const BOOTSTRAP_RETRY: std::time::Duration = std::time::Duration::from_millis(10);
/// The high half of the request id a prefill worker stages a bootstrap room's KV under
/// (the low half is the room); never a UUID v7 of an ordinary request.
const ROOM_ID_TAG: u64 = 0x5347_4c41_4e47_0000;

/// The request id a bootstrap room's KV is staged under.
pub(super) fn room_id(room: u64) -> RequestId {
    RequestId(uuid::Uuid::from_u64_pair(ROOM_ID_TAG, room))
}

/// The SGLang fields of a request (`bootstrap_room`, with `bootstrap_host` and
/// `bootstrap_port` on the decode side).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Bootstrap {
    pub(super) room: u64,
    /// Host and port of the prefill worker (absent on a prefill-only body).
    pub(super) peer: Option<(String, u16)>,
}

pub(super) fn parse_bootstrap(body: &Map<String, Value>) -> Result<Option<Bootstrap>, Refusal> {
    let room = match body.get("bootstrap_room") {
        None | Some(Value::Null) => return Ok(None),
        Some(room) => room
            .as_u64()
            .ok_or_else(|| bad("bootstrap_room", "must be an unsigned 64-bit integer"))?,
    };
    let host = match body.get("bootstrap_host") {
        None | Some(Value::Null) => None,
        Some(Value::String(h)) if !h.is_empty() => Some(h.clone()),
        Some(_) => return Err(bad("bootstrap_host", "must be a non-empty string")),
    };
    let port = match body.get("bootstrap_port") {
        None | Some(Value::Null) => None,
        Some(p) => Some(
            p.as_u64()
                .and_then(|p| u16::try_from(p).ok())
                .filter(|p| *p != 0)
                .ok_or_else(|| bad("bootstrap_port", "must be a port number"))?,
        ),
    };
    let peer = match (host, port) {
        (Some(host), Some(port)) => Some((host, port)),
        (None, None) => None,
        (None, Some(_)) => return Err(bad("bootstrap_host", "must be given with bootstrap_port")),
        (Some(_), None) => return Err(bad("bootstrap_port", "must be given with bootstrap_host")),
    };
    Ok(Some(Bootstrap { room, peer }))
}

/// What `kv_transfer_params` asks of this request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Transfer {
    None,
    /// Prefill leg: stage the KV for a decode worker.
    RemoteDecode,
    /// Decode leg: pull the KV from the prefill worker first.
    RemotePrefill {
        host: String,
        port: u16,
        request_id: String,
    },
}

pub(super) fn parse_transfer(body: &Map<String, Value>) -> Result<Transfer, Refusal> {
    const F: &str = "kv_transfer_params";
    let params = match body.get(F) {
        None | Some(Value::Null) => return Ok(Transfer::None),
        Some(Value::Object(p)) => p,
        Some(_) => return Err(bad(F, "must be an object")),
    };
    let flag = |name: &str| -> Result<bool, Refusal> {
        match params.get(name) {
            None | Some(Value::Null) => Ok(false),
            Some(Value::Bool(b)) => Ok(*b),
            Some(_) => Err(bad(&format!("{F}.{name}"), "must be a boolean")),
        }
    };
    let remote_decode = flag("do_remote_decode")?;
    let remote_prefill = flag("do_remote_prefill")?;
    if remote_prefill {
        let host = match params.get("remote_host") {
            Some(Value::String(h)) if !h.is_empty() => h.clone(),
            _ => {
                return Err(bad(
                    &format!("{F}.remote_host"),
                    "must be a non-empty string",
                ));
            }
        };
        let port = params
            .get("remote_port")
            .and_then(Value::as_u64)
            .and_then(|p| u16::try_from(p).ok())
            .filter(|p| *p != 0)
            .ok_or_else(|| bad(&format!("{F}.remote_port"), "must be a port number"))?;
        let request_id = match params.get("request_id") {
            Some(Value::String(id)) if uuid::Uuid::parse_str(id).is_ok() => id.clone(),
            _ => return Err(bad(&format!("{F}.request_id"), "must be a UUID string")),
        };
        Ok(Transfer::RemotePrefill {
            host,
            port,
            request_id,
        })
    } else if remote_decode {
        Ok(Transfer::RemoteDecode)
    } else {
        Ok(Transfer::None)
    }
}

pub(super) async fn pull(
    State(state): State<WorkerState>,
    Path(request_id): Path<String>,
) -> Response {
    let Ok(uuid) = uuid::Uuid::parse_str(&request_id) else {
        return bad("request_id", "must be a UUID").into_response();
    };
    if state.cfg.role != Role::Prefill {
        return error(
            StatusCode::NOT_FOUND,
            "not_staged",
            "this worker is not a prefill worker",
        );
    }
    match state.engine.release(RequestId(uuid)).await {
        Ok(true) => Json(json!({"request_id": request_id, "released": true})).into_response(),
        Ok(false) => error(
            StatusCode::NOT_FOUND,
            "not_staged",
            format!("no staged KV for {request_id} (unknown, pulled already, or expired)"),
        ),
        Err(_) => engine_gone(),
    }
}

/// SGLang convention: the decode side took the KV staged under `room`.
pub(super) async fn bootstrap(
    State(state): State<WorkerState>,
    Path(room): Path<String>,
) -> Response {
    let Ok(room) = room.parse::<u64>() else {
        return bad("room", "must be an unsigned 64-bit integer").into_response();
    };
    if state.cfg.role != Role::Prefill {
        return error(
            StatusCode::NOT_FOUND,
            "not_staged",
            "this worker is not a prefill worker",
        );
    }
    match state.engine.release(room_id(room)).await {
        Ok(true) => Json(json!({"bootstrap_room": room, "released": true})).into_response(),
        Ok(false) => error(
            StatusCode::NOT_FOUND,
            "not_staged",
            format!("no staged KV in room {room} (not yet, pulled already, or expired)"),
        ),
        Err(_) => engine_gone(),
    }
}

/// Tells the prefill worker we took its staged KV; false when it did not confirm.
pub(super) async fn pull_kv(
    http: &reqwest::Client,
    host: &str,
    port: u16,
    request_id: &str,
) -> bool {
    let host = if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]")
    } else {
        host.to_owned()
    };
    let url = format!("http://{host}:{port}/v1/kv/pull/{request_id}");
    match http.post(&url).send().await {
        Ok(response) if response.status().is_success() => true,
        Ok(response) => {
            tracing::debug!(%url, status = %response.status(), "KV pull refused");
            false
        }
        Err(e) => {
            tracing::debug!(%url, error = %e, "KV pull failed");
            false
        }
    }
}

/// SGLang convention: takes the KV staged in `room` on the prefill worker at `host:port`,
/// retrying while it is not staged yet (both legs start at once) for up to `wait`; false
/// when it never came (the prompt is then recomputed).
pub(super) async fn bootstrap_pull(
    http: &reqwest::Client,
    host: &str,
    port: u16,
    room: u64,
    wait: std::time::Duration,
) -> bool {
    let host = if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]")
    } else {
        host.to_owned()
    };
    let url = format!("http://{host}:{port}/v1/kv/bootstrap/{room}");
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        let call = http.post(&url).timeout(wait).send();
        match tokio::time::timeout_at(deadline, call).await {
            Ok(Ok(response)) if response.status().is_success() => return true,
            Ok(Ok(response)) if response.status() == StatusCode::NOT_FOUND => {
                tracing::trace!(%url, "KV not staged yet");
            }
            Ok(Ok(response)) => {
                tracing::debug!(%url, status = %response.status(), "bootstrap pull refused");
                return false;
            }
            Ok(Err(e)) => tracing::debug!(%url, error = %e, "bootstrap pull failed"),
            Err(_) => {
                tracing::debug!(%url, "bootstrap pull timed out");
                return false;
            }
        }
        if tokio::time::Instant::now() + BOOTSTRAP_RETRY >= deadline {
            tracing::debug!(%url, "the room's KV was never staged");
            return false;
        }
        tokio::time::sleep(BOOTSTRAP_RETRY).await;
    }
}

#[cfg(test)]
mod bootstrap_tests {
    use super::*;

    fn body(v: Value) -> Map<String, Value> {
        match v {
            Value::Object(m) => m,
            _ => Map::new(),
        }
    }

    #[test]
    fn bootstrap_fields_are_parsed_and_checked() {
        assert_eq!(parse_bootstrap(&body(json!({"x": 1}))).ok(), Some(None));
        assert_eq!(
            parse_bootstrap(&body(json!({"bootstrap_room": 7}))).ok(),
            Some(Some(Bootstrap {
                room: 7,
                peer: None
            }))
        );
        assert_eq!(
            parse_bootstrap(&body(json!({"bootstrap_room": 7, "bootstrap_host": "h",
                                         "bootstrap_port": 9})))
            .ok(),
            Some(Some(Bootstrap {
                room: 7,
                peer: Some(("h".to_owned(), 9))
            }))
        );
        for bad in [
            json!({"bootstrap_room": -1}),
            json!({"bootstrap_room": "7"}),
            json!({"bootstrap_room": 7, "bootstrap_host": "h"}),
            json!({"bootstrap_room": 7, "bootstrap_port": 9}),
            json!({"bootstrap_room": 7, "bootstrap_host": "", "bootstrap_port": 9}),
            json!({"bootstrap_room": 7, "bootstrap_host": "h", "bootstrap_port": 70000}),
        ] {
            assert!(parse_bootstrap(&body(bad.clone())).is_err(), "{bad}");
        }
        assert_ne!(room_id(7), room_id(8));
    }
}
