//! `router-tools trace synth`: a synthetic Mooncake trace with the prefix sharing asked for
//! (pure: the same parameters and seed give the same trace).
//!
//! The workload is made of conversations (*sessions*). There are `system_prompts` distinct
//! system prompts of `system_prompt_blocks` blocks each, and `sessions_per_prompt` sessions
//! open with each one (session `s` uses system prompt `s % system_prompts`): sessions under
//! one system prompt share exactly its blocks, and nothing else. A session has a number of
//! turns drawn from `turns`; each turn is one request whose prompt is the previous turn's
//! prompt, the previous answer (`output_length` tokens) and a new user message (drawn from
//! `user_tokens`), so turn k's `hash_ids` start with turn k-1's. A session ends early when
//! its next prompt would pass `max_input_tokens`.
//!
//! Arrivals: requests come at `rate` per second, evenly spaced (`constant`) or as a Poisson
//! process (`poisson`: exponential gaps). `concurrent_sessions` sessions are open at a time;
//! each arrival is the next turn of one of them, drawn at random, and a finished session is
//! replaced by the next one, so a session's turns are about `concurrent_sessions / rate`
//! seconds apart. Hash ids are numbered from 0 in order of first use (the system prompts
//! first); a block is `block_tokens` tokens, and `input_length` covers the last block in
//! part or in full.

mod dist;

use std::collections::HashSet;

use rand::rngs::SmallRng;
use rand::{Rng as _, SeedableRng as _};
use rand_distr::{Distribution as _, Exp};

pub use dist::Dist;

use super::trace::{MAX_INPUT_LENGTH, TraceRecord};

/// How requests arrive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum ArrivalProcess {
    /// Exponential gaps of mean `1 / rate`.
    #[default]
    Poisson,
    /// Gaps of exactly `1 / rate`.
    Constant,
}

/// What to generate (the command line's flags, one for one).
#[derive(Debug, Clone, PartialEq)]
pub struct SynthParams {
    pub seed: u64,
    pub system_prompts: u32,
    /// Blocks of each system prompt (0: no shared system prompt).
    pub system_prompt_blocks: u32,
    pub sessions_per_prompt: u32,
    pub turns: Dist,
    pub user_tokens: Dist,
    pub output_tokens: Dist,
    /// Tokens per hash id.
    pub block_tokens: u64,
    pub arrival: ArrivalProcess,
    /// Requests per second.
    pub rate: f64,
    pub concurrent_sessions: u32,
    pub max_input_tokens: u64,
}

impl Default for SynthParams {
    fn default() -> Self {
        Self {
            seed: 7,
            system_prompts: 4,
            system_prompt_blocks: 4,
            sessions_per_prompt: 8,
            turns: Dist::Fixed(4),
            user_tokens: Dist::Uniform(64, 512),
            output_tokens: Dist::Uniform(32, 256),
            block_tokens: 512,
            arrival: ArrivalProcess::Poisson,
            rate: 1.0,
            concurrent_sessions: 8,
            max_input_tokens: 32_768,
        }
    }
}

/// A parameter out of range; `flag` names it as the command line does.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{flag}: {message}")]
pub struct SynthError {
    pub flag: &'static str,
    pub message: String,
}

/// One generated request and where it belongs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SynthRequest {
    pub session: u32,
    /// From 0.
    pub turn: u32,
    pub system_prompt: u32,
    pub record: TraceRecord,
}

/// One open session.
struct Session {
    id: u32,
    turns: u64,
    done: u64,
    hash_ids: Vec<u64>,
    last_output: u64,
}

impl SynthParams {
    fn check(&self) -> Result<(), SynthError> {
        let bad = |flag, message: &str| {
            Err(SynthError {
                flag,
                message: message.to_owned(),
            })
        };
        if self.system_prompts == 0 {
            return bad("--system-prompts", "must be at least 1");
        }
        if self.sessions_per_prompt == 0 {
            return bad("--sessions-per-prompt", "must be at least 1");
        }
        if self.concurrent_sessions == 0 {
            return bad("--concurrent-sessions", "must be at least 1");
        }
        if self.block_tokens == 0 {
            return bad("--block-tokens", "must be at least 1");
        }
        if !(self.rate.is_finite() && self.rate > 0.0) {
            return bad("--rate", "must be a positive number of requests per second");
        }
        if self.max_input_tokens > MAX_INPUT_LENGTH {
            return bad(
                "--max-input-tokens",
                &format!("must be at most {MAX_INPUT_LENGTH}"),
            );
        }
        if u64::from(self.system_prompt_blocks).saturating_mul(self.block_tokens)
            >= self.max_input_tokens
        {
            return bad(
                "--max-input-tokens",
                "must exceed the system prompt (--system-prompt-blocks x --block-tokens)",
            );
        }
        if u64::from(self.system_prompts) * u64::from(self.sessions_per_prompt)
            > u64::from(u32::MAX)
        {
            return bad("--sessions-per-prompt", "too many sessions in all");
        }
        Ok(())
    }
}

