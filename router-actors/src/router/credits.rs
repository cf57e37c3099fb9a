//! Room credits of a router (see `router_core::credits`): the actor feeds its pool's
//! `CreditAgent` membership, ranks, the gate's wants (a decode router's from the node's
//! prefill router; an aggregated or prefill router's from its own gate), peers' credit
//! messages and ticks; writes
//! the credits it holds into its ledger (where they bound the class headroom); and hands
//! what the agent says to the credit courier (`crate::credit_bus`).

use super::state::RouterState;
use crate::bus::Bus;
use router_core::credits::{CreditAgent, CreditMsg, CreditOut, CreditSnapshot};
use router_core::{RoomWant, RouterId};
use std::sync::{Arc, Mutex, PoisonError};
use tokio::sync::{mpsc, watch};

/// A router's credit agent, kept across restarts of its actor (the credits it holds and
/// has out must not be forgotten by a restart: owners would count them forever).
pub type SharedAgent = Arc<Mutex<CreditAgent>>;

/// What a router needs to take part in its pool's room credits.
#[derive(Clone)]
pub struct CreditsArgs {
    pub agent: SharedAgent,
    /// Messages for peers, to the credit courier. Bounded: overflow is dropped and counted
    /// (periodic reports repair it).
    pub out: mpsc::Sender<CreditOut>,
    /// The pool's live peer routers, kept by peer sync.
    pub peers: watch::Receiver<Vec<RouterId>>,
    /// The node's bus: while it is down, credits from other owners are kept, not given
    /// back (a safe local share).
    pub bus: Arc<dyn Bus>,
}

impl std::fmt::Debug for CreditsArgs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CreditsArgs")
            .field("peers", &*self.peers.borrow())
            .field("bus_connected", &self.bus.connected())
            .finish_non_exhaustive()
    }
}

pub(super) struct CreditsState {
    agent: SharedAgent,
    out: mpsc::Sender<CreditOut>,
    bus: Arc<dyn Bus>,
    /// Ledger epoch of the last reconcile (nothing to reconcile while it has not moved).
    reconciled: Option<u64>,
    /// Ranks of the pool when last told to the agent.
    ranks_seen: usize,
    /// The agent's version when last applied to the ledger.
    applied_version: u64,
    pub(super) dropped: u64,
}

impl CreditsState {
    pub(super) fn new(args: &CreditsArgs) -> Self {
        Self {
            agent: Arc::clone(&args.agent),
            out: args.out.clone(),
            bus: Arc::clone(&args.bus),
            reconciled: None,
            ranks_seen: usize::MAX,
            applied_version: 0,
            dropped: 0,
        }
    }

    /// Runs `f` on the agent, told first whether the bus is up.
    fn with<R>(&self, f: impl FnOnce(&mut CreditAgent) -> R) -> R {
        let mut agent = self.agent.lock().unwrap_or_else(PoisonError::into_inner);
        agent.set_connected(self.bus.connected());
        f(&mut agent)
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
    /// Takes part in room credits: the ledger's headroom is bounded by the credits the
    /// (possibly older) agent holds.
    pub(super) fn start_credits(&mut self, args: &CreditsArgs) {
        self.credits = Some(CreditsState::new(args));
        let peers = args.peers.borrow().clone();
        self.credit_peers(peers);
    }

    /// The pool's live peers changed. Credits bound the ledger only while there are peers:
    /// a router alone sees every booking of its pool, and its lines alone are exact (credits
    /// would only narrow where it may place). The agent runs either way, so it owns its
    /// ranks and knows what it holds when peers come.
    pub(super) fn credit_peers(&mut self, peers: Vec<RouterId>) {
        let now = self.clock().now();
        let alone = peers.is_empty();
        let Some(credits) = &mut self.credits else {
            return;
        };
        let outs = credits.with(|a| a.set_peers(peers, now));
        credits.send(outs);
        let enabled = self.router.ledger().credits_enabled();
        if alone && enabled {
            if self.router.disable_credits() {
                self.drain();
            }
        } else if !alone && !enabled {
            self.router.enable_credits();
            let held = self
                .credits
                .as_ref()
                .map(|c| c.with(|a| a.all_held()))
                .unwrap_or_default();
            self.router.apply_credits(held, false);
        }
    }

    /// Requests wait at a gate for room this pool's credits give; fetch credits for them.
    pub(super) fn want_room(&mut self, wants: Vec<RoomWant>) {
        let now = self.clock().now();
        let Some(credits) = &mut self.credits else {
            return;
        };
        let ledger = self.router.ledger();
        let outs: Vec<CreditOut> =
            credits.with(|a| wants.iter().flat_map(|w| a.want(w, ledger, now)).collect());
        credits.send(outs);
    }

    pub(super) fn credit_message(&mut self, from: RouterId, msg: CreditMsg) {
        let now = self.clock().now();
        let Some(credits) = &mut self.credits else {
            return;
        };
        let ledger = self.router.ledger();
        let outs = credits.with(|a| a.receive(from, msg, ledger, now));
        credits.send(outs);
    }

    /// After every message: tell the agent about new or gone ranks, free the credits of own
    /// requests that ended, and write the credits held into the ledger. Drains when that
    /// may have opened the gate.
    pub(super) fn credit_upkeep(&mut self) {
        let now = self.clock().now();
        let Some(credits) = &mut self.credits else {
            return;
        };
        let ledger = self.router.ledger();
        if credits.ranks_seen != ledger.rank_count() {
            credits.ranks_seen = ledger.rank_count();
            let ranks: Vec<_> = ledger.rank_ids().collect();
            let outs = credits.with(|a| a.set_ranks(ranks, now));
            credits.send(outs);
        }
        if credits.reconciled != Some(ledger.epoch()) {
            let outs = credits.with(|a| a.reconcile(ledger));
            credits.send(outs);
        }
        let (held, version) = credits.with(|a| (a.take_held_changes(), a.version()));
        let grew = version != credits.applied_version;
        credits.applied_version = version;
        let opened = self.router.apply_credits(held, grew);
        if let Some(credits) = &mut self.credits {
            credits.reconciled = Some(self.router.ledger().epoch());
        }
        if opened {
            self.drain();
        }
    }

    pub(super) fn credit_tick(&mut self) {
        let now = self.clock().now();
        if let Some(credits) = &mut self.credits {
            let outs = credits.with(|a| a.tick(now));
            credits.send(outs);
        }
    }

    /// When the credit agent needs a tick (a settle period ends).
    pub(super) fn credit_deadline(&self) -> Option<router_core::Timestamp> {
        let now = self.clock().now();
        self.credits
            .as_ref()
            .and_then(|c| c.with(|a| a.next_deadline(now)))
    }

    pub(super) fn credit_snapshot(&self) -> Option<CreditSnapshot> {
        let now = self.clock().now();
        self.credits.as_ref().map(|c| c.with(|a| a.snapshot(now)))
    }
}
