//! Peer-sync behaviour, written against `Arc<dyn Bus>` so every scenario can run on NATS
//! as well; here they run on the in-process bus with paused tokio time. Faults are
//! injected, not mocked: `FaultBus` wraps a real bus and drops or duplicates chosen
//! publishes or holds back request answers. Files: `scenarios.rs` (life cycle), `repairs.rs`
//! (loss and repair), `fault.rs` (the wrapper).

/// Runs each scenario on a fresh in-process bus with paused time.
macro_rules! on_local_bus {
    ($($name:ident),* $(,)?) => {
        mod local_bus {
            $(
                #[tokio::test(start_paused = true)]
                async fn $name() {
                    super::$name(std::sync::Arc::new(crate::bus::local::LocalBus::new())).await;
                }
            )*
        }
    };
}

mod repairs;
mod scenarios;

use super::*;
use crate::clock::Clock;
use crate::router::{OwnDelta, OwnState, RouterActor, RouterArgs};
use router_core::admission::{Phase, SchedulerConfig};
use router_core::{
    PolicyProfile, PoolRouterConfig, PrefixMode, Prompt, RequestId, RouteRequest, WorkerSpec,
};
use uuid::Uuid;

pub(super) const CLUSTER: &str = "sy";
pub(super) const POOL: PoolRole = PoolRole::Aggregated;

const PROFILE: &str = r#"
default_class = "interactive"
[[classes]]
name = "interactive"
slo_ms = 500
quantum = 100
prefill_busy_threshold = 100000000
decode_busy_threshold_frac = 0.9
"#;

pub(super) fn config() -> PeerSyncConfig {
    PeerSyncConfig {
        heartbeat_every: Duration::from_millis(500),
        lease: Duration::from_secs(3),
        snapshot_window: Duration::from_millis(300),
        snapshot_timeout: Duration::from_millis(200),
        ..PeerSyncConfig::default()
    }
}

/// One node's router and peer-sync actors for the aggregated pool.
pub(super) struct Node {
    pub(super) id: RouterId,
    pub(super) router: RouterHandle,
    pub(super) sync: PeerSyncHandle,
    pub(super) next: u128,
}

pub(super) fn router_id(n: u128) -> RouterId {
    RouterId(Uuid::from_u128(n))
}

/// What stands between a node's router and its peer-sync actor.
pub(super) enum Tap {
    /// Nothing: every delta passes as it comes.
    Pass,
    /// Deltas whose 1-based index the function refuses are lost (before sequencing).
    Drop(fn(u64) -> bool),
    /// Deltas are held until the gate is notified, then passed all at once, in order.
    Gate(Arc<tokio::sync::Notify>),
}

/// Starts a node; `tap` lets a test stand between the router and peer sync.
pub(super) async fn start_node_with(
    bus: Arc<dyn Bus>,
    n: u128,
    config: PeerSyncConfig,
    tap: Tap,
) -> Node {
    let id = router_id(n);
    let clock = Clock::start();
    let (router_tx, router_rx) = mpsc::channel(1024);
    let args = RouterArgs {
        deltas: Some(router_tx),
        ..RouterArgs::new(
            PoolRouterConfig {
                scheduler: SchedulerConfig::new(POOL, id),
                block_size: 16,
                prefix: PrefixMode::Events,
            },
            PolicyProfile::from_toml_str(PROFILE).expect("valid profile"),
            clock,
        )
    };
    let (actor, _) = Actor::spawn(None, RouterActor, args)
        .await
        .expect("router starts");
    let router = RouterHandle::new(actor, clock);
    for w in 1..=4 {
        let mut spec = WorkerSpec::new(w, 1, 100_000, 1_000_000);
        spec.block_size = 16;
        router.upsert_worker(spec).expect("alive");
    }
    let deltas = match tap {
        Tap::Pass => router_rx,
        Tap::Drop(keep) => tapped(router_rx, keep),
        Tap::Gate(gate) => gated(router_rx, gate),
    };
    let (mut sync_args, _ready) = PeerSyncArgs::new(
        bus,
        Subjects::new(CLUSTER),
        POOL,
        id,
        router.clone(),
        deltas,
    );
    sync_args.config = config;
    let (sync, _) = PeerSyncActor::start(None, sync_args)
        .await
        .expect("peer sync starts");
    Node {
        id,
        router,
        sync,
        next: 0,
    }
}

pub(super) async fn start_node(bus: Arc<dyn Bus>, n: u128) -> Node {
    start_node_with(bus, n, config(), Tap::Pass).await
}

