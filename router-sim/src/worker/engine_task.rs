//! The engine task: the one owner of the simulated [`Engine`], driving its pass loop on
//! tokio time, and the handle HTTP handlers talk to it through.
//!
//! Loop: take every queued command; free staged KV whose deadline passed; if there is work,
//! `step(now)`, publish the pass's KV events at once (the reference makes them visible at
//! pass start), sleep the pass's `duration_us` while still taking commands, then hand the
//! pass's tokens to the requests. An instant task ([`super::SimConfig::instant`]) skips the
//! sleep: it yields to the runtime once and hands the tokens out at once. With no work it
//! waits for the next command (and, while staged KV is held or a delivery is pending, for a
//! short tick): no busy loop.
//!
//! Channels, all bounded:
//! - commands: [`COMMAND_CAPACITY`]; senders wait when it is full (back-pressure on the HTTP
//!   handlers), except a dropped request's cancel, which is sent by a spawned task then.
//! - per request: [`DELIVERY_CAPACITY`] deliveries. The engine never waits on a request: when
//!   its channel is full, the tokens of later passes are coalesced into one pending delivery
//!   and retried after the next pass or tick, so a slow reader loses nothing and slows no
//!   one. A closed channel (the client left) cancels the sequence and frees its blocks.

use crate::engine::{Engine, Load, Role, SeqRequest, SubmitError};
use router_actors::WorkerLink;
use router_core::{KvEvent, RequestId};
use serde::Serialize;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

/// Commands queued to the engine task.
pub const COMMAND_CAPACITY: usize = 1024;
/// Deliveries queued per request before they are coalesced.
pub const DELIVERY_CAPACITY: usize = 64;
/// How often staged deadlines and pending deliveries are checked while the engine is idle.
const IDLE_TICK: Duration = Duration::from_millis(10);

/// Tokens of one or more passes for one request.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Delivery {
    pub tokens: u32,
    /// The request is done (for a staging prefill request: its KV is now staged).
    pub finished: bool,
    /// With `finished`: the prompt tokens that were already in the prefix cache.
    pub cached_tokens: u32,
}

/// The engine's load and the task's counters, as `GET /load` shows them.
#[derive(Debug, Clone, Default, Serialize)]
pub struct LoadReport {
    /// The engine's own load (KV blocks used and cached, waiting, running, staged).
    #[serde(flatten)]
    pub engine: Load,
    /// Staged requests freed by the staging timeout instead of a pull.
    pub stranded: u64,
    /// Staged requests released by a pull.
    pub pulled: u64,
    pub preemptions: u64,
    /// LoRA adapters loaded into a slot (with `max_loras`).
    pub lora_loads: u64,
    /// The most requests the engine held at once, waiting or running, since it started: how
    /// much work a router let onto it together (for a prefill worker, the prompts it was
    /// given before any finished).
    pub peak_requests: u64,
    pub passes: u64,
    /// Prompt tokens computed (uncached prefill and recomputation) over all passes.
    pub prefill_tokens: u64,
    /// Output tokens emitted.
    pub output_tokens: u64,
    pub requests: u64,
    pub finished: u64,
    pub cancelled: u64,
    pub kv_event_batches: u64,
    pub kv_publish_failures: u64,
    /// Decode side: pulls from a prefill worker that failed (the prompt was recomputed).
    pub pull_failures: u64,
}

enum Command {
    Submit {
        req: SeqRequest,
        /// A prefill engine keeps this request's KV for a decode worker (else frees it).
        stage: bool,
        sink: mpsc::Sender<Delivery>,
        reply: oneshot::Sender<Result<(), SubmitError>>,
    },
    Cancel(RequestId),
    Release {
        id: RequestId,
        reply: oneshot::Sender<bool>,
    },
    Load(oneshot::Sender<LoadReport>),
}

/// The engine task is gone (the worker is shutting down).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the engine task has stopped")]
pub struct EngineGone;

/// A cheap handle to the engine task.
#[derive(Debug, Clone)]
pub struct EngineHandle {
    tx: mpsc::Sender<Command>,
}

impl EngineHandle {
    /// Queues `req`; its tokens arrive on the returned receiver.
    pub async fn submit(
        &self,
        req: SeqRequest,
        stage: bool,
    ) -> Result<Result<mpsc::Receiver<Delivery>, SubmitError>, EngineGone> {
        let (sink, deliveries) = mpsc::channel(DELIVERY_CAPACITY);
        let (reply, answer) = oneshot::channel();
        self.tx
            .send(Command::Submit {
                req,
                stage,
                sink,
                reply,
            })
            .await
            .map_err(|_| EngineGone)?;
        Ok(answer.await.map_err(|_| EngineGone)?.map(|()| deliveries))
    }

