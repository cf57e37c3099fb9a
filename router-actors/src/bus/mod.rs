//! The bus: publish, subscribe and request/reply over subjects, with two implementations
//! held to the same contract: NATS (`nats.rs`, for clusters) and in-process (`local.rs`, for
//! the embedded default and unit tests). Actors see typed messages from `crate::wire`, never
//! raw bus messages.
//!
//! The contract both implementations keep:
//! - delivery is at most once; a subscription sees messages published after it was made;
//! - messages from one publisher on one subject arrive in publish order;
//! - subjects are dot-separated tokens; a subscription may use `*` (one token) and `>` (one
//!   or more trailing tokens), as NATS does;
//! - a subscriber that falls behind loses messages rather than slowing publishers (NATS's
//!   slow-consumer rule; the in-process bus drops the newest and counts it);
//! - `request` publishes with a private reply subject and waits for the first answer or the
//!   timeout.

pub mod local;

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
}

/// Whether `subject` matches the subscription `pattern` (`*` = one token, `>` = the rest).
pub fn subject_matches(pattern: &str, subject: &str) -> bool {
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
    !subject.is_empty()
        && subject.split('.').enumerate().all(|(i, t)| {
            let last = i + 1 == subject.split('.').count();
            !t.is_empty()
                && !t.contains(char::is_whitespace)
                && match t {
                    "*" => pattern,
                    ">" => pattern && last,
                    _ => !t.contains('*') && !t.contains('>'),
                }
        })
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
    }
}
