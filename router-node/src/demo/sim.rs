//! The discrete-event simulation: the real router-core schedulers driving the simulated
//! engines of `engine.rs` in simulated time (microseconds, no clock, no sleeps).
//!
//! Events are arrivals, first tokens and completions, ordered by (time, insertion order)
//! so a seed always gives the same run. Before each event the earliest scheduler deadline
//! (a queued request's SLO or a reservation's lease) is checked: when it is due first, the
//! clock moves to it and `expire` runs there, so deadline sheds happen exactly on time.
//!
//! - Aggregated: one scheduler; admission books, the first token calls `prefill_done`, the
//!   end calls `release`; each of them that frees capacity is followed by `drain`.
//! - Disaggregated: the prefill scheduler is the only gate and reads the decode ledger as
//!   its room view. Its admission carries a decode reservation, applied to the decode
//!   ledger at once. At the first token the decode leg books admitted-upstream (converting
//!   the reservation) and the prefill booking is released; a decode release drains the
//!   prefill queue with the decode ledger as the room view (the `RoomChanged` signal).

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use router_core::ledger::{BookingLedger, Reservation, ReserveResult};
use router_core::{
    AdmissionRequest, ClassId, DecodeRoomView, Outcome, Phase, PoolRole, RankId, RequestId,
    RouterId, Scheduler, SchedulerConfig, Timestamp, WorkerSpec,
};

use super::Options;
use super::engine::{self, KV_BLOCKS, MAX_BATCHED_TOKENS, Pool};
use super::report::Recorder;
use super::workload::{self, BLOCK_TOKENS, Spec};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    Arrive(usize),
    FirstToken(usize),
    Done(usize),
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
    engines: Pool,
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
        for w in 0..u64::from(opts.workers) {
            let spec = WorkerSpec::new(w, 1, KV_BLOCKS, MAX_BATCHED_TOKENS);
            for s in std::iter::once(&mut main).chain(decode.as_mut()) {
                s.ledger_mut()
                    .upsert_worker(spec.clone())
                    .map_err(|e| format!("worker spec: {e}"))?;
            }
        }
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
            });
        }
        Ok(Self {
            now: 0,
            seq: reqs.len() as u64,
            events,
            main,
            decode,
            engines: Pool::new(opts.workers),
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
                Event::FirstToken(i) => self.on_first_token(i),
                Event::Done(i) => self.on_done(i),
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
        let overlap: Vec<(RankId, u32)> = self
            .engines
            .overlaps(&spec.block_hashes)
            .into_iter()
            .map(|(rank, depth)| (rank_id(rank), depth))
            .collect();
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

    fn on_first_token(&mut self, i: usize) {
        let Some(req) = self.reqs.get(i) else { return };
        let (class, arrival, output) = (req.class, req.spec.arrival_us, req.spec.output_tokens);
        let id = request_id(i);
        // The decode leg: its KV is staged, so it books admitted-upstream.
        let mut leg = AdmissionRequest::new(id, class, Phase::Decode { staged: true }, self.ts());
        leg.block_hashes = req.spec.block_hashes.clone();
        leg.prompt_tokens = req.spec.prompt_tokens;
        leg.output_blocks = req.spec.output_blocks;
        self.rec
            .first_token(class, self.now.saturating_sub(arrival));
        let prefill_freed = self.main.prefill_done(id);
        let done_at = self.now + engine::decode_us(output);
        let Some(decode) = self.decode.as_mut() else {
            self.at(done_at, Event::Done(i));
            if prefill_freed {
                self.drain();
            }
            return;
        };
        match decode.arrive(leg, Timestamp::from_micros(self.now), None) {
            Outcome::Admitted(a) => {
                self.rec.note_committed(decode.ledger(), a.rank);
                self.at(done_at, Event::Done(i));
            }
            other => {
                // Only router-wide reject thresholds can refuse a staged leg; the demo sets
                // none. Give back the reservation and count it as lost work.
                decode.release(id);
                self.rec
                    .anomaly(format!("decode leg of request {i} not admitted: {other:?}"));
            }
        }
        // The KV moved to the decode rank: the prefill booking is done with.
        self.main.release(id);
        self.drain();
    }

    fn on_done(&mut self, i: usize) {
        let Some(req) = self.reqs.get(i) else { return };
        self.rec.completed(req.class);
        let id = request_id(i);
        let freed = match self.decode.as_mut() {
            Some(decode) => decode.release(id),
            None => self.main.release(id),
        };
        if freed {
            self.drain();
        } else {
            self.rec
                .anomaly(format!("release of request {i} found nothing booked"));
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
                let spec = &self.reqs[i].spec;
                let plan = rank_index(a.rank, self.workers).and_then(|rank| {
                    self.engines
                        .prefill(rank, &spec.block_hashes, spec.prompt_tokens, self.now)
                });
                match plan {
                    Some(plan) => {
                        self.rec.prefix(spec.prompt_tokens, plan.cached_tokens);
                        self.at(plan.first_token_at, Event::FirstToken(i));
                    }
                    None => self
                        .rec
                        .anomaly(format!("request {i} admitted on unknown rank {}", a.rank)),
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

/// Request ids are the workload index plus one (never the nil id).
fn request_id(i: usize) -> RequestId {
    RequestId::from_u128(i as u128 + 1)
}

fn index_of(id: RequestId) -> Option<usize> {
    usize::try_from(id.0.as_u128().checked_sub(1)?).ok()
}

/// Worker `w` has one rank, `w/dp0`; the engine pools index ranks by worker id.
fn rank_id(index: usize) -> RankId {
    RankId::new(index as u64, 0)
}

fn rank_index(rank: RankId, workers: u32) -> Option<usize> {
    (rank.dp_rank == 0 && rank.worker.0 < u64::from(workers)).then_some(rank.worker.0 as usize)
}

/// Booked plus reserved decode blocks of a rank, as a share of its KV (percent).
pub fn committed_pct(ledger: &BookingLedger, rank: RankId) -> Option<f64> {
    let s = ledger.rank_snapshot(rank)?;
    let total = s.total_kv_blocks.filter(|&t| t > 0)?;
    Some((s.decode_blocks + s.reserved_blocks) as f64 * 100.0 / total as f64)
}
