//! The decoder's tests: payloads written with the msgpack encoder directly, in the encodings
//! engines use.

use super::*;
use rmp::encode as mp;

fn tokens(n: u32) -> Vec<u32> {
    (0..n).map(|t| t * 7 + 1).collect()
}

/// `["BlockStored", hashes, parent, token_ids, block_size, lora_id, medium]` with 32-byte
/// digests for hashes, and `["BlockRemoved", hashes, medium]`, `["AllBlocksCleared"]`.
fn array_batch() -> Vec<u8> {
    let mut b = Vec::new();
    mp::write_array_len(&mut b, 3).expect("encode");
    mp::write_f64(&mut b, 1.7e9).expect("encode");
    mp::write_array_len(&mut b, 4).expect("encode");
    // stored
    mp::write_array_len(&mut b, 7).expect("encode");
    mp::write_str(&mut b, "BlockStored").expect("encode");
    mp::write_array_len(&mut b, 2).expect("encode");
    mp::write_bin(&mut b, &[1u8; 32]).expect("encode");
    mp::write_bin(&mut b, &[2u8; 32]).expect("encode");
    mp::write_bin(&mut b, &[9u8; 32]).expect("encode");
    mp::write_array_len(&mut b, 8).expect("encode");
    for t in tokens(8) {
        mp::write_uint(&mut b, u64::from(t)).expect("encode");
    }
    mp::write_uint(&mut b, 4).expect("encode");
    mp::write_nil(&mut b).expect("encode");
    mp::write_str(&mut b, "GPU").expect("encode");
    // removed, trailing group_idx omitted
    mp::write_array_len(&mut b, 3).expect("encode");
    mp::write_str(&mut b, "BlockRemoved").expect("encode");
    mp::write_array_len(&mut b, 1).expect("encode");
    mp::write_bin(&mut b, &[1u8; 32]).expect("encode");
    mp::write_str(&mut b, "GPU").expect("encode");
    // cleared
    mp::write_array_len(&mut b, 1).expect("encode");
    mp::write_str(&mut b, "AllBlocksCleared").expect("encode");
    // a type this build does not know
    mp::write_array_len(&mut b, 2).expect("encode");
    mp::write_str(&mut b, "BlockMoved").expect("encode");
    mp::write_uint(&mut b, 3).expect("encode");
    mp::write_uint(&mut b, 2).expect("encode");
    b
}

fn digest(byte: u8) -> ExternalHash {
    ExternalHash(xxhash_rust::xxh3::xxh3_64(&[byte; 32]))
}

#[test]
fn tagged_arrays_with_digest_hashes() {
    let batch = decode_batch(&array_batch()).expect("decodes");
    assert_eq!(batch.dp_rank, Some(2));
    assert_eq!(
        batch.events,
        vec![
            EngineEvent::Stored {
                hashes: vec![digest(1), digest(2)],
                parent: Some(digest(9)),
                token_ids: tokens(8),
                block_size: 4,
                lora_name: None,
                salt: None,
                group: None,
            },
            EngineEvent::Removed {
                hashes: vec![digest(1)],
                group: None,
            },
            EngineEvent::Cleared,
            EngineEvent::Unknown {
                tag: "BlockMoved".to_owned()
            },
        ]
    );
}

