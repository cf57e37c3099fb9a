//! Starting the models' pools (`config/models.rs`): each a router `Node` of its own on the
//! model's subjects (`<cluster>.pool.<token>`), with its engines' links, its tokenizer and
//! its block size. A pool whose block size its engines tell starts once one of them answers
//! (so the node serves its other models meanwhile); it then joins the frontend's pools,
//! `/metrics`, `/debug/state`, readiness and liveness.
//!
//! The default pool's node is started by `serve` itself, on the cluster's own subjects.

use super::ServeError;
use super::parts::{self, RegistryDirectory};
use crate::config::{Config, PoolPlan, TopologyKind};
use crate::frontend::{Metrics, Pool, Pools};
use crate::metrics::NodeSources;
use futures::future::select_all;
use router_actors::bus::Bus;
use router_actors::{Liveness, Node};
use router_core::{PolicyProfile, PoolRole};
use router_engine::probe::Probe;
use router_tokenizer::TokenizeGate;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

/// How often engines are asked for their block size while none has answered.
const LEARN_EVERY: Duration = Duration::from_secs(1);

/// The models' pools' nodes, for the shutdown.
#[derive(Default)]
pub(super) struct ModelNodes {
    nodes: Mutex<Vec<Node>>,
    starting: Mutex<Vec<JoinHandle<()>>>,
}

impl ModelNodes {
    /// Stops pools still starting, then every model's node.
    pub(super) async fn shutdown(&self) {
        let starting =
            std::mem::take(&mut *self.starting.lock().unwrap_or_else(PoisonError::into_inner));
        for task in starting {
            task.abort();
        }
        let nodes = std::mem::take(&mut *self.nodes.lock().unwrap_or_else(PoisonError::into_inner));
        for node in nodes {
            node.shutdown().await;
        }
    }
}

/// What a model's pool joins once it runs.
#[derive(Clone)]
pub(super) struct Joins {
    pub pools: Arc<Pools>,
    pub metrics: Arc<Metrics>,
    pub ready: mpsc::UnboundedSender<watch::Receiver<bool>>,
    pub alive: mpsc::UnboundedSender<watch::Receiver<Liveness>>,
    pub gate: TokenizeGate,
}

/// Starts every model's pool of `config` in the background; each joins `joins` once it runs.
pub(super) fn start_model_pools(
    config: &Config,
    profile: &PolicyProfile,
    bus: &Arc<dyn Bus>,
    nodes: &Arc<ModelNodes>,
    joins: &Joins,
) {
    for plan in config.pool_plans().into_iter().filter(|p| p.key.is_some()) {
        let (config, profile, bus) = (config.clone(), profile.clone(), Arc::clone(bus));
        let (owned, joins) = (Arc::clone(nodes), joins.clone());
        let task = tokio::spawn(async move {
            let label = plan.label().to_owned();
            if let Err(error) = start_pool(&config, plan, profile, bus, &owned, &joins).await {
                tracing::error!(model = %label, %error, "the model's pool could not start");
            }
        });
        nodes
            .starting
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(task);
    }
}

