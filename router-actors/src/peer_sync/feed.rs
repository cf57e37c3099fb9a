//! The router's own deltas on their way to peer sync, kept outside the actor so that a
//! restarted PeerSyncActor takes over the same queue.
//!
//! The RouterActor holds the sending end for its whole life; the receiving end lives in a
//! [`DeltaFeed`] the node keeps. An incarnation's forwarding task holds the feed's lock while
//! it runs and gives it back when it ends (the actor's state owns the task, so even a failed
//! incarnation's task is aborted and lets go). A batch is kept in the feed until the actor
//! has handled it: a batch in flight when the actor failed goes to the next incarnation
//! first. Handing a batch over twice is harmless (see the module header of `peer_sync`), and
//! a starting incarnation skips what its first snapshot already reflects
//! ([`Queue::skip_through`]).

use super::{DELTA_BATCH, PeerSyncMsg};
use crate::router::OwnDelta;
use ractor::ActorRef;
use ractor::rpc::CallResult;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{Mutex, OwnedMutexGuard, mpsc};

#[derive(Debug)]
pub(super) struct Queue {
    deltas: mpsc::Receiver<OwnDelta>,
    /// Taken from the channel, not yet acknowledged by an incarnation.
    unsent: Vec<OwnDelta>,
}

/// The receiving end of a router's own-delta channel, shared by every incarnation of its
/// PeerSyncActor (one at a time).
#[derive(Debug, Clone)]
pub struct DeltaFeed {
    queue: Arc<Mutex<Queue>>,
}

impl Queue {
    /// Drops the deltas of index `n` or lower (a snapshot taken after them reflects them);
    /// the first later one stays first. Returns how many were dropped.
    pub(super) fn skip_through(&mut self, n: u64) -> usize {
        let before = self.unsent.len();
        self.unsent.retain(|d| d.index > n);
        let mut skipped = before - self.unsent.len();
        if self.unsent.is_empty() {
            while let Ok(delta) = self.deltas.try_recv() {
                if delta.index > n {
                    self.unsent.push(delta);
                    break;
                }
                skipped += 1;
            }
        }
        skipped
    }
}

impl DeltaFeed {
    pub fn new(deltas: mpsc::Receiver<OwnDelta>) -> Self {
        Self {
            queue: Arc::new(Mutex::new(Queue {
                deltas,
                unsent: Vec::new(),
            })),
        }
    }

    /// The queue, once the previous incarnation's task has let go of it (at most `wait`).
    pub(super) async fn take(&self, wait: Duration) -> Option<OwnedMutexGuard<Queue>> {
        tokio::time::timeout(wait, Arc::clone(&self.queue).lock_owned())
            .await
            .ok()
    }
}

/// Feeds the router's own deltas to the actor in order, in batches, until either side ends.
pub(super) fn forward_deltas(
    mut queue: OwnedMutexGuard<Queue>,
    actor: ActorRef<PeerSyncMsg>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            if queue.unsent.is_empty() {
                let Some(first) = queue.deltas.recv().await else {
                    break;
                };
                queue.unsent.push(first);
                while queue.unsent.len() < DELTA_BATCH {
                    match queue.deltas.try_recv() {
                        Ok(delta) => queue.unsent.push(delta),
                        Err(_) => break,
                    }
                }
            }
            let batch = queue.unsent.clone();
            match actor
                .call(|done| PeerSyncMsg::OwnDeltas(batch, done), None)
                .await
            {
                Ok(CallResult::Success(())) => queue.unsent.clear(),
                _ => break,
            }
        }
    })
}
