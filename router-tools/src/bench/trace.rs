//! Mooncake traces: one JSON object a line, `{"timestamp": ms, "input_length": n,
//! "output_length": m, "hash_ids": [...]}` (the format of the Mooncake / FAST'25 release).
//! Each `hash_id` names one block of `block_tokens` prompt tokens; lines that share a
//! leading run of hash ids share that prompt prefix.
//!
//! [`prompt_keys`] turns a record into one key per prompt position: block `h` at position
//! `j` is always the same key (a hash of `(h, j)`), so equal hash ids give equal runs and the
//! prefix sharing of the trace survives as token ids ([`prompt_tokens`]) or as words
//! (`prompt.rs`). The prompt is cut to `input_length` (at most
//! [`MAX_INPUT_LENGTH`], or the line is refused); when the hash ids cover fewer tokens, the
//! rest are private to the line (a hash of the line number).
//!
//! [`read_text`] reads a trace file, gunzipping it on the way when it is gzip (the project
//! ships `traces/conversation_trace.jsonl.gz`).

use std::io::Read as _;
use std::path::Path;

use flate2::read::MultiGzDecoder;
use serde::{Deserialize, Serialize};

use super::BenchError;
use super::prompt::token;

/// The first two bytes of every gzip member.
const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

/// The longest prompt a record may ask for (2 Mi tokens, beyond any model's context): a line
/// claiming `u64::MAX` tokens would otherwise make the replay build a prompt without end.
pub const MAX_INPUT_LENGTH: u64 = 1 << 21;

/// One request of the trace. All four fields are required (a misspelt `hash_ids` must not
/// quietly mean "no shared prefix"); fields beyond them are ignored (trace variants add some).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TraceRecord {
    /// Arrival, milliseconds after the trace's start.
    pub timestamp: u64,
    pub input_length: u64,
    pub output_length: u64,
    pub hash_ids: Vec<u64>,
}

/// A parsed trace: records with their 1-based line numbers, in file order.
#[derive(Debug, Clone, Default)]
pub struct Trace {
    pub records: Vec<(usize, TraceRecord)>,
}

impl Trace {
    /// Parses JSONL text; blank lines are skipped. Stops after `max` records when given.
    /// A line that is not a trace record is an error naming its line number.
    pub fn parse(text: &str, max: Option<usize>) -> Result<Self, BenchError> {
        let mut records = Vec::new();
        for (i, line) in text.lines().enumerate() {
            if max.is_some_and(|m| records.len() >= m) {
                break;
            }
            let line = line.trim();
            if line.is_empty() {
                continue;
            }
            let record: TraceRecord =
                serde_json::from_str(line).map_err(|e| BenchError::Trace {
                    line: i + 1,
                    message: e.to_string(),
                })?;
            if record.input_length == 0 {
                return Err(BenchError::Trace {
                    line: i + 1,
                    message: "input_length must be at least 1".to_owned(),
                });
            }
            if record.input_length > MAX_INPUT_LENGTH {
                return Err(BenchError::Trace {
                    line: i + 1,
                    message: format!(
                        "input_length must be at most {MAX_INPUT_LENGTH}, got {}",
                        record.input_length
                    ),
                });
            }
            records.push((i + 1, record));
        }
        if records.is_empty() {
            return Err(BenchError::Trace {
                line: 0,
                message: "the trace has no records".to_owned(),
            });
        }
        Ok(Self { records })
    }
}

/// The text of the trace at `path`: plain JSONL, or gzip (`.gz`, told by its magic bytes,
/// not its name). An unreadable file, a broken gzip stream or text that is not UTF-8 is a
/// [`BenchError::ReadTrace`] naming the file.
pub async fn read_text(path: &Path) -> Result<String, BenchError> {
    let failed = |source| BenchError::ReadTrace {
        path: path.to_owned(),
        source,
    };
    let bytes = tokio::fs::read(path).await.map_err(failed)?;
    decode(bytes).map_err(failed)
}

