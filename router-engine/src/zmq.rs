//! The engine's ZMQ sockets: its KV event publisher (we SUB) and its replay service (we
//! DEALER to its ROUTER).
//!
//! The subscriber connects to a publisher that binds (vLLM given `tcp://*:PORT`), or binds
//! for a publisher that connects (vLLM given a concrete `tcp://IP:PORT` connects to it):
//! [`SubscriberSide`].
//!
//! Publisher messages are three frames, `[topic, seq (8 bytes big-endian), payload]`; the
//! subscriber forwards `(seq, payload)` to the link actor and never decodes. The socket
//! reconnects by itself when the engine restarts; the link starts a new subscriber for every
//! incarnation of the engine anyway.
//!
//! Replay: the request is `["", start_seq (8 bytes big-endian)]`; the engine answers one
//! message per buffered batch from `start_seq` on, `["", seq, payload]` (some versions add the
//! topic before `seq`), then an end marker whose sequence frame is all ones (-1).

use bytes::Bytes;
use std::time::Duration;
use tokio::task::JoinHandle;
use zeromq::{DealerSocket, Socket, SocketRecv, SocketSend, SubSocket, ZmqMessage};

/// The end marker's sequence frame.
const END_SEQ: u64 = u64::MAX;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ZmqError {
    #[error("{endpoint}: {message}")]
    Socket { endpoint: String, message: String },
    #[error("{endpoint}: no complete replay within {timeout:?}")]
    ReplayTimeout { endpoint: String, timeout: Duration },
}

fn socket_error(endpoint: &str, e: impl std::fmt::Display) -> ZmqError {
    ZmqError::Socket {
        endpoint: endpoint.to_owned(),
        message: e.to_string(),
    }
}

/// `(seq, payload)` from a message's last two frames; `None` when it has fewer or the
/// sequence frame is not 8 bytes.
fn seq_and_payload(frames: &[Bytes]) -> Option<(u64, Bytes)> {
    let [.., seq, payload] = frames else {
        return None;
    };
    let seq: [u8; 8] = seq.as_ref().try_into().ok()?;
    Some((u64::from_be_bytes(seq), payload.clone()))
}

/// What the subscriber task hands its owner.
pub trait FrameSink: Send + 'static {
    /// One publisher message (`false`: the owner is gone, stop).
    fn frames(&self, seq: u64, payload: Bytes) -> bool;
    /// A message that is not `[topic, seq, payload]`.
    fn malformed(&self) -> bool;
    /// The socket failed; the task is about to retry.
    fn failed(&self, error: ZmqError) -> bool;
}

/// Which end of the KV event connection the subscriber is.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum SubscriberSide {
    /// It connects to the engine's publisher, which binds.
    #[default]
    Connect,
    /// It binds the endpoint and the engine's publisher connects to it.
    Bind,
}

/// Subscribes to `topic` on `endpoint` (connecting or binding, `side`) and forwards every
/// message to `sink` until the sink's owner is gone or the task is aborted. A failed
/// connect, bind or receive is reported and retried after `retry`.
pub fn spawn_subscriber(
    endpoint: String,
    side: SubscriberSide,
    topic: String,
    retry: Duration,
    sink: impl FrameSink,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            let mut socket = SubSocket::new();
            let ready = async {
                socket.subscribe(&topic).await?;
                match side {
                    SubscriberSide::Connect => socket.connect(&endpoint).await,
                    SubscriberSide::Bind => socket.bind(&endpoint).await.map(drop),
                }
            };
            if let Err(e) = ready.await {
                if !sink.failed(socket_error(&endpoint, e)) {
                    return;
                }
                tokio::time::sleep(retry).await;
                continue;
            }
            loop {
                match socket.recv().await {
                    Ok(message) => {
                        let frames = message.into_vec();
                        let alive = match (frames.len(), seq_and_payload(&frames)) {
                            (3, Some((seq, payload))) => sink.frames(seq, payload),
                            _ => sink.malformed(),
                        };
                        if !alive {
                            return;
                        }
                    }
                    Err(e) => {
                        if !sink.failed(socket_error(&endpoint, e)) {
                            return;
                        }
                        break;
                    }
                }
            }
            tokio::time::sleep(retry).await;
        }
    })
}

/// Asks the engine's replay service for every batch from `from` through `to` and returns them
/// in order. Fails when the service does not answer in `timeout` or the answer does not cover
/// the whole range (the engine's buffer no longer holds it).
pub async fn replay(
    endpoint: &str,
    from: u64,
    to: u64,
    timeout: Duration,
) -> Result<Vec<(u64, Bytes)>, ZmqError> {
    let work = async {
        let mut socket = DealerSocket::new();
        socket
            .connect(endpoint)
            .await
            .map_err(|e| socket_error(endpoint, e))?;
        let request = ZmqMessage::try_from(vec![
            Bytes::new(),
            Bytes::copy_from_slice(&from.to_be_bytes()),
        ])
        .map_err(|e| socket_error(endpoint, e))?;
        socket
            .send(request)
            .await
            .map_err(|e| socket_error(endpoint, e))?;
        let mut batches = Vec::new();
        loop {
            let message = socket.recv().await.map_err(|e| socket_error(endpoint, e))?;
            let Some((seq, payload)) = seq_and_payload(&message.into_vec()) else {
                continue;
            };
            if seq == END_SEQ {
                break;
            }
            if (from..=to).contains(&seq) {
                batches.push((seq, payload));
            }
        }
        Ok(batches)
    };
    let batches =
        tokio::time::timeout(timeout, work)
            .await
            .map_err(|_| ZmqError::ReplayTimeout {
                endpoint: endpoint.to_owned(),
                timeout,
            })??;
    let complete = batches.len() as u64 == to - from + 1
        && batches
            .iter()
            .zip(from..)
            .all(|((seq, _), want)| *seq == want);
    if complete {
        Ok(batches)
    } else {
        Err(socket_error(
            endpoint,
            format!(
                "replay of {from}..={to} returned {} of {} batches (the engine's buffer no longer \
                 holds them)",
                batches.len(),
                to - from + 1
            ),
        ))
    }
}
