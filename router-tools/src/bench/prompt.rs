//! What one bench request looks like on the wire: its prompt as token ids or as text
//! (`--prompt-format`), and the OpenAI API it goes to (`--api`).
//!
//! A prompt is first a run of *keys*, one per prompt position, from the trace's hash ids
//! (`trace::prompt_keys`) or private to a synthetic request: a key depends only on its block's
//! hash id and its place in the block. `tokens` turns each key into a token id below 100 000;
//! `text` turns it into one word of [`WORDS`], joined by single spaces. Either way equal hash
//! ids give equal runs, so a shared prefix of the trace is a shared prefix of the prompts.
//!
//! The words are common lower-case English words that the common BPE tokenizers (tiktoken's
//! `o200k_base` and `cl100k_base`, and the Llama 3 / Qwen / Mistral families built like them)
//! keep as one token each after a space, and a pre-tokenizer never joins two of them (it
//! splits at the space): a block of N words is about N tokens, and a shared run of words is a
//! shared run of tokens in any such tokenizer. The first word of a prompt has no space before
//! it and may be one token more.
//!
//! `completions` posts `{"prompt": ...}` to `/v1/completions` (ids or text); `chat` posts one
//! user message holding the text to `/v1/chat/completions` (chat implies text).

use router_core::Endpoint;
use serde_json::{Value, json};

use super::trace::mix;

/// Token ids are drawn below this (inside every common vocabulary).
const VOCAB: u64 = 100_000;

/// How prompts are sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum PromptFormat {
    /// Token ids (`"prompt": [..]`): exact lengths, for endpoints that take ids.
    #[default]
    Tokens,
    /// Words, one per token position: for gateways that want strings.
    Text,
}

/// The prompt format a request on `api` needs when `asked` for one: chat always sends text.
pub fn format(api: Endpoint, asked: PromptFormat) -> PromptFormat {
    match api {
        Endpoint::Completions => asked,
        Endpoint::Chat => PromptFormat::Text,
    }
}

/// The streaming request body of `prompt` on `api` (chat: one user message, the prompt as
/// text).
pub fn body(api: Endpoint, model: &str, prompt: Prompt, max_tokens: u64) -> Value {
    let mut body = json!({
        "model": model,
        "max_tokens": max_tokens,
        "stream": true,
        "stream_options": {"include_usage": true},
    });
    match (api, prompt) {
        (Endpoint::Completions, Prompt::Tokens(ids)) => body["prompt"] = json!(ids),
        (Endpoint::Completions, Prompt::Text(text)) => body["prompt"] = json!(text),
        (Endpoint::Chat, prompt) => {
            body["messages"] = json!([{"role": "user", "content": prompt.into_text()}]);
        }
    }
    body
}

/// One request's prompt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Prompt {
    Tokens(Vec<u32>),
    Text(String),
}

impl Prompt {
    /// The prompt of `keys` in `format`.
    pub fn of_keys(keys: &[u64], format: PromptFormat) -> Self {
        match format {
            PromptFormat::Tokens => Self::Tokens(keys.iter().map(|&k| token(k)).collect()),
            PromptFormat::Text => Self::Text(text(keys)),
        }
    }

    /// Positions (token ids, or words) in the prompt.
    pub fn len(&self) -> usize {
        match self {
            Self::Tokens(ids) => ids.len(),
            Self::Text(text) => text.split(' ').count(),
        }
    }

    /// Whether the prompt is empty.
    pub fn is_empty(&self) -> bool {
        match self {
            Self::Tokens(ids) => ids.is_empty(),
            Self::Text(text) => text.is_empty(),
        }
    }

    /// The prompt as text: token ids are read as keys and become words (only for a chat body
    /// built from ids by hand; `Api::format` makes every chat prompt text to begin with).
    fn into_text(self) -> String {
        match self {
            Self::Text(text) => text,
            Self::Tokens(ids) => text(&ids.iter().map(|&t| u64::from(t)).collect::<Vec<_>>()),
        }
    }
}

/// The token id of one prompt key.
pub fn token(key: u64) -> u32 {
    // VOCAB < 2^32, so the remainder always fits.
    u32::try_from(mix(key) % VOCAB).unwrap_or(0)
}

/// The word of one prompt key.
pub fn word(key: u64) -> &'static str {
    let i = usize::try_from(mix(key) % WORDS.len() as u64).unwrap_or(0);
    WORDS.get(i).copied().unwrap_or("the")
}

/// The words of `keys`, joined by single spaces.
pub fn text(keys: &[u64]) -> String {
    let mut out = String::with_capacity(keys.len() * 6);
    for (i, &key) in keys.iter().enumerate() {
        if i > 0 {
            out.push(' ');
        }
        out.push_str(word(key));
    }
    out
}

