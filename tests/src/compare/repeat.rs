//! Repeated comparisons (`compare-routers --repeat N`): on a shared machine the tails move
//! more between runs than between routers, so one run per router cannot rank them. Each
//! round runs every router once, in an order rotated by the round (no router always runs
//! first, or right after the same one); this module sums the rounds up per router: the
//! median of every figure over the rounds it ran, the range of its TTFT p99, and how many
//! rounds its TTFT p50 and p99 were the lowest of all routers'.

use super::{Outcome, Router, Row};
use serde_json::{Value, json};

/// The routers of round `round` (0-based): `routers` rotated left by `round`.
pub fn round_order(routers: &[Router], round: usize) -> Vec<Router> {
    let mut order = routers.to_vec();
    if !order.is_empty() {
        let by = round % order.len();
        order.rotate_left(by);
    }
    order
}

/// One router over every round.
#[derive(Debug, Clone, PartialEq)]
pub struct Summary {
    pub router: Router,
    /// Rounds it ran in (not installed and failed rounds left out).
    pub runs: usize,
    pub hit_pct: Option<f64>,
    pub ttft_p50: Option<f64>,
    pub ttft_p99: Option<f64>,
    /// The lowest and highest TTFT p99 of its rounds.
    pub ttft_p99_range: Option<(f64, f64)>,
    pub itl_p99: Option<f64>,
    pub e2e_p99: Option<f64>,
    /// Rounds where its TTFT p50 (p99) was the lowest of the routers that ran.
    pub best_p50_rounds: usize,
    pub best_p99_rounds: usize,
    pub shed: u64,
    pub errors: u64,
    /// Medians of the tails by kind of request (`tails.rs`) and of the CPU per request.
    pub short_p99: Option<f64>,
    pub long_p99: Option<f64>,
    pub short_in_bursts_p99: Option<f64>,
    /// The router's CPU seconds per request sent, in ms (its own processes).
    pub cpu_ms_per_request: Option<f64>,
    /// Every round's router CPU per request, lowest and highest.
    pub cpu_range: Option<(f64, f64)>,
    /// Why it did not run, when it ran in no round.
    pub missing: Option<String>,
}

/// The median of `values` (the mean of the middle two for an even count); `None` when empty.
pub fn median(mut values: Vec<f64>) -> Option<f64> {
    values.retain(|v| v.is_finite());
    if values.is_empty() {
        return None;
    }
    values.sort_by(f64::total_cmp);
    let mid = values.len() / 2;
    Some(if values.len() % 2 == 1 {
        values[mid]
    } else {
        (values[mid - 1] + values[mid]) / 2.0
    })
}

/// Whether `router`'s figure was the lowest in `round` (ties count for each).
fn best_in(round: &[(Router, Outcome)], router: Router, figure: fn(&Row) -> Option<f64>) -> bool {
    let of = |r: Router| {
        round.iter().find_map(|(x, o)| match o {
            Outcome::Ran(row) if *x == r => figure(row),
            _ => None,
        })
    };
    let Some(mine) = of(router) else {
        return false;
    };
    round
        .iter()
        .filter_map(|(r, _)| of(*r))
        .all(|other| mine <= other)
}

