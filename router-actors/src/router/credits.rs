//! A decode router's room credits (see `router_core::credits`): the actor feeds its
//! `CreditAgent` membership, ranks, the prefill gate's wants, own reservations, peers'
//! credit messages and ticks, and hands what the agent says to the credit courier
//! (`crate::credit_bus`), which publishes it for the peers it names.

use super::state::RouterState;
use router_core::credits::{CreditAgent, CreditMsg, CreditOut, CreditSnapshot};
use router_core::{BookingKey, DecodeReservation, RoomWant, RouterId};
use std::time::Duration;
use tokio::sync::{mpsc, watch};

/// What a decode router needs to take part in room credits.
#[derive(Debug, Clone)]
pub struct CreditsArgs {
    /// How long a rank whose ownership moved here grants nothing while holders report.
    pub settle: Duration,
    /// Messages for peers, to the credit courier. Bounded: overflow is dropped and counted
    /// (periodic reports repair it).
    pub out: mpsc::Sender<CreditOut>,
    /// The pool's live peer routers, kept by peer sync.
    pub peers: watch::Receiver<Vec<RouterId>>,
}

pub(super) struct CreditsState {
    pub(super) agent: CreditAgent,
    out: mpsc::Sender<CreditOut>,
    /// Ledger epoch of the last reconcile (nothing to reconcile while it has not moved).
    reconciled: Option<u64>,
    /// Ranks of the pool when last told to the agent.
    ranks_seen: usize,
    pub(super) dropped: u64,
}

impl CreditsState {
    pub(super) fn new(me: RouterId, args: &CreditsArgs) -> Self {
        Self {
            agent: CreditAgent::new(me, args.settle),
            out: args.out.clone(),
            reconciled: None,
            ranks_seen: usize::MAX,
            dropped: 0,
        }
    }

    fn send(&mut self, outs: Vec<CreditOut>) {
        for out in outs {
            if self.out.try_send(out).is_err() {
                self.dropped += 1;
            }
        }
    }
}

impl RouterState {
    /// The pool's live peers changed.
    pub(super) fn credit_peers(&mut self, peers: Vec<RouterId>) {
        let now = self.clock().now();
        if let Some(credits) = &mut self.credits {
            let outs = credits.agent.set_peers(peers, now);
            credits.send(outs);
        }
    }

    /// Prefill gate: requests wait for decode room; fetch credits for them.
    pub(super) fn want_room(&mut self, wants: Vec<RoomWant>) {
        let now = self.clock().now();
        let Some(credits) = &mut self.credits else {
            return;
        };
        let ledger = self.router.ledger();
        let outs: Vec<CreditOut> = wants
            .iter()
            .flat_map(|w| credits.agent.want(w, ledger, now))
            .collect();
        credits.send(outs);
    }

    pub(super) fn credit_message(&mut self, from: RouterId, msg: CreditMsg) {
        let now = self.clock().now();
        let Some(credits) = &mut self.credits else {
            return;
        };
        let outs = credits.agent.receive(from, msg, self.router.ledger(), now);
        credits.send(outs);
    }

    /// An own reservation was taken on the decode ledger: it uses credits.
    pub(super) fn credit_reserved(&mut self, res: &DecodeReservation) {
        let me = self.owner();
        if let Some(credits) = &mut self.credits
            && res.key.owner == me
        {
            credits
                .agent
                .reserved(BookingKey::new(me, res.key.request), res.rank, res.blocks);
        }
    }

    /// After every message: tell the agent about new or gone ranks, and free the credits of
    /// own requests that ended.
    pub(super) fn credit_upkeep(&mut self) {
        let now = self.clock().now();
        let Some(credits) = &mut self.credits else {
            return;
        };
        let ledger = self.router.ledger();
        if credits.ranks_seen != ledger.rank_count() {
            credits.ranks_seen = ledger.rank_count();
            let outs = credits
                .agent
                .set_ranks(ledger.rank_ids().collect::<Vec<_>>(), now);
            credits.send(outs);
        }
        if credits.reconciled != Some(ledger.epoch()) {
            credits.reconciled = Some(ledger.epoch());
            let outs = credits.agent.reconcile(ledger);
            credits.send(outs);
        }
    }

    pub(super) fn credit_tick(&mut self) {
        let now = self.clock().now();
        if let Some(credits) = &mut self.credits {
            let outs = credits.agent.tick(now);
            credits.send(outs);
        }
    }

    pub(super) fn credit_snapshot(&self) -> Option<CreditSnapshot> {
        let now = self.clock().now();
        self.credits.as_ref().map(|c| c.agent.snapshot(now))
    }
}
