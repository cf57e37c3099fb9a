//! Room credits across nodes (`router.<pool>.credits.<router>`): a courier task publishes
//! what the router's credit agent says to a peer on that peer's own subject, and a
//! subscriber task hands the messages on this router's subject to its router actor (decode
//! pool, or the aggregated pool). Each message reaches its one recipient: a replica does not
//! receive, decode and drop the credit traffic between two others (which grew with the
//! square of the replicas when every message went to all). Asks,
//! grants and reports are plain messages (no sequence of their own): a lost one is repaired
//! by the next periodic report or a repeated ask (see `router_core::credits`). Both tasks are
//! the loops of a bridge (`bridge.rs`) whose sender is this router.

use crate::bridge::{Bridge, BridgeCounters, BridgeCounts};
use crate::bus::BusError;
use crate::router::RouterHandle;
use crate::wire::{CreditEnvelope, Envelope};
use router_core::credits::CreditOut;
use router_core::{PoolRole, RouterId};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// Counters of the credit courier.
pub type CreditBusCounters = BridgeCounters;

/// The credit courier's counters as plain numbers, for `/debug/state` and `/metrics`.
pub type CreditBusCounts = BridgeCounts;

/// Publishes the router's credit messages of `pool`, each addressed to one peer.
pub(crate) fn spawn_credit_publisher(
    bridge: &Bridge,
    pool: PoolRole,
    outgoing: mpsc::Receiver<CreditOut>,
) -> JoinHandle<()> {
    let subjects = bridge.subjects.clone();
    let messages = futures::stream::unfold(outgoing, move |mut outgoing| {
        let subjects = subjects.clone();
        async move {
            let out = outgoing.recv().await?;
            let subject = subjects.credits_to(pool, out.to);
            let body = CreditEnvelope {
                to: out.to.0,
                msg: out.msg,
            };
            Some(((subject, body), outgoing))
        }
    });
    bridge.publish_to(messages)
}

/// Hands the credit messages of `pool` addressed to this router (from another) to its
/// router actor.
pub(crate) async fn spawn_credit_subscriber(
    bridge: &Bridge,
    pool: PoolRole,
    router: RouterHandle,
) -> Result<JoinHandle<()>, BusError> {
    let me = bridge.sender;
    let for_me =
        move |envelope: &Envelope<CreditEnvelope>| envelope.body.to == me && envelope.sender != me;
    let deliver = move |envelope: Envelope<CreditEnvelope>| {
        let from = RouterId(envelope.sender);
        if router.credit(from, envelope.body.msg).is_err() {
            tracing::debug!("router actor gone; credit message dropped");
        }
    };
    let subject = bridge.subjects.credits_to(pool, RouterId(me));
    bridge.receive(subject, for_me, deliver).await
}
