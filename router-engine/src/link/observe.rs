//! What an engine link shows of itself: its phase, its counters and the snapshot it answers
//! `Observe` with (`/debug/state` lists them under `node.engines`).

use crate::events::Skipped;
use crate::load::{Capacity, RankLoad};
use router_core::WorkerId;
use serde::Serialize;
use std::collections::BTreeMap;

/// Where the link stands with its engine.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "phase")]
pub enum LinkPhase {
    /// The engine has not answered (yet, or since it went down).
    Waiting,
    /// Announced; events and load relayed.
    Serving,
    /// The engine answers but cannot join: `reason` says why.
    Refused { reason: String },
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct LinkCounters {
    pub polls: u64,
    /// Probes that failed (no answer, an error status, unreadable capacity).
    pub probe_failures: u64,
    pub joins: u64,
    pub leaves: u64,
    /// Publisher messages relayed (decoded, translated, published).
    pub batches: u64,
    pub events: u64,
    /// Blocks stored plus removed, relayed.
    pub blocks: u64,
    /// Payloads that could not be decoded, and messages that were not three frames.
    pub undecodable: u64,
    /// Messages that arrived while not serving (dropped).
    pub not_serving: u64,
    pub gaps: u64,
    /// Lost batches filled from the engine's replay service.
    pub replayed: u64,
    /// Times the engine's entries were cleared because lost batches could not be replayed,
    /// or because the engine restarted.
    pub cleared: u64,
    pub restarts: u64,
    pub duplicates: u64,
    /// First batches heard after joining that did not start at 0, caught up by replay.
    pub catch_ups: u64,
    pub subscriber_failures: u64,
    /// Publishes to the bus that failed.
    pub publish_failures: u64,
}

/// What `/debug/state` shows of one link.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EngineLinkSnapshot {
    pub kind: &'static str,
    pub url: String,
    pub kv_events: Option<String>,
    /// Whether the engine's KV events are heard.
    pub kv_events_heard: super::EventsHeard,
    /// What the engine said it serves (its model, adapters and context length).
    pub served: Option<crate::load::ServedModels>,
    pub worker: WorkerId,
    pub pool: router_core::PoolRole,
    #[serde(flatten)]
    pub phase: LinkPhase,
    pub capacity: Option<Capacity>,
    /// The engine's own load by data-parallel rank, from the last scrape.
    pub load: BTreeMap<u32, RankLoad>,
    pub counters: LinkCounters,
    pub skipped: Skipped,
    pub last_error: Option<String>,
}
