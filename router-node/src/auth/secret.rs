//! API key material: the SHA-256 the keys file stores instead of a key, its hex form, new
//! random keys, the checks on a key an operator brings, and the `router-node keys` commands
//! built on them, so that an operator never computes a digest by hand:
//!
//! - `keys new --name N --classes a,b [--default-class a] [--requests-per-s R] ...`: a new
//!   random key, printed once, then its `[[keys]]` entry for the keys file (the entry holds
//!   the key's SHA-256, not the key). The entry is checked as the node checks it, except
//!   whether its classes exist (the node checks them against its profile when it loads it).
//! - `keys hash`: a key read from standard input (one trailing newline dropped), printed as
//!   the hex SHA-256 the keys file's `sha256` takes.
//!
//! Keys are random (256 bits from the operating system), so one unsalted SHA-256 is enough
//! to keep them out of the file: nobody can invert it or guess a key that hashes to it. A
//! presented key is hashed and its digest looked up, so how long a lookup takes says nothing
//! about how much of a key was right.

use super::keys::KeyEntry;
use router_core::ClassId;
use router_core::policy::valid_name;
use sha2::{Digest, Sha256};
use std::io::Read;

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

/// Most bytes `keys hash` reads from standard input.
const MAX_INPUT: u64 = 64 * 1024;

/// A new key for `entry` (whose `sha256` is set here): the key, and the entry as TOML.
pub fn new_key(mut entry: KeyEntry) -> Result<(String, String), String> {
    let key = generate_key().map_err(|e| format!("no random bytes from the system: {e}"))?;
    entry.sha256 = to_hex(&hash_key(&key));
    // Each distinct class name its own id: a repeated name is caught as the node would.
    let class_of = |name: &str| {
        let first = entry.classes.iter().position(|c| c == name)?;
        valid_name(name).then(|| ClassId(u16::try_from(first).unwrap_or(u16::MAX)))
    };
    entry
        .validate(1, class_of, "any name of [A-Za-z0-9_.-]")
        .map_err(|e| e.to_string())?;
    let file = EntryFile { keys: vec![entry] };
    let text = toml::to_string(&file).map_err(|e| format!("cannot write the entry: {e}"))?;
    Ok((key, text))
}

#[derive(serde::Serialize)]
struct EntryFile {
    keys: Vec<KeyEntry>,
}

/// The hex SHA-256 of the key on `input` (see [`read_key`] for what is accepted).
pub fn hash_input(input: impl Read) -> Result<String, String> {
    let mut text = String::new();
    input
        .take(MAX_INPUT)
        .read_to_string(&mut text)
        .map_err(|e| format!("cannot read the key from standard input: {e}"))?;
    let key = read_key(&text)?;
    Ok(to_hex(&hash_key(key)))
}
