//! Block hashing: how a prompt's tokens become the chained 64-bit hashes the prefix index
//! is keyed by.
//!
//! Tokens are cut into blocks of `block_size`; only FULL blocks are hashed (a trailing partial
//! block is never cached by an engine, so it can never be matched). Each block gets a
//! [`LocalBlockHash`]: XXH3-64 of its tokens (little-endian `u32`s), seeded by an optional
//! namespace (LoRA adapter name, cache salt). The namespace is tagged and length-prefixed before
//! it is hashed into the seed, so two adapters never share a prefix and `Some("")` differs from
//! `None`. A block's [`SequenceHash`] identifies it together with every block before it:
//! `seq[0] = local[0]`, `seq[i] = H(seq[i-1] ‖ local[i])`, so equal sequence hashes mean equal
//! prefixes.

use serde::{Deserialize, Serialize};
use std::fmt;
use xxhash_rust::xxh3::{xxh3_64, xxh3_64_with_seed};

/// Hash of one full block's tokens (and namespace), independent of what came before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct LocalBlockHash(pub u64);

/// Hash of a block together with its whole prefix: the prefix index's key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct SequenceHash(pub u64);

impl fmt::Display for LocalBlockHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "local:{:016x}", self.0)
    }
}

impl fmt::Display for SequenceHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "seq:{:016x}", self.0)
    }
}

/// The XXH3 seed for a namespace. `None` is seed 0 (plain XXH3 of the tokens); a namespace is
/// hashed with a tag byte and its length in front, so it can never collide with another
/// namespace that is a prefix of it, nor with `None`.
fn namespace_seed(namespace: Option<&str>) -> u64 {
    match namespace {
        None => 0,
        Some(ns) => {
            let mut buf = Vec::with_capacity(9 + ns.len());
            buf.push(1u8);
            buf.extend_from_slice(&(ns.len() as u64).to_le_bytes());
            buf.extend_from_slice(ns.as_bytes());
            xxh3_64(&buf)
        }
    }
}

/// What a block's hash depends on besides its tokens, as engines hash it: the LoRA adapter
/// (every block of the sequence) and the cache salt (vLLM's `cache_salt`: only the sequence's
/// first block; the chain carries it to every block after, so a continuation an engine
/// stores without the salt still chains under it). Blocks of different adapters or salts
/// never share a prefix.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HashScope<'a> {
    pub lora: Option<&'a str>,
    pub salt: Option<&'a str>,
}

impl<'a> HashScope<'a> {
    /// The base model, no salt.
    pub const NONE: HashScope<'static> = HashScope {
        lora: None,
        salt: None,
    };

    pub fn new(lora: Option<&'a str>, salt: Option<&'a str>) -> Self {
        Self { lora, salt }
    }

    /// The local hashes of `tokens`' full blocks; `starts_sequence`: the first block is the
    /// sequence's first (an engine's stored event without a parent), so the salt applies.
    pub fn local_hashes(
        &self,
        tokens: &[u32],
        block_size: usize,
        starts_sequence: bool,
    ) -> Vec<LocalBlockHash> {
        let mut locals = local_block_hashes(tokens, block_size, self.lora);
        if let (true, Some(salt), Some(first)) = (starts_sequence, self.salt, locals.first_mut()) {
            *first = salted(*first, salt);
        }
        locals
    }

    /// A whole sequence's hashes: what a request is looked up with.
    pub fn sequence_hashes(&self, tokens: &[u32], block_size: usize) -> Vec<SequenceHash> {
        sequence_hashes(&self.local_hashes(tokens, block_size, true))
    }
}

/// A first block's local hash under a cache salt (tagged and length-prefixed, so no salt is
/// another's prefix and the empty salt differs from none).
fn salted(local: LocalBlockHash, salt: &str) -> LocalBlockHash {
    let mut buf = Vec::with_capacity(17 + salt.len());
    buf.push(2u8);
    buf.extend_from_slice(&local.0.to_le_bytes());
    buf.extend_from_slice(&(salt.len() as u64).to_le_bytes());
    buf.extend_from_slice(salt.as_bytes());
    LocalBlockHash(xxh3_64(&buf))
}

/// One [`LocalBlockHash`] per full block of `block_size` tokens; a trailing partial block is
/// ignored. `block_size == 0` yields no blocks.
pub fn local_block_hashes(
    tokens: &[u32],
    block_size: usize,
    namespace: Option<&str>,
) -> Vec<LocalBlockHash> {
    if block_size == 0 {
        return Vec::new();
    }
    let seed = namespace_seed(namespace);
    let mut bytes = Vec::with_capacity(block_size * 4);
    tokens
        .chunks_exact(block_size)
        .map(|block| {
            bytes.clear();
            bytes.extend(block.iter().flat_map(|t| t.to_le_bytes()));
            LocalBlockHash(xxh3_64_with_seed(&bytes, seed))
        })
        .collect()
}

/// The sequence hash of a block whose prefix ends in `parent` (`None`: the first block).
pub fn chain(parent: Option<SequenceHash>, local: LocalBlockHash) -> SequenceHash {
    match parent {
        None => SequenceHash(local.0),
        Some(p) => {
            let mut buf = [0u8; 16];
            buf[..8].copy_from_slice(&p.0.to_le_bytes());
            buf[8..].copy_from_slice(&local.0.to_le_bytes());
            SequenceHash(xxh3_64(&buf))
        }
    }
}