/// The trace of `params`, in arrival order.
pub fn generate(params: &SynthParams) -> Result<Vec<SynthRequest>, SynthError> {
    params.check()?;
    let mut rng = SmallRng::seed_from_u64(params.seed);
    let block = params.block_tokens;
    let sys_blocks = u64::from(params.system_prompt_blocks);
    let mut next_id: u64 = u64::from(params.system_prompts) * sys_blocks;
    let system = |p: u32| u64::from(p) * sys_blocks..(u64::from(p) + 1) * sys_blocks;
    let sessions = params.system_prompts * params.sessions_per_prompt;
    let gaps = Exp::new(params.rate).ok();
    let mut opened = 0_u32;
    let mut open: Vec<Session> = Vec::new();
    let mut t_secs = 0.0_f64;
    let mut out = Vec::new();
    loop {
        while open.len() < params.concurrent_sessions as usize && opened < sessions {
            open.push(Session {
                id: opened,
                turns: params.turns.sample(&mut rng),
                done: 0,
                hash_ids: system(opened % params.system_prompts).collect(),
                last_output: 0,
            });
            opened += 1;
        }
        if open.is_empty() {
            break;
        }
        let k = rng.random_range(0..open.len());
        let Some(s) = open.get_mut(k) else { break };
        let user = params.user_tokens.sample(&mut rng);
        let base = s.hash_ids.len() as u64 * block;
        let new = if s.done == 0 {
            user
        } else {
            s.last_output + user
        };
        let mut input = base + new;
        let over = input > params.max_input_tokens;
        if over && s.done == 0 {
            // A first turn is cut to fit (the system prompt always does).
            input = params.max_input_tokens;
        }
        if !over || s.done == 0 {
            let blocks = input.div_ceil(block);
            while (s.hash_ids.len() as u64) < blocks {
                s.hash_ids.push(next_id);
                next_id += 1;
            }
            let output = params.output_tokens.sample(&mut rng);
            out.push(SynthRequest {
                session: s.id,
                turn: u32::try_from(s.done).unwrap_or(u32::MAX),
                system_prompt: s.id % params.system_prompts,
                record: TraceRecord {
                    timestamp: (t_secs * 1e3).round() as u64,
                    input_length: input,
                    output_length: output,
                    hash_ids: s.hash_ids.clone(),
                },
            });
            s.done += 1;
            s.last_output = output;
            t_secs += match (params.arrival, gaps) {
                (ArrivalProcess::Poisson, Some(exp)) => exp.sample(&mut rng),
                _ => 1.0 / params.rate,
            };
        }
        if over || s.done >= s.turns {
            open.swap_remove(k);
        }
    }
    Ok(out)
}

/// What a generated trace holds, for a line on stderr.
#[derive(Debug, Clone, PartialEq)]
pub struct SynthSummary {
    pub requests: usize,
    pub sessions: usize,
    pub duration_s: f64,
    pub mean_input: f64,
    pub mean_output: f64,
    /// Prompt tokens in leading blocks an earlier request already had, in %: the prefix hit
    /// rate of a cache that never evicts (whole blocks only).
    pub reusable_pct: f64,
}

/// Sums up `requests` (`block_tokens` per hash id).
pub fn summarize(requests: &[SynthRequest], block_tokens: u64) -> SynthSummary {
    let n = requests.len().max(1) as f64;
    let mut seen: HashSet<u64> = HashSet::new();
    let (mut input, mut output, mut reusable) = (0_u64, 0_u64, 0_u64);
    let mut sessions = HashSet::new();
    for r in requests {
        let rec = &r.record;
        sessions.insert(r.session);
        input += rec.input_length;
        output += rec.output_length;
        // Engines cache whole blocks: a prompt's last, partial block is never reused.
        let full = usize::try_from(rec.input_length / block_tokens.max(1)).unwrap_or(usize::MAX);
        let whole = rec.hash_ids.iter().take(full);
        let hit = whole.clone().take_while(|h| seen.contains(h)).count() as u64;
        reusable += hit * block_tokens;
        seen.extend(whole.copied());
    }
    SynthSummary {
        requests: requests.len(),
        sessions: sessions.len(),
        duration_s: requests
            .last()
            .map_or(0.0, |r| r.record.timestamp as f64 / 1e3),
        mean_input: input as f64 / n,
        mean_output: output as f64 / n,
        reusable_pct: if input == 0 {
            0.0
        } else {
            reusable as f64 * 100.0 / input as f64
        },
    }
}

/// The trace as JSONL text: one `{"timestamp", "input_length", "output_length",
/// "hash_ids"}` object a line.
pub fn to_jsonl(requests: &[SynthRequest]) -> Result<String, serde_json::Error> {
    let mut out = String::new();
    for r in requests {
        out.push_str(&serde_json::to_string(&r.record)?);
        out.push('\n');
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