async fn start_pool(
    config: &Config,
    plan: PoolPlan,
    profile: PolicyProfile,
    bus: Arc<dyn Bus>,
    owned: &ModelNodes,
    joins: &Joins,
) -> Result<(), ServeError> {
    let label = plan.label().to_owned();
    let prompter = config.pool_prompter(&plan)?.with_gate(joins.gate.clone());
    let block_size = match plan.block_size {
        Some(size) => size,
        None => learn_block_size(config, &plan).await,
    };
    let mut node_config = config.node_config(profile);
    node_config.cluster = router_actors::wire::pool_cluster(&config.node.cluster, &label);
    node_config.block_size = block_size;
    node_config.topology = match plan.topology {
        TopologyKind::Aggregated => router_actors::Topology::Aggregated,
        TopologyKind::Disaggregated => router_actors::Topology::Disaggregated,
    };
    node_config.allowed_endpoints = config.registry.allow_list()?;
    let engines = parts::engine_links(config, &plan.engines, &bus, &mut node_config);
    let cluster = node_config.cluster.clone();
    let node = Node::start(node_config, bus).await?;
    let (gate, decode) = match plan.topology {
        TopologyKind::Aggregated => (PoolRole::Aggregated, None),
        TopologyKind::Disaggregated => (PoolRole::Prefill, Some(PoolRole::Decode)),
    };
    let router = node.router(gate).ok_or(ServeError::NoPool(gate))?.clone();
    let decode = match decode {
        Some(role) => Some(node.router(role).ok_or(ServeError::NoPool(role))?.clone()),
        None => None,
    };
    tracing::info!(
        model = %label,
        subjects = %cluster,
        block_size,
        tokenizer = %prompter.tokenizer().describe(),
        engines = plan.engines.len(),
        "the model's pool runs"
    );
    tokio::spawn(prompter.clone().warm());
    joins.metrics.add_pool(
        label.clone(),
        NodeSources::from_node(&node).with_engines(engines),
    );
    let _ = joins.ready.send(node.ready());
    let _ = joins.alive.send(node.alive());
    joins.pools.add(Pool {
        label,
        names: plan.names,
        router,
        decode,
        convention: config.disagg.convention,
        local_prefill: plan.local_prefill,
        prompter,
        directory: Arc::new(RegistryDirectory(node.registry().clone())),
    });
    owned
        .nodes
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push(node);
    Ok(())
}

/// The block size of `plan`'s engines: the first to answer says it (the others are held
/// to it by their links, which refuse another size naming both).
async fn learn_block_size(config: &Config, plan: &PoolPlan) -> u32 {
    let probes: Vec<Probe> = plan
        .engines
        .iter()
        .filter_map(|&i| config.engines.get(i))
        .filter_map(|e| Probe::new(e.kind, &e.url, Duration::from_secs(2)).ok())
        .collect();
    let mut waited = 0u32;
    loop {
        for probe in &probes {
            if let Ok((capacity, _)) = probe.capacity().await {
                return capacity.block_size;
            }
        }
        if waited == 0 || waited.is_multiple_of(30) {
            tracing::info!(
                model = plan.label(),
                engines = probes.len(),
                "waiting for one of the model's engines to tell its block size"
            );
        }
        waited += 1;
        tokio::time::sleep(LEARN_EVERY).await;
    }
}

/// Follows a changing set of watched values, folded into one (`fold` of every current
/// value): readiness is any pool's, liveness every pool's. New receivers come through the
/// returned sender; a receiver whose sender is gone is dropped.
pub(super) fn merge_watches<T: Clone + Send + Sync + 'static>(
    first: watch::Receiver<T>,
    fold: fn(&[T]) -> T,
) -> (
    watch::Receiver<T>,
    mpsc::UnboundedSender<watch::Receiver<T>>,
    JoinHandle<()>,
) {
    let (out, merged) = watch::channel(first.borrow().clone());
    let (join, mut joined) = mpsc::unbounded_channel();
    let task = tokio::spawn(async move {
        let mut inputs = vec![first];
        let mut adding = true;
        loop {
            let values: Vec<T> = inputs.iter().map(|r| r.borrow().clone()).collect();
            out.send_replace(fold(&values));
            if inputs.is_empty() && !adding {
                return;
            }
            let changed = async {
                if inputs.is_empty() {
                    return std::future::pending().await;
                }
                let (result, at, _) =
                    select_all(inputs.iter_mut().map(|r| Box::pin(r.changed()))).await;
                (result, at)
            };
            tokio::select! {
                (result, at) = changed => {
                    if result.is_err() {
                        inputs.swap_remove(at);
                    }
                }
                added = joined.recv(), if adding => match added {
                    Some(rx) => inputs.push(rx),
                    None => adding = false,
                },
            }
        }
    });
    (merged, join, task)
}

/// Ready when any pool is.
pub(super) fn any_ready(values: &[bool]) -> bool {
    values.iter().any(|&ready| ready)
}

/// Alive while every pool is: the first failure otherwise.
pub(super) fn all_alive(values: &[Liveness]) -> Liveness {
    values
        .iter()
        .find(|l| !l.is_alive())
        .cloned()
        .unwrap_or(Liveness::Alive)
}
