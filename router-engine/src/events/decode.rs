//! Reading an engine's KV event payload (msgpack) into an [`EngineBatch`].
//!
//! The batch is an array `[ts, events, data_parallel_rank?]`. Each event is accepted in both
//! encodings engines have used: a map tagged by its `"type"` key (vLLM 0.32), or an array whose
//! first element is the tag followed by the fields in declaration order (older releases).
//! Fields an engine leaves at their default may be missing (a trailing array element or a map
//! key); fields this router does not use are skipped without being built. Block hashes are
//! unsigned 64-bit integers or 32-byte digests; a digest is folded to 64 bits with xxh3.
//!
//! The visitors are written out by hand, not derived: the payload's token lists are the hot
//! part of the event path, and a derived internally-tagged enum would buffer every token as a
//! generic value before reading it.

use super::{EngineBatch, EngineEvent};
use router_core::ExternalHash;
use serde::Deserialize;
use serde::de::{self, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use std::fmt;

/// A payload that is not a KV event batch.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("undecodable KV event batch: {0}")]
pub struct DecodeError(pub String);

/// Decodes one msgpack payload. Its shape is checked first (`router_actors::wire::check_shape`:
/// nesting, lengths within the payload), so a payload nested thousands deep or claiming
/// gigabytes is refused before serde recurses or allocates.
pub fn decode_batch(payload: &[u8]) -> Result<EngineBatch, DecodeError> {
    router_actors::wire::check_shape(payload, router_actors::wire::MAX_DEPTH)
        .map_err(|e| DecodeError(e.to_string()))?;
    rmp_serde::from_slice::<BatchDe>(payload)
        .map(|b| b.0)
        .map_err(|e| DecodeError(e.to_string()))
}

struct BatchDe(EngineBatch);

impl<'de> Deserialize<'de> for BatchDe {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_seq(BatchVisitor)
    }
}

struct BatchVisitor;

impl<'de> Visitor<'de> for BatchVisitor {
    type Value = BatchDe;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an array [ts, events, data_parallel_rank]")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<BatchDe, A::Error> {
        let ts: f64 = seq
            .next_element()?
            .ok_or_else(|| de::Error::invalid_length(0, &self))?;
        let events: Vec<EventDe> = seq
            .next_element()?
            .ok_or_else(|| de::Error::invalid_length(1, &self))?;
        let dp_rank: Option<u32> = seq.next_element::<Option<u32>>()?.flatten();
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(BatchDe(EngineBatch {
            ts,
            events: events.into_iter().map(|e| e.0).collect(),
            dp_rank,
        }))
    }
}

/// One engine block hash, folded to 64 bits.
struct HashDe(ExternalHash);

impl<'de> Deserialize<'de> for HashDe {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(HashVisitor)
    }
}

struct HashVisitor;

impl Visitor<'_> for HashVisitor {
    type Value = HashDe;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a block hash (an integer or a byte string)")
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<HashDe, E> {
        Ok(HashDe(ExternalHash(v)))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<HashDe, E> {
        Ok(HashDe(ExternalHash(u64::from_ne_bytes(v.to_ne_bytes()))))
    }

    fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<HashDe, E> {
        Ok(HashDe(ExternalHash(xxhash_rust::xxh3::xxh3_64(v))))
    }
}

fn hashes(v: Vec<HashDe>) -> Vec<ExternalHash> {
    v.into_iter().map(|h| h.0).collect()
}

/// A string where one may be, or anything else (read as none).
struct NameDe(Option<String>);

impl<'de> Deserialize<'de> for NameDe {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = NameDe;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a name or anything else")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<NameDe, E> {
                Ok(NameDe(Some(v.to_owned())))
            }
            fn visit_unit<E: de::Error>(self) -> Result<NameDe, E> {
                Ok(NameDe(None))
            }
            fn visit_none<E: de::Error>(self) -> Result<NameDe, E> {
                Ok(NameDe(None))
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<NameDe, E> {
                Ok(NameDe(None))
            }
            fn visit_u64<E: de::Error>(self, _: u64) -> Result<NameDe, E> {
                Ok(NameDe(None))
            }
            fn visit_i64<E: de::Error>(self, _: i64) -> Result<NameDe, E> {
                Ok(NameDe(None))
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<NameDe, E> {
                Ok(NameDe(None))
            }
            fn visit_bytes<E: de::Error>(self, _: &[u8]) -> Result<NameDe, E> {
                Ok(NameDe(None))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<NameDe, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(NameDe(None))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<NameDe, A::Error> {
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(NameDe(None))
            }
        }
        d.deserialize_any(V)
    }
}

