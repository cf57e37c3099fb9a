//! The NATS bus: the same contract as the in-process bus (see `bus/mod.rs`), carried by a
//! nats-server (>= 2.10) through async-nats.
//!
//! - Subjects are checked with [`valid_subject`] before anything is sent, so an invalid one is
//!   refused with [`BusError::InvalidSubject`] exactly as by the in-process bus (async-nats's
//!   own checks are looser: it accepts `a.*` as a publish subject).
//! - `flush` is a round trip through the server, not just a write to the socket (which is
//!   all async-nats's own `flush` waits for): it subscribes to a private subject under
//!   [`SYNC_PREFIX`], publishes one empty message to it and waits for it. The server handles
//!   one connection's operations in order, so when the message is back, everything sent
//!   before it (messages, subscriptions, unsubscriptions of dropped subscriptions) has been
//!   processed by the server. The sync messages are filtered out of this bus's subscriptions;
//!   other NATS clients subscribed to `>` do see them.
//! - `subscribe` ends with such a round trip, so the server holds the interest when it
//!   returns and a message published afterwards, by any connection to the same server, is
//!   delivered to it.
//! - `request` uses a private inbox subscription per request (dropped, hence unsubscribed, when
//!   the request ends, also on timeout) and the server's no-responders status: with no
//!   subscription on the subject the server answers at once and the request fails with
//!   [`BusError::NoResponders`]; with a subscriber that does not answer in time it fails with
//!   [`BusError::Timeout`].
//! - Payloads are limited by the server's `max_payload` (1 MiB by default); a larger one is
//!   refused with [`BusError::Transport`].
//! - Anything the client or the connection reports otherwise becomes [`BusError::Transport`]
//!   with its message.
//! - [`NatsBus::connect_secured`] connects with credentials and TLS (`nats_security.rs`);
//!   [`NatsBus::connect`] is the same without either.

use super::nats_security::{NatsConnectError, NatsSecurity};
use super::{Bus, BusError, BusMessage, Subscription, valid_subject};
use async_nats::client::{FlushError, PublishError, RequestErrorKind, SubscribeError};
use bytes::Bytes;
use futures::StreamExt;
use futures::future::BoxFuture;
use std::time::Duration;

/// Subjects of the private round trips of `flush` (reserved: a message published there is
/// never delivered to a subscription of this bus).
pub const SYNC_PREFIX: &str = "_SWITCHYARD_SYNC.";

/// Bound on one round trip through the server.
pub const SYNC_TIMEOUT: Duration = Duration::from_secs(10);

/// A bus over one NATS connection. Clones share the connection.
#[derive(Debug, Clone)]
pub struct NatsBus {
    client: async_nats::Client,
}

impl NatsBus {
    /// Connects to `url` (e.g. `nats://127.0.0.1:4222`). One attempt: an unreachable server is
    /// an error here, not a background retry; later disconnects are retried by async-nats.
    pub async fn connect(url: &str) -> Result<Self, BusError> {
        async_nats::connect(url)
            .await
            .map(Self::from_client)
            .map_err(|e| BusError::Transport(format!("connect to {url}: {e}")))
    }

    /// Connects to `url` with `security`'s credentials and TLS settings. One attempt, as
    /// [`NatsBus::connect`]; a refused authentication or a failed TLS handshake is its own
    /// error, so the caller can say which. The error does not include `url`.
    pub async fn connect_secured(
        url: &str,
        security: &NatsSecurity,
    ) -> Result<Self, NatsConnectError> {
        security.connect(url).await.map(Self::from_client)
    }

    /// Wraps a client that is already connected.
    pub fn from_client(client: async_nats::Client) -> Self {
        Self { client }
    }

    /// The underlying client (for JetStream and server info).
    pub fn client(&self) -> &async_nats::Client {
        &self.client
    }

