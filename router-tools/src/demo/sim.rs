//! The discrete-event simulation: the real router-core schedulers driving router-sim's
//! engines (`engines.rs`, the model `worker --sim` serves) in simulated time. Events are
//! arrivals and engine passes, ordered by (time, insertion order), so a seed always gives the
//! same run; a pass's first tokens and finishes are delivered at its end. The earliest
//! scheduler deadline is checked before each event, so sheds happen exactly on time; the
//! gate's prefix lookups read a router-core KV index fed by the engines' own KV events.
//!
//! - Aggregated: admission books and submits, the first token calls `prefill_done`, the end
//!   `release`; each that frees capacity is followed by `drain`.
//! - Disaggregated: the prefill scheduler is the only gate and reserves decode room; when the
//!   prefill engine is done the decode leg books admitted-upstream on the decode engine the
//!   decode scheduler picks, the KV moves there, the prefill booking is released, and a decode
//!   release drains the prefill queue (the `RoomChanged` signal).

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use router_core::hashing::SequenceHash;
use router_core::ledger::{Reservation, ReserveResult};
use router_core::{
    AdmissionRequest, ClassId, DecodeRoomView, Outcome, Phase, PoolRole, RankId, ReferenceIndex,
    RequestId, RouterId, Scheduler, SchedulerConfig, Timestamp, WorkerSpec,
};
use router_sim::engine::{Role, SeqRequest, StepOutput};

use super::Options;
use super::engines::{Engines, KV_BLOCKS, MAX_BATCHED_TOKENS, index_of, rank_index, request_id};
use super::report::Recorder;
use super::workload::{self, BLOCK_TOKENS, Spec};

/// Which pool of engines.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Side {
    /// The aggregated pool, or the prefill pool in disaggregated mode.
    Main,
    Decode,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    Arrive(usize),
    /// The engine's next pass: deliver what the last one did, then start another.
    Pass(Side, usize),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Pending,
    Queued,
    Admitted,
    Rejected,
}

#[derive(Debug)]
struct Req {
    spec: Spec,
    class: ClassId,
    state: State,
    /// The main pool's engine it was admitted on.
    rank: Option<usize>,
}

/// One run of the demo.
#[derive(Debug)]
pub struct Sim {
    now: u64,
    seq: u64,
    events: BinaryHeap<Reverse<(u64, u64, Event)>>,
    /// The aggregated pool, or the prefill pool in disaggregated mode.
    main: Scheduler,
    decode: Option<Scheduler>,
    main_engines: Engines,
    decode_engines: Option<Engines>,
    /// What the main pool's engines hold, from their KV events (the gate's prefix lookups).
    index: ReferenceIndex,
    workers: u32,
    reqs: Vec<Req>,
    pub rec: Recorder,
}

impl Sim {
    pub fn new(opts: &Options) -> Result<Self, String> {
        let profile = workload::profile().map_err(|e| format!("built-in profile: {e}"))?;
        let owner = RouterId(uuid::Uuid::from_u128(0x5717_c4a2_d000_0001));
        let role = if opts.disagg {
            PoolRole::Prefill
        } else {
            PoolRole::Aggregated
        };
        let mut main = Scheduler::new(SchedulerConfig::new(role, owner), profile.clone());
        let mut decode = opts.disagg.then(|| {
            Scheduler::new(
                SchedulerConfig::new(PoolRole::Decode, owner),
                profile.clone(),
            )
        });
        let mut index = ReferenceIndex::new();
        for w in 0..u64::from(opts.workers) {
            let spec = WorkerSpec::new(w, 1, KV_BLOCKS, MAX_BATCHED_TOKENS);
            index
                .add_worker(&spec)
                .map_err(|e| format!("worker spec: {e}"))?;
            for s in std::iter::once(&mut main).chain(decode.as_mut()) {
                s.ledger_mut()
                    .upsert_worker(spec.clone())
                    .map_err(|e| format!("worker spec: {e}"))?;
            }
        }
        let (main_role, decode_engines) = if opts.disagg {
            (
                Role::Prefill,
                Some(Engines::new(opts.workers, Role::Decode)?),
            )
        } else {
            (Role::Agg, None)
        };
        let mut rec = Recorder::new(&profile)?;
        let mut reqs = Vec::with_capacity(opts.requests as usize);
        let mut events = BinaryHeap::new();
        for (i, spec) in workload::generate(opts.requests, opts.workers, opts.seed)
            .into_iter()
            .enumerate()
        {
            let class = profile
                .resolve(Some(spec.class))
                .map_err(|e| format!("workload class: {e}"))?;
            rec.offered(class);
            events.push(Reverse((spec.arrival_us, i as u64, Event::Arrive(i))));
            reqs.push(Req {
                spec,
                class,
                state: State::Pending,
                rank: None,
            });
        }
        Ok(Self {
            now: 0,
            seq: reqs.len() as u64,
            events,
            main,
            decode,
            main_engines: Engines::new(opts.workers, main_role)?,
            decode_engines,
            index,
            workers: opts.workers,
            reqs,
            rec,
        })
    }