/// The bare strings among one block's extra keys (`None`, or a tuple of the adapter's name,
/// `(mm_id, offset)` pairs, the cache salt, prompt-embeds digests); anything else is none.
struct BlockKeysDe(Vec<String>);

impl<'de> Deserialize<'de> for BlockKeysDe {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = BlockKeysDe;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a block's extra keys")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<BlockKeysDe, A::Error> {
                let mut strings = Vec::new();
                while let Some(NameDe(name)) = seq.next_element()? {
                    strings.extend(name);
                }
                Ok(BlockKeysDe(strings))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<BlockKeysDe, A::Error> {
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(BlockKeysDe(Vec::new()))
            }
            fn visit_unit<E: de::Error>(self) -> Result<BlockKeysDe, E> {
                Ok(BlockKeysDe(Vec::new()))
            }
            fn visit_none<E: de::Error>(self) -> Result<BlockKeysDe, E> {
                Ok(BlockKeysDe(Vec::new()))
            }
            fn visit_str<E: de::Error>(self, _: &str) -> Result<BlockKeysDe, E> {
                Ok(BlockKeysDe(Vec::new()))
            }
            fn visit_bytes<E: de::Error>(self, _: &[u8]) -> Result<BlockKeysDe, E> {
                Ok(BlockKeysDe(Vec::new()))
            }
            fn visit_u64<E: de::Error>(self, _: u64) -> Result<BlockKeysDe, E> {
                Ok(BlockKeysDe(Vec::new()))
            }
            fn visit_i64<E: de::Error>(self, _: i64) -> Result<BlockKeysDe, E> {
                Ok(BlockKeysDe(Vec::new()))
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<BlockKeysDe, E> {
                Ok(BlockKeysDe(Vec::new()))
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<BlockKeysDe, E> {
                Ok(BlockKeysDe(Vec::new()))
            }
        }
        d.deserialize_any(V)
    }
}

/// An event's `extra_keys` (one entry per block, or none): the first block's bare strings,
/// where a cache salt is (engines salt only a sequence's first block).
struct FirstBlockKeysDe(Vec<String>);

impl<'de> Deserialize<'de> for FirstBlockKeysDe {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = FirstBlockKeysDe;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("the blocks' extra keys")
            }
            fn visit_seq<A: SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<FirstBlockKeysDe, A::Error> {
                let first = seq.next_element::<BlockKeysDe>()?.map(|k| k.0);
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(FirstBlockKeysDe(first.unwrap_or_default()))
            }
            fn visit_unit<E: de::Error>(self) -> Result<FirstBlockKeysDe, E> {
                Ok(FirstBlockKeysDe(Vec::new()))
            }
            fn visit_none<E: de::Error>(self) -> Result<FirstBlockKeysDe, E> {
                Ok(FirstBlockKeysDe(Vec::new()))
            }
        }
        d.deserialize_any(V)
    }
}

/// The cache salt among a first block's extra-key strings: the adapter's name comes first
/// when there is one, then the salt (multimodal ids are pairs, prompt-embeds digests bytes).
fn salt_of(mut strings: Vec<String>, lora_name: Option<&str>) -> Option<String> {
    if let Some(lora) = lora_name
        && let Some(at) = strings.iter().position(|s| s == lora)
    {
        strings.remove(at);
    }
    strings.into_iter().next()
}

/// The event tag.
enum Tag {
    Stored,
    Removed,
    Cleared,
    Unknown(String),
}

impl<'de> Deserialize<'de> for Tag {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Tag;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an event type name")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Tag, E> {
                Ok(match v {
                    "BlockStored" => Tag::Stored,
                    "BlockRemoved" => Tag::Removed,
                    "AllBlocksCleared" => Tag::Cleared,
                    other => Tag::Unknown(other.to_owned()),
                })
            }
            fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<Tag, E> {
                self.visit_str(&String::from_utf8_lossy(v))
            }
        }
        d.deserialize_str(V)
    }
}

/// The map keys this router reads; every other key is skipped.
enum Key {
    Type,
    BlockHashes,
    ParentBlockHash,
    TokenIds,
    BlockSize,
    LoraName,
    ExtraKeys,
    GroupIdx,
    Other,
}

