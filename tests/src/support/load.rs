//! Steady load for the fault scenarios: a client that sends `/v1/completions` requests back
//! to back through a fleet's front door until told to stop, and keeps what went wrong.

use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio::time::Instant;

/// What one client saw: when each request answered with a completion was sent, and each
/// failure with the time its request was sent.
#[derive(Debug, Default)]
pub struct ClientRun {
    pub ok: Vec<Instant>,
    pub failures: Vec<(Instant, String)>,
}

impl ClientRun {
    /// Requests that succeeded.
    pub fn ok_count(&self) -> usize {
        self.ok.len()
    }

    /// Requests sent within `[from, to)` that succeeded.
    pub fn ok_between(&self, from: Instant, to: Instant) -> usize {
        self.ok.iter().filter(|t| **t >= from && **t < to).count()
    }
}

/// Sends requests of `max_tokens` output tokens to `url` back to back until `stop`; a
/// request counts as ok only with a 200 and a non-empty completion.
pub async fn client(url: String, id: usize, max_tokens: u32, stop: Arc<AtomicBool>) -> ClientRun {
    let http = reqwest::Client::new();
    let mut run = ClientRun::default();
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        n += 1;
        let sent = Instant::now();
        let body = json!({"model": "sim", "prompt": format!("client {id} request {n}"),
                          "max_tokens": max_tokens});
        let answer = http
            .post(format!("{url}/v1/completions"))
            .json(&body)
            .timeout(Duration::from_secs(20))
            .send()
            .await;
        let failure = match answer {
            Ok(r) if r.status().as_u16() == 200 => {
                let text = r
                    .json::<Value>()
                    .await
                    .ok()
                    .and_then(|v| v["choices"][0]["text"].as_str().map(|t| !t.is_empty()));
                (text != Some(true)).then(|| "200 without a completion".to_owned())
            }
            Ok(r) => {
                let status = r.status().as_u16();
                Some(format!("{status}: {}", r.text().await.unwrap_or_default()))
            }
            Err(e) => Some(e.to_string()),
        };
        match failure {
            None => run.ok.push(sent),
            Some(why) => run.failures.push((sent, why)),
        }
    }
    run
}

/// `n` clients on `url`, and the flag that stops them.
pub fn clients(
    url: &str,
    n: usize,
    max_tokens: u32,
) -> (Arc<AtomicBool>, Vec<tokio::task::JoinHandle<ClientRun>>) {
    let stop = Arc::new(AtomicBool::new(false));
    let handles = (0..n)
        .map(|id| tokio::spawn(client(url.to_owned(), id, max_tokens, Arc::clone(&stop))))
        .collect();
    (stop, handles)
}

/// Stops the clients and adds up what they saw.
pub async fn finish(
    stop: Arc<AtomicBool>,
    handles: Vec<tokio::task::JoinHandle<ClientRun>>,
) -> ClientRun {
    stop.store(true, Ordering::Relaxed);
    let mut total = ClientRun::default();
    for handle in handles {
        if let Ok(run) = handle.await {
            total.ok.extend(run.ok);
            total.failures.extend(run.failures);
        }
    }
    total
}
