//! The link's KV event path: a publisher message checked against the engine's sequence
//! (in order, a duplicate, a gap filled from the replay service or cleared, a restarted
//! engine), translated into the fleet's events with the router's own block hashes, and
//! published on the bus. Heard batches also tell the silence watch the engine is heard.

use super::LinkState;
use crate::events::{SeqStep, decode_batch};
use crate::link::SilenceChange;
use crate::zmq::replay;
use bytes::Bytes;
use router_core::KvEvent;
use tokio::time::Instant;
use tracing::Instrument as _;

impl LinkState {
    pub(in crate::link) async fn frames(&mut self, seq: u64, payload: Bytes) {
        let Some(joined) = self.joined.as_mut() else {
            self.counters.not_serving += 1;
            return;
        };
        if joined.silence.batch(Instant::now()) == Some(SilenceChange::Heard) {
            tracing::info!(engine = %self.config.url, "the engine's KV events are heard again");
        }
        // The first batch heard since joining: a subscription only hears what is published
        // after it connected, so an engine that published before (it served requests while
        // the link was connecting, or before this link started) has batches this link never
        // saw. They are caught up from the replay buffer when there is one; when it no longer
        // starts at 0 (a long-lived engine) what the engine cached before stays unknown, and
        // nothing of it is in the index to go stale.
        let catch_up = joined.seq.expected().is_none() && seq > 0 && self.config.replay.is_some();
        let step = joined.seq.observe(seq);
        let mut events = Vec::new();
        if catch_up {
            self.counters.catch_ups += 1;
            if let Ok(missed) = self.replayed(0, seq - 1).await {
                events = missed;
            }
        } else {
            match step {
                SeqStep::InOrder => {}
                SeqStep::Duplicate => {
                    self.counters.duplicates += 1;
                    return;
                }
                SeqStep::Restarted => {
                    self.counters.restarts += 1;
                    events = self.cleared();
                }
                SeqStep::Gap { from, to } => {
                    self.counters.gaps += 1;
                    // Without the lost batches, what they said is unknown: forget everything
                    // this engine holds rather than keep matching blocks it may have evicted.
                    events = match self.replayed(from, to).await {
                        Ok(missed) => missed,
                        Err(()) => self.cleared(),
                    };
                }
            }
        }
        events.extend(self.translate(&payload));
        self.publish(events).await;
    }

    /// Batches `from ..= to` fetched from the engine's replay service and translated, in
    /// order; `Err` when there is no replay service or it does not have them all. The fetch
    /// is an `engine_link.replay` span (exported when the process exports traces).
    async fn replayed(&mut self, from: u64, to: u64) -> Result<Vec<KvEvent>, ()> {
        let Some(endpoint) = self.config.replay.clone() else {
            return Err(());
        };
        let span = tracing::info_span!(
            "engine_link.replay",
            otel.kind = "client",
            engine = %self.config.url,
            from,
            to,
            batches = tracing::field::Empty,
            error = tracing::field::Empty,
        );
        let fetched = replay(&endpoint, from, to, self.config.replay_timeout)
            .instrument(span.clone())
            .await;
        match &fetched {
            Ok(missed) => span.record("batches", missed.len()),
            Err(e) => span.record("error", tracing::field::display(e)),
        };
        match fetched {
            Ok(missed) => {
                self.counters.replayed += missed.len() as u64;
                Ok(missed
                    .iter()
                    .flat_map(|(_, payload)| self.translate(payload))
                    .collect())
            }
            Err(e) => {
                self.error(e);
                Err(())
            }
        }
    }

    /// `Cleared` for every rank of the engine (counted).
    fn cleared(&mut self) -> Vec<KvEvent> {
        let Some(joined) = self.joined.as_mut() else {
            return Vec::new();
        };
        self.counters.cleared += 1;
        let ranks = joined.ranks;
        joined.translator.cleared(0..ranks)
    }

    fn translate(&mut self, payload: &[u8]) -> Vec<KvEvent> {
        let Some(joined) = self.joined.as_mut() else {
            return Vec::new();
        };
        match decode_batch(payload) {
            Ok(batch) => {
                let translated = joined.translator.translate(batch);
                self.counters.batches += 1;
                self.counters.blocks += translated.blocks;
                self.skipped.add(translated.skipped);
                translated.events
            }
            Err(e) => {
                self.counters.undecodable += 1;
                self.error(e);
                Vec::new()
            }
        }
    }

    async fn publish(&mut self, events: Vec<KvEvent>) {
        let Some(joined) = self.joined.as_ref() else {
            return;
        };
        if events.is_empty() {
            return;
        }
        let n = events.len() as u64;
        match joined.link.publish_kv_events(events).await {
            Ok(()) => self.counters.events += n,
            Err(e) => {
                self.counters.publish_failures += 1;
                self.error(e);
            }
        }
    }

    pub(in crate::link) fn malformed(&mut self) {
        self.counters.undecodable += 1;
    }
}
