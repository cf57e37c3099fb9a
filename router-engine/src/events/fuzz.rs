//! Property tests of what an engine sends (issue #14 item 5): its KV event payloads (arbitrary
//! bytes, and batches in both encodings with arbitrary fields, then mutated), their
//! translation, and its `/metrics` text and SGLang server info. Nothing panics; a batch the
//! decoder accepts translates; a well-formed stored event keeps one block per engine hash.

use super::*;
use crate::load::{EngineKind, read_metrics, sglang_capacity};
use proptest::prelude::*;
use rmp::encode as mp;
use router_core::WorkerId;

/// One event's fields, written in either encoding.
#[derive(Debug, Clone)]
enum Ev {
    Stored {
        hashes: Vec<u64>,
        digests: bool,
        parent: Option<u64>,
        tokens: Vec<u32>,
        block_size: u32,
        lora: Option<String>,
        group: Option<u32>,
    },
    Removed {
        hashes: Vec<u64>,
        group: Option<u32>,
    },
    Cleared,
    Other(String),
}

fn hash(b: &mut Vec<u8>, h: u64, digest: bool) {
    if digest {
        let mut bytes = [0u8; 32];
        bytes[..8].copy_from_slice(&h.to_le_bytes());
        mp::write_bin(b, &bytes).expect("encode");
    } else {
        mp::write_uint(b, h).expect("encode");
    }
}

/// Writes with the msgpack encoder, which cannot fail on a `Vec`.
macro_rules! w {
    ($e:expr) => {{
        let _ = $e.expect("encode");
    }};
}

fn write_event(b: &mut Vec<u8>, ev: &Ev, tagged_map: bool) {
    match ev {
        Ev::Stored {
            hashes,
            digests,
            parent,
            tokens,
            block_size,
            lora,
            group,
        } => {
            if tagged_map {
                w!(mp::write_map_len(b, 8));
                w!(mp::write_str(b, "type"));
                w!(mp::write_str(b, "BlockStored"));
                w!(mp::write_str(b, "block_hashes"));
            } else {
                w!(mp::write_array_len(b, 10));
                w!(mp::write_str(b, "BlockStored"));
            }
            w!(mp::write_array_len(b, hashes.len() as u32));
            for h in hashes {
                hash(b, *h, *digests);
            }
            if tagged_map {
                w!(mp::write_str(b, "parent_block_hash"));
            }
            match parent {
                Some(p) => hash(b, *p, *digests),
                None => w!(mp::write_nil(b)),
            }
            if tagged_map {
                w!(mp::write_str(b, "token_ids"));
            }
            w!(mp::write_array_len(b, tokens.len() as u32));
            for t in tokens {
                w!(mp::write_uint(b, u64::from(*t)));
            }
            if tagged_map {
                w!(mp::write_str(b, "block_size"));
            }
            w!(mp::write_uint(b, u64::from(*block_size)));
            if !tagged_map {
                w!(mp::write_nil(b)); // lora_id
                w!(mp::write_str(b, "GPU")); // medium
            }
            if tagged_map {
                w!(mp::write_str(b, "lora_name"));
            }
            match lora {
                Some(l) => w!(mp::write_str(b, l)),
                None => w!(mp::write_nil(b)),
            }
            if tagged_map {
                w!(mp::write_str(b, "medium"));
                w!(mp::write_str(b, "GPU"));
            } else {
                w!(mp::write_nil(b)); // extra_keys
            }
            if tagged_map {
                w!(mp::write_str(b, "group_idx"));
            }
            match group {
                Some(g) => w!(mp::write_uint(b, u64::from(*g))),
                None => w!(mp::write_nil(b)),
            }
        }
        Ev::Removed { hashes, group } => {
            if tagged_map {
                w!(mp::write_map_len(b, 3));
                w!(mp::write_str(b, "type"));
                w!(mp::write_str(b, "BlockRemoved"));
                w!(mp::write_str(b, "block_hashes"));
            } else {
                w!(mp::write_array_len(b, 5));
                w!(mp::write_str(b, "BlockRemoved"));
            }
            w!(mp::write_array_len(b, hashes.len() as u32));
            for h in hashes {
                hash(b, *h, false);
            }
            if tagged_map {
                w!(mp::write_str(b, "group_idx"));
            } else {
                w!(mp::write_str(b, "GPU"));
            }
            match group {
                Some(g) => w!(mp::write_uint(b, u64::from(*g))),
                None => w!(mp::write_nil(b)),
            }
            if !tagged_map {
                w!(mp::write_nil(b)); // a field of a later release
            }
        }
        Ev::Cleared | Ev::Other(_) => {
            let tag = match ev {
                Ev::Other(tag) => tag.as_str(),
                _ => "AllBlocksCleared",
            };
            if tagged_map {
                w!(mp::write_map_len(b, 1));
                w!(mp::write_str(b, "type"));
                w!(mp::write_str(b, tag));
            } else {
                w!(mp::write_array_len(b, 1));
                w!(mp::write_str(b, tag));
            }
        }
    }
}

fn write_batch(events: &[Ev], tagged_map: bool, dp_rank: Option<u32>) -> Vec<u8> {
    let mut b = Vec::new();
    mp::write_array_len(&mut b, 3).expect("encode");
    mp::write_f64(&mut b, 1.7e9).expect("encode");
    mp::write_array_len(&mut b, events.len() as u32).expect("encode");
    for ev in events {
        write_event(&mut b, ev, tagged_map);
    }
    match dp_rank {
        Some(r) => w!(mp::write_uint(&mut b, u64::from(r))),
        None => w!(mp::write_nil(&mut b)),
    }
    b
}

