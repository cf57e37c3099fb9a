//! The frontend's bounds ([`Limits`]) and the checks a request passes before any work in
//! proportion to its size.
//!
//! In order (`handlers.rs`): the body is read under `max_body_bytes` and
//! `body_read_timeout` (no concurrency permit is held meanwhile), parsed, then checked here
//! before it is tokenized: `max_tokens` against `max_tokens_limit`; a token-id prompt's
//! length against the prompt limit ([`Limits::prompt_limit`]: `max_prompt_tokens`, else the
//! fleet's shortest context length); a text prompt for a byte length that alone proves it
//! longer than that. Only then is the permit taken and the text tokenized
//! (under the node's tokenizer lanes, [`tokenize_wait`]), every chunk of it not in the token
//! cache first checked for a piece longer than `max_word_bytes`, and its count checked once
//! more.
//!
//! The piece bound: BPE merges within one pre-tokenizer piece, in time and memory that grow
//! with the piece (tiktoken keeps some 50 bytes per byte of it, and a piece cannot be
//! encoded in parallel parts), so no piece may be longer than `max_word_bytes`. The pieces
//! are the configured tokenizer's own: its split pattern is run over the text before the
//! BPE ([`Tokenizer::piece_over`], linear, nothing kept, each piece read at most a few
//! bytes past the limit), so whatever that pattern joins
//! (a letter and its combining marks such as U+0301, emoji with joiners and variation
//! selectors, a symbol and the newlines after it) counts as one piece, and what it cuts
//! (o200k's three-digit numbers) does not. For a HuggingFace pre-tokenizer it cannot run
//! (not one of the known split patterns), runs of one kind of character are bounded
//! instead ([`longest_run`], marks and joiners continuing the run they follow).
//!
//! The byte bound: when a tokenizer turns every byte of the text into part of exactly one
//! token and no token stands for more than `L` bytes ([`super::Tokenizer::longest_token_bytes`],
//! 128 for tiktoken's encodings), a text of `n` bytes has at least `ceil(n / L)` tokens.
//! Tokenizers that may drop or fold text (normalizers, whitespace-removing pre-tokenizers)
//! give no `L`; their prompts are counted after tokenizing only.

use super::error::ApiError;
use super::upstream::UpstreamClient;
pub use router_tokenizer::longest_run;
use router_tokenizer::{PromptInput, Tokenizer};
use std::time::Duration;

/// The longest a request waits for the tokenizer gate (`AppState::tokenize_gate`, one slot
/// per core) before it is a 503 `tokenizer_saturated`; at most half the request's own
/// timeout (so the 503 comes before the 504).
pub const TOKENIZE_WAIT: Duration = Duration::from_secs(5);

/// The prompt limit while no engine of the fleet announces its context length.
pub const DEFAULT_MAX_PROMPT_TOKENS: u64 = 131_072;

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
    /// Longest prompt, in tokens; longer is a 400 `prompt_too_long`. `None`: the fleet's
    /// shortest announced context length ([`Limits::prompt_limit`]).
    pub max_prompt_tokens: Option<u64>,
    /// Largest `max_tokens` a request may ask for; more is a 400 `max_tokens_too_large`.
    pub max_tokens_limit: u64,
    /// Longest tokenizer piece of a text prompt (bytes; module docs); longer is a 400
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
            max_prompt_tokens: None,
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

    /// The longest prompt this node takes now: `max_prompt_tokens` when configured, else
    /// the shortest context length the fleet's engines announce (`fleet`), else
    /// [`DEFAULT_MAX_PROMPT_TOKENS`].
    pub fn prompt_limit(&self, fleet: Option<u64>) -> u64 {
        self.max_prompt_tokens
            .or(fleet)
            .unwrap_or(DEFAULT_MAX_PROMPT_TOKENS)
    }

    /// The checks before tokenizing (module docs): a token-id prompt by its length, a text
    /// prompt by its length (given `tokenizer`'s longest token), against `limit` prompt
    /// tokens. Its pieces are checked as it is tokenized (`Prompter::tokenize_gated`).
    pub(super) fn check_prompt(
        &self,
        prompt: &PromptInput,
        tokenizer: &Tokenizer,
        limit: u64,
    ) -> Result<(), ApiError> {
        let parts = match prompt {
            PromptInput::Tokens(ids) => return check_prompt_tokens(ids.len(), limit),
            PromptInput::Text(parts) => parts,
        };
        if let Some(longest) = tokenizer.longest_token_bytes().filter(|&l| l > 0) {
            // Parts are tokenized one by one: each counts its own tokens.
            let at_least: u64 = parts
                .iter()
                .map(|p| (p.len() as u64).div_ceil(longest as u64))
                .sum();
            if at_least > limit {
                return Err(ApiError::prompt_too_long(
                    at_least,
                    Some((parts.iter().map(String::len).sum(), longest)),
                    limit,
                ));
            }
        }
        Ok(())
    }

    /// How long a request may wait for the tokenizer gate: [`TOKENIZE_WAIT`], at most half
    /// its own timeout.
    pub fn tokenize_wait(&self) -> Duration {
        TOKENIZE_WAIT.min(self.request_timeout / 2)
    }
}

/// A tokenized prompt of `tokens` tokens against `limit`.
pub(super) fn check_prompt_tokens(tokens: usize, limit: u64) -> Result<(), ApiError> {
    if tokens as u64 > limit {
        return Err(ApiError::prompt_too_long(tokens as u64, None, limit));
    }
    Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prompts_are_checked_by_ids_and_bytes_before_tokenizing() {
        let limits = Limits {
            max_prompt_tokens: Some(10),
            max_word_bytes: 8,
            max_tokens_limit: 100,
            ..Limits::default()
        };
        // o200k_base, its longest token (128 bytes) read.
        let tokenizer = Tokenizer::default();
        tokenizer.warm();
        let ids = |n: u32| PromptInput::Tokens((0..n).collect());
        assert!(limits.check_prompt(&ids(10), &tokenizer, 10).is_ok());
        let over = limits
            .check_prompt(&ids(11), &tokenizer, 10)
            .expect_err("11 > 10");
        assert_eq!(over.reason, "prompt_too_long");
        assert!(
            over.message.contains("11") && over.message.contains("10"),
            "{}",
            over.message
        );

        let text = |s: &str| PromptInput::Text(vec![s.to_owned()]);
        // Pieces are checked as the text is tokenized (the prompter), not here.
        assert!(
            limits
                .check_prompt(&text("aaaaaaaaa b"), &tokenizer, 10)
                .is_ok()
        );
        // 1,320 bytes, at most 128 bytes a token: at least 11 tokens > 10, without tokenizing.
        let long = "abc ".repeat(330);
        let bytes = limits
            .check_prompt(&text(&long), &tokenizer, 10)
            .expect_err("11");
        assert_eq!(bytes.reason, "prompt_too_long");
        assert!(
            limits
                .check_prompt(&text(&"abc ".repeat(320)), &tokenizer, 10)
                .is_ok()
        );

        assert!(limits.check_max_tokens(Some(100)).is_ok());
        assert!(limits.check_max_tokens(None).is_ok());
        let max = limits.check_max_tokens(Some(101)).expect_err("101 > 100");
        assert_eq!(max.reason, "max_tokens_too_large");
        assert!(max.message.contains("100"), "{}", max.message);
        assert_eq!(limits.tokenize_wait(), TOKENIZE_WAIT);
    }
}
