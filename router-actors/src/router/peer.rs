//! Carrying out what other routers did (router-core decides what it means): their deltas
//! under their owner id, a full snapshot replacing everything held under it, a silent peer
//! dropped; and, on a decode pool, the room this node's prefill pool holds. Capacity that
//! may have grown drains the queue; own changes go to peer sync.

use super::state::RouterState;
use crate::wire::BookingDelta;
use router_core::{Applied, DecodeReservation, Holdings, RequestId, RouterId};

impl RouterState {
    pub(super) fn apply_peer(&mut self, owner: RouterId, delta: BookingDelta) {
        let now = self.clock().now();
        let applied = self.router.apply_peer(owner, delta, now);
        self.drain_if(applied);
    }

    pub(super) fn replace_peer(&mut self, owner: RouterId, state: Holdings) {
        let now = self.clock().now();
        let applied = self.router.replace_peer(owner, state, now);
        self.drain_if(applied);
    }

    pub(super) fn peer_gone(&mut self, owner: RouterId) {
        let applied = self.router.peer_gone(owner);
        self.drain_if(applied);
    }

    /// Decode pool: hold room for the node's prefill admission, and tell peers.
    pub(super) fn reserve(&mut self, res: DecodeReservation) {
        let now = self.clock().now();
        if let Some(delta) = self.router.hold_reservation(res, now) {
            self.emit(delta);
        }
    }

    pub(super) fn unreserve(&mut self, request: RequestId) {
        if let Some(delta) = self.router.release_reservation(request) {
            self.emit(delta);
            self.drain();
        }
    }

    fn drain_if(&mut self, applied: Applied) {
        if applied.freed() {
            self.drain();
        }
    }
}
