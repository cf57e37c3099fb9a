//! The node's pools as the frontend sees them, and which one a request's `model` goes to.
//!
//! A node serves one pool per model (`config/models.rs`): its own routers, tokenizer and
//! chat template, and directory of workers. A request goes to the pool whose configured
//! names hold its `model`, else to the pool whose workers serve it (a base model or a LoRA
//! adapter they announced), else to the default pool when there is one (the single-model
//! configuration: any model), else it is a 404. Pools whose block size is learned from their
//! engines join once it is known ([`Pools::add`]).

use super::{DisaggConvention, WorkerDirectory};
use arc_swap::ArcSwap;
use router_actors::RouterHandle;
use router_actors::registry::ServedModel;
use router_tokenizer::Prompter;
use std::sync::Arc;

/// One pool: what a request of its model is routed, tokenized and placed with.
#[derive(Clone)]
pub struct Pool {
    /// `default`, or the model (or model directory) that names its subjects.
    pub label: String,
    /// The names clients send for it, as configured.
    pub names: Vec<String>,
    /// The admitting router (prefill when disaggregated).
    pub router: RouterHandle,
    /// The paired decode router, when disaggregated.
    pub decode: Option<RouterHandle>,
    pub convention: DisaggConvention,
    /// When its disaggregated requests are prefilled by their decode worker.
    pub local_prefill: router_core::LocalPrefillRule,
    pub prompter: Prompter,
    pub directory: Arc<dyn WorkerDirectory>,
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool")
            .field("label", &self.label)
            .field("names", &self.names)
            .field("block_size", &self.router.block_size())
            .field("tokenizer", &self.prompter.tokenizer().describe())
            .finish_non_exhaustive()
    }
}

impl Pool {
    /// Whether a request for `model` belongs here (by name, or served by its workers).
    fn serves(&self, model: &str) -> bool {
        self.names.iter().any(|n| n == model) || self.directory.serves_model(model)
    }
}

/// Every pool of the node.
#[derive(Debug)]
pub struct Pools {
    /// Takes requests for any model no model pool serves; `None`: those are 404s.
    default: Option<Arc<Pool>>,
    models: ArcSwap<Vec<Arc<Pool>>>,
}

impl Pools {
    pub fn new(default: Option<Pool>) -> Self {
        Self {
            default: default.map(Arc::new),
            models: ArcSwap::from_pointee(Vec::new()),
        }
    }

    /// A model's pool, ready to take requests.
    pub fn add(&self, pool: Pool) {
        let pool = Arc::new(pool);
        self.models.rcu(|pools| {
            let mut pools = Vec::clone(pools);
            pools.push(Arc::clone(&pool));
            pools
        });
    }

    /// The pool a request for `model` goes to (module docs); `None`: no pool serves it.
    pub fn resolve(&self, model: &str) -> Option<Arc<Pool>> {
        let models = self.models.load();
        models
            .iter()
            .find(|p| p.names.iter().any(|n| n == model))
            .or_else(|| models.iter().find(|p| p.serves(model)))
            .cloned()
            .or_else(|| self.default.clone())
    }

    /// Every pool, the default first.
    pub fn all(&self) -> Vec<Arc<Pool>> {
        self.default
            .iter()
            .cloned()
            .chain(self.models.load().iter().cloned())
            .collect()
    }

    /// What `/v1/models` lists: each pool's configured names and what its workers serve,
    /// sorted by name, each once.
    pub fn served_models(&self) -> Vec<ServedModel> {
        let mut served: Vec<ServedModel> = Vec::new();
        for pool in self.all() {
            let configured = pool.names.iter().map(|name| ServedModel {
                id: name.clone(),
                parent: None,
                adapter: false,
                workers: 0,
            });
            for model in pool.directory.served_models().into_iter().chain(configured) {
                match served.iter_mut().find(|m| m.id == model.id) {
                    Some(known) => known.workers += model.workers,
                    None => served.push(model),
                }
            }
        }
        served.sort_by(|a, b| a.id.cmp(&b.id));
        served
    }
}