#[test]
fn sglang_arrays_with_a_metadata_map_and_no_rank() {
    let mut b = Vec::new();
    mp::write_array_len(&mut b, 2).expect("encode");
    mp::write_f64(&mut b, 1.7e9).expect("encode");
    mp::write_array_len(&mut b, 2).expect("encode");
    mp::write_array_len(&mut b, 8).expect("encode");
    mp::write_str(&mut b, "BlockStored").expect("encode");
    mp::write_array_len(&mut b, 1).expect("encode");
    mp::write_uint(&mut b, 5).expect("encode");
    mp::write_nil(&mut b).expect("encode");
    mp::write_array_len(&mut b, 1).expect("encode");
    mp::write_uint(&mut b, 42).expect("encode");
    mp::write_uint(&mut b, 1).expect("encode");
    mp::write_nil(&mut b).expect("encode");
    mp::write_str(&mut b, "GPU").expect("encode");
    mp::write_map_len(&mut b, 1).expect("encode");
    mp::write_str(&mut b, "cache_salt").expect("encode");
    mp::write_str(&mut b, "tenant-a").expect("encode");
    mp::write_array_len(&mut b, 2).expect("encode");
    mp::write_str(&mut b, "BlockRemoved").expect("encode");
    mp::write_array_len(&mut b, 1).expect("encode");
    mp::write_uint(&mut b, 5).expect("encode");
    let batch = decode_batch(&b).expect("decodes");
    assert_eq!(batch.dp_rank, None);
    assert_eq!(
        batch.events,
        vec![
            EngineEvent::Stored {
                hashes: vec![ExternalHash(5)],
                parent: None,
                token_ids: vec![42],
                block_size: 1,
                lora_name: None,
                salt: None,
                group: None,
            },
            EngineEvent::Removed {
                hashes: vec![ExternalHash(5)],
                group: None,
            },
        ]
    );
}

#[test]
fn tagged_maps_with_extra_keys_and_no_rank() {
    let mut b = Vec::new();
    mp::write_array_len(&mut b, 2).expect("encode");
    mp::write_f64(&mut b, 1.7e9).expect("encode");
    mp::write_array_len(&mut b, 1).expect("encode");
    mp::write_map_len(&mut b, 6).expect("encode");
    // vLLM's per-block extra keys: the adapter's name, then the cache salt on the first block.
    mp::write_str(&mut b, "extra_keys").expect("encode");
    mp::write_array_len(&mut b, 2).expect("encode");
    mp::write_array_len(&mut b, 2).expect("encode");
    mp::write_str(&mut b, "sql-adapter").expect("encode");
    mp::write_str(&mut b, "tenant-a").expect("encode");
    mp::write_nil(&mut b).expect("encode");
    mp::write_str(&mut b, "type").expect("encode");
    mp::write_str(&mut b, "BlockStored").expect("encode");
    mp::write_str(&mut b, "block_hashes").expect("encode");
    mp::write_array_len(&mut b, 1).expect("encode");
    mp::write_uint(&mut b, u64::MAX - 5).expect("encode");
    mp::write_str(&mut b, "token_ids").expect("encode");
    mp::write_array_len(&mut b, 2).expect("encode");
    mp::write_uint(&mut b, 10).expect("encode");
    mp::write_uint(&mut b, 11).expect("encode");
    mp::write_str(&mut b, "block_size").expect("encode");
    mp::write_uint(&mut b, 2).expect("encode");
    mp::write_str(&mut b, "lora_name").expect("encode");
    mp::write_str(&mut b, "sql-adapter").expect("encode");
    let batch = decode_batch(&b).expect("decodes");
    assert_eq!(batch.dp_rank, None);
    assert_eq!(
        batch.events,
        vec![EngineEvent::Stored {
            hashes: vec![ExternalHash(u64::MAX - 5)],
            parent: None,
            token_ids: vec![10, 11],
            block_size: 2,
            lora_name: Some("sql-adapter".to_owned()),
            salt: Some("tenant-a".to_owned()),
            group: None,
        }]
    );
}

#[test]
fn garbage_is_an_error_not_a_panic() {
    for payload in [
        &b""[..],
        b"\x93",
        b"\xc1",
        b"\x92\xcb\0\0\0\0\0\0\0\0\x91\x90",
    ] {
        assert!(decode_batch(payload).is_err(), "{payload:?}");
    }
    // A map event without its tag.
    let mut b = Vec::new();
    mp::write_array_len(&mut b, 2).expect("encode");
    mp::write_f64(&mut b, 0.0).expect("encode");
    mp::write_array_len(&mut b, 1).expect("encode");
    mp::write_map_len(&mut b, 1).expect("encode");
    mp::write_str(&mut b, "block_size").expect("encode");
    mp::write_uint(&mut b, 2).expect("encode");
    let error = decode_batch(&b).expect_err("no type");
    assert!(error.to_string().contains("type"), "{error}");
}
