//! Admission through a router actor, shared by the aggregated path and both legs of the
//! disaggregated one: the route call of a request under the class the frontend resolved,
//! its `router.admission` span (class, pool, phase, outcome, reject reason, queue wait, the
//! chosen worker and rank, matched and prompt blocks), the admission and prefix-hit
//! metrics, and the failure as the client's [`ApiError`].

use super::AppState;
use super::error::ApiError;
use super::openai::ParsedRequest;
use router_actors::{RouteError, RouterHandle};
use router_core::{Admission, ClassId, Phase, Prompt, RequestId, RouteRequest};
use tracing::Instrument as _;

/// A request's policy class, resolved once at the frontend before any hop: the id every
/// router call carries and the name metrics, spans and errors use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Class {
    pub id: ClassId,
    pub name: String,
}

/// The route call of one request (or one leg) under `class`: its prompt (hashed once, in
/// `handlers::prepare`), its adapter and its expected output (`ParsedRequest::expected_output`: every
/// sequence it asks for).
pub(super) fn route_request(
    state: &AppState,
    id: RequestId,
    class: &Class,
    phase: Phase,
    prompt: Prompt,
    request: &ParsedRequest,
) -> RouteRequest {
    let mut route = RouteRequest::new(id, class.id, phase, prompt);
    route.expected_output_tokens = request.expected_output(&state.limits);
    // Only workers that serve the adapter (the salt is already in the prompt's hashes).
    route.lora = request.lora.clone();
    route
}

/// Routes `route` through `router` and records the admission. The gate leg (aggregated or
/// prefill) counts in the admission metrics; a staged decode leg, admitted upstream, does not
/// count again.
pub(super) async fn admit(
    state: &AppState,
    router: &RouterHandle,
    class: &Class,
    route: RouteRequest,
) -> Result<Admission, ApiError> {
    let gate = !matches!(route.phase, Phase::Decode { staged: true });
    let started = tokio::time::Instant::now();
    let pool = pool_label(route.phase);
    let span = tracing::info_span!(
        "router.admission",
        class = class.name.as_str(),
        pool,
        phase = phase_label(route.phase),
        outcome = tracing::field::Empty,
        reason = tracing::field::Empty,
        queue_wait_ms = tracing::field::Empty,
        worker = tracing::field::Empty,
        dp_rank = tracing::field::Empty,
        matched_blocks = tracing::field::Empty,
        prompt_blocks = tracing::field::Empty,
    );
    let routed = router.route(route).instrument(span.clone()).await;
    match routed {
        Ok(admission) => {
            let prefix = admission.prefix;
            span.record("outcome", "admitted");
            span.record("queue_wait_ms", admission.waited.as_secs_f64() * 1e3);
            span.record("worker", admission.rank.worker.0);
            span.record("dp_rank", admission.rank.dp_rank);
            span.record("matched_blocks", prefix.matched_blocks);
            span.record("prompt_blocks", prefix.prompt_blocks);
            drop(tracing::info_span!(
                parent: &span,
                "router.selection",
                worker = admission.rank.worker.0,
                dp_rank = admission.rank.dp_rank,
                matched_blocks = prefix.matched_blocks,
            ));
            state.metrics.prefix_hit(pool, prefix);
            if gate {
                state
                    .metrics
                    .admitted(&class.name, started.elapsed(), admission.waited);
            }
            Ok(admission)
        }
        Err(error) => {
            let err = ApiError::from_route(&error, &class.name);
            span.record("outcome", outcome_label(&error));
            span.record("reason", err.reason);
            if gate && matches!(error, RouteError::Rejected { .. }) {
                state
                    .metrics
                    .admission_latency(&class.name, started.elapsed());
            }
            Err(err)
        }
    }
}

/// The `outcome` attribute of a failed `router.admission` span.
fn outcome_label(error: &RouteError) -> &'static str {
    match error {
        RouteError::Rejected { .. } => "rejected",
        RouteError::UnknownClass(_) => "unknown_class",
        RouteError::Unavailable => "router_gone",
    }
}

/// The `pool` label of the pool a phase is routed on.
pub(super) fn pool_label(phase: Phase) -> &'static str {
    match phase {
        Phase::Aggregated => "aggregated",
        Phase::Prefill => "prefill",
        Phase::Decode { .. } => "decode",
    }
}

fn phase_label(phase: Phase) -> &'static str {
    match phase {
        Phase::Aggregated => "aggregated",
        Phase::Prefill => "prefill",
        Phase::Decode { staged: true } => "decode_staged",
        Phase::Decode { staged: false } => "decode",
    }
}