/// The prompt vocabulary of `--prompt-format text`: one token each, after a space, in the
/// common BPE tokenizers (checked against `o200k_base` and `cl100k_base` by the tests).
pub const WORDS: &[&str] = &[
    "the", "of", "and", "to", "in", "is", "was", "for", "on", "are", "with", "as", "his", "they",
    "be", "at", "one", "have", "this", "from", "or", "had", "by", "word", "but", "what", "some",
    "we", "can", "out", "other", "were", "all", "there", "when", "up", "use", "your", "how",
    "said", "an", "each", "she", "which", "do", "their", "time", "if", "will", "way", "about",
    "many", "then", "them", "would", "like", "so", "these", "her", "long", "make", "thing", "see",
    "him", "two", "has", "look", "more", "day", "could", "go", "come", "did", "number", "sound",
    "no", "most", "people", "my", "over", "know", "water", "than", "call", "first", "who", "may",
    "down", "side", "been", "now", "find", "any", "new", "work", "part", "take", "get", "place",
    "made", "live", "where", "after", "back", "little", "only", "round", "man", "year", "came",
    "show", "every", "good", "me", "give", "our", "under", "name", "very", "through", "just",
    "form", "great", "think", "say", "help", "low", "line", "turn", "cause", "much", "mean",
    "before", "move", "right", "boy", "old", "too", "same", "tell", "does", "set", "three", "want",
    "air", "well", "also", "play", "small", "end", "put", "home", "read", "hand", "large", "add",
    "even", "land", "here", "must", "big", "high", "such", "follow", "act", "why", "ask", "men",
    "change", "went", "light", "kind", "off", "need", "house", "picture", "try", "us", "again",
    "animal", "point", "mother", "world", "near", "build", "self", "earth", "father", "head",
    "stand", "own", "page", "should", "country", "found", "answer", "school", "grow", "study",
    "still", "learn", "plant", "cover", "food", "sun", "four", "between", "state", "keep", "eye",
    "never", "last", "let", "thought", "city", "tree", "cross", "farm", "hard", "start", "might",
    "story", "saw", "far", "sea", "draw", "left", "late", "run", "while", "press", "close",
    "night", "real", "life", "few", "north", "open", "seem", "together", "next", "white",
    "children", "begin", "got", "walk", "example", "paper", "group", "always", "music", "those",
    "both", "mark", "often", "letter", "until", "mile", "river", "car", "feet", "care", "second",
    "book", "carry", "took", "science", "eat", "room", "friend", "began", "idea", "fish",
    "mountain", "stop", "once", "base", "hear", "horse", "cut", "sure", "watch", "color", "face",
    "wood", "main", "enough", "plain", "girl", "usual", "young", "ready", "above", "ever", "red",
    "list", "though", "feel", "talk", "bird", "soon", "body", "dog", "family", "direct", "pose",
    "leave", "song", "measure", "door", "product", "black", "short",
];

#[cfg(test)]
mod tests {
    use super::*;
    use router_tokenizer::{TiktokenEncoding, Tokenizer};

    #[test]
    fn every_word_is_one_token_after_a_space_in_common_tokenizers() {
        for encoding in [TiktokenEncoding::O200kBase, TiktokenEncoding::Cl100kBase] {
            let (name, bpe) = (encoding.name(), Tokenizer::Tiktoken(encoding));
            for w in WORDS {
                let ids = bpe.encode(&format!(" {w}"));
                assert_eq!(ids.len(), 1, "{name}: {w:?} is {} tokens", ids.len());
            }
            // A block of 512 keys is 512 tokens, give or take the first word.
            let keys: Vec<u64> = (0..512).map(|j| mix(42) ^ j).collect();
            let n = bpe.encode(&text(&keys)).len();
            assert!((512..=513).contains(&n), "{name}: {n}");
        }
        let mut sorted = WORDS.to_vec();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), WORDS.len(), "no word twice");
    }

    #[test]
    fn equal_keys_give_equal_text_and_a_shared_prefix_survives_tokenizing() {
        let a: Vec<u64> = (0..64).collect();
        let mut b = a[..40].to_vec();
        b.extend(1000..1024);
        let (ta, tb) = (text(&a), text(&b));
        assert_eq!(ta, text(&a), "deterministic");
        assert_eq!(ta.split(' ').count(), 64);
        let bpe = Tokenizer::default();
        let (ia, ib) = (bpe.encode(&ta), bpe.encode(&tb));
        let shared = ia.iter().zip(&ib).take_while(|(x, y)| x == y).count();
        assert!(shared >= 40, "{shared} shared tokens for 40 shared words");
    }

    #[test]
    fn bodies_follow_the_api() {
        let ids = Prompt::of_keys(&[1, 2, 3], PromptFormat::Tokens);
        assert_eq!(ids.len(), 3);
        let ids_body = body(Endpoint::Completions, "m", ids.clone(), 5);
        assert_eq!(ids_body["prompt"].as_array().map(Vec::len), Some(3));
        assert_eq!(ids_body["max_tokens"], 5);
        assert_eq!(ids_body["stream"], true);
        let words = Prompt::of_keys(&[1, 2, 3], PromptFormat::Text);
        let text_body = body(Endpoint::Completions, "m", words.clone(), 5);
        assert_eq!(
            text_body["prompt"].as_str().map(|s| s.split(' ').count()),
            Some(3)
        );
        let chat = body(Endpoint::Chat, "m", words.clone(), 5);
        assert_eq!(chat["messages"][0]["role"], "user");
        let Prompt::Text(text) = words else {
            panic!("text asked");
        };
        assert_eq!(chat["messages"][0]["content"], text.as_str());
        assert!(chat.get("prompt").is_none());
        assert_eq!(
            format(Endpoint::Chat, PromptFormat::Tokens),
            PromptFormat::Text
        );
    }
}
