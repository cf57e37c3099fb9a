//! The EngineLinkActor's state and what each message does: joining the fleet when the engine
//! answers, following what it serves, relaying its load, leaving when it stops answering;
//! its KV events (sequence checks, replay or clear on a gap) in `events.rs`.

use super::observe::{EngineLinkSnapshot, LinkCounters, LinkPhase};
use super::{EngineLinkArgs, EngineLinkConfig, EventsHeard, LinkMsg, SilenceChange, SilenceWatch};
use crate::events::{SeqCheck, Skipped, Translator};
use crate::load::{Capacity, EngineReport, ServedModels};
use crate::probe::Probe;
use crate::zmq::spawn_subscriber;
use ractor::{ActorProcessingErr, ActorRef};
use router_actors::bus::Bus;
use router_actors::supervisor::OwnedTasks;
use router_actors::wire::{Subjects, WorkerAnnounce, WorkerLoad};
use router_actors::worker_link::WorkerLink;
use router_core::WorkerSpec;
use std::sync::Arc;
use tokio::time::Instant;

mod events;

/// How many timed-out health checks weigh as one refused one.
const SLOW_MISSES: u32 = 5;

/// What one probe of the engine found.
#[derive(Debug)]
pub enum Probed {
    /// The engine answers; its capacity and what it serves (asked while not joined).
    Capacity(Capacity, EngineReport, Option<ServedModels>),
    /// The engine answers; its load and what it serves now (asked while joined: adapters
    /// load and unload at run time).
    Load(EngineReport, Option<ServedModels>),
    /// It answered `/health` but its load could not be read (counted, not a miss).
    NoLoad(String),
    /// No answer in time (`slow`), or a refused connection, an error status, an unreadable
    /// answer.
    NoAnswer { slow: bool, error: String },
}

/// An engine the link has announced.
struct Joined {
    link: WorkerLink,
    /// What was announced (sent again, changed, when the engine's models change).
    announce: WorkerAnnounce,
    capacity: Capacity,
    ranks: u32,
    translator: Translator,
    seq: SeqCheck,
    /// The KV event subscriber; aborted when the engine leaves.
    subscriber: OwnedTasks,
    /// Whether its KV events are heard while it prefills.
    silence: SilenceWatch,
    /// Polls in a row without an answer.
    missed: u32,
}

pub struct LinkState {
    config: EngineLinkConfig,
    bus: Arc<dyn Bus>,
    subjects: Subjects,
    probe: Probe,
    joined: Option<Joined>,
    refused: Option<String>,
    /// A probe is out (its outcome has not come back yet).
    probing: bool,
    report: EngineReport,
    /// What the engine said it serves, last time it said.
    served: Option<ServedModels>,
    counters: LinkCounters,
    skipped: Skipped,
    last_error: Option<String>,
}

impl std::fmt::Debug for LinkState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LinkState")
            .field("url", &self.config.url)
            .field("joined", &self.joined.is_some())
            .field("counters", &self.counters)
            .finish_non_exhaustive()
    }
}

impl LinkState {
    pub(super) fn new(args: EngineLinkArgs) -> Result<Self, ActorProcessingErr> {
        let probe = Probe::new(
            args.config.kind,
            &args.config.url,
            args.config.probe_timeout,
        )?;
        Ok(Self {
            config: args.config,
            bus: args.bus,
            subjects: args.subjects,
            probe,
            joined: None,
            refused: None,
            probing: false,
            report: EngineReport::default(),
            served: None,
            counters: LinkCounters::default(),
            skipped: Skipped::default(),
            last_error: None,
        })
    }

    pub(super) fn config(&self) -> &EngineLinkConfig {
        &self.config
    }

    fn error(&mut self, error: impl std::fmt::Display) {
        let message = error.to_string();
        if self.last_error.as_deref() != Some(message.as_str()) {
            tracing::warn!(engine = %self.config.url, error = %message, "engine link");
        }
        self.last_error = Some(message);
    }

    /// Starts one probe of the engine, off the mailbox: its outcome comes back as
    /// [`LinkMsg::Probed`]. A poll while a probe is still out is skipped.
    pub(super) fn poll(&mut self, myself: &ActorRef<LinkMsg>) {
        if self.probing {
            return;
        }
        self.probing = true;
        self.counters.polls += 1;
        let probe = self.probe.clone();
        let joined = self.joined.is_some();
        let myself = myself.clone();
        tokio::spawn(async move {
            let outcome = if let Err(e) = probe.health().await {
                Probed::NoAnswer {
                    slow: matches!(e, crate::probe::ProbeError::Timeout { .. }),
                    error: e.to_string(),
                }
            } else if joined {
                match probe.report().await {
                    Ok(report) => Probed::Load(report, probe.models().await),
                    // It answers its health check: slow metrics are no reason to leave.
                    Err(e) => Probed::NoLoad(e.to_string()),
                }
            } else {
                match probe.capacity().await {
                    Ok((capacity, report)) => {
                        Probed::Capacity(capacity, report, probe.models().await)
                    }
                    Err(e) => Probed::NoAnswer {
                        slow: false,
                        error: e.to_string(),
                    },
                }
            };
            let _ = myself.cast(LinkMsg::Probed(outcome));
        });
    }