fn event() -> impl Strategy<Value = Ev> {
    let group = prop::option::of(prop_oneof![Just(0u32), any::<u32>()]);
    prop_oneof![
        4 => (
            prop::collection::vec(any::<u64>(), 0..5),
            any::<bool>(),
            prop::option::of(any::<u64>()),
            prop::collection::vec(any::<u32>(), 0..40),
            prop_oneof![Just(4u32), Just(16), any::<u32>()],
            prop::option::of("[a-z]{0,6}"),
            group.clone(),
        )
            .prop_map(|(hashes, digests, parent, tokens, block_size, lora, group)| Ev::Stored {
                hashes, digests, parent, tokens, block_size, lora, group,
            }),
        2 => (prop::collection::vec(any::<u64>(), 0..5), group)
            .prop_map(|(hashes, group)| Ev::Removed { hashes, group }),
        1 => Just(Ev::Cleared),
        1 => "[A-Za-z]{0,12}".prop_map(Ev::Other),
    ]
}

fn mutate(mut bytes: Vec<u8>, edits: &[(usize, u8, u8)]) -> Vec<u8> {
    for &(at, byte, how) in edits {
        let len = bytes.len().max(1);
        let at = (at % len).min(bytes.len());
        match how % 4 {
            0 | 1 => {
                if let Some(b) = bytes.get_mut(at) {
                    *b = byte;
                }
            }
            2 => bytes.truncate(at),
            _ => bytes
                .splice(at..at, [0xdd, byte, 0xff, 0xff, 0xff])
                .for_each(drop),
        }
    }
    bytes
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(384))]

    #[test]
    fn arbitrary_bytes_never_panic_the_decoder(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        if let Ok(batch) = decode_batch(&bytes) {
            Translator::new(WorkerId(1), 16).translate(batch);
        }
    }

    /// Batches in both encodings with any field values decode; a stored event whose tokens
    /// fill its blocks at the engine's block size keeps one block per engine hash.
    #[test]
    fn well_formed_batches_decode_and_translate(
        events in prop::collection::vec(event(), 0..6),
        tagged_map in any::<bool>(),
        dp_rank in prop::option::of(any::<u32>()),
    ) {
        let payload = write_batch(&events, tagged_map, dp_rank);
        let batch = decode_batch(&payload).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(batch.events.len(), events.len());
        let out = Translator::new(WorkerId(1), 4).translate(batch);
        for e in &out.events {
            prop_assert_eq!(e.dp_rank, dp_rank.unwrap_or(0));
        }
        let fitting = events.iter().filter(|e| matches!(e, Ev::Stored { hashes, tokens, block_size: 4, group: None | Some(0), .. } if tokens.len() == hashes.len() * 4)).count();
        let stored = out.events.iter().filter(|e| matches!(e.data, router_core::KvEventData::Stored { .. })).count();
        prop_assert_eq!(stored, fitting);
    }

    #[test]
    fn mutated_batches_never_panic_the_decoder(
        events in prop::collection::vec(event(), 1..4),
        tagged_map in any::<bool>(),
        edits in prop::collection::vec((any::<usize>(), any::<u8>(), any::<u8>()), 1..6),
    ) {
        let payload = mutate(write_batch(&events, tagged_map, Some(0)), &edits);
        if let Ok(batch) = decode_batch(&payload) {
            Translator::new(WorkerId(1), 4).translate(batch);
        }
    }

    #[test]
    fn engine_metrics_and_server_info_never_panic(
        text in "[ -~\n]{0,400}",
        name in prop_oneof![Just("vllm:num_requests_running"), Just("vllm:gpu_cache_usage_perc"),
            Just("sglang:num_running_reqs"), Just("vllm:cache_config_info")],
        labels in "[a-z_]{0,10}=\"[ -!#-~]{0,10}\"",
        value in prop_oneof![Just("NaN".to_owned()), Just("+Inf".to_owned()), Just("-1e308".to_owned()),
            Just("18446744073709551616".to_owned()), "[0-9.e+-]{0,12}"],
        json in prop::collection::vec(any::<u8>(), 0..200),
    ) {
        for kind in [EngineKind::Vllm, EngineKind::Sglang] {
            let _ = read_metrics(kind, &text);
            let _ = read_metrics(kind, &format!("{name}{{{labels}}} {value}\n{text}"));
            let _ = read_metrics(kind, &format!(
                "vllm:cache_config_info{{block_size=\"{value}\",num_gpu_blocks=\"{value}\"}} 1\n"
            ));
        }
        let _ = sglang_capacity(&json);
        let info = format!("{{\"page_size\": {value}, \"max_total_num_tokens\": {value}}}");
        let _ = sglang_capacity(info.as_bytes());
    }
}

/// A batch nested a hundred thousand arrays deep used to reach serde, which recursed once per
/// level (rmp-serde allows 1,024; a debug build's stack overflowed first, aborting the
/// process). The shape check refuses it before.
#[test]
fn deep_nesting_and_length_claims_are_refused_before_serde() {
    let mut deep = vec![0x93, 0x01];
    deep.extend(std::iter::repeat_n(0x91, 100_000));
    assert!(decode_batch(&deep).is_err());
    let claims = [0x93, 0x01, 0xdd, 0xff, 0xff, 0xff, 0xff];
    let error = decode_batch(&claims).expect_err("refused");
    assert!(error.0.contains("claims more"), "{error}");
}
