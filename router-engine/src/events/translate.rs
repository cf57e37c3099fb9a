//! From an engine's batch to the fleet's [`KvEvent`]s.
//!
//! The router never recomputes an engine's block hash (vLLM's is a sha256 chain over
//! pickled or CBOR-encoded tuples, configurable per engine). It computes its own
//! [`LocalBlockHash`](router_core::LocalBlockHash) from each stored block's tokens, exactly as
//! it hashes a request's prompt, and sends it beside the engine's hash; the index keeps the
//! mapping, so a later `BlockRemoved` naming only the engine's hash finds the right blocks.
//!
//! Consecutive removals of one batch are merged into one event (vLLM sends one per block).
//!
//! Refused, counted and skipped (never half-applied): a stored event whose block size is not
//! the engine's, whose tokens do not fill its blocks exactly, or that belongs to another KV
//! cache group than the first; unknown event types.

use super::{EngineBatch, EngineEvent};
use router_core::HashScope;
use router_core::{KvEvent, KvEventData, StoredBlock, WorkerId};
use serde::Serialize;

/// What a translation skipped, by reason.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Skipped {
    /// A stored event announcing another block size than the engine's.
    pub block_size: u64,
    /// A stored event whose `token_ids` are not `block_size` tokens per block.
    pub token_count: u64,
    /// An event of a KV cache group other than the first (hybrid models).
    pub other_group: u64,
    pub unknown_type: u64,
}

impl Skipped {
    pub fn total(&self) -> u64 {
        self.block_size + self.token_count + self.other_group + self.unknown_type
    }

    pub fn add(&mut self, other: Skipped) {
        self.block_size += other.block_size;
        self.token_count += other.token_count;
        self.other_group += other.other_group;
        self.unknown_type += other.unknown_type;
    }
}

/// One translated batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Translated {
    pub events: Vec<KvEvent>,
    pub skipped: Skipped,
    /// Blocks stored plus blocks removed, for throughput counts.
    pub blocks: u64,
}

/// Translates one engine's batches; numbers the events it emits.
#[derive(Debug, Clone)]
pub struct Translator {
    worker: WorkerId,
    block_size: u32,
    next_event_id: u64,
}

impl Translator {
    /// For `worker`, whose engine stores blocks of `block_size` tokens.
    pub fn new(worker: WorkerId, block_size: u32) -> Self {
        Self {
            worker,
            block_size,
            next_event_id: 0,
        }
    }

    pub fn block_size(&self) -> u32 {
        self.block_size
    }

    fn event(&mut self, dp_rank: u32, data: KvEventData) -> KvEvent {
        let event_id = self.next_event_id;
        self.next_event_id += 1;
        KvEvent {
            worker: self.worker,
            dp_rank,
            event_id,
            data,
        }
    }

    /// `Cleared` for each of `ranks`: what the fleet is told when this link cannot vouch for
    /// what it said before (a lost batch that cannot be replayed, a restarted engine).
    pub fn cleared(&mut self, ranks: impl IntoIterator<Item = u32>) -> Vec<KvEvent> {
        ranks
            .into_iter()
            .map(|r| self.event(r, KvEventData::Cleared))
            .collect()
    }

