//! The bus contract (`router_actors::bus` module doc), run against both implementations: the
//! in-process `LocalBus` and `NatsBus` on a real nats-server started per test
//! (`router_actors::testkit`). Each property is one generic async fn taking two handles on
//! the same bus, `a` and `b`: clones of one `LocalBus`, or two separate NATS connections to
//! one server, so publisher and subscriber are peers as in a cluster.
//!
//! A missing or too old nats-server fails the NATS half with instructions
//! (`scripts/install-nats.sh`); nothing is skipped.

use bytes::Bytes;
use futures::StreamExt;
use router_actors::bus::local::LocalBus;
use router_actors::bus::nats::NatsBus;
use router_actors::bus::{Bus, BusError, BusMessage, Subscription};
use router_actors::testkit::NatsServer;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Bound on waiting for a message that must come (real time: NATS crosses a process).
const WAIT: Duration = Duration::from_secs(10);

type Handle = Arc<dyn Bus>;

async fn recv(sub: &mut Subscription) -> BusMessage {
    match tokio::time::timeout(WAIT, sub.next()).await {
        Ok(Some(message)) => message,
        Ok(None) => panic!("subscription ended"),
        Err(_) => panic!("no message within {WAIT:?}"),
    }
}

async fn subscribe(bus: &Handle, subject: &str) -> Subscription {
    match bus.subscribe(subject.to_owned()).await {
        Ok(sub) => sub,
        Err(e) => panic!("subscribe {subject}: {e}"),
    }
}

async fn publish(bus: &Handle, subject: &str, payload: impl Into<Bytes>) {
    if let Err(e) = bus.publish(subject.to_owned(), payload.into()).await {
        panic!("publish {subject}: {e}");
    }
}

/// Receives messages and checks their subjects, in order.
async fn expect_subjects(sub: &mut Subscription, subjects: &[&str]) {
    for expected in subjects {
        let got = recv(sub).await;
        assert_eq!(got.subject, *expected);
    }
}

// ---- properties -------------------------------------------------------------------------

async fn exact_subject_delivery(a: Handle, b: Handle) {
    let mut sub = subject_sub(&b, "c.exact.one").await;
    publish(&a, "c.exact.other", "no").await;
    publish(&a, "c.exact.one.more", "no").await;
    publish(&a, "c.exact.one", "yes").await;
    a.flush().await.expect("flush");
    let got = recv(&mut sub).await;
    assert_eq!(got.subject, "c.exact.one");
    assert_eq!(got.payload, Bytes::from_static(b"yes"));
    assert_eq!(got.reply, None);
}

async fn subject_sub(bus: &Handle, subject: &str) -> Subscription {
    subscribe(bus, subject).await
}

async fn star_matches_one_token(a: Handle, b: Handle) {
    let mut sub = subscribe(&b, "c.star.*.x").await;
    for subject in [
        "c.star.x",     // no: * needs a token
        "c.star.1.x",   // yes
        "c.star.1.2.x", // no: * is one token
        "c.star.2.x",   // yes
        "c.star.2.y",   // no
        "c.star.end.x", // yes: the marker
    ] {
        publish(&a, subject, "m").await;
    }
    a.flush().await.expect("flush");
    expect_subjects(&mut sub, &["c.star.1.x", "c.star.2.x", "c.star.end.x"]).await;
}

async fn gt_matches_trailing_tokens(a: Handle, b: Handle) {
    let mut sub = subscribe(&b, "c.gt.>").await;
    for subject in [
        "c.gt",       // no: > needs at least one token
        "c.gt.a",     // yes
        "c.other.a",  // no
        "c.gt.a.b.c", // yes
        "c.gtx.a",    // no
        "c.gt.end",   // yes: the marker
    ] {
        publish(&a, subject, "m").await;
    }
    a.flush().await.expect("flush");
    expect_subjects(&mut sub, &["c.gt.a", "c.gt.a.b.c", "c.gt.end"]).await;
}

async fn one_publisher_order_is_kept(a: Handle, b: Handle) {
    const N: u32 = 1_000;
    let mut sub = subscribe(&b, "c.order").await;
    for i in 0..N {
        publish(&a, "c.order", i.to_be_bytes().to_vec()).await;
    }
    a.flush().await.expect("flush");
    for i in 0..N {
        let got = recv(&mut sub).await;
        assert_eq!(
            got.payload.as_ref(),
            i.to_be_bytes(),
            "message {i} out of order"
        );
    }
}