    /// Runs until no event and no deadline is left.
    pub fn run(&mut self) {
        loop {
            let next_event = self.events.peek().map(|Reverse((t, _, _))| *t);
            let deadline = self.next_deadline();
            if let Some(d) = deadline
                && next_event.is_none_or(|e| d <= e)
            {
                self.now = self.now.max(d);
                self.on_timer();
                if self.next_deadline().is_some_and(|d| d <= self.now) {
                    let at = self.now;
                    self.rec
                        .anomaly(format!("deadline still due after expire at {at} us"));
                    break;
                }
                continue;
            }
            let Some(Reverse((t, _, event))) = self.events.pop() else {
                break;
            };
            self.now = self.now.max(t);
            match event {
                Event::Arrive(i) => self.on_arrive(i),
                Event::Pass(side, rank) => self.on_pass(side, rank),
            }
        }
        self.finish();
    }

    fn next_deadline(&self) -> Option<u64> {
        let a = self.main.next_deadline();
        let b = self.decode.as_ref().and_then(Scheduler::next_deadline);
        a.into_iter().chain(b).min().map(Timestamp::as_micros)
    }

    fn at(&mut self, t: u64, event: Event) {
        self.seq += 1;
        self.events.push(Reverse((t, self.seq, event)));
    }

    fn ts(&self) -> Timestamp {
        Timestamp::from_micros(self.now)
    }

    fn on_timer(&mut self) {
        let now = self.ts();
        if let Some(decode) = self.decode.as_mut() {
            let before = decode.ledger().room_epoch();
            let shed = decode.expire(now);
            let grown = decode.ledger().room_epoch() != before;
            self.apply_all(shed);
            if grown {
                self.drain();
            }
        }
        let shed = self.main.expire(now);
        self.apply_all(shed);
    }

    fn on_arrive(&mut self, i: usize) {
        let Some(req) = self.reqs.get(i) else { return };
        let spec = &req.spec;
        let hashes: Vec<SequenceHash> =
            spec.block_hashes.iter().map(|&h| SequenceHash(h)).collect();
        let overlap: Vec<(RankId, u32)> = self.index.find_matches(&hashes).iter().collect();
        let best = overlap
            .iter()
            .map(|&(_, d)| u64::from(d))
            .max()
            .unwrap_or(0);
        let phase = if self.decode.is_some() {
            Phase::Prefill
        } else {
            Phase::Aggregated
        };
        let mut request = AdmissionRequest::new(request_id(i), req.class, phase, self.ts());
        request.block_hashes = spec.block_hashes.clone();
        request.prompt_tokens = spec.prompt_tokens;
        request.cached_tokens = (best * BLOCK_TOKENS).min(spec.prompt_tokens.saturating_sub(1));
        request.overlap = overlap;
        request.output_blocks = spec.output_blocks;
        let room = self
            .decode
            .as_ref()
            .map(|d| d.ledger() as &dyn DecodeRoomView);
        let outcome = self.main.arrive(request, self.ts(), room);
        self.apply(outcome);
    }

    fn engines(&mut self, side: Side) -> Option<&mut Engines> {
        match side {
            Side::Main => Some(&mut self.main_engines),
            Side::Decode => self.decode_engines.as_mut(),
        }
    }

