//! A replaceable actor reference: handles hold the slot, the supervisor puts the actor in
//! when it starts it and swaps in the new one after a restart, and every handle follows
//! without being rebuilt. An empty slot (not started yet, or between a failure and its
//! restart) makes calls fail as if the actor were gone.

use arc_swap::ArcSwapOption;
use ractor::{ActorRef, Message};
use std::sync::Arc;

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
}
