//! The engine link in a router node, against a stand-in engine that speaks vLLM's interfaces
//! for real: HTTP `/health` and `/metrics` (Prometheus text) and a ZMQ publisher sending
//! msgpack batches. (The real-engine suite, `tests/tests/real_vllm.rs`, does the same against
//! real vLLM processes; this one runs in a second and covers what a real engine rarely does on
//! demand: lost batches, a restart, a wrong block size.)

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use bytes::Bytes;
use rmp::encode as mp;
use router_actors::bus::local::LocalBus;
use router_actors::supervisor::ActorSlot;
use router_actors::wire::Subjects;
use router_actors::{Node, NodeConfig, Topology};
use router_core::{PolicyProfile, PoolRole, RouterId};
use router_engine::zmq::SubscriberSide;
use router_engine::{
    EngineKind, EngineLinkArgs, EngineLinkConfig, EngineLinkHandle, EngineLinkSnapshot,
    EventsHeard, LinkPhase, engine_link_child,
};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use zeromq::{PubSocket, RouterSocket, Socket, SocketRecv, SocketSend, ZmqMessage};

const BLOCK: u32 = 4;

/// What the stand-in engine answers.
struct Engine {
    healthy: AtomicBool,
    block_size: u32,
    /// Its `vllm:prompt_tokens_total`.
    prompt_tokens: AtomicU64,
    /// The LoRA adapters its `/v1/models` lists.
    adapters: Mutex<Vec<String>>,
}

async fn health(State(e): State<Arc<Engine>>) -> StatusCode {
    if e.healthy.load(Ordering::SeqCst) {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    }
}

async fn metrics(State(e): State<Arc<Engine>>) -> String {
    format!(
        "# TYPE vllm:num_requests_running gauge\n\
         vllm:num_requests_running{{engine=\"0\",model_name=\"m\"}} 2.0\n\
         # TYPE vllm:num_requests_waiting gauge\n\
         vllm:num_requests_waiting{{engine=\"0\",model_name=\"m\"}} 1.0\n\
         # TYPE vllm:kv_cache_usage_perc gauge\n\
         vllm:kv_cache_usage_perc{{engine=\"0\",model_name=\"m\"}} 0.25\n\
         # TYPE vllm:cache_config_info gauge\n\
         vllm:cache_config_info{{block_size=\"{}\",engine=\"0\",kv_cache_dtype_skip_layers=\"[]\",num_gpu_blocks=\"100\"}} 1.0\n\
         # TYPE vllm:prompt_tokens counter\n\
         vllm:prompt_tokens_total{{engine=\"0\",model_name=\"m\"}} {}.0\n",
        e.block_size,
        e.prompt_tokens.load(Ordering::SeqCst)
    )
}

/// vLLM's model list, with the context length the link reads and the adapters loaded now.
async fn models(State(e): State<Arc<Engine>>) -> axum::Json<serde_json::Value> {
    let mut data = vec![serde_json::json!({"id": "m", "object": "model", "max_model_len": 4096})];
    for adapter in e.adapters.lock().expect("adapters").iter() {
        data.push(serde_json::json!({"id": adapter, "object": "model", "parent": "m"}));
    }
    axum::Json(serde_json::json!({"object": "list", "data": data}))
}

/// Starts the HTTP side; returns its base URL.
async fn serve_engine(engine: Arc<Engine>) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    let app = Router::new()
        .route("/health", get(health))
        .route("/metrics", get(metrics))
        .route("/v1/models", get(models))
        .with_state(engine);
    tokio::spawn(async move { axum::serve(listener, app).await });
    url
}

/// A batch `[ts, [BlockStored{...}], 0]` storing `blocks` blocks of `tokens`.
fn stored_batch(first_hash: u64, tokens: &[u32]) -> Vec<u8> {
    let blocks = tokens.len() as u32 / BLOCK;
    let mut b = Vec::new();
    mp::write_array_len(&mut b, 3).expect("encode");
    mp::write_f64(&mut b, 1.7e9).expect("encode");
    mp::write_array_len(&mut b, 1).expect("encode");
    mp::write_map_len(&mut b, 5).expect("encode");
    mp::write_str(&mut b, "type").expect("encode");
    mp::write_str(&mut b, "BlockStored").expect("encode");
    mp::write_str(&mut b, "block_hashes").expect("encode");
    mp::write_array_len(&mut b, blocks).expect("encode");
    for h in 0..u64::from(blocks) {
        mp::write_uint(&mut b, first_hash + h).expect("encode");
    }
    mp::write_str(&mut b, "parent_block_hash").expect("encode");
    mp::write_nil(&mut b).expect("encode");
    mp::write_str(&mut b, "token_ids").expect("encode");
    mp::write_array_len(&mut b, tokens.len() as u32).expect("encode");
    for t in tokens {
        mp::write_uint(&mut b, u64::from(*t)).expect("encode");
    }
    mp::write_str(&mut b, "block_size").expect("encode");
    mp::write_uint(&mut b, u64::from(BLOCK)).expect("encode");
    mp::write_uint(&mut b, 0).expect("encode");
    b
}

