//! The frontend's bounds ([`Limits`]) and the checks a request passes before any work in
//! proportion to its size.
//!
//! In order (`handlers.rs`): the body is read under `max_body_bytes` and
//! `body_read_timeout` (no concurrency permit is held meanwhile), parsed, then checked here
//! before it is tokenized: `max_tokens` against `max_tokens_limit`; a token-id prompt's
//! length against `max_prompt_tokens`; a text prompt for a run of one kind of character
//! longer than `max_word_bytes` (a tokenizer keeps such a run as one piece, and merging one
//! giant piece costs far more per byte than text does) and for a byte length that alone
//! proves it longer than `max_prompt_tokens`. Only then is the permit taken and the text
//! tokenized, and its count checked once more.
//!
//! The byte bound: when a tokenizer turns every byte of the text into part of exactly one
//! token and no token stands for more than `L` bytes ([`super::Tokenizer::longest_token_bytes`],
//! 128 for tiktoken's encodings), a text of `n` bytes has at least `ceil(n / L)` tokens.
//! Tokenizers that may drop or fold text (normalizers, whitespace-removing pre-tokenizers)
//! give no `L`; their prompts are counted after tokenizing only.

use super::error::ApiError;
use super::upstream::UpstreamClient;
use router_tokenizer::PromptInput;
use std::time::Duration;

/// The frontend's bounds. Every one of them is enforced; none is unlimited.
#[derive(Debug, Clone)]
pub struct Limits {
    /// OpenAI requests handled at once (from a read and parsed body to the end of the
    /// answer); one more is a 429 `frontend_saturated`.
    pub max_concurrent_requests: usize,
    /// Largest accepted request body; a larger one is a 413.
    pub max_body_bytes: usize,
    /// Longest time a client may take to send its body; then a 408 and the connection closes.
    pub body_read_timeout: Duration,
    /// Longest time a client may take to send a request's headers (and the longest idle
    /// keep-alive); then the connection is closed.
    pub header_read_timeout: Duration,
    /// A request still unfinished this long after it arrived is ended (a 504, or an error
    /// event ending its stream).
    pub request_timeout: Duration,
    /// Connections open at once on the public listener; more wait in the listen backlog.
    pub max_connections: usize,
    /// Longest prompt, in tokens; longer is a 400 `prompt_too_long`.
    pub max_prompt_tokens: u64,
    /// Largest `max_tokens` a request may ask for; more is a 400 `max_tokens_too_large`.
    pub max_tokens_limit: u64,
    /// Longest run of one kind of character in a text prompt (bytes); longer is a 400
    /// `word_too_long`.
    pub max_word_bytes: usize,
    /// Output tokens assumed when a request gives no `max_tokens`.
    pub default_max_tokens: u64,
    /// `max_tokens` above this is booked as this many tokens (the worker still sees the
    /// request's own value).
    pub max_expected_output_tokens: u64,
    /// Largest assembled body for a non-streaming client; beyond it the request is a 502.
    pub max_response_bytes: usize,
    /// Connecting to a worker.
    pub connect_timeout: Duration,
    /// Longest silence between two upstream reads (including before the first chunk).
    pub read_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_concurrent_requests: 4096,
            max_body_bytes: 4 * 1024 * 1024,
            body_read_timeout: Duration::from_secs(30),
            header_read_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(600),
            max_connections: 4096,
            max_prompt_tokens: 131_072,
            max_tokens_limit: 131_072,
            max_word_bytes: 16 * 1024,
            default_max_tokens: 256,
            max_expected_output_tokens: 32_768,
            max_response_bytes: 16 * 1024 * 1024,
            connect_timeout: Duration::from_secs(2),
            read_timeout: Duration::from_secs(60),
        }
    }
}

impl Limits {
    /// The HTTP client of the upstream legs under these limits (HTTP/1, no TLS, redirects
    /// not followed).
    pub fn http_client(&self) -> UpstreamClient {
        UpstreamClient::new(self.connect_timeout, self.read_timeout)
    }

    /// A `max_tokens` above `max_tokens_limit` is a 400 naming the limit.
    pub(super) fn check_max_tokens(&self, max_tokens: Option<u64>) -> Result<(), ApiError> {
        match max_tokens {
            Some(asked) if asked > self.max_tokens_limit => {
                Err(ApiError::max_tokens_too_large(asked, self.max_tokens_limit))
            }
            _ => Ok(()),
        }
    }

