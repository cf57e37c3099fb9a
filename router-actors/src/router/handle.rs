//! The typed handle to a RouterActor: what the frontend, the peer-sync actor and the paired
//! prefill actor call. `route` stamps the arrival time before the message is sent, so time
//! spent in the mailbox counts against the class deadline. Every other call waits at most the
//! handle's call timeout (`CallError::Timeout`), so a stuck actor never hangs its caller.
//! A handle given the node's in-flight registry records each release there before casting
//! it, so a release sent while the actor restarts is applied by the next incarnation.

use super::{OwnState, OwnerDigest, RouterMsg, RouterSnapshot};
use crate::clock::Clock;
use crate::supervisor::{ActorSlot, CallError, DEFAULT_CALL_TIMEOUT, InflightRegistry, ask};
use ractor::ActorRef;
use router_core::{
    Admission, ClassId, DecodeReservation, Prompt, RejectReason, RequestId, RouteRequest, RouterId,
    WorkerId, WorkerSpec,
};
use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the router actor is gone")]
pub struct ActorGone;

/// Why a `route` call did not admit: the one failure type of the request path (a queued
/// request never comes back as such; the call resolves when it is admitted or rejected).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RouteError {
    /// The scheduler refused the request (queue full, deadline, overload, no worker, ...).
    #[error("{reason}")]
    Rejected {
        class: ClassId,
        reason: RejectReason,
    },
    /// The class id is not in the router's profile (the caller resolved it against another).
    #[error("class {0:?} is not in the router's profile")]
    UnknownClass(ClassId),
    /// The router actor is gone (restarting or stopped).
    #[error("the router is unavailable")]
    Unavailable,
}

impl From<ActorGone> for RouteError {
    fn from(_: ActorGone) -> Self {
        RouteError::Unavailable
    }
}

#[derive(Debug, Clone)]
pub struct RouterHandle {
    slot: ActorSlot<RouterMsg>,
    clock: Clock,
    /// How long `observe`, `own_state`, `state_of` and `digest_of` wait for an answer.
    call_timeout: Duration,
    /// How long `route` waits at most: the longest class wait plus the call timeout (`None`:
    /// as long as the queue holds the request).
    route_timeout: Option<Duration>,
    /// The pool's tokens per KV block: callers hash prompts with it ([`Self::prompt`]).
    block_size: u32,
    /// The actor's in-flight registry, where releases are recorded ([`Self::release`]).
    inflight: Option<InflightRegistry>,
    /// The pool's prefix index (KV events), read without a message ([`Self::cached_tokens`]).
    index: Option<router_core::SharedKvIndex>,
}

/// A pool's block size until the node says otherwise (the router config's default).
pub const DEFAULT_BLOCK_SIZE: u32 = 16;

impl RouterHandle {
    pub fn new(actor: ActorRef<RouterMsg>, clock: Clock) -> Self {
        Self::from_slot(ActorSlot::new(actor), clock)
    }

    /// A handle that follows the actor in `slot` across restarts.
    pub fn from_slot(slot: ActorSlot<RouterMsg>, clock: Clock) -> Self {
        Self {
            slot,
            clock,
            call_timeout: DEFAULT_CALL_TIMEOUT,
            route_timeout: None,
            block_size: DEFAULT_BLOCK_SIZE,
            inflight: None,
            index: None,
        }
    }

    /// The same handle, recording releases in `registry`, the in-flight registry its actor
    /// restores from (`RouterArgs::inflight`): a release sent between two incarnations is
    /// applied by the next one instead of being lost.
    pub fn with_inflight(mut self, registry: InflightRegistry) -> Self {
        self.inflight = Some(registry);
        self
    }

    /// The same handle, for a pool of `block_size` tokens per KV block.
    pub fn with_block_size(mut self, block_size: u32) -> Self {
        self.block_size = block_size.max(1);
        self
    }

    /// The pool's tokens per KV block.
    pub fn block_size(&self) -> u32 {
        self.block_size
    }

    /// Reads the pool's prefix index (the one its router and KV-events actor share).
    pub fn with_index(mut self, index: router_core::SharedKvIndex) -> Self {
        self.index = Some(index);
        self
    }

    /// How many of `prompt`'s tokens the pool's best-placed rank holds, by the KV events
    /// indexed (no message to the actor; 0 without an index or for unhashed tokens).
    pub fn cached_tokens(&self, prompt: &Prompt) -> u64 {
        let (
            Some(index),
            Prompt::Hashes {
                block_hashes,
                prompt_tokens,
            },
        ) = (&self.index, prompt)
        else {
            return 0;
        };
        let hashes: Vec<router_core::SequenceHash> = block_hashes
            .iter()
            .copied()
            .map(router_core::SequenceHash)
            .collect();
        let deepest = index
            .find_matches(&hashes)
            .best()
            .map_or(0, |(_, depth)| depth);
        (u64::from(deepest) * u64::from(self.block_size)).min(*prompt_tokens)
    }

    /// `tokens` as this pool's router looks them up: hashed once, here, by the caller, so
    /// the router actor (one per pool) does not hash and no leg or retry clones the tokens.
    pub fn prompt(&self, tokens: &[u32], scope: router_core::HashScope<'_>) -> Prompt {
        Prompt::hashed(tokens, self.block_size, scope)
    }

