//! The token ids of text already seen, by chunk: multi-turn conversations and shared system
//! prompts send the same long text again and again, and tokenizing it is the router's main
//! cost per request.
//!
//! Text is cut into chunks of about [`CHUNK_BYTES`] at `split.rs`'s boundaries, which no
//! pre-tokenizer piece crosses, so a chunk tokenizes alone exactly as it does inside any
//! text (the same property that lets long text be encoded in parallel pieces): its ids can
//! be reused wherever the same chunk comes again. Cuts depend only on the text before them,
//! so two prompts that share a prefix share its chunks up to the chunk where they part.
//!
//! The cache is bounded by bytes (the text kept to check a hit, and its ids) and evicts
//! with quick_cache's S3-FIFO (a one-off long prompt does not push out the system prompts
//! every request repeats). A key is the chunk's xxh3 hash and a hit is checked against the
//! chunk's own text, so a hash collision (or a chunk a client crafted to collide) is a miss,
//! never another text's ids.

use quick_cache::Weighter;
use quick_cache::sync::Cache;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// About how long a chunk is: a KV block or two of text (512 tokens of English words are
/// about 3 KB), so two prompts that part mid-prompt re-tokenize about one chunk.
pub const CHUNK_BYTES: usize = 4 * 1024;

/// What one entry weighs beyond its text and ids (key, pointers, the cache's own slot).
const ENTRY_OVERHEAD: u64 = 64;

/// One chunk's text and its ids.
#[derive(Debug)]
pub(crate) struct CachedChunk {
    text: Box<str>,
    pub(crate) ids: Box<[u32]>,
}

#[derive(Debug, Clone)]
struct ChunkWeight;

impl Weighter<u64, Arc<CachedChunk>> for ChunkWeight {
    fn weight(&self, _key: &u64, chunk: &Arc<CachedChunk>) -> u64 {
        chunk.text.len() as u64 + 4 * chunk.ids.len() as u64 + ENTRY_OVERHEAD
    }
}

/// The chunk cache (module docs). Shared by every clone of the prompter it is given to.
pub struct TokenCache {
    chunks: Cache<u64, Arc<CachedChunk>, ChunkWeight>,
    capacity: u64,
    hit_bytes: AtomicU64,
    miss_bytes: AtomicU64,
}

impl std::fmt::Debug for TokenCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenCache")
            .field("capacity", &self.capacity)
            .field("entries", &self.chunks.len())
            .finish_non_exhaustive()
    }
}

/// What the cache holds and has saved so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct TokenCacheStats {
    /// The most bytes it may hold.
    pub capacity_bytes: u64,
    /// Bytes held now (text, ids and per-entry overhead).
    pub held_bytes: u64,
    pub entries: u64,
    /// Text found in the cache (not tokenized), in bytes.
    pub hit_bytes: u64,
    /// Text tokenized and added.
    pub miss_bytes: u64,
}

impl TokenCache {
    /// A cache of at most `capacity_bytes`.
    pub fn new(capacity_bytes: u64) -> Self {
        let estimated = (capacity_bytes / (2 * CHUNK_BYTES as u64)).max(16);
        Self {
            chunks: Cache::with_weighter(estimated as usize, capacity_bytes, ChunkWeight),
            capacity: capacity_bytes,
            hit_bytes: AtomicU64::new(0),
            miss_bytes: AtomicU64::new(0),
        }
    }

    /// The ids of `chunk`, when it was seen (its text compared, not only its hash).
    pub(crate) fn get(&self, chunk: &str) -> Option<Arc<CachedChunk>> {
        let found = self
            .chunks
            .get(&key(chunk))
            .filter(|cached| *cached.text == *chunk);
        let counter = match found {
            Some(_) => &self.hit_bytes,
            None => &self.miss_bytes,
        };
        counter.fetch_add(chunk.len() as u64, Ordering::Relaxed);
        found
    }

    /// Keeps `ids` as `chunk`'s.
    pub(crate) fn insert(&self, chunk: &str, ids: &[u32]) {
        let entry = CachedChunk {
            text: chunk.into(),
            ids: ids.into(),
        };
        self.chunks.insert(key(chunk), Arc::new(entry));
    }

    pub fn stats(&self) -> TokenCacheStats {
        TokenCacheStats {
            capacity_bytes: self.capacity,
            held_bytes: self.chunks.weight(),
            entries: self.chunks.len() as u64,
            hit_bytes: self.hit_bytes.load(Ordering::Relaxed),
            miss_bytes: self.miss_bytes.load(Ordering::Relaxed),
        }
    }
}

fn key(chunk: &str) -> u64 {
    xxhash_rust::xxh3::xxh3_64(chunk.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chunk_is_found_by_its_text_and_counted() {
        let cache = TokenCache::new(1 << 20);
        assert!(cache.get("hello world").is_none());
        cache.insert("hello world", &[1, 2]);
        let hit = cache.get("hello world").expect("kept");
        assert_eq!(&*hit.ids, &[1, 2]);
        assert!(cache.get("hello there").is_none());
        let stats = cache.stats();
        assert_eq!(stats.entries, 1);
        assert_eq!(stats.hit_bytes, 11);
        assert_eq!(stats.miss_bytes, 22);
        assert!(stats.held_bytes >= 11 + 8);
    }

    #[test]
    fn it_holds_no_more_than_its_capacity() {
        let cache = TokenCache::new(64 * 1024);
        for i in 0..1000 {
            let text = format!("{i} {}", "x".repeat(500));
            cache.insert(&text, &[i; 100]);
        }
        let stats = cache.stats();
        assert!(stats.held_bytes <= 64 * 1024, "{stats:?}");
        assert!(stats.entries > 0 && stats.entries < 1000, "{stats:?}");
    }
}