/// Passes the router's deltas on, except those whose 1-based index `keep` refuses (a
/// delta lost before it was sequenced).
fn tapped(mut rx: mpsc::Receiver<OwnDelta>, keep: fn(u64) -> bool) -> mpsc::Receiver<OwnDelta> {
    let (tx, out) = mpsc::channel(1024);
    tokio::spawn(async move {
        let mut i = 0;
        while let Some(delta) = rx.recv().await {
            i += 1;
            if keep(i) && tx.send(delta).await.is_err() {
                break;
            }
        }
    });
    out
}

/// Holds the router's deltas until `gate` is notified, then passes them on at once.
fn gated(
    mut rx: mpsc::Receiver<OwnDelta>,
    gate: Arc<tokio::sync::Notify>,
) -> mpsc::Receiver<OwnDelta> {
    let (tx, out) = mpsc::channel(1024);
    tokio::spawn(async move {
        let mut held = Vec::new();
        let opened = gate.notified();
        tokio::pin!(opened);
        loop {
            tokio::select! {
                biased;
                () = &mut opened => break,
                delta = rx.recv() => match delta {
                    Some(delta) => held.push(delta),
                    None => return,
                },
            }
        }
        for delta in held {
            if tx.send(delta).await.is_err() {
                return;
            }
        }
        while let Some(delta) = rx.recv().await {
            if tx.send(delta).await.is_err() {
                break;
            }
        }
    });
    out
}

impl Node {
    /// Books one request of `blocks` blocks; returns its id.
    pub(super) async fn book(&mut self, blocks: u32, seed: u32) -> RequestId {
        self.next += 1;
        let id = RequestId::from_u128((self.id.0.as_u128() << 64) | self.next);
        let tokens = (0..blocks * 16).map(|t| seed * 100_000 + t).collect();
        let request = RouteRequest::new(
            id,
            router_core::ClassId(0),
            Phase::Aggregated,
            Prompt::Tokens(tokens),
        );
        match self.router.route(request).await {
            Ok(_) => id,
            other => panic!("expected an admission, got {other:?}"),
        }
    }

    /// Whether this node's ledger holds nothing (no booking, no reservation).
    pub(super) async fn idle(&self) -> bool {
        let router = self.router.observe().await.expect("router alive");
        router.scheduler.ledger.is_idle()
    }

    pub(super) async fn observe(&self) -> PeerSyncSnapshot {
        self.sync.observe().await.expect("peer sync alive")
    }

    /// What this node's ledger holds under `owner`.
    pub(super) async fn held(&self, owner: RouterId) -> OwnState {
        self.router.state_of(owner).await.expect("router alive")
    }

    pub(super) async fn own(&self) -> OwnState {
        let mut own = self.router.own_state().await.expect("router alive");
        own.deltas_sent = 0;
        own
    }

    pub(super) fn stop(&self) {
        self.sync.stop();
        if let Some(actor) = self.router.actor() {
            actor.stop(None);
        }
    }
}

/// Every node's ledger holds every node's own bookings and reservations exactly.
pub(super) async fn assert_converged(nodes: &[&Node]) {
    for owner in nodes {
        let truth = owner.own().await;
        for viewer in nodes {
            assert_eq!(
                viewer.held(owner.id).await,
                truth,
                "{} sees {} differently",
                viewer.id,
                owner.id
            );
        }
    }
}

pub(super) async fn sleep_ms(ms: u64) {
    tokio::time::sleep(Duration::from_millis(ms)).await;
}

/// A small deterministic generator (xorshift64*), so scenarios replay from a seed.
pub(super) struct Rng(u64);

impl Rng {
    pub(super) fn new(seed: u64) -> Self {
        Self(seed.max(1))
    }

    pub(super) fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n.max(1)
    }
}

/// Books, marks prefill done and releases at random on both nodes.
pub(super) async fn random_stream(
    nodes: &mut [&mut Node],
    live: &mut [Vec<RequestId>],
    rng: &mut Rng,
    steps: usize,
) {
    for _ in 0..steps {
        let which = rng.below(nodes.len() as u64) as usize;
        let node = &mut nodes[which];
        let held = &mut live[which];
        match rng.below(5) {
            0 | 1 => {
                let blocks = 1 + rng.below(4) as u32;
                let id = node.book(blocks, rng.below(40) as u32).await;
                held.push(id);
            }
            2 if !held.is_empty() => {
                let i = rng.below(held.len() as u64) as usize;
                node.router.prefill_done(held[i]).expect("alive");
            }
            _ if !held.is_empty() => {
                let i = rng.below(held.len() as u64) as usize;
                node.router.release(held.swap_remove(i)).expect("alive");
            }
            _ => {}
        }
        sleep_ms(rng.below(8)).await;
    }
}

pub(super) async fn release_all(nodes: &[&Node], live: &mut [Vec<RequestId>]) {
    for (node, held) in nodes.iter().zip(live.iter_mut()) {
        for id in held.drain(..) {
            node.router.release(id).expect("alive");
        }
    }
}