    /// Drops a request wherever it is (a no-op for an unknown one). Never waits: when the
    /// command queue is full the cancel is sent from a spawned task.
    pub fn cancel(&self, id: RequestId) {
        match self.tx.try_send(Command::Cancel(id)) {
            Ok(()) | Err(mpsc::error::TrySendError::Closed(_)) => {}
            Err(mpsc::error::TrySendError::Full(cmd)) => {
                if let Ok(rt) = tokio::runtime::Handle::try_current() {
                    let tx = self.tx.clone();
                    rt.spawn(async move {
                        let _ = tx.send(cmd).await;
                    });
                }
            }
        }
    }

    /// Frees a staged request's KV (the decode side pulled it). False when not staged, or
    /// while the pass that staged it is not over (the request has not finished yet).
    pub async fn release(&self, id: RequestId) -> Result<bool, EngineGone> {
        let (reply, answer) = oneshot::channel();
        self.tx
            .send(Command::Release { id, reply })
            .await
            .map_err(|_| EngineGone)?;
        answer.await.map_err(|_| EngineGone)
    }

    pub async fn load(&self) -> Result<LoadReport, EngineGone> {
        let (reply, answer) = oneshot::channel();
        self.tx
            .send(Command::Load(reply))
            .await
            .map_err(|_| EngineGone)?;
        answer.await.map_err(|_| EngineGone)
    }
}

/// Spawns the engine task; it ends when every handle is dropped. An `instant` task hands
/// out each pass's tokens as soon as the pass is computed instead of after its modelled
/// duration.
pub fn spawn(
    engine: Engine,
    link: Option<Arc<WorkerLink>>,
    instant: bool,
) -> (EngineHandle, tokio::task::JoinHandle<()>) {
    let (tx, rx) = mpsc::channel(COMMAND_CAPACITY);
    let task = tokio::spawn(run(
        Task {
            engine,
            sinks: HashMap::new(),
            stats: LoadReport::default(),
            link,
            unpublished: Vec::new(),
            instant,
        },
        rx,
    ));
    (EngineHandle { tx }, task)
}

struct Sink {
    tx: mpsc::Sender<Delivery>,
    stage: bool,
    pending: Delivery,
}

struct Task {
    engine: Engine,
    sinks: HashMap<RequestId, Sink>,
    stats: LoadReport,
    link: Option<Arc<WorkerLink>>,
    /// Events produced between passes (none today), published with the next batch.
    unpublished: Vec<KvEvent>,
    /// Passes take no time (tokens are delivered at once).
    instant: bool,
}

fn elapsed_us(start: Instant) -> u64 {
    u64::try_from(start.elapsed().as_micros()).unwrap_or(u64::MAX)
}

async fn run(mut task: Task, mut rx: mpsc::Receiver<Command>) {
    let start = Instant::now();
    loop {
        loop {
            match rx.try_recv() {
                Ok(cmd) => task.handle(cmd),
                Err(mpsc::error::TryRecvError::Empty) => break,
                Err(mpsc::error::TryRecvError::Disconnected) => return,
            }
        }
        task.engine.expire_staged(elapsed_us(start));
        task.flush_all();
        let pass_start = Instant::now();
        let out = if task.engine.is_idle() {
            None
        } else {
            Some(task.engine.step(elapsed_us(start)))
        };
        match out {
            Some(out) if out.did_work() => {
                task.stats.passes += 1;
                task.stats.prefill_tokens += out.work.prefill_tokens;
                let mut events = std::mem::take(&mut task.unpublished);
                events.extend(out.kv_events.iter().cloned());
                task.publish(events).await;
                if task.instant {
                    // No modelled time, but never a busy loop that starves the runtime.
                    tokio::task::yield_now().await;
                    task.deliver(&out.tokens, &out.finished, &out.cached_tokens);
                    continue;
                }
                let end = pass_start + Duration::from_micros(out.duration_us);
                loop {
                    tokio::select! {
                        biased;
                        () = tokio::time::sleep_until(end) => break,
                        cmd = rx.recv() => match cmd {
                            Some(cmd) => task.handle(cmd),
                            None => return,
                        },
                    }
                }
                task.deliver(&out.tokens, &out.finished, &out.cached_tokens);
            }
            other => {
                // Nothing could be scheduled: keep any events, wait for something to change.
                if let Some(out) = other {
                    task.unpublished.extend(out.kv_events);
                }
                let tick = task.needs_tick().then_some(IDLE_TICK);
                tokio::select! {
                    cmd = rx.recv() => match cmd {
                        Some(cmd) => task.handle(cmd),
                        None => return,
                    },
                    () = tokio::time::sleep(tick.unwrap_or(IDLE_TICK)), if tick.is_some() => {}
                }
            }
        }
    }
}