/// Gunzips `bytes` when they are gzip (one member or several, as `cat a.gz b.gz` makes);
/// either way the result must be UTF-8.
fn decode(bytes: Vec<u8>) -> std::io::Result<String> {
    if bytes.starts_with(&GZIP_MAGIC) {
        let mut text = String::new();
        MultiGzDecoder::new(&bytes[..]).read_to_string(&mut text)?;
        Ok(text)
    } else {
        String::from_utf8(bytes)
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
    }
}

/// SplitMix64's finaliser: a well-mixed 64-bit hash of `x`.
pub(super) fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// The prompt keys of `record` (line `line` of the trace), `block_tokens` per hash id: one
/// key per prompt position, a hash of the block's id and the position in the block, so
/// equal hash ids give equal runs of keys. Past its hash ids, the prompt's keys are private
/// to the line. `crate::bench::prompt` turns keys into token ids or words.
pub fn prompt_keys(record: &TraceRecord, line: usize, block_tokens: usize) -> Vec<u64> {
    let len = usize::try_from(record.input_length).unwrap_or(usize::MAX);
    let block_tokens = block_tokens.max(1);
    let mut keys = Vec::with_capacity(len.min(1 << 20));
    'blocks: for &h in &record.hash_ids {
        let block = mix(h);
        for j in 0..block_tokens {
            if keys.len() >= len {
                break 'blocks;
            }
            keys.push(block ^ (j as u64).rotate_left(40));
        }
    }
    let private = mix((1 << 63) | line as u64);
    let mut j = 0_u64;
    while keys.len() < len {
        keys.push(private ^ j);
        j += 1;
    }
    keys
}