async fn no_delivery_of_earlier_messages(a: Handle, b: Handle) {
    publish(&a, "c.late", "before").await;
    a.flush().await.expect("flush");
    let mut sub = subscribe(&b, "c.late").await;
    publish(&a, "c.late", "after").await;
    a.flush().await.expect("flush");
    let got = recv(&mut sub).await;
    assert_eq!(got.payload, Bytes::from_static(b"after"));
}

/// Answers every request on `subject` with `echo:` + its payload, through `publish`.
async fn spawn_echo(bus: Handle, subject: &str) -> tokio::task::JoinHandle<()> {
    let mut sub = subscribe(&bus, subject).await;
    tokio::spawn(async move {
        while let Some(message) = sub.next().await {
            let Some(reply) = message.reply else { continue };
            assert!(reply.starts_with("_INBOX."), "reply subject {reply}");
            let mut answer = b"echo:".to_vec();
            answer.extend_from_slice(&message.payload);
            if bus.publish(reply, answer.into()).await.is_err() {
                return;
            }
        }
    })
}

async fn request_reply_round_trip(a: Handle, b: Handle) {
    let responder = spawn_echo(b, "c.svc").await;
    for i in 0..3 {
        let question = format!("q{i}");
        let answer = a
            .request("c.svc".into(), question.clone().into(), WAIT)
            .await
            .expect("answer");
        assert_eq!(answer, Bytes::from(format!("echo:{question}")));
    }
    responder.abort();
}

async fn request_without_responder_fails_promptly(a: Handle, _b: Handle) {
    let started = Instant::now();
    let result = a.request("c.nobody".into(), "q".into(), WAIT).await;
    assert_eq!(result, Err(BusError::NoResponders("c.nobody".into())));
    assert!(started.elapsed() < WAIT / 2, "took {:?}", started.elapsed());
}

async fn request_unanswered_times_out(a: Handle, b: Handle) {
    let _silent = subscribe(&b, "c.silent").await;
    let timeout = Duration::from_millis(200);
    let result = a.request("c.silent".into(), "q".into(), timeout).await;
    assert_eq!(result, Err(BusError::Timeout(timeout)));
}

async fn invalid_subjects_are_rejected(a: Handle, b: Handle) {
    let mut watch = subscribe(&b, ">").await;
    for subject in [
        "",
        "a..b",
        ".a",
        "a.",
        "has space",
        "tab\tx",
        "a.*",
        "a.>",
        "*",
        "a*b",
    ] {
        let result = a.publish(subject.to_owned(), "x".into()).await;
        assert_eq!(
            result,
            Err(BusError::InvalidSubject(subject.to_owned())),
            "publish {subject:?}"
        );
        let result = a.request(subject.to_owned(), "x".into(), WAIT).await;
        assert_eq!(
            result,
            Err(BusError::InvalidSubject(subject.to_owned())),
            "request {subject:?}"
        );
    }
    for subject in ["", "a..b", ".a", "a.", "a b", "a.>.b", ">.a", "a*", "a.b>"] {
        let result = b.subscribe(subject.to_owned()).await.map(|_| ());
        assert_eq!(
            result,
            Err(BusError::InvalidSubject(subject.to_owned())),
            "subscribe {subject:?}"
        );
    }
    // Nothing was sent: the first message the catch-all sees is the marker.
    publish(&a, "c.invalid.marker", "m").await;
    a.flush().await.expect("flush");
    let got = recv(&mut watch).await;
    assert_eq!(got.subject, "c.invalid.marker");
}

async fn dropped_subscription_stops_without_affecting_others(a: Handle, b: Handle) {
    let first = subscribe(&b, "c.drop").await;
    let mut second = subscribe(&b, "c.drop").await;
    let mut elsewhere = subscribe(&b, "c.keep").await;
    drop(first);
    b.flush().await.expect("flush");
    publish(&a, "c.drop", "1").await;
    publish(&a, "c.keep", "2").await;
    a.flush().await.expect("flush");
    assert_eq!(recv(&mut second).await.payload, Bytes::from_static(b"1"));
    assert_eq!(recv(&mut elsewhere).await.payload, Bytes::from_static(b"2"));

    // With every subscription on the subject dropped, nobody is listening any more.
    drop(second);
    b.flush().await.expect("flush");
    let result = a.request("c.drop".into(), "q".into(), WAIT).await;
    assert_eq!(result, Err(BusError::NoResponders("c.drop".into())));
    publish(&a, "c.keep", "3").await;
    a.flush().await.expect("flush");
    assert_eq!(recv(&mut elsewhere).await.payload, Bytes::from_static(b"3"));
}