    /// Acts on a probe's outcome: join, relay load, or count a miss (and leave after
    /// `down_after` of them in a row).
    pub(super) async fn probed(&mut self, outcome: Probed, myself: &ActorRef<LinkMsg>) {
        self.probing = false;
        match outcome {
            Probed::Capacity(capacity, report, served) if self.joined.is_none() => {
                self.join(capacity, report, served, myself).await;
            }
            Probed::Load(report, served) if self.joined.is_some() => {
                self.follow_models(served);
                self.relay_load(report).await;
            }
            Probed::NoLoad(error) => {
                self.counters.probe_failures += 1;
                self.error(error);
                if let Some(joined) = self.joined.as_mut() {
                    joined.missed = 0;
                }
            }
            Probed::NoAnswer { slow, error } => {
                self.counters.probe_failures += 1;
                self.error(error);
                let Some(joined) = self.joined.as_mut() else {
                    return;
                };
                // A refused connection or an error status says the engine is not serving; a
                // health check that only timed out may be an engine busy streaming: it must
                // stay silent for longer before it is taken out.
                joined.missed += if slow { 1 } else { SLOW_MISSES };
                let missed = joined.missed;
                if missed >= self.config.down_after.max(1) * SLOW_MISSES {
                    tracing::warn!(engine = %self.config.url, missed, "engine stopped answering: it leaves the fleet");
                    self.leave().await;
                }
            }
            // The link joined or left while the probe was out: the next poll asks again.
            Probed::Capacity(..) | Probed::Load(..) => {}
        }
    }

    async fn join(
        &mut self,
        capacity: Capacity,
        report: EngineReport,
        served: Option<ServedModels>,
        myself: &ActorRef<LinkMsg>,
    ) {
        if let Some(expected) = self.config.expected_block_size
            && expected != capacity.block_size
        {
            let reason = format!(
                "{} engine at {} stores KV blocks of {} tokens but its pool's block size is \
                 {expected} (node.block_size, its model's block_size, or learned from the \
                 pool's first engine): one block size per pool; start the engine with \
                 --block-size {expected}, or give its model a pool of its own",
                self.config.kind.name(),
                self.config.url,
                capacity.block_size,
            );
            if self.refused.as_deref() != Some(reason.as_str()) {
                tracing::error!(engine = %self.config.url, "{reason}");
            }
            self.refused = Some(reason);
            return;
        }
        self.refused = None;
        let ranks = u32::try_from(report.ranks.len()).unwrap_or(1).max(1);
        let mut spec = WorkerSpec {
            id: self.config.worker,
            dp_start: 0,
            dp_size: ranks,
            total_kv_blocks: Some(capacity.blocks),
            max_num_batched_tokens: self.config.max_num_batched_tokens,
            block_size: capacity.block_size,
            model: None,
            loras: Vec::new(),
            // Without an event publisher the routers learn this engine from placements.
            kv_events: self.config.kv_events.is_some(),
            max_model_len: None,
        };
        self.served_into(&mut spec, served.as_ref());
        let announce = WorkerAnnounce {
            spec,
            pool: self.config.pool,
            endpoint: self.config.url.clone(),
            heartbeat_ms: 0,
            lease_ms: u64::try_from(self.config.lease.as_millis()).unwrap_or(u64::MAX),
            leaving: false,
        };
        let link = match WorkerLink::start(
            self.bus.clone(),
            &self.subjects,
            announce.clone(),
            self.config.poll_every,
        )
        .await
        {
            Ok(link) => link,
            Err(e) => {
                self.counters.publish_failures += 1;
                self.error(e);
                return;
            }
        };
        let subscriber = match &self.config.kv_events {
            Some(endpoint) => OwnedTasks::new(vec![spawn_subscriber(
                endpoint.clone(),
                self.config.kv_events_side,
                self.config.topic.clone(),
                self.config.poll_every,
                myself.clone(),
            )]),
            None => OwnedTasks::new(Vec::new()),
        };
        tracing::info!(
            engine = %self.config.url,
            worker = %self.config.worker,
            block_size = capacity.block_size,
            blocks = capacity.blocks,
            ranks,
            "engine joined the fleet"
        );
        self.counters.joins += 1;
        let mut silence = SilenceWatch::new(self.config.silent_after, capacity.block_size);
        silence.joined(Instant::now(), report.prompt_tokens);
        self.report = report;
        self.served = served;
        self.joined = Some(Joined {
            announce,
            link,
            capacity,
            ranks,
            translator: Translator::new(self.config.worker, capacity.block_size),
            seq: SeqCheck::default(),
            subscriber,
            silence,
            missed: 0,
        });
    }