    pub fn translate(&mut self, batch: EngineBatch) -> Translated {
        let dp_rank = batch.dp_rank.unwrap_or(0);
        let mut out = Translated {
            events: Vec::with_capacity(batch.events.len()),
            skipped: Skipped::default(),
            blocks: 0,
        };
        for event in batch.events {
            let data = match event {
                EngineEvent::Stored {
                    hashes,
                    parent,
                    token_ids,
                    block_size,
                    lora_name,
                    salt,
                    group,
                } => {
                    if group.unwrap_or(0) != 0 {
                        out.skipped.other_group += 1;
                        continue;
                    }
                    if block_size != self.block_size {
                        out.skipped.block_size += 1;
                        continue;
                    }
                    let size = self.block_size as usize;
                    if token_ids.len() != hashes.len() * size {
                        out.skipped.token_count += 1;
                        continue;
                    }
                    // The salt only where the sequence starts, as the engine hashed it.
                    let scope = HashScope::new(lora_name.as_deref(), salt.as_deref());
                    let locals = scope.local_hashes(&token_ids, size, parent.is_none());
                    out.blocks += hashes.len() as u64;
                    KvEventData::Stored {
                        parent,
                        blocks: hashes
                            .into_iter()
                            .zip(locals)
                            .map(|(hash, local)| StoredBlock { hash, local })
                            .collect(),
                    }
                }
                EngineEvent::Removed { hashes, group } => {
                    if group.unwrap_or(0) != 0 {
                        out.skipped.other_group += 1;
                        continue;
                    }
                    out.blocks += hashes.len() as u64;
                    // vLLM sends one removal per block: consecutive ones travel and apply as
                    // one event (the order of removals among themselves does not matter).
                    if let Some(KvEvent {
                        data: KvEventData::Removed { hashes: last },
                        ..
                    }) = out.events.last_mut()
                    {
                        last.extend(hashes);
                        continue;
                    }
                    KvEventData::Removed { hashes }
                }
                EngineEvent::Cleared => KvEventData::Cleared,
                EngineEvent::Unknown { .. } => {
                    out.skipped.unknown_type += 1;
                    continue;
                }
            };
            let event = self.event(dp_rank, data);
            out.events.push(event);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::EngineEvent;
    use router_core::ExternalHash;
    use router_core::hashing::local_block_hashes;

    fn stored(n: usize, block_size: u32, tokens: usize, lora: Option<&str>) -> EngineEvent {
        EngineEvent::Stored {
            hashes: (0..n as u64).map(ExternalHash).collect(),
            parent: None,
            token_ids: (0..tokens as u32).collect(),
            block_size,
            lora_name: lora.map(str::to_owned),
            salt: None,
            group: None,
        }
    }

    fn batch(events: Vec<EngineEvent>) -> EngineBatch {
        EngineBatch {
            ts: 0.0,
            events,
            dp_rank: Some(1),
        }
    }

    #[test]
    fn wrong_sizes_and_other_groups_are_skipped_and_counted() {
        let mut t = Translator::new(WorkerId(3), 4);
        let out = t.translate(batch(vec![
            stored(2, 8, 16, None),
            stored(2, 4, 7, None),
            EngineEvent::Removed {
                hashes: vec![ExternalHash(1)],
                group: Some(1),
            },
            EngineEvent::Unknown { tag: "X".into() },
            stored(2, 4, 8, None),
        ]));
        assert_eq!(
            out.skipped,
            Skipped {
                block_size: 1,
                token_count: 1,
                other_group: 1,
                unknown_type: 1
            }
        );
        assert_eq!(out.events.len(), 1);
        assert_eq!(out.blocks, 2);
        let event = &out.events[0];
        assert_eq!(
            (event.worker, event.dp_rank, event.event_id),
            (WorkerId(3), 1, 0)
        );
    }

    #[test]
    fn adapter_blocks_hash_in_the_adapters_namespace() {
        let mut t = Translator::new(WorkerId(3), 4);
        let out = t.translate(batch(vec![stored(1, 4, 4, Some("sql"))]));
        let KvEventData::Stored { blocks, .. } = &out.events[0].data else {
            panic!("stored");
        };
        assert_eq!(
            blocks[0].local,
            local_block_hashes(&[0, 1, 2, 3], 4, Some("sql"))[0]
        );
        assert_ne!(
            blocks[0].local,
            local_block_hashes(&[0, 1, 2, 3], 4, None)[0]
        );
    }

    #[test]
    fn a_salted_sequence_hashes_as_the_salted_request_does() {
        let tokens: Vec<u32> = (0..8).collect();
        let scope = router_core::HashScope::new(None, Some("tenant-a"));
        let request = scope.sequence_hashes(&tokens, 4);
        let mut t = Translator::new(WorkerId(3), 4);
        // The first block with the salt among its extra keys, then a continuation the engine
        // stores without it, under its parent.
        let block =
            |parent: Option<ExternalHash>, salt: Option<&str>, from: usize| EngineEvent::Stored {
                hashes: vec![ExternalHash(from as u64)],
                parent,
                token_ids: tokens[from..from + 4].to_vec(),
                block_size: 4,
                lora_name: None,
                salt: salt.map(str::to_owned),
                group: None,
            };
        let first = block(None, Some("tenant-a"), 0);
        let rest = block(Some(ExternalHash(0)), None, 4);
        let out = t.translate(batch(vec![first, rest]));
        let locals: Vec<_> = out
            .events
            .iter()
            .flat_map(|e| match &e.data {
                KvEventData::Stored { blocks, .. } => blocks.iter().map(|b| b.local).collect(),
                _ => Vec::new(),
            })
            .collect();
        assert_eq!(router_core::hashing::sequence_hashes(&locals), request);
        assert_ne!(
            request,
            router_core::HashScope::NONE.sequence_hashes(&tokens, 4)
        );
    }

    #[test]
    fn event_ids_run_on_across_batches_and_clears() {
        let mut t = Translator::new(WorkerId(3), 4);
        t.translate(batch(vec![stored(1, 4, 4, None), EngineEvent::Cleared]));
        let cleared = t.cleared(0..2);
        let ids: Vec<(u32, u64)> = cleared.iter().map(|e| (e.dp_rank, e.event_id)).collect();
        assert_eq!(ids, vec![(0, 2), (1, 3)]);
    }
}