async fn payload_bytes_arrive_unchanged(a: Handle, b: Handle) {
    let mut sub = subscribe(&b, "c.bytes").await;
    let every_byte: Vec<u8> = (0..=255).collect();
    let mut state = 0x9E37_79B9_7F4A_7C15_u64;
    let big: Vec<u8> = (0..512 * 1024)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        })
        .collect();
    let payloads = [Vec::new(), every_byte, b"\r\nPUB x 1\r\n".to_vec(), big];
    for payload in &payloads {
        publish(&a, "c.bytes", payload.clone()).await;
    }
    a.flush().await.expect("flush");
    for payload in &payloads {
        let got = recv(&mut sub).await;
        assert_eq!(got.payload.len(), payload.len());
        assert!(
            got.payload.as_ref() == payload.as_slice(),
            "payload of {} bytes changed",
            payload.len()
        );
    }
}

// ---- the two implementations ------------------------------------------------------------

fn local_pair() -> (Handle, Handle) {
    let bus = LocalBus::new();
    (Arc::new(bus.clone()), Arc::new(bus))
}

/// A server and two connections to it; the server lives as long as this value.
struct NatsPair {
    a: Handle,
    b: Handle,
    _server: NatsServer,
}

async fn nats_pair() -> NatsPair {
    let server = match NatsServer::start().await {
        Ok(server) => server,
        Err(e) => panic!("{e}"),
    };
    let a = NatsBus::connect(server.url()).await.expect("connect a");
    let b = NatsBus::connect(server.url()).await.expect("connect b");
    NatsPair {
        a: Arc::new(a),
        b: Arc::new(b),
        _server: server,
    }
}

macro_rules! contract {
    ($($property:ident),* $(,)?) => {
        mod local_bus {
            $(
                #[tokio::test]
                async fn $property() {
                    let (a, b) = super::local_pair();
                    super::$property(a, b).await;
                }
            )*
        }

        mod nats_bus {
            $(
                #[tokio::test]
                async fn $property() {
                    let pair = super::nats_pair().await;
                    super::$property(pair.a.clone(), pair.b.clone()).await;
                }
            )*
        }
    };
}

contract!(
    exact_subject_delivery,
    star_matches_one_token,
    gt_matches_trailing_tokens,
    one_publisher_order_is_kept,
    no_delivery_of_earlier_messages,
    request_reply_round_trip,
    request_without_responder_fails_promptly,
    request_unanswered_times_out,
    invalid_subjects_are_rejected,
    dropped_subscription_stops_without_affecting_others,
    payload_bytes_arrive_unchanged,
);

// ---- NATS only: what the contract leaves to the transport --------------------------------

#[tokio::test]
async fn nats_unreachable_server_is_a_transport_error() {
    // A port bound by a socket that never listens: refused, and no server started by another
    // test beside this one can take it meanwhile.
    let socket = tokio::net::TcpSocket::new_v4().expect("a socket");
    socket
        .bind("127.0.0.1:0".parse().expect("an address"))
        .expect("binds");
    let url = format!("nats://{}", socket.local_addr().expect("an address"));
    let result = tokio::time::timeout(WAIT, NatsBus::connect(&url))
        .await
        .expect("connect gave up in time");
    match result {
        Err(BusError::Transport(message)) => assert!(message.contains(&url), "{message}"),
        other => panic!("expected a transport error, got {other:?}"),
    }
}

#[tokio::test]
async fn nats_payload_above_max_payload_is_refused() {
    let pair = nats_pair().await;
    let too_big = vec![0u8; 2 * 1024 * 1024];
    let result = pair.a.publish("c.huge".into(), too_big.into()).await;
    assert!(matches!(result, Err(BusError::Transport(_))), "{result:?}");
}

#[tokio::test]
async fn nats_server_reports_a_recent_version() {
    let pair = nats_pair().await;
    let server = &pair._server;
    assert!(
        server.url().starts_with("nats://127.0.0.1:"),
        "{}",
        server.url()
    );
    let mut parts = server
        .version()
        .split('.')
        .map(|p| p.parse::<u32>().unwrap_or(0));
    let version = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    assert!(
        version >= router_actors::testkit::MIN_VERSION,
        "{}",
        server.version()
    );
}
