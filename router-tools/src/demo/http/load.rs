//! The HTTP demo's clients: the built-in workload (`workload::generate`) turned into real
//! OpenAI requests, each sent by its own task at its arrival time (divided by the engines'
//! speedup) to the node's endpoint, streaming, with the `x-policy-class` header.
//!
//! Prompt text: every prompt token is one common English word (one o200k token each, so
//! the router and the engines see about `prompt_tokens` tokens). The first
//! `prefix_tokens` words are the shared system prompt `prefix` (the same words for every
//! request on it), the rest are private to the request, so block hashes repeat exactly
//! where the generator's do.
//!
//! Each request ends in exactly one [`Outcome`]: admitted (HTTP 200; then completed when
//! the stream ended with `[DONE]` and no error event) or rejected by a reason (the JSON
//! error's `reason`, or `http_<status>` / `transport_error` when there is none). The HTTP
//! exchange itself is `crate::loadgen::send_streaming`, shared with `router-tools bench`.

use std::time::Duration;

use serde_json::{Value, json};
use tokio::time::Instant;

use crate::demo::workload::{Spec, prompt_key};
use crate::loadgen;

/// Single-token words (with their leading space) of the o200k vocabulary.
const WORDS: [&str; 64] = [
    " the", " of", " and", " to", " in", " is", " that", " for", " it", " as", " was", " with",
    " be", " by", " on", " not", " he", " this", " are", " or", " his", " from", " at", " which",
    " but", " have", " an", " had", " they", " you", " were", " their", " one", " all", " we",
    " can", " her", " has", " there", " been", " if", " more", " when", " will", " would", " who",
    " so", " no", " time", " about", " into", " than", " other", " some", " new", " only", " also",
    " may", " first", " any", " like", " over", " after", " most",
];

/// The model name the simulated engines serve.
pub const MODEL: &str = "sim";

/// Longest one request may take end to end before the client gives up on it.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(120);

/// The prompt text of request `index`.
pub fn prompt_text(spec: &Spec, index: usize) -> String {
    let mut text = String::with_capacity(spec.prompt_tokens as usize * 6);
    for j in 0..spec.prompt_tokens {
        let h = prompt_key(spec.prefix, spec.prefix_tokens, index, j);
        text.push_str(WORDS[(h % WORDS.len() as u64) as usize]);
    }
    text
}

/// How one request ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    Admitted {
        /// The stream ended with `[DONE]` and carried no error event.
        completed: bool,
        /// Send → first content chunk.
        ttft: Option<Duration>,
        /// Send → end of the stream.
        e2e: Duration,
        /// `usage.prompt_tokens` of the final event, when it came.
        prompt_tokens: Option<u64>,
    },
    Rejected {
        reason: String,
    },
}

/// One finished request.
#[derive(Debug, Clone)]
pub struct Finished {
    pub class: &'static str,
    pub outcome: Outcome,
}

/// Sends every request at its arrival (simulated µs ÷ `speedup` after the start) and
/// returns how each ended, in workload order.
pub async fn run(base: &str, specs: Vec<Spec>, speedup: f64) -> Result<Vec<Finished>, String> {
    let client = reqwest::Client::builder()
        .timeout(REQUEST_TIMEOUT)
        .pool_max_idle_per_host(1024)
        .build()
        .map_err(|e| format!("building the HTTP client: {e}"))?;
    let url = format!("{base}/v1/completions");
    let start = Instant::now();
    let mut tasks = Vec::with_capacity(specs.len());
    for (index, spec) in specs.into_iter().enumerate() {
        let at = start + Duration::from_secs_f64(spec.arrival_us as f64 / 1e6 / speedup);
        let client = client.clone();
        let url = url.clone();
        tasks.push(tokio::spawn(async move {
            tokio::time::sleep_until(at).await;
            let class = spec.class;
            let body = json!({
                "model": MODEL,
                "prompt": prompt_text(&spec, index),
                "max_tokens": spec.output_tokens,
                "stream": true,
            });
            let outcome = send(&client, &url, class, &body).await;
            Finished { class, outcome }
        }));
    }
    let mut out = Vec::with_capacity(tasks.len());
    for task in tasks {
        out.push(
            task.await
                .map_err(|e| format!("a client task failed: {e}"))?,
        );
    }
    Ok(out)
}

async fn send(client: &reqwest::Client, url: &str, class: &str, body: &Value) -> Outcome {
    match loadgen::send_streaming(client, url, Some(class), body).await {
        loadgen::Outcome::Admitted(s) => Outcome::Admitted {
            completed: s.completed,
            ttft: s.ttft,
            e2e: s.e2e,
            prompt_tokens: s.prompt_tokens,
        },
        loadgen::Outcome::Rejected { reason, .. } => Outcome::Rejected { reason },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::demo::workload::generate;

    #[test]
    fn prompts_on_one_system_prompt_share_its_text_and_differ_after_it() {
        let specs = generate(40, 2, 7);
        let (a, b) = specs
            .iter()
            .enumerate()
            .flat_map(|(i, a)| {
                specs
                    .iter()
                    .enumerate()
                    .skip(i + 1)
                    .map(move |(j, b)| ((i, a), (j, b)))
            })
            .find(|((_, a), (_, b))| {
                a.prefix == b.prefix
                    && a.prompt_tokens > a.prefix_tokens + 8
                    && b.prompt_tokens > b.prefix_tokens + 8
            })
            .expect("two requests on one system prompt");
        let (ta, tb) = (prompt_text(a.1, a.0), prompt_text(b.1, b.0));
        assert_eq!(ta.split(' ').count() as u64, a.1.prompt_tokens + 1);
        let shared = ta
            .split(' ')
            .zip(tb.split(' '))
            .take_while(|(x, y)| x == y)
            .count() as u64;
        assert!(shared > a.1.prefix_tokens, "{shared}");
        assert!(shared < a.1.prefix_tokens + 8, "{shared}");
    }
}