async fn publish(socket: &mut PubSocket, seq: u64, payload: Vec<u8>) {
    let message = ZmqMessage::try_from(vec![
        Bytes::from_static(b"kv-events"),
        Bytes::copy_from_slice(&seq.to_be_bytes()),
        Bytes::from(payload),
    ])
    .expect("frames");
    socket.send(message).await.expect("publish");
}

/// Publishes batch `seq` until the index holds `blocks` blocks: a ZMQ subscriber misses what
/// was sent before it connected (later copies are duplicates, which the link drops).
async fn publish_until_indexed(
    f: &mut Fixture,
    seq: u64,
    payload: Vec<u8>,
    blocks: u64,
    what: &str,
) {
    for _ in 0..200 {
        publish(&mut f.zmq, seq, payload.clone()).await;
        tokio::time::sleep(Duration::from_millis(20)).await;
        if index_blocks(f).await.0 == blocks {
            return;
        }
    }
    panic!("not indexed: {what}");
}

async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while tokio::time::Instant::now() < deadline {
        if check().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("timed out waiting for: {what}");
}

struct Fixture {
    node: Node,
    link: EngineLinkHandle,
    engine: Arc<Engine>,
    zmq: PubSocket,
}

async fn start(block_size: u32) -> Fixture {
    start_with(block_size, None).await
}

async fn start_with(block_size: u32, replay: Option<String>) -> Fixture {
    start_linked(block_size, replay, SubscriberSide::Connect, |_| {}).await
}

