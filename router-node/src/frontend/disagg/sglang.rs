//! The SGLang convention of the disaggregated path ([`DisaggConvention::Sglang`]): both legs
//! booked, then sent at once, meeting at the prefill worker's bootstrap room (see the parent
//! module's doc for the whole sequence and its failure rules).
//!
//! [`DisaggConvention::Sglang`]: super::DisaggConvention::Sglang

use super::{
    Legs, PrefillHold, one_token_leg, prefill_answer, prefill_call, prefill_span, send_decode,
};
use crate::frontend::AppState;
use crate::frontend::admit::admit;
use crate::frontend::error::{ApiError, Stage};
use crate::frontend::openai::ParsedRequest;
use crate::frontend::placement::Placements;
use crate::frontend::proxy::BookingGuard;
use crate::metrics::RequestObserver;
use axum::body::{Body, Bytes};
use axum::response::Response;
use futures::{Stream, StreamExt};
use router_actors::RouterHandle;
use router_core::{Phase, RequestId, WorkerId};
use serde_json::{Map, Value, json};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::sync::OwnedSemaphorePermit;
use tracing::Instrument as _;

/// The SGLang convention: books the decode leg right after the prefill admission, then runs
/// both legs at once (see the module doc). A decode worker that refuses the connection gets
/// the leg placed once more on another decode worker, in the same bootstrap room
/// ([`send_decode`]); a prefill worker that refuses it ends the attempt with
/// `prefill_connect` (both bookings and the reservation released) for the caller to place
/// both legs again.
#[allow(clippy::too_many_arguments)]
pub(super) async fn legs(
    state: &AppState,
    decode: &RouterHandle,
    legs: &Legs<'_>,
    id: RequestId,
    prefill_worker: WorkerId,
    mut hold: PrefillHold,
    permit: &mut Option<OwnedSemaphorePermit>,
    observer: &mut RequestObserver,
) -> Result<Response, ApiError> {
    let mut placements = Placements::new(state);
    let mut staged = legs.route(state, id, Phase::Decode { staged: true });
    placements.narrow(state, &mut staged);
    let admission = admit(state, decode, legs.class, staged).await?;
    // Owned at once: an early return below (a prefill worker gone from the directory, a
    // prefill call that cannot be built) releases the decode booking as it drops.
    let booking = BookingGuard::new(decode.clone(), id, state.metrics.clone());
    hold.converted();
    let (host, port) = bootstrap_address(state, prefill_worker)?;
    let room = uuid::Uuid::new_v4().as_u64_pair().0;
    let mut request = legs.request.clone();
    request.body.extend(bootstrap_fields(&host, port, room));
    let leg = prefill_span(prefill_worker);
    let call = prefill_call(
        state,
        &request,
        prefill_worker,
        legs.headers,
        sglang_prefill_body(&request),
        &leg,
    )?;
    let mut prefill: PrefillFuture =
        Box::pin(prefill_answer(state, call, prefill_worker).instrument(leg));
    let first = (booking, admission.rank.worker);
    let decode_leg = send_decode(
        state,
        decode,
        legs,
        &request,
        (first, placements),
        permit,
        observer,
    );
    tokio::pin!(decode_leg);
    tokio::select! {
        answer = &mut prefill => {
            // A failure drops the decode leg (its guard releases the decode booking) and
            // the hold (the prefill booking).
            answer?;
            state.breaker.reached(prefill_worker);
            hold.staged();
            drop(hold);
            decode_leg.await
        }
        response = &mut decode_leg => {
            // A failure drops the prefill leg's request and the hold.
            let response = response?;
            Ok(with_prefill(response, prefill, hold))
        }
    }
}

/// The three SGLang fields both legs carry.
fn bootstrap_fields(host: &str, port: u16, room: u64) -> Map<String, Value> {
    let mut fields = Map::new();
    fields.insert("bootstrap_host".to_owned(), json!(host));
    fields.insert("bootstrap_port".to_owned(), json!(port));
    fields.insert("bootstrap_room".to_owned(), json!(room));
    fields
}

