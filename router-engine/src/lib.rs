//! Engine links: what makes a real inference engine (vLLM, SGLang) a worker of a Switchyard
//! fleet, without changing the engine.
//!
//! One [`EngineLinkActor`] per engine:
//! - reads the engine's KV capacity and block size from the engine itself (vLLM's
//!   `vllm:cache_config_info`, SGLang's server info) and announces it on the bus like any
//!   worker, under the engine's own OpenAI base URL;
//! - subscribes to the engine's ZMQ KV event publisher, decodes its batches (both encodings,
//!   integer and digest hashes, the data-parallel rank), computes the router's own block hashes
//!   from the blocks' tokens and relays them on the bus; a lost batch is replayed from the
//!   engine's replay socket when there is one, otherwise the engine's entries are cleared so
//!   no stale block is ever matched;
//! - scrapes the engine's `/metrics` for its own load (kept apart from the routers' bookings)
//!   and watches `/health`: an engine that stops answering leaves the fleet at once and joins
//!   again, as a new incarnation, when it answers.
//!
//! The same actor runs in a `router-node link` sidecar next to the engine (over NATS) and
//! inside `router-node serve` for `[[engines]]` (over NATS or the in-process bus).
//!
//! Pure parts: `events` (decode, translate, sequence checks) and `load` (metrics reading);
//! I/O: `probe` (HTTP), `zmq` (sockets); the actor: `link`.

pub mod events;
pub mod link;
pub mod load;
pub mod probe;
pub mod zmq;

pub use link::{
    EngineLinkActor, EngineLinkArgs, EngineLinkConfig, EngineLinkHandle, EngineLinkSnapshot,
    EventsHeard, LinkMsg, LinkPhase, engine_link_child, has_scheme,
};
pub use load::{Capacity, EngineKind, EngineReport, RankLoad, ServedModels};