/// A free local TCP port, for a listener someone else binds next.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// The fixture with the link on `side` of the KV event connection (binding: the engine's
/// publisher connects to it, as vLLM given a concrete address does), `tune` applied last.
async fn start_linked(
    block_size: u32,
    replay: Option<String>,
    side: SubscriberSide,
    tune: impl FnOnce(&mut EngineLinkConfig),
) -> Fixture {
    let engine = Arc::new(Engine {
        healthy: AtomicBool::new(true),
        block_size,
        prompt_tokens: AtomicU64::new(0),
        adapters: Mutex::new(Vec::new()),
    });
    let url = serve_engine(engine.clone()).await;
    let mut zmq = PubSocket::new();
    let endpoint = match side {
        SubscriberSide::Connect => zmq
            .bind("tcp://127.0.0.1:0")
            .await
            .expect("zmq bind")
            .to_string(),
        SubscriberSide::Bind => format!("tcp://127.0.0.1:{}", free_port()),
    };
    let bus = Arc::new(LocalBus::new());
    let mut link = EngineLinkConfig::new(EngineKind::Vllm, url, PoolRole::Aggregated);
    link.kv_events = Some(endpoint.clone());
    link.kv_events_side = side;
    link.replay = replay;
    link.expected_block_size = Some(BLOCK);
    link.poll_every = Duration::from_millis(50);
    link.lease = Duration::from_secs(2);
    tune(&mut link);
    let slot = ActorSlot::empty();
    let mut config = NodeConfig::new(
        "test",
        RouterId(uuid::Uuid::new_v4()),
        Topology::Aggregated,
        PolicyProfile::fallback(),
    );
    config.block_size = BLOCK;
    config.extra_children.push(engine_link_child(
        "engine-link-0",
        EngineLinkArgs {
            bus: bus.clone(),
            subjects: Subjects::new("test"),
            config: link,
        },
        slot.clone(),
    ));
    let node = Node::start(config, bus).await.expect("node");
    if side == SubscriberSide::Bind {
        // The link binds once the engine joined: connect when it listens.
        let mut connected = false;
        for _ in 0..250 {
            if zmq.connect(&endpoint).await.is_ok() {
                connected = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(connected, "the link never bound {endpoint}");
    }
    Fixture {
        node,
        link: EngineLinkHandle::from_slot(slot),
        engine,
        zmq,
    }
}

async fn link_state(f: &Fixture) -> EngineLinkSnapshot {
    f.link.observe().await.expect("observe the link")
}

async fn workers(f: &Fixture) -> usize {
    f.node
        .registry()
        .observe()
        .await
        .expect("registry")
        .workers
        .len()
}

async fn index_blocks(f: &Fixture) -> (u64, u64) {
    let kv = f
        .node
        .kv_events(PoolRole::Aggregated)
        .expect("pool")
        .observe()
        .await
        .expect("kv events");
    (kv.index.blocks, kv.counters.events.cleared)
}

#[tokio::test]
async fn an_engine_joins_relays_events_and_load_and_leaves_when_it_stops_answering() {
    let mut f = start(BLOCK).await;
    eventually("the engine joins", || async { workers(&f).await == 1 }).await;
    let snapshot = link_state(&f).await;
    assert_eq!(snapshot.phase, LinkPhase::Serving);
    let capacity = snapshot.capacity.expect("read from the engine");
    assert_eq!((capacity.block_size, capacity.blocks), (BLOCK, 99));
    // Its context length, from its `/v1/models`, is announced: the frontend's prompt limit.
    assert_eq!(f.node.registry().directory().max_model_len, Some(4096));

    // Load: the engine's own numbers reach the registry, apart from bookings.
    eventually("the engine's load is relayed", || async {
        let registry = f.node.registry().observe().await.expect("registry");
        registry.workers[0]
            .load
            .first()
            .is_some_and(|l| (l.running, l.waiting, l.kv_used_blocks) == (2, 1, 25))
    })
    .await;

    // Events.
    let tokens: Vec<u32> = (0..12).collect();
    publish_until_indexed(
        &mut f,
        0,
        stored_batch(1000, &tokens),
        3,
        "3 blocks indexed",
    )
    .await;

    // A lost batch (seq 1 never sent) without a replay service: the engine's entries are
    // cleared, then the new batch applied.
    publish(
        &mut f.zmq,
        2,
        stored_batch(2000, &(100..108).collect::<Vec<_>>()),
    )
    .await;
    eventually("cleared on the gap, then 2 new blocks", || async {
        index_blocks(&f).await == (2, 1)
    })
    .await;
    let counters = link_state(&f).await.counters;
    assert_eq!((counters.gaps, counters.cleared), (1, 1));

    // The engine restarted (its numbering starts again at 0): cleared again.
    publish(
        &mut f.zmq,
        0,
        stored_batch(3000, &(200..204).collect::<Vec<_>>()),
    )
    .await;
    eventually("cleared on the restart", || async {
        index_blocks(&f).await == (1, 2)
    })
    .await;

    // It stops answering: it leaves at once (not after its lease), entries dropped.
    f.engine.healthy.store(false, Ordering::SeqCst);
    eventually("the engine leaves", || async { workers(&f).await == 0 }).await;
    assert_eq!(index_blocks(&f).await.0, 0);
    let registry = f.node.registry().observe().await.expect("registry");
    assert_eq!(registry.counters.left, 1);
    assert_eq!(registry.counters.expired, 0, "left, not expired");
    assert_eq!(link_state(&f).await.phase, LinkPhase::Waiting);

    // It answers again: it joins again.
    f.engine.healthy.store(true, Ordering::SeqCst);
    eventually("the engine joins again", || async {
        workers(&f).await == 1
    })
    .await;
    assert_eq!(link_state(&f).await.counters.joins, 2);
    f.node.shutdown().await;
}

#[tokio::test]
async fn a_link_binds_for_an_engine_whose_publisher_connects() {
    let mut f = start_linked(BLOCK, None, SubscriberSide::Bind, |_| {}).await;
    eventually("the engine joins", || async { workers(&f).await == 1 }).await;
    let tokens: Vec<u32> = (0..8).collect();
    publish_until_indexed(&mut f, 0, stored_batch(10, &tokens), 2, "2 blocks indexed").await;
    assert_eq!(link_state(&f).await.kv_events_heard, EventsHeard::Heard);
    f.node.shutdown().await;
}

#[tokio::test]
async fn an_engine_that_prefills_but_is_not_heard_is_reported_silent_until_heard() {
    let mut f = start_linked(BLOCK, None, SubscriberSide::Connect, |link| {
        link.silent_after = Duration::from_millis(300);
    })
    .await;
    eventually("the engine joins", || async { workers(&f).await == 1 }).await;
    // It serves requests (its prompt-token counter grows) and no batch reaches the link.
    f.engine.prompt_tokens.store(5_000, Ordering::SeqCst);
    eventually("the link reports the silence", || async {
        matches!(
            link_state(&f).await.kv_events_heard,
            EventsHeard::Silent {
                prompt_tokens: 5_000,
                ..
            }
        )
    })
    .await;
    // A batch arrives: heard again.
    let tokens: Vec<u32> = (0..4).collect();
    publish_until_indexed(&mut f, 0, stored_batch(10, &tokens), 1, "1 block indexed").await;
    assert_eq!(link_state(&f).await.kv_events_heard, EventsHeard::Heard);
    f.node.shutdown().await;
}

#[tokio::test]
async fn adapters_loaded_and_unloaded_at_run_time_are_announced() {
    let f = start(BLOCK).await;
    eventually("the engine joins", || async { workers(&f).await == 1 }).await;
    let adapters = |f: &Fixture| {
        f.node
            .registry()
            .directory()
            .models
            .iter()
            .filter(|m| m.adapter)
            .map(|m| (m.id.clone(), m.parent.clone()))
            .collect::<Vec<_>>()
    };
    assert_eq!(adapters(&f), Vec::new());
    f.engine.adapters.lock().unwrap().push("sql".to_owned());
    eventually("the loaded adapter is announced", || async {
        adapters(&f) == vec![("sql".to_owned(), Some("m".to_owned()))]
    })
    .await;
    assert!(f.node.registry().directory().is_adapter("sql"));
    f.engine.adapters.lock().unwrap().clear();
    eventually("the unloaded adapter is gone", || async {
        adapters(&f).is_empty()
    })
    .await;
    f.node.shutdown().await;
}

#[tokio::test]
async fn an_engine_with_another_block_size_is_refused_with_both_values() {
    let f = start(32).await;
    eventually("the link refuses the engine", || async {
        matches!(link_state(&f).await.phase, LinkPhase::Refused { .. })
    })
    .await;
    let LinkPhase::Refused { reason } = link_state(&f).await.phase else {
        unreachable!()
    };
    assert!(
        reason.contains("blocks of 32 tokens") && reason.contains("block size is 4"),
        "{reason}"
    );
    assert_eq!(workers(&f).await, 0, "never announced");
    f.node.shutdown().await;
}

/// A replay service as vLLM runs it: `[id, "", start]` in; `[id, "", topic, seq, payload]` per
/// kept batch from `start` on, then `[id, "", "", ff*8, ""]`.
async fn serve_replay(kept: Vec<(u64, Vec<u8>)>) -> String {
    let mut socket = RouterSocket::new();
    let endpoint = socket.bind("tcp://127.0.0.1:0").await.expect("bind replay");
    tokio::spawn(async move {
        while let Ok(request) = socket.recv().await {
            let frames = request.into_vec();
            let id = frames[0].clone();
            let start = u64::from_be_bytes(frames[2].as_ref().try_into().expect("8 bytes"));
            for (seq, payload) in kept.iter().filter(|(s, _)| *s >= start) {
                let reply = ZmqMessage::try_from(vec![
                    id.clone(),
                    Bytes::new(),
                    Bytes::from_static(b"kv-events"),
                    Bytes::copy_from_slice(&seq.to_be_bytes()),
                    Bytes::from(payload.clone()),
                ])
                .expect("frames");
                socket.send(reply).await.expect("reply");
            }
            let end = ZmqMessage::try_from(vec![
                id,
                Bytes::new(),
                Bytes::new(),
                Bytes::copy_from_slice(&u64::MAX.to_be_bytes()),
                Bytes::new(),
            ])
            .expect("frames");
            socket.send(end).await.expect("end");
        }
    });
    endpoint.to_string()
}

#[tokio::test]
async fn a_lost_batch_is_replayed_from_the_engine_not_cleared() {
    let lost: Vec<u32> = (50..58).collect();
    let replay = serve_replay(vec![(1, stored_batch(5000, &lost))]).await;
    let mut f = start_with(BLOCK, Some(replay)).await;
    eventually("the engine joins", || async { workers(&f).await == 1 }).await;
    let tokens: Vec<u32> = (0..12).collect();
    publish_until_indexed(
        &mut f,
        0,
        stored_batch(1000, &tokens),
        3,
        "3 blocks indexed",
    )
    .await;
    // Batch 1 is never published live: the link fetches it before applying batch 2.
    publish(
        &mut f.zmq,
        2,
        stored_batch(2000, &(100..104).collect::<Vec<_>>()),
    )
    .await;
    eventually("3 + 2 replayed + 1 blocks, nothing cleared", || async {
        index_blocks(&f).await == (6, 0)
    })
    .await;
    let counters = link_state(&f).await.counters;
    assert_eq!(
        (counters.gaps, counters.replayed, counters.cleared),
        (1, 1, 0)
    );
    f.node.shutdown().await;
}

#[tokio::test]
async fn batches_published_before_the_link_listened_are_caught_up_by_replay() {
    // The engine served a request (batch 0) before the link heard anything.
    let early: Vec<u32> = (60..68).collect();
    let replay = serve_replay(vec![(0, stored_batch(7000, &early))]).await;
    let mut f = start_with(BLOCK, Some(replay)).await;
    eventually("the engine joins", || async { workers(&f).await == 1 }).await;
    let tokens: Vec<u32> = (0..12).collect();
    publish_until_indexed(
        &mut f,
        1,
        stored_batch(1000, &tokens),
        5,
        "2 caught-up blocks + 3 new ones indexed",
    )
    .await;
    let counters = link_state(&f).await.counters;
    assert_eq!(
        (counters.catch_ups, counters.replayed, counters.cleared),
        (1, 1, 0)
    );
    f.node.shutdown().await;
}