/// The prompt of `record` (line `line` of the trace) as token ids, `block_tokens` per hash id.
pub fn prompt_tokens(record: &TraceRecord, line: usize, block_tokens: usize) -> Vec<u32> {
    prompt_keys(record, line, block_tokens)
        .into_iter()
        .map(token)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(input_length: u64, hash_ids: &[u64]) -> TraceRecord {
        TraceRecord {
            timestamp: 0,
            input_length,
            output_length: 4,
            hash_ids: hash_ids.to_vec(),
        }
    }

    #[test]
    fn the_mooncake_fields_parse_and_max_stops_early() {
        let text = "{\"timestamp\": 0, \"input_length\": 6758, \"output_length\": 500, \
                    \"hash_ids\": [0, 1, 2]}\n\n{\"timestamp\": 27, \"input_length\": 10, \
                    \"output_length\": 3, \"hash_ids\": [0]}\n";
        let trace = Trace::parse(text, None).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(trace.records.len(), 2);
        assert_eq!(trace.records[1].0, 3, "line numbers count blank lines");
        assert_eq!(trace.records[1].1.timestamp, 27);
        let one = Trace::parse(text, Some(1)).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(one.records.len(), 1);
    }

    #[test]
    fn a_malformed_line_is_an_error_naming_its_line() {
        let good =
            "{\"timestamp\": 0, \"input_length\": 5, \"output_length\": 1, \"hash_ids\": [1]}";
        for bad in [
            "not json",
            "{\"timestamp\": 0, \"output_length\": 1, \"hash_ids\": [1]}",
            "{\"timestamp\": -1, \"input_length\": 5, \"output_length\": 1, \"hash_ids\": []}",
            "{\"timestamp\": 0, \"input_length\": 0, \"output_length\": 1, \"hash_ids\": []}",
            "{\"timestamp\": 0, \"input_length\": 5, \"output_length\": 1, \"hashids\": [1]}",
            // A line claiming 2^64 - 1 tokens made the replay build its prompt without end.
            "{\"timestamp\": 0, \"input_length\": 18446744073709551615, \"output_length\": 1, \"hash_ids\": [1]}",
        ] {
            let text = format!("{good}\n{good}\n{bad}\n{good}\n");
            let err = Trace::parse(&text, None).err().map(|e| e.to_string());
            let err = err.unwrap_or_else(|| panic!("{bad:?} parsed"));
            assert!(err.contains("line 3"), "{bad:?}: {err}");
        }
        assert!(Trace::parse("\n\n", None).is_err());
    }

    fn gzip(text: &str) -> Vec<u8> {
        use std::io::Write as _;
        let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        encoder
            .write_all(text.as_bytes())
            .unwrap_or_else(|e| panic!("{e}"));
        encoder.finish().unwrap_or_else(|e| panic!("{e}"))
    }

    const TWO_LINES: &str = "{\"timestamp\": 0, \"input_length\": 5, \"output_length\": 1, \
                             \"hash_ids\": [1]}\n{\"timestamp\": 9, \"input_length\": 7, \
                             \"output_length\": 2, \"hash_ids\": [1, 2]}\n";

    #[tokio::test]
    async fn a_gzipped_trace_reads_like_the_plain_one() {
        let dir = std::env::temp_dir().join(format!("sy-trace-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
        let plain = dir.join("t.jsonl");
        let gz = dir.join("t.jsonl.gz");
        std::fs::write(&plain, TWO_LINES).unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(&gz, gzip(TWO_LINES)).unwrap_or_else(|e| panic!("{e}"));
        let read = |path| async move {
            let text = read_text(path).await.unwrap_or_else(|e| panic!("{e}"));
            Trace::parse(&text, None).unwrap_or_else(|e| panic!("{e}"))
        };
        let (from_plain, from_gz) = (read(&plain).await, read(&gz).await);
        assert_eq!(from_gz.records, from_plain.records);
        assert_eq!(from_gz.records.len(), 2);
        assert_eq!(from_gz.records[1].1.hash_ids, [1, 2]);
        // A broken gzip stream is a read error naming the file, not a panic or a parse error.
        let mut cut = gzip(TWO_LINES);
        cut.truncate(cut.len() / 2);
        std::fs::write(&gz, cut).unwrap_or_else(|e| panic!("{e}"));
        let err = read_text(&gz)
            .await
            .err()
            .map(|e| (e.exit_code(), e.to_string()));
        let (code, message) = err.unwrap_or_else(|| panic!("a cut gzip stream was read"));
        assert_eq!(code, 2);
        assert!(message.contains("t.jsonl.gz"), "{message}");
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn concatenated_gzip_members_and_plain_text_decode() {
        let mut two = gzip("a\n");
        two.extend(gzip("b\n"));
        assert_eq!(decode(two).ok().as_deref(), Some("a\nb\n"));
        assert_eq!(decode(b"plain\n".to_vec()).ok().as_deref(), Some("plain\n"));
        assert!(decode(vec![0xff, 0xfe]).is_err(), "not UTF-8");
    }

    #[test]
    fn equal_hash_ids_give_equal_token_runs() {
        let a = prompt_tokens(&record(40, &[7, 8, 9]), 1, 16);
        let b = prompt_tokens(&record(40, &[7, 8, 10]), 2, 16);
        assert_eq!(a.len(), 40);
        assert_eq!(a[..32], b[..32], "blocks 7 and 8 are shared");
        assert_ne!(a[32..], b[32..], "blocks 9 and 10 differ");
        // Within a block the tokens vary; the same block elsewhere in a prompt is the same run.
        assert!(a[..16].iter().any(|&t| t != a[0]));
        let c = prompt_tokens(&record(32, &[8, 7]), 3, 16);
        assert_eq!(c[..16], a[16..32]);
        assert!(a.iter().all(|&t| t < 100_000));
    }

    #[test]
    fn prompts_are_cut_or_padded_to_input_length_with_private_tokens() {
        let short = prompt_tokens(&record(10, &[1, 2]), 1, 16);
        assert_eq!(short.len(), 10);
        let p1 = prompt_tokens(&record(50, &[1]), 1, 16);
        let p2 = prompt_tokens(&record(50, &[1]), 2, 16);
        assert_eq!(p1.len(), 50);
        assert_eq!(p1[..16], p2[..16]);
        assert_ne!(p1[16..], p2[16..], "padding is private to the line");
        assert_eq!(prompt_tokens(&record(3, &[]), 9, 16).len(), 3);
    }
}