    /// The checks before tokenizing (module docs): a token-id prompt by its length, a text
    /// prompt by its runs and, given the tokenizer's `longest_token` bytes, by its length.
    pub(super) fn check_prompt(
        &self,
        prompt: &PromptInput,
        longest_token: Option<usize>,
    ) -> Result<(), ApiError> {
        let parts = match prompt {
            PromptInput::Tokens(ids) => return self.check_prompt_tokens(ids.len()),
            PromptInput::Text(parts) => parts,
        };
        for part in parts {
            let run = longest_run(part);
            if run > self.max_word_bytes {
                return Err(ApiError::word_too_long(run, self.max_word_bytes));
            }
        }
        if let Some(longest) = longest_token.filter(|&l| l > 0) {
            // Parts are tokenized one by one: each counts its own tokens.
            let at_least: u64 = parts
                .iter()
                .map(|p| (p.len() as u64).div_ceil(longest as u64))
                .sum();
            if at_least > self.max_prompt_tokens {
                return Err(ApiError::prompt_too_long(
                    at_least,
                    Some((parts.iter().map(String::len).sum(), longest)),
                    self.max_prompt_tokens,
                ));
            }
        }
        Ok(())
    }

    /// A tokenized prompt of `tokens` tokens against `max_prompt_tokens`.
    pub(super) fn check_prompt_tokens(&self, tokens: usize) -> Result<(), ApiError> {
        if tokens as u64 > self.max_prompt_tokens {
            return Err(ApiError::prompt_too_long(
                tokens as u64,
                None,
                self.max_prompt_tokens,
            ));
        }
        Ok(())
    }
}

/// When a request must be finished (`http.request_timeout_ms` after it arrived), with the
/// limit it came from (for the error's message).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deadline {
    pub at: tokio::time::Instant,
    pub limit: Duration,
}

impl Deadline {
    /// `limit` from now (a limit too large for the clock is a century).
    pub fn after(limit: Duration) -> Self {
        let now = tokio::time::Instant::now();
        let at = now
            .checked_add(limit)
            .unwrap_or_else(|| now + Duration::from_secs(100 * 365 * 24 * 3600));
        Self { at, limit }
    }
}

/// What kind of character continues a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Letter,
    Digit,
    Space,
    Other,
}

fn kind(c: char) -> Kind {
    if c.is_alphabetic() {
        Kind::Letter
    } else if c.is_numeric() {
        Kind::Digit
    } else if c.is_whitespace() {
        Kind::Space
    } else {
        Kind::Other
    }
}

/// The longest run of characters of one kind (letters, digits, whitespace, anything else)
/// in `text`, in bytes: no pre-tokenizer piece of a GPT-style pattern is much longer.
pub fn longest_run(text: &str) -> usize {
    let mut longest = 0;
    let mut run = 0;
    let mut last = None;
    for c in text.chars() {
        let k = kind(c);
        if last == Some(k) {
            run += c.len_utf8();
        } else {
            run = c.len_utf8();
            last = Some(k);
        }
        longest = longest.max(run);
    }
    longest
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_longest_run_is_of_one_kind_of_character_in_bytes() {
        assert_eq!(longest_run(""), 0);
        assert_eq!(longest_run("ab, cd"), 2);
        assert_eq!(longest_run("a    b"), 4);
        assert_eq!(longest_run("x1234567y"), 7);
        assert_eq!(longest_run("-----=====  ab"), 10);
        // Letters of any script count together; bytes, not characters.
        assert_eq!(longest_run("東京abc"), 9);
    }

    #[test]
    fn prompts_are_checked_by_ids_runs_and_bytes() {
        let limits = Limits {
            max_prompt_tokens: 10,
            max_word_bytes: 8,
            max_tokens_limit: 100,
            ..Limits::default()
        };
        let ids = |n: u32| PromptInput::Tokens((0..n).collect());
        assert!(limits.check_prompt(&ids(10), None).is_ok());
        let over = limits.check_prompt(&ids(11), None).expect_err("11 > 10");
        assert_eq!(over.reason, "prompt_too_long");
        assert!(
            over.message.contains("11") && over.message.contains("10"),
            "{}",
            over.message
        );

        let text = |s: &str| PromptInput::Text(vec![s.to_owned()]);
        let word = limits
            .check_prompt(&text("aaaaaaaaa b"), None)
            .expect_err("a 9-byte word");
        assert_eq!(word.reason, "word_too_long");
        assert!(word.message.contains('9') && word.message.contains('8'));
        // 44 bytes, at most 4 bytes a token: at least 11 tokens > 10, without tokenizing.
        let long = "abc ".repeat(11);
        let bytes = limits.check_prompt(&text(&long), Some(4)).expect_err("11");
        assert_eq!(bytes.reason, "prompt_too_long");
        assert!(limits.check_prompt(&text(&long), Some(5)).is_ok());
        assert!(limits.check_prompt(&text(&long), None).is_ok());

        assert!(limits.check_max_tokens(Some(100)).is_ok());
        assert!(limits.check_max_tokens(None).is_ok());
        let max = limits.check_max_tokens(Some(101)).expect_err("101 > 100");
        assert_eq!(max.reason, "max_tokens_too_large");
        assert!(max.message.contains("100"), "{}", max.message);
    }
}
