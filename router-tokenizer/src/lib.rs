//! `router-tokenizer`: how a request's prompt becomes the token ids the router hashes and
//! counts. Shared by the router node's frontend and the simulated worker, so both count the
//! same tokens and name the same KV blocks.
//!
//! - `request`: the OpenAI body fields every route shares ([`RequestBody`]: `model`, the
//!   prompt or chat `messages`, `max_tokens`, `stream`), read with errors naming the field,
//!   and the plain chat rendering ([`render_chat`]).
//! - `prompter`: the [`Prompter`], a tokenizer plus a chat rendering: parse, render,
//!   tokenize (short text inline, longer text on a blocking thread in a quick or a bulk
//!   lane by its size), and the [`TokenizeGate`] of those two lanes.
//! - `plan` (a prompt cut into chunks, each from the cache or encoded after its piece
//!   check) and `cache` ([`TokenCache`]: the ids of chunks of text already seen).
//! - `tokenizer`: the [`Tokenizer`] (tiktoken's encodings or a HuggingFace `tokenizer.json`).
//! - `huggingface` (a `tokenizer.json`), `hf_fast` (usual byte-level BPE files, faster;
//!   tested in `hf_fast_tests.rs`), `o200k` (the default encoding without fancy-regex),
//!   `pretokenize` (split patterns on regex-automata; the longest piece and [`longest_run`]
//!   the input limits bound), `split` (long text encoded in
//!   parallel pieces, with the same ids as whole).
//! - `chat_template`: Jinja chat templates rendered as HuggingFace's `apply_chat_template`.
//! - `model_dir`: a model directory's tokenizer and chat template, loaded as vLLM loads them.
//! - `error`: [`PromptError`], a request field that cannot be read or rendered.

mod cache;
mod chat_template;
mod error;
mod hf_fast;
#[cfg(test)]
mod hf_fast_tests;
mod huggingface;
mod model_dir;
mod o200k;
mod plan;
mod pretokenize;
mod prompter;
mod request;
mod split;
mod tokenizer;

pub use cache::{CHUNK_BYTES, TokenCache, TokenCacheStats};
pub use chat_template::{ChatTemplate, ChatTemplateError};
pub use error::PromptError;
pub use huggingface::{HuggingFaceTokenizer, SpecialTokens};
pub use model_dir::ModelDirError;
pub use plan::PieceTooLong;
pub use pretokenize::longest_run;
pub use prompter::{
    HeldSlots, INLINE_TOKENIZE_MAX_BYTES, Lane, Prompter, QUICK_LANE_MAX_BYTES, TokenizeError,
    TokenizeGate, Tokenized, TokenizerBusy,
};
pub use request::{
    MAX_SEQUENCES, PromptInput, RequestBody, TextPrompt, byte_pieces, render_chat, render_request,
};
/// The OpenAI route a request came in on: router-core's one enum of routes.
pub use router_core::Endpoint;
pub use split::{SPLIT_MIN_BYTES, pieces};
pub use tokenizer::{TiktokenEncoding, Tokenizer, TokenizerLoadError};
