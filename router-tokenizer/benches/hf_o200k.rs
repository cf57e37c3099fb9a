//! A Llama-3-shaped byte-level BPE `tokenizer.json` with a real-sized vocabulary, for the
//! tokenizer benchmark and tests (written once under the system's temp directory, not
//! committed: about 10 MB).
//!
//! It is `tests/fixtures/tiny-llama/tokenizer.json` (Llama 3's split pattern, `ByteLevel`,
//! its special tokens and BOS post-processor, `ignore_merges` as Llama 3 has it) with the
//! model's vocabulary and merges replaced by tiktoken-rs's `o200k_base` ranks (200k tokens):
//! each token is written in GPT-2's byte-to-character form, and the merge that makes a token
//! is found by merging its bytes by rank with only lower-ranked tokens allowed, until two
//! parts are left.

#![allow(dead_code, clippy::expect_used)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// The generated file's path, written on first use.
pub fn o200k_llama3_tokenizer_json() -> PathBuf {
    let dir = std::env::temp_dir().join("switchyard-o200k-llama3-v1");
    let path = dir.join("tokenizer.json");
    if !path.exists() {
        std::fs::create_dir_all(&dir).expect("a temp directory");
        let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tiny-llama");
        let json = generate(&fixture.join("tokenizer.json"));
        let partial = dir.join(format!("tokenizer.json.{}", std::process::id()));
        std::fs::write(&partial, json).expect("writes the tokenizer");
        std::fs::rename(&partial, &path).expect("renames the tokenizer");
    }
    path
}

fn generate(template: &Path) -> String {
    let core = tiktoken_rs::o200k_base_singleton();
    let specials = core.special_tokens();
    let mut ranks: HashMap<Vec<u8>, u32> = HashMap::new();
    for rank in 0..200_019u32 {
        if let Ok(bytes) = core.decode_bytes(&[rank])
            && !std::str::from_utf8(&bytes).is_ok_and(|s| specials.contains(s))
        {
            ranks.insert(bytes, rank);
        }
    }
    let chars = byte_chars();
    let text = |bytes: &[u8]| -> String { bytes.iter().map(|&b| chars[usize::from(b)]).collect() };
    let mut by_rank: Vec<(&Vec<u8>, u32)> = ranks.iter().map(|(b, &r)| (b, r)).collect();
    by_rank.sort_by_key(|&(_, r)| r);
    let mut vocab = serde_json::Map::new();
    let mut merges = Vec::new();
    for &(bytes, rank) in &by_rank {
        vocab.insert(text(bytes), rank.into());
        if bytes.len() > 1
            && let Some((left, right)) = last_merge(bytes, rank, &ranks)
        {
            merges.push(serde_json::json!([text(left), text(right)]));
        }
    }
    let next_id = by_rank.last().map_or(0, |&(_, r)| r + 1);
    let mut json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(template).expect("the fixture"))
            .expect("the fixture's JSON");
    let mut renumbered = HashMap::new();
    for (i, token) in json["added_tokens"]
        .as_array_mut()
        .expect("added tokens")
        .iter_mut()
        .enumerate()
    {
        let id = next_id + u32::try_from(i).expect("few added tokens");
        renumbered.insert(token["content"].as_str().expect("content").to_owned(), id);
        token["id"] = id.into();
    }
    if let Some(specials) = json["post_processor"]["special_tokens"].as_object_mut() {
        for (name, special) in specials {
            special["ids"] = serde_json::json!([renumbered[name.as_str()]]);
        }
    }
    json["model"]["vocab"] = vocab.into();
    json["model"]["merges"] = merges.into();
    json["model"]["ignore_merges"] = true.into();
    json.to_string()
}

/// The two parts `bytes` (of rank `rank`) is merged from: its bytes merged lowest rank
/// first, only through tokens ranked below it.
fn last_merge<'b>(
    bytes: &'b [u8],
    rank: u32,
    ranks: &HashMap<Vec<u8>, u32>,
) -> Option<(&'b [u8], &'b [u8])> {
    let mut starts: Vec<usize> = (0..bytes.len()).collect();
    let end = |starts: &[usize], i: usize| starts.get(i + 1).copied().unwrap_or(bytes.len());
    loop {
        let best = (0..starts.len().saturating_sub(1))
            .filter_map(|i| {
                let r = *ranks.get(&bytes[starts[i]..end(&starts, i + 1)])?;
                (r < rank).then_some((r, i))
            })
            .min();
        match best {
            Some((_, i)) => {
                starts.remove(i + 1);
            }
            None => break,
        }
    }
    (starts.len() == 2).then(|| (&bytes[..starts[1]], &bytes[starts[1]..]))
}

/// GPT-2's byte-to-character table.
fn byte_chars() -> Vec<char> {
    let mut shifted = 0u32;
    (0..=255u8)
        .map(|b| match b {
            b'!'..=b'~' | 0xa1..=0xac | 0xae..=0xff => char::from(b),
            _ => {
                shifted += 1;
                char::from_u32(255 + shifted).expect("a character")
            }
        })
        .collect()
}
