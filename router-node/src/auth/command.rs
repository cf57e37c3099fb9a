//! `router-node keys`: what an operator runs so as never to compute a digest by hand.
//!
//! - `keys new --name N --classes a,b [--default-class a] [--requests-per-s R] ...`: a new
//!   random key, printed once, then its `[[keys]]` entry for the keys file (the entry holds
//!   the key's SHA-256, not the key).
//! - `keys hash`: a key read from standard input (one trailing newline dropped), printed as
//!   the hex SHA-256 the keys file's `sha256` takes.
//!
//! The entry is checked as the node checks it, except whether its classes exist (the node
//! checks them against its policy profile when it loads the file).

use super::keys::KeyEntry;
use super::secret::{generate_key, hash_key, read_key, to_hex};
use router_core::ClassId;
use router_core::policy::valid_name;
use std::io::Read;

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
