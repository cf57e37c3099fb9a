//! Who the peers are: a peer that says goodbye is dropped at once, this router says goodbye
//! when its node stops, peers' leases count only the time this node was running (see
//! `crate::vigil`), and the live peer set is published for the router's room credits.

use super::state::PeerSyncState;
use crate::router::RouterMsg;
use crate::wire::BookingMsg;
use router_core::RouterId;
use std::time::Duration;
use tokio::time::Instant;

impl PeerSyncState {
    /// The actor runs at `now`: after a stop of this node (nothing ran, so no peer could be
    /// heard), every peer's lease is extended by the time it was stopped.
    pub(super) fn running(&mut self, now: Instant) {
        let Some(stopped) = self.vigil.ran_holding(now, self.peers.len(), "peer") else {
            return;
        };
        self.counters.leases_kept_stopped += 1;
        for peer in self.peers.values_mut() {
            peer.last_seen = (peer.last_seen + stopped).min(now);
        }
    }

    /// A peer said goodbye (it is stopping): drop it and everything it holds at once.
    pub(super) fn peer_left(&mut self, owner: RouterId) {
        if self.peers.remove(&owner).is_none() {
            return;
        }
        self.tracker.forget(owner.0);
        self.counters.goodbyes += 1;
        tracing::info!(peer = %owner, "peer said goodbye: its bookings are dropped");
        if self.router.cast(RouterMsg::PeerGone(owner)).is_err() {
            self.counters.router_gone += 1;
        }
        self.publish_peers();
    }

    /// Publishes a goodbye on the bookings subject (this router is stopping), so peers drop
    /// its bookings at once instead of at the end of its lease.
    pub(super) async fn goodbye(&mut self) {
        self.publish(BookingMsg::Goodbye).await;
        let _ = tokio::time::timeout(Duration::from_secs(1), self.bus.flush()).await;
    }

    /// Tells the router which peers are live now (when that changed).
    pub(super) fn publish_peers(&self) {
        let mut now: Vec<RouterId> = self.peers.keys().copied().collect();
        now.sort();
        self.peers_out.send_if_modified(|old| {
            let changed = *old != now;
            if changed {
                *old = now;
            }
            changed
        });
    }
}
