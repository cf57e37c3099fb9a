//! `cluster-faults`: issue #11's fault scenarios as a command with a report. For each
//! scenario it starts a fresh fleet from the cluster harness (a real nats-server, N `serve`
//! replicas, M simulated workers, HAProxy), runs `router-tools bench` through HAProxy
//! (constant-rate synthetic load, every request recorded), injects the scenario's fault on a
//! timeline and prints a report: requests sent / ok / failed / shed before, during and after
//! the fault, the times to recover, the failed requests, every surviving replica's bookings,
//! reservations, queue and retries at the end, and each promise of the scenario kept or
//! broken; then a JSON line with every figure.
//!
//! ```sh
//! cargo build --release -p router-node
//! cargo run --release -p switchyard-system-tests --bin cluster-faults -- --scenario all
//! ```
//!
//! It runs the `router-node` of its own profile (`SWITCHYARD_ROUTER_NODE_BIN` for another),
//! the nats-server of `NATS_SERVER_BIN` or `.tools/nats`, the HAProxy of `HAPROXY_BIN` or
//! `.tools/haproxy` (`scripts/install-nats.sh`, `scripts/install-haproxy.sh`).
//!
//! Exit codes: 0 when every promise of every scenario held, 3 when one was broken, 2 for
//! usage errors.

use clap::Parser;
use std::process::ExitCode;
use std::time::Duration;
use switchyard_system_tests::faults::{FaultOptions, Scenario, run};

#[derive(Debug, Parser)]
#[command(
    name = "cluster-faults",
    about = "Fault scenarios through N replicas behind HAProxy, load from router-tools bench"
)]
struct Args {
    /// nats-outage, replica-kill, worker-kill, rolling-restart, or all (one after the other,
    /// each on a fresh fleet).
    #[arg(long, default_value = "all")]
    scenario: String,
    /// `serve` replicas behind HAProxy.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(2..=16))]
    replicas: u64,
    /// Simulated aggregated workers.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u64).range(2..=64))]
    workers: u64,
    /// Requests per second `router-tools bench` sends through HAProxy.
    #[arg(long, default_value_t = 40.0)]
    rate: f64,
    /// Prompt tokens of every request.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    prompt_tokens: u64,
    /// Output tokens of every request.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    max_tokens: u64,
    /// The simulated workers' speedup.
    #[arg(long, default_value_t = 10.0)]
    speedup: f64,
    /// Seconds of load before the fault.
    #[arg(long, default_value_t = 3.0)]
    before: f64,
    /// Seconds of load after the fleet is whole again.
    #[arg(long, default_value_t = 3.0)]
    after: f64,
    /// Seconds NATS stays down (nats-outage).
    #[arg(long, default_value_t = 10.0)]
    outage: f64,
}

fn seconds(name: &str, value: f64) -> Result<Duration, String> {
    Duration::try_from_secs_f64(value).map_err(|_| format!("--{name} must be a number of seconds"))
}

fn options(args: &Args) -> Result<(Vec<Scenario>, FaultOptions), String> {
    let scenarios = if args.scenario == "all" {
        Scenario::ALL.to_vec()
    } else {
        vec![Scenario::parse(&args.scenario).ok_or_else(|| {
            format!(
                "--scenario {:?}: one of nats-outage, replica-kill, worker-kill, \
                 rolling-restart, all",
                args.scenario
            )
        })?]
    };
    for (name, v) in [("rate", args.rate), ("speedup", args.speedup)] {
        if !(v.is_finite() && v > 0.0) {
            return Err(format!("--{name} must be a positive number"));
        }
    }
    let opts = FaultOptions {
        replicas: usize::try_from(args.replicas).unwrap_or(3),
        workers: usize::try_from(args.workers).unwrap_or(4),
        rate: args.rate,
        prompt_tokens: args.prompt_tokens,
        max_tokens: args.max_tokens,
        speedup: args.speedup,
        before: seconds("before", args.before)?,
        after: seconds("after", args.after)?,
        outage: seconds("outage", args.outage)?,
    };
    Ok((scenarios, opts))
}

fn main() -> ExitCode {
    let args = Args::parse();
    let (scenarios, opts) = match options(&args) {
        Ok(parsed) => parsed,
        Err(e) => {
            eprintln!("cluster-faults: {e}");
            return ExitCode::from(2);
        }
    };
    let runtime = match router_node::runtime::start("cluster-faults") {
        Ok(runtime) => runtime,
        Err(code) => return code,
    };
    let mut broken = 0;
    for scenario in scenarios {
        eprintln!("cluster-faults: running {} ...", scenario.name());
        let report = runtime.block_on(run(scenario, &opts));
        println!("{}", report.render());
        println!("{}\n", report.json());
        broken += report.broken().len();
        if let Some(outputs) = &report.outputs {
            eprintln!(
                "cluster-faults: {} broke a promise; the fleet's output:\n{outputs}",
                scenario.name()
            );
        }
    }
    if broken == 0 {
        ExitCode::SUCCESS
    } else {
        eprintln!("cluster-faults: {broken} promise(s) broken");
        ExitCode::from(3)
    }
}