    /// What the engine serves into its announcement: the engine's model and context length,
    /// its adapters with the configured ones.
    fn served_into(&self, spec: &mut WorkerSpec, served: Option<&ServedModels>) {
        spec.model = served.and_then(|s| s.base.clone());
        spec.max_model_len = served.and_then(|s| s.max_model_len);
        let mut loras = self.config.loras.clone();
        loras.extend(served.iter().flat_map(|s| s.adapters.iter().cloned()));
        loras.sort();
        loras.dedup();
        loras.truncate(router_core::worker::MAX_LORAS);
        spec.loras = loras;
    }

    /// Announces the engine again when what it serves changed (an adapter loaded or
    /// unloaded): routers then send an adapter's requests only where it is. A list that
    /// could not be read changes nothing.
    fn follow_models(&mut self, served: Option<ServedModels>) {
        let Some(served) = served else {
            return;
        };
        if self.served.as_ref() == Some(&served) {
            return;
        }
        let Some(mut announce) = self.joined.as_ref().map(|j| j.announce.clone()) else {
            return;
        };
        self.served_into(&mut announce.spec, Some(&served));
        tracing::info!(
            engine = %self.config.url,
            model = served.base.as_deref().unwrap_or(""),
            adapters = ?served.adapters,
            "the engine's models changed: announced again"
        );
        self.served = Some(served);
        if let Some(joined) = self.joined.as_mut() {
            joined.link.update(announce.clone());
            joined.announce = announce;
        }
    }

    async fn relay_load(&mut self, report: EngineReport) {
        let Some(joined) = self.joined.as_mut() else {
            return;
        };
        joined.missed = 0;
        if self.config.kv_events.is_some()
            && let Some(SilenceChange::BecameSilent {
                prompt_tokens,
                after,
            }) = joined.silence.scrape(Instant::now(), report.prompt_tokens)
        {
            tracing::warn!(
                engine = %self.config.url,
                kv_events = self.config.kv_events.as_deref().unwrap_or(""),
                side = ?self.config.kv_events_side,
                prompt_tokens,
                seconds = after.as_secs(),
                "the engine prefills but no KV event reaches the link: routing falls back to \
                 load alone. Check the engine's publisher endpoint (vLLM binds only `tcp://*:PORT`; \
                 given a concrete address it connects, and the link must bind: kv_events_bind)"
            );
        }
        let blocks = joined.capacity.blocks;
        let mut failed = 0;
        // The adapter slots are the engine's: said once, with its first rank's load.
        let mut adapters = report.adapters.clone();
        for (&dp_rank, load) in &report.ranks {
            let body = WorkerLoad {
                worker: self.config.worker,
                dp_rank,
                kv_used_blocks: (load.kv_usage * blocks as f64).round() as u64,
                waiting: load.waiting,
                running: load.running,
                adapters: adapters.take(),
            };
            if joined.link.publish_load(&body).await.is_err() {
                failed += 1;
            }
        }
        self.counters.publish_failures += failed;
        self.report = report;
    }

    /// Leaves the fleet (if joined): stops the subscriber, publishes the leaving announcement.
    pub(super) async fn leave(&mut self) {
        let Some(mut joined) = self.joined.take() else {
            return;
        };
        joined.subscriber.abort_all();
        self.counters.leaves += 1;
        if let Err(e) = joined.link.leave().await {
            self.counters.publish_failures += 1;
            self.error(e);
        }
    }

    pub(super) fn subscriber_failed(&mut self, error: String) {
        self.counters.subscriber_failures += 1;
        self.error(error);
    }

    pub(super) fn snapshot(&self) -> EngineLinkSnapshot {
        let phase = match (&self.joined, &self.refused) {
            (Some(_), _) => LinkPhase::Serving,
            (None, Some(reason)) => LinkPhase::Refused {
                reason: reason.clone(),
            },
            (None, None) => LinkPhase::Waiting,
        };
        EngineLinkSnapshot {
            kind: self.config.kind.name(),
            url: self.config.url.clone(),
            kv_events: self.config.kv_events.clone(),
            kv_events_heard: match (&self.config.kv_events, &self.joined) {
                (None, _) => EventsHeard::NotConfigured,
                (Some(_), Some(joined)) => joined.silence.heard(Instant::now()),
                (Some(_), None) => EventsHeard::Heard,
            },
            served: self.served.clone(),
            worker: self.config.worker,
            pool: self.config.pool,
            phase,
            capacity: self.joined.as_ref().map(|j| j.capacity),
            load: self.report.ranks.clone(),
            counters: self.counters,
            skipped: self.skipped,
            last_error: self.last_error.clone(),
        }
    }
}
