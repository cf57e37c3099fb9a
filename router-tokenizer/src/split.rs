//! Long text cut into pieces that tokenize exactly as the whole text does, encoded in
//! parallel (rayon's pool).
//!
//! A cut goes before a space that follows a visible ASCII character and precedes an ASCII
//! letter (`x| yz`). The pre-tokenizer patterns of tiktoken (`o200k_base`, `cl100k_base`,
//! `r50k_base`, `p50k_base`) and of GPT-2-, Llama-3- and Qwen-style HuggingFace tokenizers
//! never make a piece that holds both the character before such a space and the space: a
//! word may carry one leading non-letter (the space) but no trailing one, and the whitespace
//! alternatives (the only ones with a look-ahead) cannot end at a cut, since the character
//! before it is not whitespace. No pattern looks behind. So the pieces before the cut are
//! the same in the part before it, the pieces after it start at the cut, and BPE, which
//! merges within a piece only, gives the same ids. A HuggingFace tokenizer is also checked
//! at load (`huggingface.rs`); tests compare split and whole encodings on varied text.

use rayon::prelude::*;

/// Shorter text is encoded in one piece: a piece's encoding must outweigh handing it to
/// another thread.
pub const SPLIT_MIN_BYTES: usize = 32 * 1024;

/// About how long the pieces are.
const PIECE_BYTES: usize = 16 * 1024;

/// Whether `text` may be cut before byte `i` (see the module docs).
pub(crate) fn is_cut(bytes: &[u8], i: usize) -> bool {
    i > 0
        && bytes.get(i) == Some(&b' ')
        && bytes.get(i + 1).is_some_and(u8::is_ascii_alphabetic)
        && bytes[i - 1].is_ascii_graphic()
}

/// `text` cut into pieces of about `piece` bytes each at `is_cut` boundaries (one piece
/// when there is no boundary). The pieces concatenate to `text`.
pub fn pieces(text: &str, piece: usize) -> Vec<&str> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(text.len() / piece.max(1) + 1);
    let mut start = 0;
    let mut at = piece.max(1);
    while at < bytes.len() {
        // Cuts are before spaces: jump from space to space (a text without one is scanned at
        // memchr's speed, not a byte at a time).
        let next_cut = memchr::memchr_iter(b' ', &bytes[at..])
            .map(|i| at + i)
            .find(|&i| is_cut(bytes, i));
        match next_cut {
            // A cut is before an ASCII space: always a character boundary.
            Some(cut) => {
                out.push(&text[start..cut]);
                start = cut;
                at = cut + piece.max(1);
            }
            None => break,
        }
    }
    out.push(&text[start..]);
    out
}

/// The ids of `text`, encoded by `encode` whole when short, else piece by piece in
/// parallel and concatenated in order.
pub fn encode_parallel(text: &str, encode: impl Fn(&str) -> Vec<u32> + Sync) -> Vec<u32> {
    if text.len() < SPLIT_MIN_BYTES {
        return encode(text);
    }
    let parts: Vec<Vec<u32>> = pieces(text, PIECE_BYTES)
        .par_iter()
        .map(|piece| encode(piece))
        .collect();
    let mut ids = Vec::with_capacity(parts.iter().map(Vec::len).sum());
    for part in parts {
        ids.extend(part);
    }
    ids
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuts_go_before_a_space_between_a_visible_character_and_a_letter() {
        let text = "ab cd,  ef\n gh.(ij kl";
        let cuts: Vec<usize> = (0..text.len())
            .filter(|&i| is_cut(text.as_bytes(), i))
            .collect();
        // `b| c`, `j| k`; not after two spaces or a newline, nor before a non-letter.
        assert_eq!(cuts, vec![2, 18]);
    }

    #[test]
    fn pieces_concatenate_to_the_text_and_are_about_the_asked_size() {
        let text = "word ".repeat(1000);
        let parts = pieces(&text, 100);
        assert_eq!(parts.concat(), text);
        assert!(parts.len() >= 45, "{}", parts.len());
        assert!(parts.iter().all(|p| p.len() <= 105), "{parts:?}");
        // No boundary: one piece.
        let cjk = "東京".repeat(100);
        assert_eq!(pieces(&cjk, 10), vec![cjk.as_str()]);
    }
}
