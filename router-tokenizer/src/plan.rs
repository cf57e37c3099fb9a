//! A text prompt's encoding as a plan: its parts cut into chunks (`cache.rs`), each found in
//! the token cache or still to encode. Making the plan is cheap (finding the cuts, one hash
//! and one lookup a chunk), so it is made on the request's task; what is left to encode
//! ([`EncodePlan::miss_bytes`]) then says where the work runs (`prompter.rs`: on the task,
//! or on a blocking thread in the quick or the bulk lane).
//!
//! [`EncodePlan::finish`] encodes the chunks the cache did not have (in parallel when they
//! are many) after checking each for a pre-tokenizer piece over the caller's limit (the BPE
//! of one piece grows in time and memory with it, so a piece is measured before it is
//! merged), keeps their ids in the cache, and joins the ids part by part. Every chunk is cut
//! where no piece crosses, so the ids are those of the whole text however it was cut and
//! whatever the cache held.

use crate::cache::{CHUNK_BYTES, CachedChunk, TokenCache};
use crate::request::byte_pieces;
use crate::split;
use crate::tokenizer::Tokenizer;
use rayon::prelude::*;
use std::ops::Range;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

/// A pre-tokenizer piece longer than the caller's limit: the prompt is refused before its
/// BPE runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("a piece of at least {piece} bytes is over the limit of {limit}")]
pub struct PieceTooLong {
    /// A lower bound of the piece's length, in bytes.
    pub piece: usize,
    pub limit: usize,
}

/// One chunk of one part.
#[derive(Debug)]
struct Chunk {
    part: usize,
    range: Range<usize>,
    cached: Option<Arc<CachedChunk>>,
}

/// A text prompt's parts, cut and looked up (module docs).
#[derive(Debug)]
pub(crate) struct EncodePlan {
    parts: Vec<String>,
    chunks: Vec<Chunk>,
    /// Add the tokenizer's own special tokens to each part (a completion's prompt).
    specials: bool,
    miss_bytes: usize,
}

impl EncodePlan {
    /// Cuts `parts` into chunks (one chunk a part for a tokenizer whose pieces may cross
    /// `split.rs`'s cuts) and looks each up in `cache`.
    pub(crate) fn new(
        tokenizer: &Tokenizer,
        cache: Option<&TokenCache>,
        parts: Vec<String>,
        specials: bool,
    ) -> Self {
        let mut chunks = Vec::new();
        let mut miss_bytes = 0;
        for (part, text) in parts.iter().enumerate() {
            let cuts = match tokenizer.splits_long_text() {
                true => split::pieces(text, CHUNK_BYTES),
                false => vec![text.as_str()],
            };
            let mut start = 0;
            for piece in cuts {
                let range = start..start + piece.len();
                start = range.end;
                if piece.is_empty() {
                    continue;
                }
                let cached = cache.and_then(|c| c.get(piece));
                if cached.is_none() {
                    miss_bytes += piece.len();
                }
                chunks.push(Chunk {
                    part,
                    range,
                    cached,
                });
            }
        }
        Self {
            parts,
            chunks,
            specials,
            miss_bytes,
        }
    }

    /// Bytes of text the cache did not have: what [`Self::finish`] will encode.
    pub(crate) fn miss_bytes(&self) -> usize {
        self.miss_bytes
    }