/// The prefill worker's body under the SGLang convention (`request` carries the bootstrap
/// fields already).
fn sglang_prefill_body(request: &ParsedRequest) -> Vec<u8> {
    request.leg_body(&one_token_leg(request))
}

/// The host and port of `worker`'s endpoint.
fn bootstrap_address(state: &AppState, worker: WorkerId) -> Result<(String, u16), ApiError> {
    let base = state
        .directory
        .endpoint(worker)
        .ok_or_else(|| ApiError::no_endpoint(worker))?;
    let bad = |why: &str| {
        ApiError::upstream(
            Stage::Dispatch,
            "prefill_bad_endpoint",
            format!("prefill {worker}: endpoint {base:?} {why}"),
        )
    };
    let url: axum::http::Uri = base.parse().map_err(|_| bad("is not a URL"))?;
    let host = url
        .host()
        .map(|h| h.trim_start_matches('[').trim_end_matches(']').to_owned())
        .filter(|h| !h.is_empty())
        .ok_or_else(|| bad("has no host"))?;
    let port = match (url.port_u16(), url.scheme_str()) {
        (Some(port), _) => port,
        (None, Some("http")) => 80,
        (None, Some("https")) => 443,
        _ => return Err(bad("has no port")),
    };
    Ok((host, port))
}

/// The prefill leg in flight (owns everything it needs).
type PrefillFuture = Pin<Box<dyn Future<Output = Result<Vec<u8>, ApiError>> + Send>>;

/// The decode leg's response, whose body also drives the still unanswered prefill leg: its
/// answer ends the prefill booking, its failure cuts the stream.
fn with_prefill(response: Response, prefill: PrefillFuture, hold: PrefillHold) -> Response {
    let (parts, body) = response.into_parts();
    let watched = PrefillWatch {
        inner: Some(body.into_data_stream()),
        prefill: Some(prefill),
        hold: Some(hold),
    };
    Response::from_parts(parts, Body::from_stream(watched))
}

/// See [`with_prefill`].
struct PrefillWatch {
    inner: Option<axum::body::BodyDataStream>,
    prefill: Option<PrefillFuture>,
    hold: Option<PrefillHold>,
}

impl Stream for PrefillWatch {
    type Item = Result<Bytes, axum::Error>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        if let Some(prefill) = this.prefill.as_mut()
            && let Poll::Ready(answer) = prefill.as_mut().poll(cx)
        {
            this.prefill = None;
            match answer {
                Ok(_) => {
                    if let Some(mut hold) = this.hold.take() {
                        hold.staged();
                    }
                }
                Err(e) => {
                    tracing::warn!(reason = e.reason, error = %e.message, "the prefill leg failed mid-stream");
                    // Dropping the decode stream releases its booking.
                    this.inner = None;
                    this.hold = None;
                    return Poll::Ready(Some(Err(axum::Error::new(std::io::Error::other(
                        e.message,
                    )))));
                }
            }
        }
        let Some(inner) = this.inner.as_mut() else {
            return Poll::Ready(None);
        };
        match inner.poll_next_unpin(cx) {
            Poll::Ready(None) => {
                // The decode leg is done: its KV came over, the prefill answer is moot.
                this.inner = None;
                this.prefill = None;
                this.hold = None;
                Poll::Ready(None)
            }
            other => other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use router_core::Endpoint;

    #[test]
    fn the_sglang_prefill_body_carries_the_bootstrap_fields_and_asks_for_one_token() {
        let mut request = ParsedRequest::parse(
            Endpoint::Completions,
            br#"{"model":"m","prompt":"hi","stream":true,"max_tokens":50}"#,
        )
        .expect("valid");
        request
            .body
            .extend(bootstrap_fields("10.0.0.7", 8001, u64::MAX));
        let body: Value = serde_json::from_slice(&sglang_prefill_body(&request)).expect("json");
        assert_eq!(body["stream"], false);
        assert_eq!(body["max_tokens"], 1);
        assert_eq!(body["bootstrap_host"], "10.0.0.7");
        assert_eq!(body["bootstrap_port"], 8001);
        assert_eq!(body["bootstrap_room"], u64::MAX);
        assert!(body.get(crate::frontend::disagg::KV_TRANSFER).is_none());
    }
}