impl<'de> Deserialize<'de> for Key {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Key;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a field name")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Key, E> {
                Ok(match v {
                    "type" => Key::Type,
                    "block_hashes" => Key::BlockHashes,
                    "parent_block_hash" => Key::ParentBlockHash,
                    "token_ids" => Key::TokenIds,
                    "block_size" => Key::BlockSize,
                    "lora_name" => Key::LoraName,
                    "extra_keys" => Key::ExtraKeys,
                    "group_idx" => Key::GroupIdx,
                    _ => Key::Other,
                })
            }
            fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<Key, E> {
                self.visit_str(&String::from_utf8_lossy(v))
            }
        }
        d.deserialize_str(V)
    }
}

/// The fields of any event, gathered before the tag says which ones matter.
#[derive(Default)]
struct Fields {
    hashes: Vec<HashDe>,
    parent: Option<HashDe>,
    token_ids: Vec<u32>,
    block_size: u32,
    lora_name: Option<String>,
    first_block_keys: Vec<String>,
    group: Option<u32>,
}

impl Fields {
    fn into_event(self, tag: Tag) -> EngineEvent {
        match tag {
            Tag::Stored => EngineEvent::Stored {
                salt: salt_of(self.first_block_keys, self.lora_name.as_deref()),
                hashes: hashes(self.hashes),
                parent: self.parent.map(|h| h.0),
                token_ids: self.token_ids,
                block_size: self.block_size,
                lora_name: self.lora_name,
                group: self.group,
            },
            Tag::Removed => EngineEvent::Removed {
                hashes: hashes(self.hashes),
                group: self.group,
            },
            Tag::Cleared => EngineEvent::Cleared,
            Tag::Unknown(tag) => EngineEvent::Unknown { tag },
        }
    }
}

struct EventDe(EngineEvent);

impl<'de> Deserialize<'de> for EventDe {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(EventVisitor)
    }
}

struct EventVisitor;

impl<'de> Visitor<'de> for EventVisitor {
    type Value = EventDe;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a KV event (a map tagged by \"type\", or an array led by its tag)")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<EventDe, A::Error> {
        let mut tag = None;
        let mut f = Fields::default();
        while let Some(key) = map.next_key::<Key>()? {
            match key {
                Key::Type => tag = Some(map.next_value::<Tag>()?),
                Key::BlockHashes => f.hashes = map.next_value()?,
                Key::ParentBlockHash => f.parent = map.next_value()?,
                Key::TokenIds => f.token_ids = map.next_value()?,
                Key::BlockSize => f.block_size = map.next_value()?,
                Key::LoraName => f.lora_name = map.next_value()?,
                Key::ExtraKeys => f.first_block_keys = map.next_value::<FirstBlockKeysDe>()?.0,
                Key::GroupIdx => f.group = map.next_value()?,
                Key::Other => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        let tag = tag.ok_or_else(|| de::Error::missing_field("type"))?;
        Ok(EventDe(f.into_event(tag)))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<EventDe, A::Error> {
        let tag: Tag = seq
            .next_element()?
            .ok_or_else(|| de::Error::invalid_length(0, &self))?;
        let mut f = Fields::default();
        match tag {
            // block_hashes, parent_block_hash, token_ids, block_size, lora_id, medium,
            // lora_name, extra_keys, group_idx, ...
            Tag::Stored => {
                f.hashes = seq.next_element()?.unwrap_or_default();
                f.parent = seq.next_element::<Option<HashDe>>()?.flatten();
                f.token_ids = seq.next_element()?.unwrap_or_default();
                f.block_size = seq.next_element()?.unwrap_or_default();
                let _lora_id = seq.next_element::<IgnoredAny>()?;
                let _medium = seq.next_element::<IgnoredAny>()?;
                // vLLM: lora_name, extra_keys, group_idx. SGLang puts a metadata map here
                // instead (read as no name), and nothing after it.
                f.lora_name = seq.next_element::<NameDe>()?.and_then(|n| n.0);
                f.first_block_keys = seq
                    .next_element::<FirstBlockKeysDe>()?
                    .map(|k| k.0)
                    .unwrap_or_default();
                f.group = seq.next_element::<Option<u32>>()?.flatten();
            }
            // block_hashes, medium, group_idx, ...
            Tag::Removed => {
                f.hashes = seq.next_element()?.unwrap_or_default();
                let _medium = seq.next_element::<IgnoredAny>()?;
                f.group = seq.next_element::<Option<u32>>()?.flatten();
            }
            Tag::Cleared | Tag::Unknown(_) => {}
        }
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(EventDe(f.into_event(tag)))
    }
}

#[cfg(test)]
#[path = "decode_tests.rs"]
mod tests;
