//! Property tests of every decoder of the node that reads what someone else wrote: the
//! OpenAI request parser and the tokenizer behind it (clients), the upstream SSE assembler
//! (workers), the SSE reader (any endpoint), the config loader with the policy profile it names and the API keys file (files). Each gets arbitrary bytes
//! and structured input with extreme values; none may panic, and what they hold stays bounded.
//! Case counts are modest so the suite runs in seconds with the normal tests.

use crate::config::Config;
use crate::frontend::{ApiError, ParsedRequest, SseAssembler};
use crate::sse::{MAX_SSE_LINE, SseReader};
use proptest::prelude::*;
use router_core::Endpoint;
use router_core::{PolicyFormat, PolicyProfile, WorkerId};
use router_tokenizer::{ChatTemplate, PromptInput, Prompter};
use serde_json::{Value, json};
use std::path::Path;
use std::sync::OnceLock;

/// The default tokenizer, built once (about a second in a debug build).
fn prompter() -> &'static Prompter {
    static PROMPTER: OnceLock<Prompter> = OnceLock::new();
    PROMPTER.get_or_init(Prompter::default)
}

/// Any JSON value, nested a few levels.
fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<u64>().prop_map(|n| json!(n)),
        any::<f64>()
            .prop_filter("JSON numbers are finite", |f| f.is_finite())
            .prop_map(|f| json!(f)),
        ".{0,12}".prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 32, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map("[a-z_]{0,8}", inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// A request-shaped body: the fields the parser reads, each absent or any value, with the
/// shapes clients really send mixed in.
fn request_body() -> impl Strategy<Value = Value> {
    let field = |typical: BoxedStrategy<Value>| {
        prop_oneof![
            1 => Just(None),
            2 => typical.prop_map(Some),
            1 => json_value().prop_map(Some),
        ]
    };
    let model = field(".{0,8}".prop_map(Value::String).boxed());
    let prompt = field(
        prop_oneof![
            ".{0,40}".prop_map(Value::String),
            prop::collection::vec(any::<u32>(), 0..20).prop_map(|v| json!(v)),
            prop::collection::vec(prop::collection::vec(any::<u32>(), 0..5), 0..4)
                .prop_map(|v| json!(v)),
            prop::collection::vec(".{0,10}", 0..4).prop_map(|v| json!(v)),
        ]
        .boxed(),
    );
    let messages = field(
        prop::collection::vec(
            (
                "(user|system|assistant|.{0,6})",
                prop_oneof![
                    ".{0,30}".prop_map(Value::String),
                    Just(Value::Null),
                    prop::collection::vec(".{0,10}", 0..3).prop_map(|parts| {
                        json!(
                            parts
                                .into_iter()
                                .map(|t| json!({"type": "text", "text": t}))
                                .collect::<Vec<_>>()
                        )
                    }),
                ],
            )
                .prop_map(|(role, content)| json!({"role": role, "content": content})),
            0..4,
        )
        .prop_map(Value::Array)
        .boxed(),
    );
    let max_tokens =
        field(prop_oneof![any::<u64>().prop_map(|n| json!(n)), Just(json!(-1))].boxed());
    let stream = field(any::<bool>().prop_map(Value::Bool).boxed());
    (model, prompt, messages, max_tokens, stream, json_value()).prop_map(
        |(model, prompt, messages, max_tokens, stream, extra)| {
            let mut body = serde_json::Map::new();
            for (key, value) in [
                ("model", model),
                ("prompt", prompt),
                ("messages", messages),
                ("max_tokens", max_tokens),
                ("stream", stream),
                ("metadata", Some(extra)),
            ] {
                if let Some(value) = value {
                    body.insert(key.to_owned(), value);
                }
            }
            Value::Object(body)
        },
    )
}

/// What a parsed request leads to before any hop: its upstream body and its tokens.
fn exercise(request: &ParsedRequest) -> Result<(), TestCaseError> {
    prop_assert!(!request.model.is_empty());
    let upstream: Value = serde_json::from_slice(&request.upstream_body())
        .map_err(|e| TestCaseError::fail(e.to_string()))?;
    prop_assert_eq!(&upstream["stream"], &json!(true));
    if let PromptInput::Text(parts) = &request.prompt {
        for part in parts {
            let _ = prompter().encode(part);
        }
    }
    Ok(())
}

/// Feeds `bytes` to an assembler in pieces cut at `cuts`.
fn assemble_in_pieces(
    bytes: &[u8],
    cuts: &[usize],
    limit: usize,
) -> Result<Value, crate::frontend::ApiError> {
    let mut reader = SseAssembler::new(Endpoint::Chat, limit, WorkerId(1));
    let mut at = 0;
    let mut points: Vec<usize> = cuts.iter().map(|c| c % (bytes.len() + 1)).collect();
    points.sort_unstable();
    points.push(bytes.len());
    for end in points {
        if end < at {
            continue;
        }
        if reader.feed(&bytes[at..end])? {
            break;
        }
        at = end;
    }
    let body = reader.finish()?;
    Ok(serde_json::to_value(body).unwrap_or_else(|e| panic!("an assembled body is JSON: {e}")))
}

fn chunk_line(text: &str, finish: Option<&str>) -> String {
    format!(
        "data: {}\n\n",
        json!({"id": "c", "choices": [{"delta": {"content": text}, "finish_reason": finish}]})
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn arbitrary_bytes_never_panic_the_openai_parser(bytes in prop::collection::vec(any::<u8>(), 0..300)) {
        for endpoint in [Endpoint::Completions, Endpoint::Chat] {
            if let Ok(request) = ParsedRequest::parse(endpoint, &bytes) {
                exercise(&request)?;
            }
        }
    }

    #[test]
    fn request_shaped_bodies_parse_or_name_a_field(body in request_body()) {
        let bytes = serde_json::to_vec(&body).map_err(|e| TestCaseError::fail(e.to_string()))?;
        for endpoint in [Endpoint::Completions, Endpoint::Chat] {
            match prompter().parse(endpoint, &bytes).map(ParsedRequest::from).map_err(ApiError::from) {
                Ok(request) => {
                    exercise(&request)?;
                    if let Some(n) = body.get("max_tokens").and_then(Value::as_u64) {
                        prop_assert_eq!(request.max_tokens, Some(n));
                    }
                }
                Err(e) => prop_assert_eq!(e.status.as_u16(), 400, "{}", e.message),
            }
        }
    }

    /// The tokenizer (and its parallel split of long text) takes any Unicode text.
    #[test]
    fn any_text_tokenizes(text in "\\PC{0,200}", bytes in prop::collection::vec(any::<u8>(), 0..200)) {
        let _ = prompter().encode(&text);
        let lossy = String::from_utf8_lossy(&bytes);
        let _ = prompter().encode(&lossy);
        let pieces = router_tokenizer::pieces(&text, 7);
        prop_assert_eq!(pieces.concat(), text);
    }

    /// Arbitrary worker bytes, cut anywhere: never a panic, the same answer however cut, and
    /// a line without its end longer than the limit is `upstream_too_large`.
    #[test]
    fn arbitrary_upstream_bytes_are_assembled_the_same_however_cut(
        bytes in prop::collection::vec(prop_oneof![any::<u8>(), Just(b'\n'), Just(b'd')], 0..600),
        cuts in prop::collection::vec(any::<usize>(), 0..8),
        limit in prop_oneof![Just(64usize), Just(4096)],
    ) {
        let whole = assemble_in_pieces(&bytes, &[], limit);
        let cut = assemble_in_pieces(&bytes, &cuts, limit);
        match (&whole, &cut) {
            (Ok(a), Ok(b)) => prop_assert_eq!(a, b),
            // The limit is checked per chunk: a long last line may pass whole and not cut,
            // or the reverse, but only as too large.
            (Err(a), Err(b)) => prop_assert!(
                a.reason == b.reason || a.reason == "upstream_too_large" || b.reason == "upstream_too_large",
                "{} / {}", a.reason, b.reason
            ),
            (Err(e), Ok(_)) | (Ok(_), Err(e)) => prop_assert_eq!(e.reason, "upstream_too_large"),
        }
        let tail = bytes.iter().rev().take_while(|b| **b != b'\n').count();
        if tail > limit {
            let error = assemble_in_pieces(&bytes, &[], limit).err();
            prop_assert_eq!(error.map(|e| e.reason), Some("upstream_too_large"));
        }
    }

    /// Well-formed chunks of any text, cut anywhere, assemble to their concatenation.
    #[test]
    fn streamed_chunks_assemble_to_their_text(
        texts in prop::collection::vec("\\PC{0,12}", 1..8),
        cuts in prop::collection::vec(any::<usize>(), 0..10),
    ) {
        let mut stream = String::new();
        for (i, text) in texts.iter().enumerate() {
            let finish = (i + 1 == texts.len()).then_some("stop");
            stream.push_str(&chunk_line(text, finish));
        }
        stream.push_str("data: [DONE]\n\n");
        let body = assemble_in_pieces(stream.as_bytes(), &cuts, 1 << 20)
            .map_err(|e| TestCaseError::fail(e.message))?;
        prop_assert_eq!(&body["choices"][0]["message"]["content"], &json!(texts.concat()));
        prop_assert_eq!(&body["choices"][0]["finish_reason"], &json!("stop"));
    }

    /// The benchmark's reader: never a panic, and the same counts however the bytes are cut.
    #[test]
    fn the_bench_reader_counts_the_same_however_cut(
        bytes in prop::collection::vec(prop_oneof![any::<u8>(), Just(b'\n')], 0..400),
        texts in prop::collection::vec("[a-z]{0,4}", 0..5),
        cut in any::<usize>(),
    ) {
        let mut stream = bytes;
        stream.push(b'\n');
        for text in &texts {
            stream.extend_from_slice(chunk_line(text, None).as_bytes());
        }
        let mut whole = SseReader::default();
        whole.feed(&stream);
        let mut split = SseReader::default();
        let at = cut % (stream.len() + 1);
        split.feed(&stream[..at]);
        split.feed(&stream[at..]);
        prop_assert_eq!(
            (whole.content_chunks, whole.done, whole.error, whole.prompt_tokens),
            (split.content_chunks, split.done, split.error, split.prompt_tokens)
        );
        prop_assert!(whole.content_chunks >= texts.iter().filter(|t| !t.is_empty()).count() as u64);
    }

    #[test]
    fn arbitrary_config_text_never_panics_the_loader(text in "[ -~\n]{0,300}") {
        if let Ok(config) = Config::from_toml_str(&text, Path::new("fuzz.toml")) {
            let _ = config.validate();
        }
        let _ = PolicyProfile::parse(&text, PolicyFormat::Toml);
        let _ = PolicyProfile::parse(&text, PolicyFormat::Yaml);
    }

    /// A keys file: arbitrary text, and a valid one with values replaced by extreme ones: keys
    /// or an error naming an entry or the parser's line, never a panic; a key read for
    /// `keys hash` from any input is accepted or refused with a message.
    #[test]
    fn keys_files_load_or_fail_cleanly(
        text in "[ -~\n]{0,300}",
        edits in prop::collection::vec((any::<usize>(), prop_oneof![
            Just("0".to_owned()), Just("-1".to_owned()), Just("1e400".to_owned()),
            Just("nan".to_owned()), Just("4294967296".to_owned()), Just("\"\"".to_owned()),
            Just("[]".to_owned()), Just("[\"interactive\", \"interactive\"]".to_owned()),
            "[ -~]{0,12}",
        ]), 0..4),
    ) {
        let profile = PolicyProfile::fallback();
        let _ = crate::auth::KeySet::parse(&text, &profile, None);
        let _ = crate::auth::read_key(&text);
        let mut lines: Vec<String> = [
            "[[keys]]", "name = \"a\"", &format!("sha256 = \"{}\"", "ab".repeat(32)),
            "classes = [\"default\"]", "default_class = \"default\"", "requests_per_s = 2.5",
            "requests_burst = 3", "tokens_per_s = 100", "tokens_burst = 1000",
        ].iter().map(|l| (*l).to_owned()).collect();
        for (at, value) in edits {
            let at = at % lines.len();
            if let Some((key, _)) = lines[at].split_once('=') {
                lines[at] = format!("{key}= {value}");
            }
        }
        match crate::auth::KeySet::parse(&lines.join("\n"), &profile, None) {
            Ok(keys) => {
                let key = keys.named("a").map(|k| k.limits());
                if let Some(limits) = key {
                    let _ = limits.request();
                    let _ = limits.tokens(u64::MAX);
                }
            }
            Err(e) => prop_assert!(!e.to_string().is_empty()),
        }
    }

    /// The example config with lines dropped, repeated or given other values: an error that
    /// names something, or a configuration that validates, never a panic.
    #[test]
    fn mutated_example_configs_load_or_fail_cleanly(
        edits in prop::collection::vec((any::<usize>(), 0u8..4, prop_oneof![
            Just("0".to_owned()), Just("-1".to_owned()), Just("1e400".to_owned()),
            Just("18446744073709551616".to_owned()), Just("\"\"".to_owned()),
            Just("[]".to_owned()), Just("{}".to_owned()), "[ -~]{0,12}",
        ]), 1..6),
    ) {
        let mut lines: Vec<String> = include_str!("../node.example.toml").lines().map(str::to_owned).collect();
        for (at, how, value) in edits {
            let at = at % lines.len();
            match how {
                0 => { lines.remove(at); }
                1 => { let line = lines[at].clone(); lines.insert(at, line); }
                2 => {
                    if let Some((key, _)) = lines[at].split_once('=') {
                        lines[at] = format!("{key}= {value}");
                    }
                }
                _ => {
                    let line = lines[at].trim_start_matches("# ").to_owned();
                    lines[at] = line;
                }
            }
        }
        let text = lines.join("\n");
        match Config::from_toml_str(&text, Path::new("node.toml")) {
            Ok(config) => {
                if config.validate().is_ok() {
                    let _ = config.node_config(PolicyProfile::fallback());
                    let _ = config.limits();
                    let _ = config.registry.allow_list();
                    let _ = config.bus.security();
                }
            }
            Err(e) => prop_assert!(!e.to_string().is_empty()),
        }
    }
}

/// Nesting far past any sane document, in every text format a node reads: refused with an
/// error (serde_json stops at 128 levels, the TOML and YAML parsers at their own limits), not
/// a stack overflow.
#[test]
fn deep_nesting_is_an_error_in_every_format() {
    let deep = "[".repeat(100_000);
    let body = format!("{{\"model\":\"m\",\"prompt\":{deep}");
    let error = ParsedRequest::parse(Endpoint::Completions, body.as_bytes()).expect_err("deep");
    assert_eq!(error.status.as_u16(), 400);
    let sse = format!("data: {{\"choices\":{deep}\n");
    let error = assemble_in_pieces(sse.as_bytes(), &[], 1 << 20).expect_err("no choice read");
    assert_eq!(error.reason, "upstream_empty");
    let mut reader = SseReader::default();
    reader.feed(sse.as_bytes());
    assert_eq!(reader.content_chunks, 0);
    for text in [
        format!("a = {deep}"),
        format!("a = {}", "{ b = ".repeat(20_000)),
        format!("{}x = 1", "[a]\n".repeat(10)),
    ] {
        assert!(Config::from_toml_str(&text, Path::new("deep.toml")).is_err());
        assert!(PolicyProfile::parse(&text, PolicyFormat::Toml).is_err());
    }
    assert!(PolicyProfile::parse(&deep, PolicyFormat::Yaml).is_err());
    assert!(PolicyProfile::parse(&"- ".repeat(50_000), PolicyFormat::Yaml).is_err());
}

/// YAML aliases that would expand a billion times ("billion laughs"), referenced where the
/// profile takes its classes: refused within bounded work (the typed profile refuses unknown
/// keys and values that are not classes before any expansion is built).
#[test]
fn yaml_alias_expansion_is_bounded() {
    let mut doc = String::from(
        "a: &a [\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\"]\n",
    );
    for (i, name) in ["b", "c", "d", "e", "f", "g", "h", "i"].iter().enumerate() {
        let prev = ["a", "b", "c", "d", "e", "f", "g", "h"][i];
        doc.push_str(&format!(
            "{name}: &{name} [*{prev},*{prev},*{prev},*{prev},*{prev},*{prev},*{prev},*{prev},*{prev}]\n"
        ));
    }
    doc.push_str("default_class: x\nclasses: *i\n");
    let started = std::time::Instant::now();
    assert!(PolicyProfile::parse(&doc, PolicyFormat::Yaml).is_err());
    assert!(
        started.elapsed() < std::time::Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
}

/// A line without an end, longer than the benchmark reader keeps: the stream is an error and
/// the bytes are dropped; the next line is read again.
#[test]
fn the_bench_reader_drops_an_endless_line() {
    let mut reader = SseReader::default();
    let chunk = vec![b'x'; 1 << 20];
    for _ in 0..=(MAX_SSE_LINE >> 20) {
        reader.feed(&chunk);
    }
    assert!(reader.error);
    reader.feed(b"still the same line\n");
    reader.feed(chunk_line("after", None).as_bytes());
    assert_eq!(reader.content_chunks, 1);
}

/// A chat template renders whatever messages a client sends, or refuses them with a 400.
#[test]
fn a_chat_template_renders_or_refuses_any_messages() {
    let template = ChatTemplate::new(
        "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}\n{% endfor %}<|assistant|>",
        None,
        None,
    )
    .expect("compiles");
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig::with_cases(128));
    runner
        .run(&json_value(), |messages| {
            if let Err(e) = template.render(Some(&json!([{"role": "user", "content": messages}]))) {
                prop_assert_eq!(ApiError::from(e).status.as_u16(), 400);
            }
            if let Err(e) = template.render(Some(&messages)) {
                prop_assert_eq!(ApiError::from(e).status.as_u16(), 400);
            }
            Ok(())
        })
        .expect("no panic");
}
