//! A guard run before any msgpack payload from the bus (or an engine's KV event socket) is
//! handed to serde: one pass over the bytes, without recursion, that refuses
//!
//! - nesting deeper than the caller's limit: rmp-serde recurses once per level and allows
//!   1,024 of them, which overflows a 2 MiB thread stack in a debug build (a stack overflow
//!   aborts the whole process: one message from any client of the bus would kill the node);
//! - a container that claims more items than bytes are left (each item takes at least one
//!   byte), or a string, binary or extension longer than the payload;
//! - the one marker msgpack never uses (`0xc1`), a payload that ends inside a value, and bytes
//!   after the first value.
//!
//! It allocates only its stack of open containers (at most `max_depth` entries).

/// Why a payload was refused before decoding.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ShapeError {
    #[error("nested deeper than {0} levels")]
    TooDeep(usize),
    #[error("a length at byte {0} claims more than the payload holds")]
    Overlong(usize),
    #[error("invalid marker at byte {0}")]
    InvalidMarker(usize),
    #[error("the payload ends inside a value")]
    Truncated,
    #[error("bytes after the value, from byte {0}")]
    Trailing(usize),
}

/// What one marker says: bytes of header to skip after it (a length or a number), and then
/// either a body of some length or a container of some items.
enum Item {
    /// A value of `len` more bytes.
    Scalar(usize),
    /// A string, binary or extension whose length is the big-endian number in the next
    /// `width` bytes, plus `extra` bytes (an extension's type).
    Sized { width: usize, extra: usize },
    /// An array (`per_entry` 1) or map (2) of `n` entries.
    Container { n: u64, per_entry: u64 },
    /// An array or map whose entry count is in the next `width` bytes.
    SizedContainer { width: usize, per_entry: u64 },
}

fn item(marker: u8) -> Option<Item> {
    Some(match marker {
        0x00..=0x7f | 0xe0..=0xff | 0xc0 | 0xc2 | 0xc3 => Item::Scalar(0),
        0x80..=0x8f => Item::Container {
            n: u64::from(marker & 0x0f),
            per_entry: 2,
        },
        0x90..=0x9f => Item::Container {
            n: u64::from(marker & 0x0f),
            per_entry: 1,
        },
        0xa0..=0xbf => Item::Scalar(usize::from(marker & 0x1f)),
        0xc1 => return None,
        0xc4 => Item::Sized { width: 1, extra: 0 },
        0xc5 => Item::Sized { width: 2, extra: 0 },
        0xc6 => Item::Sized { width: 4, extra: 0 },
        0xc7 => Item::Sized { width: 1, extra: 1 },
        0xc8 => Item::Sized { width: 2, extra: 1 },
        0xc9 => Item::Sized { width: 4, extra: 1 },
        0xca => Item::Scalar(4),
        0xcb => Item::Scalar(8),
        0xcc | 0xd0 => Item::Scalar(1),
        0xcd | 0xd1 => Item::Scalar(2),
        0xce | 0xd2 => Item::Scalar(4),
        0xcf | 0xd3 => Item::Scalar(8),
        0xd4 => Item::Scalar(2),
        0xd5 => Item::Scalar(3),
        0xd6 => Item::Scalar(5),
        0xd7 => Item::Scalar(9),
        0xd8 => Item::Scalar(17),
        0xd9 => Item::Sized { width: 1, extra: 0 },
        0xda => Item::Sized { width: 2, extra: 0 },
        0xdb => Item::Sized { width: 4, extra: 0 },
        0xdc => Item::SizedContainer {
            width: 2,
            per_entry: 1,
        },
        0xdd => Item::SizedContainer {
            width: 4,
            per_entry: 1,
        },
        0xde => Item::SizedContainer {
            width: 2,
            per_entry: 2,
        },
        0xdf => Item::SizedContainer {
            width: 4,
            per_entry: 2,
        },
    })
}

/// The big-endian number of `width` bytes at `at`.
fn number(payload: &[u8], at: usize, width: usize) -> Result<u64, ShapeError> {
    let bytes = payload
        .get(at..at.checked_add(width).ok_or(ShapeError::Truncated)?)
        .ok_or(ShapeError::Truncated)?;
    Ok(bytes.iter().fold(0u64, |n, b| (n << 8) | u64::from(*b)))
}

