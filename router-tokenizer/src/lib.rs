//! `router-tokenizer`: how a request's prompt becomes the token ids the router hashes and
//! counts. Shared by the router node's frontend and the simulated worker, so both count the
//! same tokens and name the same KV blocks.
//!
//! - `request`: the OpenAI body fields every route shares ([`RequestBody`]: `model`, the
//!   prompt or chat `messages`, `max_tokens`, `stream`), read with errors naming the field,
//!   and the plain chat rendering ([`render_chat`]).
//! - `prompter`: the [`Prompter`], a tokenizer plus a chat rendering: parse, render,
//!   tokenize (short text inline, long text on a blocking thread), and the
//!   [`TokenizeGate`] that bounds concurrent tokenizer work.
//! - `tokenizer`: the [`Tokenizer`] (tiktoken's encodings or a HuggingFace `tokenizer.json`).
//! - `huggingface` (a `tokenizer.json`), `hf_fast` (usual byte-level BPE files, faster;
//!   tested in `hf_fast_tests.rs`), `o200k` (the default encoding without fancy-regex),
//!   `pretokenize` (split patterns on regex-automata; the longest piece and [`longest_run`]
//!   the input limits bound), `split` (long text encoded in
//!   parallel pieces, with the same ids as whole).
//! - `chat_template`: Jinja chat templates rendered as HuggingFace's `apply_chat_template`.
//! - `model_dir`: a model directory's tokenizer and chat template, loaded as vLLM loads them.
//! - `error`: [`PromptError`], a request field that cannot be read or rendered.

mod chat_template;
mod error;
mod hf_fast;
#[cfg(test)]
mod hf_fast_tests;
mod huggingface;
mod model_dir;
mod o200k;
mod pretokenize;
mod prompter;
mod request;
mod split;
mod tokenizer;

pub use chat_template::{ChatTemplate, ChatTemplateError};
pub use error::PromptError;
pub use huggingface::{HuggingFaceTokenizer, SpecialTokens};
pub use model_dir::ModelDirError;
pub use pretokenize::longest_run;
pub use prompter::{INLINE_TOKENIZE_MAX_BYTES, Prompter, TokenizeGate, TokenizerBusy};
pub use request::{
    MAX_SEQUENCES, PromptInput, RequestBody, byte_pieces, render_chat, render_request,
};
/// The OpenAI route a request came in on: router-core's one enum of routes.
pub use router_core::Endpoint;
pub use split::{SPLIT_MIN_BYTES, pieces};
pub use tokenizer::{TiktokenEncoding, Tokenizer, TokenizerLoadError};