    /// Queues request `i` on `rank` of `side`, its KV already there up to `staged` tokens.
    fn submit(&mut self, side: Side, rank: usize, i: usize, staged: Option<usize>) -> bool {
        let Some(req) = self.reqs.get(i) else {
            return false;
        };
        let seq = SeqRequest {
            id: request_id(i),
            tokens: req.spec.tokens.clone(),
            max_tokens: u32::try_from(req.spec.output_tokens).unwrap_or(u32::MAX),
            scope: Default::default(),
            staged_prefix: staged,
        };
        let submitted = match self.engines(side).and_then(|e| e.engines.get_mut(rank)) {
            Some(engine) => engine.submit(seq).map_err(|e| e.to_string()),
            None => Err(format!("no engine {rank}")),
        };
        match submitted {
            Ok(()) => {
                self.wake(side, rank);
                true
            }
            Err(e) => {
                self.rec
                    .anomaly(format!("request {i} not taken by {side:?} engine: {e}"));
                false
            }
        }
    }

    /// Schedules the engine's next pass now unless one is already scheduled.
    fn wake(&mut self, side: Side, rank: usize) {
        let now = self.now;
        let Some(engines) = self.engines(side) else {
            return;
        };
        if let Some(busy) = engines.busy.get_mut(rank)
            && !*busy
        {
            *busy = true;
            self.at(now, Event::Pass(side, rank));
        }
    }

    /// The engine's last pass ends now: deliver what it did, then run the next one.
    fn on_pass(&mut self, side: Side, rank: usize) {
        let now = self.now;
        let Some(done) = self.engines(side).map(|e| e.take_done(rank)) else {
            return;
        };
        if let Some(out) = done {
            self.deliver(side, out);
        }
        let Some(engines) = self.engines(side) else {
            return;
        };
        // Nothing to run: the next submit wakes it.
        let Some((end, events)) = engines.start_pass(rank, now) else {
            return;
        };
        if side == Side::Main {
            for event in &events {
                self.index.apply(event);
            }
        }
        self.at(end, Event::Pass(side, rank));
    }

    /// What a finished pass did: first tokens, prefix hits and finished requests.
    fn deliver(&mut self, side: Side, out: StepOutput) {
        let disagg = self.decode.is_some();
        if side == Side::Main {
            for &(id, cached) in &out.cached_tokens {
                if let Some(req) = index_of(id).and_then(|i| self.reqs.get(i)) {
                    self.rec.prefix(req.spec.prompt_tokens, cached as u64);
                }
            }
        }
        for &id in &out.first_tokens {
            if side == Side::Main && !disagg {
                self.on_first_token(id);
            }
        }
        for &id in &out.finished {
            match (side, disagg) {
                (Side::Main, true) => self.on_prefilled(id),
                _ => self.on_done(id),
            }
        }
    }

    /// Aggregated: the first token is out; the prompt's prefill no longer loads the rank.
    fn on_first_token(&mut self, id: RequestId) {
        let Some(req) = index_of(id).and_then(|i| self.reqs.get(i)) else {
            return;
        };
        let ttft = self.now.saturating_sub(req.spec.arrival_us);
        self.rec.first_token(req.class, ttft);
        if self.main.prefill_done(id) {
            self.drain();
        }
    }

    /// Disaggregated: the prefill engine is done (first token out, KV staged). The decode
    /// leg books admitted-upstream, the KV moves to its decode engine, the prefill booking
    /// and the staged KV are given back.
    fn on_prefilled(&mut self, id: RequestId) {
        let Some(i) = index_of(id).filter(|&i| i < self.reqs.len()) else {
            return;
        };
        let req = &self.reqs[i];
        let (class, arrival) = (req.class, req.spec.arrival_us);
        let mut leg = AdmissionRequest::new(id, class, Phase::Decode { staged: true }, self.ts());
        leg.block_hashes = req.spec.block_hashes.clone();
        leg.prompt_tokens = req.spec.prompt_tokens;
        leg.output_blocks = req.spec.output_blocks;
        let staged = req.spec.tokens.len();
        self.rec
            .first_token(class, self.now.saturating_sub(arrival));
        let prefill_rank = req.rank;
        self.main.prefill_done(id);
        let now = Timestamp::from_micros(self.now);
        let Some(decode) = self.decode.as_mut() else {
            return;
        };
        match decode.arrive(leg, now, None) {
            Outcome::Admitted(a) => {
                self.rec.note_committed(decode.ledger(), a.rank);
                let placed = rank_index(a.rank, self.workers)
                    .is_some_and(|rank| self.submit(Side::Decode, rank, i, Some(staged)));
                if !placed && let Some(decode) = self.decode.as_mut() {
                    decode.release(id);
                }
            }
            other => {
                // Only router-wide reject thresholds can refuse a staged leg; the demo sets
                // none. Give back the reservation and count it as lost work.
                decode.release(id);
                self.rec
                    .anomaly(format!("decode leg of request {i} not admitted: {other:?}"));
            }
        }
        // The KV moved to the decode rank: the prefill engine and booking are done with it.
        if let Some(engine) = prefill_rank.and_then(|r| self.main_engines.engines.get_mut(r)) {
            engine.release_staged(id);
        }
        self.main.release(id);
        self.drain();
    }

