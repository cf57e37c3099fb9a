//! API key material: the SHA-256 the keys file stores instead of a key, its hex form, new
//! random keys (`router-node keys new`), and the checks on a key an operator brings
//! (`router-node keys hash`).
//!
//! Keys are random (256 bits from the operating system), so one unsalted SHA-256 is enough
//! to keep them out of the file: nobody can invert it or guess a key that hashes to it. A
//! presented key is hashed and its digest looked up, so how long a lookup takes says nothing
//! about how much of a key was right.

use sha2::{Digest, Sha256};

/// A key's SHA-256.
pub type KeyDigest = [u8; 32];

/// The prefix of generated keys (lets secret scanners and people recognise one).
pub const KEY_PREFIX: &str = "sy-";

/// Random bytes in a generated key.
const KEY_BYTES: usize = 32;

/// Shortest key `keys hash` accepts: a short key could be guessed.
pub const MIN_KEY_CHARS: usize = 32;

/// Longest key `keys hash` accepts (as a header, a client could not send much more).
pub const MAX_KEY_CHARS: usize = 4096;

/// The SHA-256 of a key as presented.
pub fn hash_key(key: &str) -> KeyDigest {
    Sha256::digest(key.as_bytes()).into()
}

/// Lower-case hex.
pub fn to_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A digest from 64 hex digits (either case); `None` for anything else.
pub fn parse_digest(hex: &str) -> Option<KeyDigest> {
    if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

/// A new key: [`KEY_PREFIX`] and 64 hex digits of the operating system's randomness.
pub fn generate_key() -> Result<String, getrandom::Error> {
    let mut bytes = [0u8; KEY_BYTES];
    getrandom::fill(&mut bytes)?;
    Ok(format!("{KEY_PREFIX}{}", to_hex(&bytes)))
}

/// A key an operator brings, as `keys hash` reads it: one trailing newline (`\n` or
/// `\r\n`) dropped, then at least [`MIN_KEY_CHARS`] visible ASCII characters (what a client
/// can send in `Authorization: Bearer`). The error says what is wrong, never the key.
pub fn read_key(input: &str) -> Result<&str, String> {
    let key = input
        .strip_suffix("\r\n")
        .or_else(|| input.strip_suffix('\n'))
        .unwrap_or(input);
    if key.is_empty() {
        return Err("no key on standard input".to_owned());
    }
    if !key.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(
            "the key must be visible ASCII characters only (no spaces, tabs or further lines): \
             a client sends it in an HTTP header"
                .to_owned(),
        );
    }
    let chars = key.len();
    if chars < MIN_KEY_CHARS {
        return Err(format!(
            "the key has {chars} characters; at least {MIN_KEY_CHARS} are required (make one \
             with `router-node keys new`)"
        ));
    }
    if chars > MAX_KEY_CHARS {
        return Err(format!(
            "the key has {chars} characters; at most {MAX_KEY_CHARS} are accepted"
        ));
    }
    Ok(key)
}
