//! `router-tools trace synth`: its flags, the trace written (to `--output`, or stdout) and a
//! summary line on stderr (requests, sessions, span, mean lengths, the prefix share a cache
//! that never evicts would hit). The generation itself is `router_tools::bench::synth`.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Subcommand};
use router_tools::bench::synth::{self, ArrivalProcess, Dist, SynthParams};

#[derive(Debug, Subcommand)]
pub enum TraceCommand {
    /// Write a synthetic Mooncake JSONL trace (`timestamp` ms, `input_length`,
    /// `output_length`, `hash_ids`) for `router-tools bench --trace`: multi-turn sessions
    /// under shared system prompts, arriving at a rate. Same flags and seed, same trace.
    Synth(SynthArgs),
}

#[derive(Debug, Args)]
pub struct SynthArgs {
    /// Where to write the trace (default: standard output).
    #[arg(long, short = 'o', value_name = "PATH")]
    output: Option<PathBuf>,
    /// Distinct system prompts.
    #[arg(long, default_value_t = 4)]
    system_prompts: u32,
    /// Length of every system prompt, in blocks (0: no shared system prompt).
    #[arg(long, default_value_t = 4, value_name = "BLOCKS")]
    system_prompt_blocks: u32,
    /// Sessions (conversations) opened with each system prompt: the fan-out.
    #[arg(long, default_value_t = 8)]
    sessions_per_prompt: u32,
    /// Turns per session, the conversation depth: N, uniform:MIN:MAX, exp:MEAN or
    /// lognormal:MEAN:SIGMA. Each turn's prompt extends the previous turn's with its answer
    /// and a new user message.
    #[arg(long, default_value = "4", value_name = "DIST", value_parser = Dist::parse)]
    turns: Dist,
    /// Tokens of each turn's new user message (a distribution, as for --turns).
    #[arg(long, default_value = "uniform:64:512", value_name = "DIST", value_parser = Dist::parse)]
    user_tokens: Dist,
    /// Output tokens of each request (a distribution, as for --turns).
    #[arg(long, default_value = "uniform:32:256", value_name = "DIST", value_parser = Dist::parse)]
    output_tokens: Dist,
    /// Tokens per hash id (give bench the same --block-tokens).
    #[arg(long, default_value_t = 512)]
    block_tokens: u64,
    /// How requests arrive: a Poisson process, or evenly spaced.
    #[arg(long, value_enum, default_value_t = ArrivalProcess::Poisson)]
    arrival: ArrivalProcess,
    /// Requests per second (the mean rate for poisson).
    #[arg(long, default_value_t = 1.0, value_name = "PER_SECOND")]
    rate: f64,
    /// Sessions open at a time: each arrival is the next turn of one of them, drawn at
    /// random, so a session's turns come about N / rate seconds apart.
    #[arg(long, default_value_t = 8, value_name = "N")]
    concurrent_sessions: u32,
    /// A session ends before a turn whose prompt would be longer than this.
    #[arg(long, default_value_t = 32_768, value_name = "TOKENS")]
    max_input_tokens: u64,
    /// Seed of every draw (same seed, same trace).
    #[arg(long, default_value_t = 7)]
    seed: u64,
}

pub fn run(command: TraceCommand) -> ExitCode {
    match command {
        TraceCommand::Synth(args) => synth(args),
    }
}

fn synth(args: SynthArgs) -> ExitCode {
    let params = SynthParams {
        seed: args.seed,
        system_prompts: args.system_prompts,
        system_prompt_blocks: args.system_prompt_blocks,
        sessions_per_prompt: args.sessions_per_prompt,
        turns: args.turns,
        user_tokens: args.user_tokens,
        output_tokens: args.output_tokens,
        block_tokens: args.block_tokens,
        arrival: args.arrival,
        rate: args.rate,
        concurrent_sessions: args.concurrent_sessions,
        max_input_tokens: args.max_input_tokens,
    };
    let requests = match synth::generate(&params) {
        Ok(requests) => requests,
        Err(e) => {
            eprintln!("router-tools trace synth: {e}");
            return ExitCode::from(2);
        }
    };
    let text = match synth::to_jsonl(&requests) {
        Ok(text) => text,
        Err(e) => {
            eprintln!("router-tools trace synth: encoding the trace: {e}");
            return ExitCode::from(1);
        }
    };
    let written = match &args.output {
        Some(path) => std::fs::write(path, &text).map_err(|e| format!("{}: {e}", path.display())),
        None => std::io::stdout()
            .lock()
            .write_all(text.as_bytes())
            .map_err(|e| format!("standard output: {e}")),
    };
    if let Err(e) = written {
        eprintln!("router-tools trace synth: cannot write the trace to {e}");
        return ExitCode::from(1);
    }
    let s = synth::summarize(&requests, params.block_tokens);
    eprintln!(
        "router-tools trace synth: {} requests in {} sessions over {:.1} s; mean input {:.0} \
         tokens, mean output {:.0}; {:.1} % of prompt tokens in blocks an earlier request had \
         (the hit rate of a cache that never evicts)",
        s.requests, s.sessions, s.duration_s, s.mean_input, s.mean_output, s.reusable_pct
    );
    ExitCode::SUCCESS
}