    /// The request's last token is out: its booking goes.
    fn on_done(&mut self, id: RequestId) {
        let Some(req) = index_of(id).and_then(|i| self.reqs.get(i)) else {
            return;
        };
        self.rec.completed(req.class);
        let freed = match self.decode.as_mut() {
            Some(decode) => decode.release(id),
            None => self.main.release(id),
        };
        if freed {
            self.drain();
        } else {
            self.rec
                .anomaly(format!("release of request {id} found nothing booked"));
        }
    }

    /// Drains the gate scheduler (with the decode ledger as the room view when paired).
    fn drain(&mut self) {
        let room = self
            .decode
            .as_ref()
            .map(|d| d.ledger() as &dyn DecodeRoomView);
        let outcomes = self.main.drain(self.ts(), room);
        self.apply_all(outcomes);
    }

    fn apply_all(&mut self, outcomes: Vec<Outcome>) {
        for outcome in outcomes {
            self.apply(outcome);
        }
    }

    /// Carries out one gate outcome.
    fn apply(&mut self, outcome: Outcome) {
        let Some(i) = index_of(outcome.request()).filter(|&i| i < self.reqs.len()) else {
            self.rec
                .anomaly(format!("outcome for an unknown request: {outcome:?}"));
            return;
        };
        let (class, state) = (self.reqs[i].class, self.reqs[i].state);
        match outcome {
            Outcome::Admitted(a) if matches!(state, State::Pending | State::Queued) => {
                self.reqs[i].state = State::Admitted;
                self.rec.admitted(class, state == State::Queued, a.waited);
                if let Some(r) = a.decode_reservation
                    && let Some(decode) = self.decode.as_mut()
                {
                    let reservation = Reservation {
                        rank: r.rank,
                        blocks: r.blocks,
                        expires_at: r.expires_at,
                        seq: r.seq,
                    };
                    let result = decode.ledger_mut().reserve(r.key, reservation);
                    if result != ReserveResult::Reserved {
                        self.rec
                            .anomaly(format!("decode reservation of request {i}: {result:?}"));
                    }
                    self.rec.note_committed(decode.ledger(), r.rank);
                } else if self.decode.is_none() {
                    self.rec.note_committed(self.main.ledger(), a.rank);
                }
                let rank = rank_index(a.rank, self.workers);
                self.reqs[i].rank = rank;
                let placed = rank.is_some_and(|rank| self.submit(Side::Main, rank, i, None));
                if !placed {
                    self.rec
                        .anomaly(format!("request {i} admitted on unknown rank {}", a.rank));
                }
            }
            Outcome::Queued { .. } if state == State::Pending => {
                self.reqs[i].state = State::Queued;
            }
            Outcome::Rejected { reason, .. } if matches!(state, State::Pending | State::Queued) => {
                self.reqs[i].state = State::Rejected;
                self.rec.rejected(class, reason.label());
            }
            other => self
                .rec
                .anomaly(format!("request {i} in state {state:?} got {other:?}")),
        }
    }

    /// Checks that every request ended admitted or rejected and that the ledgers are idle.
    fn finish(&mut self) {
        let unfinished = self
            .reqs
            .iter()
            .filter(|r| matches!(r.state, State::Pending | State::Queued))
            .count();
        if unfinished > 0 {
            self.rec
                .anomaly(format!("{unfinished} requests never got an answer"));
        }
        let idle = |s: &Scheduler| s.queued_len() == 0 && s.ledger().snapshot().is_idle();
        let idle = idle(&self.main) && self.decode.as_ref().is_none_or(idle);
        self.rec
            .finish(self.now, idle, &self.main, self.decode.as_ref());
    }
}
