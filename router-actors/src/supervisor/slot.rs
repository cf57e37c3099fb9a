//! A replaceable actor reference: handles hold the slot, the supervisor puts the actor in
//! when it starts it and swaps in the new one after a restart, and every handle follows
//! without being rebuilt. An empty slot (not started yet, or between a failure and its
//! restart) makes calls fail as if the actor were gone.
//!
//! [`ActorSlot::call`] is how every handle asks its actor and waits: with a deadline, so a
//! stuck actor is an error ([`CallError::Timeout`]) for the caller (an HTTP endpoint, a
//! scrape), never a hang. The deadline counts the time the node ran: a stopped VM wakes up
//! with every deadline passed and no actor having had a chance to answer.

use arc_swap::ArcSwapOption;
use ractor::rpc::CallResult;
use ractor::{ActorRef, Message, RpcReplyPort};
use std::sync::Arc;
use std::time::Duration;

/// How long a handle waits for its actor's answer unless told otherwise.
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(2);

/// Why a call on an actor got no answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum CallError {
    /// No actor in the slot, or it stopped before answering.
    #[error("the actor is gone")]
    Gone,
    /// The actor did not answer in time (stuck, or far behind).
    #[error("the actor did not answer within {0:?}")]
    Timeout(Duration),
}

pub struct ActorSlot<M: Message> {
    inner: Arc<ArcSwapOption<ActorRef<M>>>,
}

impl<M: Message> Clone for ActorSlot<M> {
    fn clone(&self) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<M: Message> std::fmt::Debug for ActorSlot<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("ActorSlot")
            .field(&self.get().map(|a| a.get_id()))
            .finish()
    }
}

impl<M: Message> Default for ActorSlot<M> {
    fn default() -> Self {
        Self::empty()
    }
}

impl<M: Message> ActorSlot<M> {
    pub fn empty() -> Self {
        Self {
            inner: Arc::new(ArcSwapOption::empty()),
        }
    }

    pub fn new(actor: ActorRef<M>) -> Self {
        let slot = Self::empty();
        slot.set(actor);
        slot
    }

    pub fn get(&self) -> Option<ActorRef<M>> {
        self.inner.load_full().map(|a| ActorRef::clone(&a))
    }

    pub fn set(&self, actor: ActorRef<M>) {
        self.inner.store(Some(Arc::new(actor)));
    }

    pub fn clear(&self) {
        self.inner.store(None);
    }

    /// Empties the slot and returns the actor it held.
    pub fn take(&self) -> Option<ActorRef<M>> {
        self.inner.swap(None).map(|a| ActorRef::clone(&a))
    }

    /// Asks the current actor and waits at most `timeout` for its answer.
    pub async fn call<R, F>(&self, build: F, timeout: Duration) -> Result<R, CallError>
    where
        R: Send + 'static,
        F: FnOnce(RpcReplyPort<R>) -> M,
    {
        let actor = self.get().ok_or(CallError::Gone)?;
        ask(&actor, build, Some(timeout)).await
    }

    /// Sends to the current actor without waiting; `false` if there is none or it is gone.
    pub fn cast(&self, msg: M) -> bool {
        self.get().is_some_and(|actor| actor.cast(msg).is_ok())
    }
}

/// Asks `actor` and waits for its answer: at most `timeout` of the time this node ran (a stop
/// of the whole node does not count: [`crate::vigil::within_running`]), or for as long as the
/// actor lives when `None`. Dropping the future drops the reply port: the actor sees its
/// caller gave up.
pub async fn ask<M, R, F>(
    actor: &ActorRef<M>,
    build: F,
    timeout: Option<Duration>,
) -> Result<R, CallError>
where
    M: Message,
    R: Send + 'static,
    F: FnOnce(RpcReplyPort<R>) -> M,
{
    let answer = actor.call(build, None);
    let answer = match timeout {
        Some(timeout) => crate::vigil::within_running(timeout, answer)
            .await
            .ok_or(CallError::Timeout(timeout))?,
        None => answer.await,
    };
    match answer {
        Ok(CallResult::Success(answer)) => Ok(answer),
        // ractor never answers `Timeout`: its own timeout is never set here.
        Ok(CallResult::Timeout | CallResult::SenderError) | Err(_) => Err(CallError::Gone),
    }
}
