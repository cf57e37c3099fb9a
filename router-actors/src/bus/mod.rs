//! The bus: publish, subscribe and request/reply over subjects, with two implementations
//! held to the same contract: NATS (`nats.rs`, for clusters; its credentials and TLS in
//! `nats_security.rs`, their `--nats-*` command-line flags in `nats_args.rs`) and in-process (`local.rs`, for the embedded default and unit tests). Actors see typed messages from `crate::wire`, never
//! raw bus messages.
//!
//! The contract both implementations keep, checked against both by
//! `router-actors/tests/integration/bus_contract.rs` (the NATS half against a real nats-server):
//! - **subjects** are non-empty dot-separated tokens without whitespace ([`valid_subject`]);
//!   a subscription may use `*` (exactly one token) and `>` (one or more trailing tokens,
//!   last token only), as NATS does. Publishing to, requesting on or subscribing to an
//!   invalid subject (a wildcard in a publish subject included) fails with
//!   [`BusError::InvalidSubject`] and sends nothing;
//! - **delivery** is at most once, to every subscription whose pattern matches;
//! - a subscription sees exactly the messages published **after `subscribe` returned**
//!   (for NATS: after the server has registered it), and none published before;
//! - messages from one publisher on one subject arrive **in publish order**;
//! - **payload bytes** arrive unchanged, the empty payload included. Both carry payloads up
//!   to 512 KiB; NATS refuses one above the server's `max_payload` (1 MiB by default) with
//!   [`BusError::Transport`], the in-process bus has no limit;
//! - **dropping** a subscription stops its deliveries and does not affect other
//!   subscriptions, on the same subject or any other; once it is dropped (for NATS: and the
//!   dropping handle flushed) it no longer counts as a responder;
//! - a subscriber that falls behind loses messages rather than slowing publishers (NATS's
//!   slow-consumer rule; the in-process bus drops the newest and counts it);
//! - `request` publishes with a private reply subject (`_INBOX.…`) and returns the payload of
//!   the first answer. A responder answers by `publish`ing on the message's `reply` subject.
//!   With **no subscription matching** the subject the request fails promptly (without
//!   waiting for the timeout) with [`BusError::NoResponders`]; with a matching subscription
//!   but no answer within the timeout it fails with [`BusError::Timeout`];
//! - `flush` returns once everything sent through this handle before it (messages,
//!   subscriptions, drops of subscriptions) has been processed by the bus (NATS: a round trip
//!   through the server); a no-op in process.
//! - Failures of the connection or the client are [`BusError::Transport`] with the message.

pub mod local;
pub mod nats;
pub mod nats_args;
pub mod nats_security;

pub use nats_args::NatsSecurityArgs;

use bytes::Bytes;
use futures::future::BoxFuture;
use futures::stream::BoxStream;
use std::time::Duration;

/// One message as the bus carries it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BusMessage {
    pub subject: String,
    pub payload: Bytes,
    /// Where to send an answer (request/reply).
    pub reply: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BusError {
    #[error("bus closed")]
    Closed,
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    #[error("no responder on {0}")]
    NoResponders(String),
    #[error("invalid subject {0:?}")]
    InvalidSubject(String),
    #[error("bus transport: {0}")]
    Transport(String),
}

pub type Subscription = BoxStream<'static, BusMessage>;

/// A message bus. Cheap to clone behind an `Arc`.
pub trait Bus: Send + Sync + 'static {
    fn publish(&self, subject: String, payload: Bytes) -> BoxFuture<'_, Result<(), BusError>>;

    fn subscribe(&self, subject: String) -> BoxFuture<'_, Result<Subscription, BusError>>;

    fn request(
        &self,
        subject: String,
        payload: Bytes,
        timeout: Duration,
    ) -> BoxFuture<'_, Result<Bytes, BusError>>;

    /// Flushes what was published so far (NATS sends asynchronously).
    fn flush(&self) -> BoxFuture<'_, Result<(), BusError>>;

    /// Whether this end is connected to the bus now. While it is not, silence from peers
    /// and workers is no evidence that they are gone (leases are not run out on it).
    fn connected(&self) -> bool {
        true
    }
}

/// Seals `body` in `outbox`'s next envelope on `subject` and publishes it; false when it
/// could not be encoded or published (the caller counts it).
pub async fn publish_sealed<T: serde::Serialize>(
    bus: &dyn Bus,
    outbox: &mut crate::wire::Outbox,
    subject: &str,
    body: T,
) -> bool {
    match outbox.seal(subject, body) {
        Ok(bytes) => bus.publish(subject.to_owned(), bytes).await.is_ok(),
        Err(_) => false,
    }
}

/// Whether `subject` matches the subscription `pattern` (`*` = one token, `>` = the rest).
pub fn subject_matches(pattern: &str, subject: &str) -> bool {
    // Most subscriptions name one subject: compared whole, without splitting either.
    if !pattern.contains(['*', '>']) {
        return pattern == subject;
    }
    let mut p = pattern.split('.');
    let mut s = subject.split('.');
    loop {
        match (p.next(), s.next()) {
            (Some(">"), Some(_)) => return true,
            (Some("*"), Some(_)) => {}
            (Some(a), Some(b)) if a == b => {}
            (None, None) => return true,
            _ => return false,
        }
    }
}

/// A subject is non-empty dot-separated tokens without spaces; `*` and `>` only in patterns.
pub fn valid_subject(subject: &str, pattern: bool) -> bool {
    if subject.is_empty() {
        return false;
    }
    let mut tokens = subject.split('.').peekable();
    while let Some(t) = tokens.next() {
        let last = tokens.peek().is_none();
        let valid = !t.is_empty()
            && !t.contains(char::is_whitespace)
            && match t {
                "*" => pattern,
                ">" => pattern && last,
                _ => !t.contains(['*', '>']),
            };
        if !valid {
            return false;
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wildcards_match_like_nats() {
        assert!(subject_matches("a.b.c", "a.b.c"));
        assert!(subject_matches("a.*.c", "a.x.c"));
        assert!(!subject_matches("a.*", "a.x.c"));
        assert!(subject_matches("a.>", "a.x.c"));
        assert!(!subject_matches("a.>", "a"));
        assert!(!subject_matches("a.b", "a.b.c"));
        assert!(!subject_matches("a.b.c", "a.b"));
        assert!(!subject_matches("a.b.c", "a.b.d"));
        assert!(subject_matches("*", "a"));
        assert!(!subject_matches("*", "a.b"));
    }

    #[test]
    fn subjects_are_validated() {
        assert!(valid_subject("sy.router.decode.room", false));
        assert!(!valid_subject("sy..room", false));
        assert!(!valid_subject("sy.*", false));
        assert!(valid_subject("sy.*.room", true));
        assert!(!valid_subject("sy.>.room", true));
        assert!(!valid_subject("has space", false));
        assert!(!valid_subject("", true));
        assert!(valid_subject("sy.>", true));
        assert!(!valid_subject("sy.>", false));
        assert!(!valid_subject("sy.a*b", true));
        assert!(!valid_subject("sy.room.", false));
    }
}