    /// A round trip through the server (see the module doc).
    async fn sync(&self) -> Result<(), BusError> {
        let token = self.client.new_inbox();
        let subject = format!(
            "{SYNC_PREFIX}{}",
            token.rsplit('.').next().unwrap_or(token.as_str())
        );
        let mut echo = self
            .client
            .subscribe(subject.clone())
            .await
            .map_err(subscribe_error)?;
        self.client
            .publish(subject, Bytes::new())
            .await
            .map_err(publish_error)?;
        self.client.flush().await.map_err(flush_error)?;
        match tokio::time::timeout(SYNC_TIMEOUT, echo.next()).await {
            Ok(Some(_)) => Ok(()),
            Ok(None) => Err(BusError::Transport(
                "flush: connection closed during the round trip".into(),
            )),
            Err(_) => Err(BusError::Transport(format!(
                "flush: no round trip through the server within {SYNC_TIMEOUT:?}"
            ))),
        }
    }
}

fn publish_error(e: PublishError) -> BusError {
    BusError::Transport(format!("publish: {e}"))
}

fn subscribe_error(e: SubscribeError) -> BusError {
    BusError::Transport(format!("subscribe: {e}"))
}

fn flush_error(e: FlushError) -> BusError {
    BusError::Transport(format!("flush: {e}"))
}

fn to_bus_message(message: async_nats::Message) -> BusMessage {
    BusMessage {
        subject: message.subject.to_string(),
        payload: message.payload,
        reply: message.reply.map(|r| r.to_string()),
    }
}

impl Bus for NatsBus {
    fn connected(&self) -> bool {
        self.client.connection_state() == async_nats::connection::State::Connected
    }

    fn publish(&self, subject: String, payload: Bytes) -> BoxFuture<'_, Result<(), BusError>> {
        Box::pin(async move {
            if !valid_subject(&subject, false) {
                return Err(BusError::InvalidSubject(subject));
            }
            self.client
                .publish(subject, payload)
                .await
                .map_err(publish_error)
        })
    }

    fn subscribe(&self, subject: String) -> BoxFuture<'_, Result<Subscription, BusError>> {
        Box::pin(async move {
            if !valid_subject(&subject, true) {
                return Err(BusError::InvalidSubject(subject));
            }
            let subscriber = self
                .client
                .subscribe(subject)
                .await
                .map_err(subscribe_error)?;
            // The SUB goes out before the round trip's message, so the server has it after.
            self.sync().await?;
            Ok(subscriber
                .filter(|m| std::future::ready(!m.subject.starts_with(SYNC_PREFIX)))
                .map(to_bus_message)
                .boxed())
        })
    }

    fn request(
        &self,
        subject: String,
        payload: Bytes,
        timeout: Duration,
    ) -> BoxFuture<'_, Result<Bytes, BusError>> {
        Box::pin(async move {
            if !valid_subject(&subject, false) {
                return Err(BusError::InvalidSubject(subject));
            }
            // A dedicated inbox: its subscription is dropped with this future, so a request
            // that times out leaves nothing behind in the client.
            let request = async_nats::Request::new()
                .payload(payload)
                .inbox(self.client.new_inbox())
                .timeout(None);
            let answer =
                tokio::time::timeout(timeout, self.client.send_request(subject.clone(), request))
                    .await;
            match answer {
                Err(_) => Err(BusError::Timeout(timeout)),
                Ok(Ok(message)) => Ok(message.payload),
                Ok(Err(e)) => Err(match e.kind() {
                    RequestErrorKind::NoResponders => BusError::NoResponders(subject),
                    RequestErrorKind::TimedOut => BusError::Timeout(timeout),
                    RequestErrorKind::InvalidSubject => BusError::InvalidSubject(subject),
                    RequestErrorKind::MaxPayloadExceeded | RequestErrorKind::Other => {
                        BusError::Transport(format!("request on {subject}: {e}"))
                    }
                }),
            }
        })
    }

    fn flush(&self) -> BoxFuture<'_, Result<(), BusError>> {
        Box::pin(self.sync())
    }
}