/// Checks that `payload` is exactly one msgpack value nested at most `max_depth` deep, with
/// every length within the payload (see the module doc).
pub fn check_shape(payload: &[u8], max_depth: usize) -> Result<(), ShapeError> {
    // Items still to read in each open container, innermost last.
    let mut open: Vec<u64> = Vec::new();
    let mut at = 0usize;
    let mut done = false;
    while !done {
        let marker_at = at;
        let marker = *payload.get(at).ok_or(ShapeError::Truncated)?;
        at += 1;
        let left = |at: usize| (payload.len().saturating_sub(at)) as u64;
        let container = match item(marker).ok_or(ShapeError::InvalidMarker(marker_at))? {
            Item::Scalar(len) => {
                at = at.checked_add(len).ok_or(ShapeError::Truncated)?;
                None
            }
            Item::Sized { width, extra } => {
                let len = number(payload, at, width)?;
                at += width;
                let len = len.saturating_add(extra as u64);
                if len > left(at) {
                    return Err(ShapeError::Overlong(marker_at));
                }
                at += usize::try_from(len).map_err(|_| ShapeError::Overlong(marker_at))?;
                None
            }
            Item::Container { n, per_entry } => Some(n * per_entry),
            Item::SizedContainer { width, per_entry } => {
                let n = number(payload, at, width)?;
                at += width;
                Some(n * per_entry)
            }
        };
        if at > payload.len() {
            return Err(ShapeError::Truncated);
        }
        match container {
            Some(items) if items > 0 => {
                if items > left(at) {
                    return Err(ShapeError::Overlong(marker_at));
                }
                if open.len() >= max_depth {
                    return Err(ShapeError::TooDeep(max_depth));
                }
                open.push(items);
                continue;
            }
            _ => {}
        }
        // One value is complete: close every container it completes.
        loop {
            match open.last_mut() {
                None => {
                    done = true;
                    break;
                }
                Some(items) => {
                    *items -= 1;
                    if *items > 0 {
                        break;
                    }
                    open.pop();
                }
            }
        }
    }
    if at != payload.len() {
        return Err(ShapeError::Trailing(at));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde::Serialize;

    #[derive(Serialize)]
    struct Sample {
        name: String,
        ids: Vec<u64>,
        nested: Vec<Vec<(u8, Option<String>)>>,
        bytes: serde_bytes_like::Bytes,
        f: f64,
        neg: i64,
    }

    mod serde_bytes_like {
        /// Serializes as msgpack bin (not an array of numbers).
        #[derive(Debug)]
        pub struct Bytes(pub Vec<u8>);

        impl serde::Serialize for Bytes {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_bytes(&self.0)
            }
        }
    }

    #[test]
    fn what_rmp_serde_writes_passes_and_depth_is_counted() {
        let sample = Sample {
            name: "x".repeat(300),
            ids: (0..70_000).map(|i| i * 1_000_003).collect(),
            nested: vec![vec![(1, None), (2, Some("y".into()))]; 20],
            bytes: serde_bytes_like::Bytes(vec![7; 70_000]),
            f: 1.5,
            neg: -1_000_000_000_000,
        };
        let bytes = rmp_serde::to_vec_named(&sample).expect("encodes");
        assert_eq!(check_shape(&bytes, 4), Ok(()));
        assert_eq!(check_shape(&bytes, 3), Err(ShapeError::TooDeep(3)));
        assert_eq!(check_shape(&[0x05], 0), Ok(()), "a scalar needs no depth");
    }

    #[test]
    fn bombs_truncation_and_garbage_are_refused() {
        assert_eq!(
            check_shape(&[0xdd, 0xff, 0xff, 0xff, 0xff, 0x01], 8),
            Err(ShapeError::Overlong(0))
        );
        assert_eq!(
            check_shape(&[0x91, 0xc6, 0xff, 0xff, 0xff, 0xff], 8),
            Err(ShapeError::Overlong(1))
        );
        assert_eq!(
            check_shape(&vec![0x91; 100_000], 32),
            Err(ShapeError::TooDeep(32))
        );
        assert_eq!(check_shape(&[0xc1], 8), Err(ShapeError::InvalidMarker(0)));
        assert_eq!(check_shape(&[0x92, 0x01], 8), Err(ShapeError::Overlong(0)));
        assert_eq!(check_shape(&[0xcd, 0x01], 8), Err(ShapeError::Truncated));
        assert_eq!(check_shape(&[0x01, 0x02], 8), Err(ShapeError::Trailing(1)));
        assert_eq!(check_shape(&[], 8), Err(ShapeError::Truncated));
        assert_eq!(
            check_shape(&[0x90], 0),
            Ok(()),
            "an empty array opens nothing"
        );
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        /// Never panics; whatever it accepts within depth 1024, rmp-serde can skip too.
        #[test]
        fn arbitrary_bytes(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
            if check_shape(&bytes, 16).is_ok() {
                prop_assert!(rmp_serde::from_slice::<serde::de::IgnoredAny>(&bytes).is_ok());
            }
        }
    }
}