/// Chains local hashes from the start of a sequence.
pub fn sequence_hashes(locals: &[LocalBlockHash]) -> Vec<SequenceHash> {
    let mut parent = None;
    locals
        .iter()
        .map(|&local| {
            let seq = chain(parent, local);
            parent = Some(seq);
            seq
        })
        .collect()
}

/// Tokens straight to sequence hashes: what a request is looked up with.
pub fn token_sequence_hashes(
    tokens: &[u32],
    block_size: usize,
    scope: HashScope<'_>,
) -> Vec<SequenceHash> {
    scope.sequence_hashes(tokens, block_size)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tokens(n: u32) -> Vec<u32> {
        (0..n).map(|i| i.wrapping_mul(2_654_435_761)).collect()
    }

    #[test]
    fn same_prefix_gives_same_hashes_and_divergence_changes_the_rest() {
        let a = tokens(64);
        let mut b = a.clone();
        b[40] ^= 1; // third block (32..48) differs
        let la = local_block_hashes(&a, 16, None);
        let lb = local_block_hashes(&b, 16, None);
        assert_eq!(la.len(), 4);
        assert_eq!(la[..2], lb[..2]);
        assert_ne!(la[2], lb[2]);
        assert_eq!(la[3], lb[3], "local hashes do not depend on the prefix");
        let sa = sequence_hashes(&la);
        let sb = sequence_hashes(&lb);
        assert_eq!(sa[..2], sb[..2]);
        assert_ne!(sa[2], sb[2]);
        assert_ne!(sa[3], sb[3], "sequence hashes carry the divergence forward");
    }

    #[test]
    fn namespaces_separate_hashes_and_empty_namespace_differs_from_none() {
        let t = tokens(32);
        let none = local_block_hashes(&t, 16, None);
        let empty = local_block_hashes(&t, 16, Some(""));
        let lora_a = local_block_hashes(&t, 16, Some("lora-a"));
        let lora_b = local_block_hashes(&t, 16, Some("lora-b"));
        assert_ne!(none, empty);
        assert_ne!(empty, lora_a);
        assert_ne!(lora_a, lora_b);
        assert_eq!(lora_a, local_block_hashes(&t, 16, Some("lora-a")));
    }

    #[test]
    fn partial_last_block_is_ignored() {
        let t = tokens(50);
        let full = local_block_hashes(&t[..48], 16, None);
        assert_eq!(local_block_hashes(&t, 16, None), full);
        assert_eq!(full.len(), 3);
        assert!(local_block_hashes(&t[..15], 16, None).is_empty());
        assert!(local_block_hashes(&t, 0, None).is_empty());
    }

    #[test]
    fn sequence_hashes_follow_the_chain_rule() {
        let locals = local_block_hashes(&tokens(80), 16, Some("salt"));
        let seqs = sequence_hashes(&locals);
        assert_eq!(seqs[0], SequenceHash(locals[0].0));
        for i in 1..locals.len() {
            assert_eq!(seqs[i], chain(Some(seqs[i - 1]), locals[i]));
        }
        let scope = HashScope::new(Some("salt"), None);
        assert_eq!(token_sequence_hashes(&tokens(80), 16, scope), seqs);
    }

    #[test]
    fn a_salt_changes_the_first_block_and_through_the_chain_every_block_after() {
        let t = tokens(64);
        let plain = HashScope::NONE.local_hashes(&t, 16, true);
        let salted = HashScope::new(None, Some("tenant-a")).local_hashes(&t, 16, true);
        assert_ne!(plain[0], salted[0]);
        assert_eq!(plain[1..], salted[1..], "only the first block is salted");
        let a = HashScope::new(None, Some("tenant-a")).sequence_hashes(&t, 16);
        let b = HashScope::new(None, Some("tenant-b")).sequence_hashes(&t, 16);
        let empty = HashScope::new(None, Some("")).sequence_hashes(&t, 16);
        let none = HashScope::NONE.sequence_hashes(&t, 16);
        for (i, block) in a.iter().enumerate() {
            assert!(block != &b[i] && block != &none[i] && empty[i] != none[i]);
        }
        // A continuation stored without the salt (an engine's event with a parent) chains
        // under the salted first block to the request's own hashes.
        let rest = HashScope::new(None, Some("tenant-a")).local_hashes(&t[16..], 16, false);
        let mut chained = vec![a[0]];
        for local in rest {
            chained.push(chain(chained.last().copied(), local));
        }
        assert_eq!(chained, a);
    }

    #[test]
    fn same_block_at_different_positions_has_different_sequence_hashes() {
        let block: Vec<u32> = (0..16).collect();
        let twice: Vec<u32> = block.iter().chain(block.iter()).copied().collect();
        let locals = local_block_hashes(&twice, 16, None);
        assert_eq!(locals[0], locals[1]);
        let seqs = sequence_hashes(&locals);
        assert_ne!(seqs[0], seqs[1]);
    }

    #[test]
    fn hash_newtypes_serialise_as_plain_numbers() {
        assert_eq!(
            serde_json::to_string(&SequenceHash(7)).ok().as_deref(),
            Some("7")
        );
        assert_eq!(
            serde_json::to_string(&LocalBlockHash(9)).ok().as_deref(),
            Some("9")
        );
    }
}