impl Task {
    fn handle(&mut self, cmd: Command) {
        match cmd {
            Command::Submit {
                req,
                stage,
                sink,
                reply,
            } => {
                let id = req.id;
                let result = self.engine.submit(req);
                if result.is_ok() {
                    self.stats.requests += 1;
                    let load = self.engine.load();
                    let held = (load.waiting + load.running) as u64;
                    self.stats.peak_requests = self.stats.peak_requests.max(held);
                    self.sinks.insert(
                        id,
                        Sink {
                            tx: sink,
                            stage,
                            pending: Delivery::default(),
                        },
                    );
                }
                if reply.send(result).is_err() {
                    // The handler is gone already: drop the request again.
                    self.cancel(id);
                }
            }
            Command::Cancel(id) => self.cancel(id),
            Command::Release { id, reply } => {
                // The engine stages a request's KV when it computes its last pass; the KV
                // is ready only once that pass's time is over and the request finished (its
                // sink is gone). Until then a pull finds nothing (SGLang's decode leg, sent
                // with the prefill leg, retries).
                let released = !self.sinks.contains_key(&id) && self.engine.release_staged(id);
                if released {
                    self.stats.pulled += 1;
                }
                let _ = reply.send(released);
            }
            Command::Load(reply) => {
                let _ = reply.send(self.report());
            }
        }
    }

    fn cancel(&mut self, id: RequestId) {
        // Only requests still streaming have a sink: a staged request, whose client has its
        // transfer parameters, is released only by a pull or its deadline.
        let known = self.sinks.remove(&id).is_some();
        if known && self.engine.cancel(id) {
            self.stats.cancelled += 1;
        }
    }

    fn report(&self) -> LoadReport {
        let load = self.engine.load();
        LoadReport {
            engine: load,
            stranded: self.engine.stranded(),
            preemptions: self.engine.preemptions(),
            lora_loads: self.engine.lora_loads(),
            ..self.stats.clone()
        }
    }

    async fn publish(&mut self, events: Vec<KvEvent>) {
        if events.is_empty() {
            return;
        }
        let Some(link) = &self.link else { return };
        match link.publish_kv_events(events).await {
            Ok(()) => self.stats.kv_event_batches += 1,
            Err(e) => {
                self.stats.kv_publish_failures += 1;
                tracing::warn!(error = %e, "could not publish KV events");
            }
        }
    }

    fn deliver(
        &mut self,
        tokens: &[(RequestId, u32)],
        finished: &[RequestId],
        cached: &[(RequestId, usize)],
    ) {
        for &(id, n) in cached {
            if let Some(sink) = self.sinks.get_mut(&id) {
                sink.pending.cached_tokens = u32::try_from(n).unwrap_or(u32::MAX);
            }
        }
        for &(id, n) in tokens {
            self.stats.output_tokens += u64::from(n);
            if let Some(sink) = self.sinks.get_mut(&id) {
                sink.pending.tokens = sink.pending.tokens.saturating_add(n);
            }
        }
        for &id in finished {
            self.stats.finished += 1;
            match self.sinks.get_mut(&id) {
                Some(sink) => {
                    sink.pending.finished = true;
                    if self.engine.config().role == Role::Prefill && !sink.stage {
                        self.engine.release_staged(id);
                    }
                }
                None => {
                    // Its client left during the last pass: nobody will pull this KV.
                    if self.engine.config().role == Role::Prefill {
                        self.engine.release_staged(id);
                    }
                }
            }
        }
        let ids: Vec<RequestId> = tokens
            .iter()
            .map(|(id, _)| *id)
            .chain(finished.iter().copied())
            .collect();
        for id in ids {
            self.flush(id);
        }
    }

    /// Tries to hand `id` its pending delivery.
    fn flush(&mut self, id: RequestId) {
        let Some(sink) = self.sinks.get_mut(&id) else {
            return;
        };
        if sink.pending.tokens == 0 && !sink.pending.finished {
            return;
        }
        match sink.tx.try_send(sink.pending) {
            Ok(()) => {
                let done = sink.pending.finished;
                sink.pending = Delivery::default();
                if done {
                    self.sinks.remove(&id);
                }
            }
            Err(mpsc::error::TrySendError::Full(_)) => {}
            Err(mpsc::error::TrySendError::Closed(_)) => self.cancel(id),
        }
    }

    fn flush_all(&mut self) {
        let pending: Vec<RequestId> = self
            .sinks
            .iter()
            .filter(|(_, s)| s.pending.tokens > 0 || s.pending.finished)
            .map(|(id, _)| *id)
            .collect();
        for id in pending {
            self.flush(id);
        }
    }

    /// Whether idle waiting must wake up by itself (staged deadlines, blocked deliveries).
    fn needs_tick(&self) -> bool {
        self.engine.load().staged > 0
            || self
                .sinks
                .values()
                .any(|s| s.pending.tokens > 0 || s.pending.finished)
    }
}