/// Every router of `routers` summed up over `rounds`.
pub fn summarize(routers: &[Router], rounds: &[Vec<(Router, Outcome)>]) -> Vec<Summary> {
    routers
        .iter()
        .map(|&router| {
            let rows: Vec<&Row> = rounds
                .iter()
                .flat_map(|round| round.iter())
                .filter_map(|(r, o)| match o {
                    Outcome::Ran(row) if *r == router => Some(&**row),
                    _ => None,
                })
                .collect();
            let pick =
                |f: fn(&Row) -> Option<f64>| median(rows.iter().filter_map(|r| f(r)).collect());
            let range = range_of(rows.iter().filter_map(|r| r.ttft_p99).collect());
            let missing = rows.is_empty().then(|| {
                rounds
                    .iter()
                    .flat_map(|round| round.iter())
                    .find_map(|(r, o)| match o {
                        Outcome::NotInstalled(why) | Outcome::Failed(why) if *r == router => {
                            Some(why.lines().next().unwrap_or_default().to_owned())
                        }
                        _ => None,
                    })
                    .unwrap_or_default()
            });
            Summary {
                router,
                runs: rows.len(),
                hit_pct: pick(|r| r.hit_pct),
                ttft_p50: pick(|r| r.ttft_p50),
                ttft_p99: pick(|r| r.ttft_p99),
                ttft_p99_range: range,
                itl_p99: pick(|r| r.itl_p99),
                e2e_p99: pick(|r| r.e2e_p99),
                best_p50_rounds: rounds
                    .iter()
                    .filter(|round| best_in(round, router, |r| r.ttft_p50))
                    .count(),
                best_p99_rounds: rounds
                    .iter()
                    .filter(|round| best_in(round, router, |r| r.ttft_p99))
                    .count(),
                shed: rows.iter().map(|r| r.shed).sum(),
                errors: rows.iter().map(|r| r.errors).sum(),
                short_p99: pick(|r| r.tails.short.p99),
                long_p99: pick(|r| r.tails.long.p99),
                short_in_bursts_p99: pick(|r| r.tails.short_in_bursts.p99),
                cpu_ms_per_request: pick(cpu_per_request),
                cpu_range: range_of(rows.iter().filter_map(|r| cpu_per_request(r)).collect()),
                missing,
            }
        })
        .collect()
}

/// The router's CPU per request sent of one run, in ms.
fn cpu_per_request(row: &Row) -> Option<f64> {
    row.cpu.map(|c| c.router * 1000.0 / row.sent.max(1) as f64)
}

/// The lowest and highest of `values`, when there are any.
fn range_of(values: Vec<f64>) -> Option<(f64, f64)> {
    (!values.is_empty()).then(|| {
        let lo = values.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        (lo, hi)
    })
}

fn ms(v: Option<f64>) -> String {
    v.map_or_else(|| "-".to_owned(), |v| format!("{v:.0} ms"))
}

/// The second table over the rounds: medians of the tails by kind of request and of the
/// router's CPU per request, with its range.
pub fn tails_markdown(summaries: &[Summary]) -> String {
    let mut out = String::from(
        "| router | short prompts: TTFT p99 | long prompts: TTFT p99 | short prompts in bursts: \
         TTFT p99 | router CPU per request (range) |\n|---|---:|---:|---:|---:|\n",
    );
    for s in summaries.iter().filter(|s| s.missing.is_none()) {
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} |\n",
            s.router.name(),
            ms(s.short_p99),
            ms(s.long_p99),
            ms(s.short_in_bursts_p99),
            match (s.cpu_ms_per_request, s.cpu_range) {
                (Some(m), Some((lo, hi))) => format!("{m:.2} ms ({lo:.2}-{hi:.2})"),
                _ => "-".to_owned(),
            },
        ));
    }
    out
}

/// The markdown table over `rounds` rounds: medians, the p99 range, and rounds best.
pub fn markdown(summaries: &[Summary], rounds: usize) -> String {
    let mut out = format!(
        "Medians over {rounds} rounds (each router once per round, the order rotated).\n\n\
         | router | runs | prefix hit | TTFT p50 | TTFT p99 | TTFT p99 range | ITL p99 | \
         end-to-end p99 | lowest p50 / p99 (rounds) | shed | errors |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n"
    );
    for s in summaries {
        if let Some(why) = &s.missing {
            let why: String = why.chars().take(160).collect();
            out.push_str(&format!(
                "| {} | 0 | {why} | | | | | | | | |\n",
                s.router.name()
            ));
            continue;
        }
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} / {} | {} | {} |\n",
            s.router.name(),
            s.runs,
            s.hit_pct
                .map_or_else(|| "-".to_owned(), |h| format!("{h:.1} %")),
            ms(s.ttft_p50),
            ms(s.ttft_p99),
            s.ttft_p99_range
                .map_or_else(|| "-".to_owned(), |(lo, hi)| format!("{lo:.0}-{hi:.0} ms")),
            ms(s.itl_p99),
            ms(s.e2e_p99),
            s.best_p50_rounds,
            s.best_p99_rounds,
            s.shed,
            s.errors,
        ));
    }
    out
}

