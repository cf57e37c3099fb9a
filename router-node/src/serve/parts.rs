//! What a serving node is assembled from, besides its frontend: the bus it connects to
//! ([`connect_bus`]), the worker registry as the frontend's directory of worker endpoints,
//! one engine link per `[[engines]]` entry, its two bound listeners ([`Listeners`]), and the
//! API keys attached to the frontend with their reloader ([`attach_keys`]).

use super::ServeError;
use crate::auth::KeyStore;
use crate::config::{BusKind, Config};
use crate::frontend::{AppState, WorkerDirectory};
use router_actors::bus::nats::NatsBus;
use router_actors::bus::nats_security::NatsConnectError;
use router_actors::bus::{Bus, local::LocalBus};
use router_actors::supervisor::ActorSlot;
use router_actors::{Node, RegistryHandle};
use router_core::WorkerId;
use router_engine::{EngineLinkArgs, EngineLinkHandle, engine_link_child};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// The worker registry is the frontend's directory of worker endpoints.
#[derive(Debug, Clone)]
pub struct RegistryDirectory(pub RegistryHandle);

impl WorkerDirectory for RegistryDirectory {
    fn endpoint(&self, worker: WorkerId) -> Option<String> {
        self.0.endpoint(worker)
    }

    fn workers(&self) -> Option<Vec<WorkerId>> {
        let directory = self.0.directory();
        Some(
            directory
                .pools
                .iter()
                .flat_map(|(_, workers)| workers.iter().map(|(w, _)| *w))
                .collect(),
        )
    }

    fn max_model_len(&self) -> Option<u64> {
        self.0.directory().max_model_len
    }

    fn served_models(&self) -> Vec<router_actors::registry::ServedModel> {
        self.0.directory().models.clone()
    }

    fn serves_model(&self, model: &str) -> bool {
        self.0.directory().serves(model)
    }

    fn is_adapter(&self, model: &str) -> bool {
        self.0.directory().is_adapter(model)
    }
}

/// The bus `config` asks for: a NATS connection, or a fresh in-process bus.
pub async fn connect_bus(config: &Config) -> Result<Arc<dyn Bus>, ServeError> {
    match config.bus.kind {
        BusKind::InProcess => Ok(Arc::new(LocalBus::new())),
        BusKind::Nats => {
            let url = &config.bus.nats_url;
            let bus = NatsBus::connect_secured(url, &config.bus.security())
                .await
                .map_err(|e| match e {
                    NatsConnectError::File { .. } | NatsConnectError::Settings(_) => {
                        ServeError::BusSettings(e.to_string())
                    }
                    // "authentication failed: ..." / "TLS failed: ..." / the client's message.
                    _ => ServeError::Bus(format!(
                        "{}: {}",
                        redact_url(url),
                        e.to_string().replace(url, &redact_url(url))
                    )),
                })?;
            Ok(Arc::new(bus))
        }
    }
}

/// `url` with any user info (`user:password@`) replaced by `***@`.
pub fn redact_url(url: &str) -> String {
    router_actors::bus::nats_security::redact_url(url)
}

/// The node's two already-bound listeners.
#[derive(Debug)]
pub struct Listeners {
    /// `http.listen`: the OpenAI API, `/health`, `/ready`.
    pub public: TcpListener,
    /// `admin.listen`: `/metrics`, `/debug/state`, `/health`, `/ready`.
    pub admin: TcpListener,
}

impl Listeners {
    /// Binds `http.listen` and `admin.listen`; an error names the key.
    pub async fn bind(config: &Config) -> Result<Self, ServeError> {
        async fn bind(key: &'static str, addr: &str) -> Result<TcpListener, ServeError> {
            TcpListener::bind(addr)
                .await
                .map_err(|source| ServeError::Bind {
                    key,
                    addr: addr.to_owned(),
                    source,
                })
        }
        Ok(Self {
            public: bind("http.listen", &config.http.listen).await?,
            admin: bind("admin.listen", &config.admin.listen).await?,
        })
    }
}

/// Whether the node's bus connection is up, for `/ready`.
pub(super) fn bus_status(node: &Node) -> Arc<dyn Fn() -> bool + Send + Sync> {
    let bus = node.bus();
    Arc::new(move || bus.connected())
}

/// One engine link per `[[engines]]` entry of a pool (`engines`, by index), as children of
/// its node's supervisor, announcing on the pool's subjects (its node's cluster) and
/// refusing an engine of another block size than the pool's; their handles, for
/// `/debug/state`.
pub(super) fn engine_links(
    config: &Config,
    engines: &[usize],
    bus: &Arc<dyn Bus>,
    node: &mut router_actors::NodeConfig,
) -> Vec<EngineLinkHandle> {
    let subjects = router_actors::wire::Subjects::new(node.cluster.clone());
    engines
        .iter()
        .filter_map(|&index| Some((index, config.engines.get(index)?)))
        .map(|(index, engine)| {
            let args = EngineLinkArgs {
                bus: Arc::clone(bus),
                subjects: subjects.clone(),
                config: engine.link_config(Some(node.block_size)),
            };
            let slot = ActorSlot::empty();
            node.extra_children.push(engine_link_child(
                format!("engine-link-{index}"),
                args,
                slot.clone(),
            ));
            EngineLinkHandle::from_slot(slot).with_call_timeout(node.call_timeout)
        })
        .collect()
}

/// `state` with the API keys of `keys` required, and the task reloading them (`every`: the
/// change poll); without keys, `state` as it is, open, with a warning saying so.
pub(super) fn attach_keys(
    state: AppState,
    keys: Option<KeyStore>,
    every: Option<Duration>,
    listen: SocketAddr,
) -> (AppState, Option<JoinHandle<()>>) {
    let Some(keys) = keys.map(Arc::new) else {
        tracing::warn!(
            %listen,
            "auth.keys_file is not set: anyone who can reach the listener may use the OpenAI \
             API under every policy class; set [auth] keys_file (SECURITY.md)"
        );
        return (state, None);
    };
    tracing::info!(
        keys_file = %keys.path().display(),
        keys = keys.keys().len(),
        "API keys required on the OpenAI API",
    );
    if keys.keys().is_empty() {
        tracing::warn!(
            keys_file = %keys.path().display(),
            "the keys file has no keys: every OpenAI request is refused until one is added"
        );
    }
    let reloader =
        crate::auth::spawn_reloader(Arc::clone(&keys), Arc::clone(&state.metrics), every);
    (state.with_auth(keys), Some(reloader))
}