    /// The same handle, waiting at most `timeout` for the answer to a call (not `route`,
    /// which waits for admission).
    pub fn with_call_timeout(mut self, timeout: Duration) -> Self {
        self.call_timeout = timeout;
        self
    }

    /// The same handle, giving up on a `route` call after `timeout` (`Unavailable`): a stuck
    /// actor never holds a request past every class deadline. Set it above the longest class
    /// wait, since a queued request legitimately waits that long.
    pub fn with_route_timeout(mut self, timeout: Duration) -> Self {
        self.route_timeout = Some(timeout);
        self
    }

    /// The current actor (a restart swaps it; none between a failure and its restart).
    pub fn actor(&self) -> Option<ActorRef<RouterMsg>> {
        self.slot.get()
    }

    pub fn slot(&self) -> &ActorSlot<RouterMsg> {
        &self.slot
    }

    pub fn clock(&self) -> Clock {
        self.clock
    }

    /// Admits or rejects, after waiting in the class queue if the gate is closed: resolves
    /// when the request is admitted or rejected. The arrival time is stamped here, before the
    /// message is sent, so time in the mailbox counts against the class deadline. Dropping
    /// the future while queued removes the request from the queue (it is never booked); so
    /// does the route timeout (an admission whose caller gave up is rolled back).
    pub async fn route(&self, request: RouteRequest) -> Result<Admission, RouteError> {
        let arrival = self.clock.now();
        let actor = self.slot.get().ok_or(RouteError::Unavailable)?;
        let routed = ask(
            &actor,
            |reply| RouterMsg::Route {
                request,
                arrival,
                reply,
            },
            self.route_timeout,
        )
        .await;
        routed.unwrap_or(Err(RouteError::Unavailable))
    }

    pub fn prefill_done(&self, id: RequestId) -> Result<(), ActorGone> {
        self.cast(RouterMsg::PrefillDone(id))
    }

    /// Ends the booking of `id`. With an in-flight registry ([`Self::with_inflight`]) the
    /// release is recorded there first and always succeeds: the running actor, or the next
    /// one when it is restarting, applies it.
    pub fn release(&self, id: RequestId) -> Result<(), ActorGone> {
        let Some(registry) = &self.inflight else {
            return self.cast(RouterMsg::Release(id));
        };
        registry.end(id);
        // A wake-up: the actor applies what is recorded before any message.
        let _ = self.cast(RouterMsg::Release(id));
        Ok(())
    }

    pub fn cancel(&self, id: RequestId) -> Result<(), ActorGone> {
        self.cast(RouterMsg::Cancel(id))
    }

    pub fn upsert_worker(&self, spec: WorkerSpec) -> Result<(), ActorGone> {
        self.cast(RouterMsg::UpsertWorker(spec))
    }

    /// What a worker's engine reports of its LoRA adapter slots.
    pub fn set_adapters(
        &self,
        id: WorkerId,
        adapters: router_core::AdapterResidency,
    ) -> Result<(), ActorGone> {
        self.cast(RouterMsg::SetAdapters(id, adapters))
    }

    pub fn remove_worker(&self, id: WorkerId) -> Result<(), ActorGone> {
        self.cast(RouterMsg::RemoveWorker(id))
    }

    pub fn reserve(&self, reservation: DecodeReservation) -> Result<(), ActorGone> {
        self.cast(RouterMsg::Reserve(reservation))
    }

    pub fn unreserve(&self, id: RequestId) -> Result<(), ActorGone> {
        self.cast(RouterMsg::Unreserve(id))
    }

    /// Decode pool: requests wait at the prefill gate for decode room.
    pub fn want_room(&self, wants: Vec<router_core::RoomWant>) -> Result<(), ActorGone> {
        self.cast(RouterMsg::WantRoom(wants))
    }

    /// Decode pool: a peer's room-credit message.
    pub fn credit(
        &self,
        from: router_core::RouterId,
        msg: router_core::credits::CreditMsg,
    ) -> Result<(), ActorGone> {
        self.cast(RouterMsg::Credit { from, msg })
    }

    /// The actor's state, for `/debug/state` and `/metrics`; within the call timeout.
    pub async fn observe(&self) -> Result<RouterSnapshot, CallError> {
        self.slot.call(RouterMsg::Observe, self.call_timeout).await
    }

    pub async fn own_state(&self) -> Result<OwnState, CallError> {
        self.slot.call(RouterMsg::OwnState, self.call_timeout).await
    }

    /// What this router's ledger holds under `owner`.
    pub async fn state_of(&self, owner: RouterId) -> Result<OwnState, CallError> {
        self.slot
            .call(
                |reply| RouterMsg::StateOf { owner, reply },
                self.call_timeout,
            )
            .await
    }

    /// The digest of what this router's ledger holds under `owner` (its own: with the count
    /// of deltas handed to peer sync).
    pub async fn digest_of(&self, owner: RouterId) -> Result<OwnerDigest, CallError> {
        self.slot
            .call(
                |reply| RouterMsg::DigestOf { owner, reply },
                self.call_timeout,
            )
            .await
    }

    pub fn cast(&self, msg: RouterMsg) -> Result<(), ActorGone> {
        self.slot
            .get()
            .ok_or(ActorGone)?
            .cast(msg)
            .map_err(|_| ActorGone)
    }
}