/// The summaries as JSON, for `summary.json`.
pub fn to_json(summaries: &[Summary], rounds: usize) -> Value {
    let rows: Vec<Value> = summaries
        .iter()
        .map(|s| {
            json!({
                "router": s.router.name(),
                "runs": s.runs,
                "prefix_hit_pct_median": s.hit_pct,
                "ttft_p50_ms_median": s.ttft_p50,
                "ttft_p99_ms_median": s.ttft_p99,
                "ttft_p99_ms_range": s.ttft_p99_range.map(|(lo, hi)| [lo, hi]),
                "itl_p99_ms_median": s.itl_p99,
                "e2e_p99_ms_median": s.e2e_p99,
                "lowest_ttft_p50_rounds": s.best_p50_rounds,
                "lowest_ttft_p99_rounds": s.best_p99_rounds,
                "shed": s.shed,
                "errors": s.errors,
                "short_ttft_p99_ms_median": s.short_p99,
                "long_ttft_p99_ms_median": s.long_p99,
                "short_in_bursts_ttft_p99_ms_median": s.short_in_bursts_p99,
                "router_cpu_ms_per_request_median": s.cpu_ms_per_request,
                "router_cpu_ms_per_request_range": s.cpu_range.map(|(lo, hi)| [lo, hi]),
                "missing": s.missing,
            })
        })
        .collect();
    json!({ "rounds": rounds, "routers": rows })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(router: Router, p50: f64, p99: f64) -> Outcome {
        Outcome::Ran(Box::new(Row {
            router,
            sent: 10,
            ok: 10,
            shed: 1,
            errors: 0,
            hit_pct: Some(80.0),
            ttft_p50: Some(p50),
            ttft_p99: Some(p99),
            itl_p99: Some(20.0),
            e2e_p99: Some(900.0),
            ttfts: Vec::new(),
            tails: Default::default(),
            stages: None,
            cpu: Some(crate::compare::fronts::RouterCpu {
                router: p50 / 10.0,
                balancer: 0.0,
            }),
            interrupted: false,
            notes: Vec::new(),
        }))
    }

    #[test]
    fn the_order_rotates_every_round() {
        let all = [Router::HaproxyRr, Router::Dynamo, Router::Switchyard1];
        assert_eq!(round_order(&all, 0), all.to_vec());
        assert_eq!(
            round_order(&all, 1),
            vec![Router::Dynamo, Router::Switchyard1, Router::HaproxyRr]
        );
        assert_eq!(round_order(&all, 3), all.to_vec());
        assert!(round_order(&[], 2).is_empty());
    }

    #[test]
    fn medians_ranges_and_rounds_won() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(vec![4.0, 1.0, 2.0, 3.0]), Some(2.5));
        assert_eq!(median(Vec::new()), None);
        let (a, b) = (Router::SglangGateway, Router::Switchyard1);
        let rounds = vec![
            vec![(a, row(a, 50.0, 200.0)), (b, row(b, 47.0, 120.0))],
            vec![(b, row(b, 49.0, 400.0)), (a, row(a, 51.0, 150.0))],
            vec![
                (a, row(a, 48.0, 180.0)),
                (b, Outcome::Failed("did not come up".to_owned())),
            ],
        ];
        let s = summarize(&[a, b], &rounds);
        assert_eq!((s[0].runs, s[1].runs), (3, 2));
        assert_eq!(s[0].ttft_p99, Some(180.0));
        assert_eq!(s[0].ttft_p99_range, Some((150.0, 200.0)));
        assert_eq!(s[1].ttft_p99, Some(260.0));
        assert_eq!((s[0].best_p50_rounds, s[0].best_p99_rounds), (1, 2));
        assert_eq!((s[1].best_p50_rounds, s[1].best_p99_rounds), (2, 1));
        assert_eq!(s[0].shed, 3);
        let table = markdown(&s, 3);
        assert!(
            table.contains("| switchyard-1 | 2 | 80.0 % | 48 ms | 260 ms | 120-400 ms |"),
            "{table}"
        );
        let missing = summarize(
            &[Router::VllmRouter],
            &[vec![(
                Router::VllmRouter,
                Outcome::NotInstalled("not installed: run scripts/install-peers.sh".to_owned()),
            )]],
        );
        assert_eq!(missing[0].runs, 0);
        assert!(markdown(&missing, 1).contains("| vllm-router | 0 | not installed"));
    }
}
