//! router-core: the pure heart of Switchyard.
//!
//! Policy classes, the booking ledger, the admission gate and class queues, placement and
//! the KV prefix index. Nothing here is async, does I/O, reads a clock or draws random
//! numbers of its own: time, randomness and ids come in as arguments, and decisions come
//! out as values with reasons. The actor layer (`router-actors`) carries them out.

pub mod adapters;
pub mod admission;
pub mod breaker;
pub mod credits;
pub mod eligibility;
pub mod hashing;
pub mod ids;
pub mod index;
pub mod ledger;
pub mod local_prefill;
pub mod policy;
pub mod queue;
pub mod router;
pub mod select;
pub mod time;
pub mod worker;

pub use adapters::{AdapterFit, AdapterResidency};
pub use admission::{
    Admission, AdmissionRequest, DecodeReservation, DecodeRoomView, Outcome, Phase, PoolRole,
    PrefixHit, RejectReason, RoomWant, Scheduler, SchedulerConfig,
};
pub use eligibility::Eligibility;
pub use hashing::{HashScope, LocalBlockHash, SequenceHash};
pub use ids::{BookingKey, ClassId, RankId, RequestId, RouterId, WorkerId};
pub use index::{
    ApproxConfig, ApproxIndex, EventStatus, ExternalHash, IndexStats, KvEvent, KvEventData,
    KvIndexReader, KvIndexWriter, OverlapScores, ReferenceIndex, SharedKvIndex, StoredBlock,
};
pub use ledger::{
    BookingDelta, BookingLedger, GateClosed, LeaseLeft, LeasedReservation, RoomAnswer,
};
pub use local_prefill::{LocalPrefillRule, LocalReason, PrefillPlace};
pub use policy::{
    ClassPolicy, ClassSource, Classification, ClassifyError, Endpoint, PolicyError, PolicyFormat,
    PolicyProfile, RequestFacts, UnknownClass,
};
pub use queue::{
    ClassQueues, Dequeued, EnqueueRejection, Expired, ExpiryStage, LimitKind, Pop, QueueClassSpec,
    QueueConfigError, QueueSnapshot, QueueTicket,
};
pub use router::{
    Applied, Holdings, PoolRouter, PoolRouterConfig, PrefixMode, Prompt, RouteRequest,
};
pub use select::{
    SelectError, Selected, SelectionConfig, SelectionConfigError, SelectionRequest, Selector,
};
pub use time::Timestamp;
pub use worker::{WorkerSpec, WorkerSpecError};
