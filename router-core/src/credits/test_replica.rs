//! One test replica's parts, shared by the agent tests: its id, its ledger over two ranks
//! of 1,024 KV blocks and 4,096 batch tokens with credits on, and its agent that knows them.

use super::{CreditAgent, CreditOut};
use crate::ids::RouterId;
use crate::ledger::BookingLedger;
use crate::policy::PolicyProfile;
use crate::time::Timestamp;
use crate::worker::WorkerSpec;
use std::collections::VecDeque;
use std::time::Duration;

/// Tells every replica's agent that the others are its peers; returns the messages that
/// leaves on the wire, each with its sender.
pub(super) fn introduce(
    mut agents: Vec<(RouterId, &mut CreditAgent)>,
) -> VecDeque<(RouterId, CreditOut)> {
    let ids: Vec<RouterId> = agents.iter().map(|(id, _)| *id).collect();
    let mut wire = VecDeque::new();
    for (id, agent) in &mut agents {
        let peers: Vec<RouterId> = ids.iter().copied().filter(|p| p != id).collect();
        for out in agent.set_peers(peers, Timestamp::ZERO) {
            wire.push_back((*id, out));
        }
    }
    wire
}

/// A profile of one class, `interactive`, with a minute of queue wait and `lines` (TOML
/// keys of the class: its busy thresholds).
pub(super) fn one_class(lines: &str) -> PolicyProfile {
    PolicyProfile::from_toml_str(&format!(
        "default_class = \"interactive\"\n[[classes]]\nname = \"interactive\"\n\
         slo_ms = 60000\nquantum = 100\n{lines}\n"
    ))
    .expect("valid test profile")
}

/// Replica `n` under `profile`; `prefill`: prefill credits on too (an aggregated pool).
pub(super) fn parts(
    n: u128,
    profile: &PolicyProfile,
    prefill: bool,
) -> (RouterId, CreditAgent, BookingLedger) {
    let id = RouterId(uuid::Uuid::from_u128(n));
    let mut ledger = BookingLedger::new(profile);
    for w in [1, 2] {
        ledger
            .upsert_worker(WorkerSpec::new(w, 1, 1024, 4096))
            .expect("a valid worker");
    }
    ledger.enable_credits(id, prefill);
    let mut agent = CreditAgent::new(id, Duration::from_millis(5));
    agent.set_ranks(ledger.rank_ids().collect::<Vec<_>>(), Timestamp::ZERO);
    (id, agent, ledger)
}
