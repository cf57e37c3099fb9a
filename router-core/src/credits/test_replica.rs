//! One test replica's parts, shared by the agent tests: its id, its ledger over two ranks
//! of 1,024 KV blocks and 4,096 batch tokens with credits on, and its agent that knows them.

use super::CreditAgent;
use crate::ids::RouterId;
use crate::ledger::BookingLedger;
use crate::policy::PolicyProfile;
use crate::time::Timestamp;
use crate::worker::WorkerSpec;
use std::time::Duration;

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