    /// The prompt's ids (module docs) and its text given back, or the first piece over
    /// `max_piece` bytes among the chunks to encode.
    pub(crate) fn finish(
        self,
        tokenizer: &Tokenizer,
        cache: Option<&TokenCache>,
        max_piece: usize,
    ) -> Result<(Vec<u32>, Vec<String>), PieceTooLong> {
        let text = |c: &Chunk| &self.parts[c.part][c.range.clone()];
        let misses: Vec<&Chunk> = self.chunks.iter().filter(|c| c.cached.is_none()).collect();
        for chunk in &misses {
            if let Some(piece) = tokenizer.piece_over(text(chunk), max_piece) {
                return Err(PieceTooLong {
                    piece,
                    limit: max_piece,
                });
            }
        }
        let encode = |chunk: &&Chunk| encode_chunk(tokenizer, text(chunk));
        let encoded: Vec<Vec<u32>> = match self.miss_bytes >= split::SPLIT_MIN_BYTES {
            true => misses.par_iter().map(encode).collect(),
            false => misses.iter().map(encode).collect(),
        };
        if let Some(cache) = cache {
            for (chunk, ids) in misses.iter().zip(&encoded) {
                cache.insert(text(chunk), ids);
            }
        }
        let mut fresh = encoded.into_iter();
        let mut ids = Vec::new();
        let mut part_ids = Vec::new();
        let mut chunks = self.chunks.iter().peekable();
        for part in 0..self.parts.len() {
            part_ids.clear();
            while let Some(chunk) = chunks.next_if(|c| c.part == part) {
                match &chunk.cached {
                    Some(cached) => part_ids.extend_from_slice(&cached.ids),
                    None => part_ids.extend(fresh.next().unwrap_or_default()),
                }
            }
            match self.specials {
                true => ids.extend(tokenizer.with_specials(std::mem::take(&mut part_ids))),
                false => ids.append(&mut part_ids),
            }
        }
        Ok((ids, self.parts))
    }
}

/// The ids of one chunk; a panicking tokenizer counts 4-byte pieces instead.
fn encode_chunk(tokenizer: &Tokenizer, text: &str) -> Vec<u32> {
    std::panic::catch_unwind(AssertUnwindSafe(|| tokenizer.encode_whole(text)))
        .unwrap_or_else(|_| byte_pieces(text).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encode(cache: Option<&TokenCache>, parts: &[&str]) -> Vec<u32> {
        let tokenizer = Tokenizer::default();
        let parts = parts.iter().map(|p| (*p).to_owned()).collect();
        EncodePlan::new(&tokenizer, cache, parts, false)
            .finish(&tokenizer, cache, usize::MAX)
            .expect("no limit")
            .0
    }

    #[test]
    fn chunks_from_the_cache_and_fresh_ones_give_the_whole_texts_ids() {
        let tokenizer = Tokenizer::default();
        let shared = "The quick brown fox jumps over the lazy dog, again and again. ".repeat(300);
        let first = format!("{shared} and then it slept.");
        let second = format!("{shared} and then it ran away, far away.");
        let cache = TokenCache::new(16 << 20);
        for text in [&first, &second, &first] {
            assert_eq!(encode(Some(&cache), &[text]), tokenizer.encode_whole(text));
        }
        let stats = cache.stats();
        // The second prompt found the shared prefix's chunks; the third found everything.
        let expected = (shared.len() + first.len() - CHUNK_BYTES * 2) as u64;
        assert!(stats.hit_bytes >= expected, "{stats:?}");
        // A batch: each part on its own, joined.
        let mut both = tokenizer.encode_whole(&first);
        both.extend(tokenizer.encode_whole("short"));
        assert_eq!(encode(Some(&cache), &[&first, "short"]), both);
        assert_eq!(encode(None, &[&first, "short"]), both);
    }

    #[test]
    fn what_the_cache_holds_is_not_encoded_again() {
        let tokenizer = Tokenizer::default();
        let cache = TokenCache::new(16 << 20);
        let text = "word ".repeat(5000);
        let plan = EncodePlan::new(&tokenizer, Some(&cache), vec![text.clone()], false);
        assert_eq!(plan.miss_bytes(), text.len());
        plan.finish(&tokenizer, Some(&cache), usize::MAX)
            .expect("no limit");
        let again = EncodePlan::new(&tokenizer, Some(&cache), vec![text], false);
        assert_eq!(again.miss_bytes(), 0);
    }

    #[test]
    fn a_piece_over_the_limit_in_a_chunk_to_encode_is_refused() {
        let tokenizer = Tokenizer::default();
        let text = format!("fine words {} more words", "a\u{301}".repeat(100));
        let plan = EncodePlan::new(&tokenizer, None, vec![text], false);
        let refused = plan
            .finish(&tokenizer, None, 64)
            .expect_err("a 300-byte piece");
        assert_eq!(refused.limit, 64);
        assert!(refused.piece > 64, "{refused:?}");
    }
}
