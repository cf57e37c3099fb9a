//! The plots of a bench run, as SVG files beside its JSON (`--plots DIR`, or `--json`'s
//! folder with the JSON's name as a prefix): what each chart shows is computed here from the
//! run's request records and queue samples ([`charts`]); `svg.rs` draws it.
//!
//! - `ttft-cdf`, `e2e-cdf`: the share of a class's ok requests whose TTFT (end to end) was
//!   at most x ms, one line per class (and `all` when there are several).
//! - `throughput`: output tokens per second of ok requests over the run, by the time each
//!   answer ended, in buckets of [`bucket_secs`].
//! - `requests`: ok, shed and failed requests per second, by the time each one ended.
//! - `hit-rate`: cached over prompt tokens of the ok requests ending in each bucket, in %,
//!   when the endpoint reported cached tokens.
//! - `queue-depth`: requests waiting per class, sampled from the node's `/metrics`
//!   (`queue.rs`), when the endpoint is a Switchyard node.
//!
//! A chart without a point (no ok request, no cache report, not our endpoint) is not drawn.

mod svg;

/// Draws a [`Chart`] as SVG text (e.g. one made of several runs, as `compare-routers` does).
pub use svg::render;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::BenchError;
use super::queue::QueueSample;
use super::record::{RecordOutcome, RequestRecord};

/// At most this many points on one CDF line (evenly spaced quantiles beyond).
const CDF_POINTS: usize = 400;
/// About this many time buckets over a run.
const TIME_BUCKETS: f64 = 60.0;

/// Where the plots go: `dir/{prefix}{chart}.svg`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlotTarget {
    pub dir: PathBuf,
    pub prefix: String,
}

impl PlotTarget {
    /// Beside the JSON result `json`, named after it: `run.json` → `run-ttft-cdf.svg`.
    pub fn beside(json: &Path) -> Self {
        let dir = json
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .map_or_else(|| PathBuf::from("."), Path::to_path_buf);
        let stem = json
            .file_stem()
            .map_or_else(|| "bench".to_owned(), |s| s.to_string_lossy().into_owned());
        Self {
            dir,
            prefix: format!("{stem}-"),
        }
    }

    /// In `dir`, without a prefix.
    pub fn in_dir(dir: impl Into<PathBuf>) -> Self {
        Self {
            dir: dir.into(),
            prefix: String::new(),
        }
    }

    fn path(&self, file: &str) -> PathBuf {
        self.dir.join(format!("{}{file}.svg", self.prefix))
    }
}

/// One line of a chart.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

/// One chart: its file name (without `.svg`), titles and lines.
#[derive(Debug, Clone, PartialEq)]
pub struct Chart {
    pub file: &'static str,
    pub title: String,
    pub x_label: &'static str,
    pub y_label: &'static str,
    /// A CDF (y from 0 to 1, legend at the lower right) or a time series.
    pub cdf: bool,
    pub series: Vec<Series>,
}

/// The width of the time buckets for a run lasting `secs`: a round number of seconds, at
/// least 1, giving about [`TIME_BUCKETS`] buckets.
pub fn bucket_secs(secs: f64) -> f64 {
    const NICE: [f64; 10] = [1.0, 2.0, 5.0, 10.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0];
    let want = secs / TIME_BUCKETS;
    NICE.into_iter().find(|&w| w >= want).unwrap_or(600.0)
}

/// The empirical CDF of `values` as (value, share at or below it), at most [`CDF_POINTS`]
/// points, one per distinct value.
pub fn cdf(mut values: Vec<f64>) -> Vec<(f64, f64)> {
    values.retain(|v| v.is_finite());
    values.sort_by(f64::total_cmp);
    let n = values.len();
    if n == 0 {
        return Vec::new();
    }
    let steps = n.min(CDF_POINTS);
    let mut points: Vec<(f64, f64)> = Vec::with_capacity(steps);
    for k in 1..=steps {
        let i = (k * n).div_ceil(steps) - 1;
        let Some(&v) = values.get(i) else { continue };
        let point = (v, (i + 1) as f64 / n as f64);
        // Equal values are one step: only its top is kept.
        match points.last_mut() {
            Some(last) if last.0 == v => *last = point,
            _ => points.push(point),
        }
    }
    points
}

/// The classes of `records` in first-seen order, with `all` last when there are several.
fn groups(records: &[RequestRecord]) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for r in records {
        if !names.contains(&r.class) {
            names.push(r.class.clone());
        }
    }
    if names.len() > 1 {
        names.push("all".to_owned());
    }
    names
}

fn in_group(r: &RequestRecord, group: &str) -> bool {
    group == "all" || r.class == group
}

fn cdf_chart(
    records: &[RequestRecord],
    file: &'static str,
    title: &str,
    value: fn(&RequestRecord) -> Option<f64>,
) -> Chart {
    let series = groups(records)
        .into_iter()
        .map(|g| Series {
            points: cdf(records
                .iter()
                .filter(|r| r.outcome == RecordOutcome::Ok && in_group(r, &g))
                .filter_map(value)
                .collect()),
            name: g,
        })
        .filter(|s| !s.points.is_empty())
        .collect();
    Chart {
        file,
        title: title.to_owned(),
        x_label: "ms",
        y_label: "share of ok requests",
        cdf: true,
        series,
    }
}

/// Sums `value` of the records ending in each bucket of `width` seconds, then maps each
/// bucket's sums with `point` (`None`: no point there); points at the buckets' middles.
fn buckets<'a>(
    records: impl Iterator<Item = &'a RequestRecord>,
    width: f64,
    value: impl Fn(&RequestRecord) -> (f64, f64),
    point: impl Fn((f64, f64)) -> Option<f64>,
    n: usize,
) -> Vec<(f64, f64)> {
    let mut sums = vec![(0.0, 0.0); n];
    for r in records {
        let b = ((r.done_ms() / 1e3 / width).floor().max(0.0) as usize).min(n - 1);
        if let Some(sum) = sums.get_mut(b) {
            let (a, c) = value(r);
            sum.0 += a;
            sum.1 += c;
        }
    }
    sums.into_iter()
        .enumerate()
        .filter_map(|(b, s)| point(s).map(|y| ((b as f64 + 0.5) * width, y)))
        .collect()
}

/// Every chart of a run with a point to show.
pub fn charts(records: &[RequestRecord], queue: &[QueueSample]) -> Vec<Chart> {
    let mut out = vec![
        cdf_chart(records, "ttft-cdf", "Time to first token (CDF)", |r| {
            r.ttft_ms
        }),
        cdf_chart(records, "e2e-cdf", "End-to-end latency (CDF)", |r| {
            Some(r.e2e_ms)
        }),
    ];
    let end_s = records
        .iter()
        .map(|r| r.done_ms() / 1e3)
        .fold(0.0, f64::max);
    let width = bucket_secs(end_s);
    let n = (end_s / width).floor() as usize + 1;
    let ok = |r: &&RequestRecord| r.outcome == RecordOutcome::Ok;
    let per_s = |(sum, _): (f64, f64)| Some(sum / width);
    let mut throughput = Vec::new();
    let mut hits = Vec::new();
    for g in groups(records) {
        let of = |r: &&RequestRecord| ok(r) && in_group(r, &g);
        let tokens = |r: &RequestRecord| (r.output_tokens.unwrap_or(0) as f64, 0.0);
        throughput.push(Series {
            points: buckets(records.iter().filter(of), width, tokens, per_s, n),
            name: g.clone(),
        });
        let cached = |r: &RequestRecord| match (r.prompt_tokens, r.cached_tokens) {
            (Some(p), Some(c)) => (c as f64, p as f64),
            _ => (0.0, 0.0),
        };
        let pct = |(c, p): (f64, f64)| (p > 0.0).then(|| c * 100.0 / p);
        if records.iter().filter(of).any(|r| r.cached_tokens.is_some()) {
            hits.push(Series {
                points: buckets(records.iter().filter(of), width, cached, pct, n),
                name: g,
            });
        }
    }
    let one = |_: &RequestRecord| (1.0, 0.0);
    let mut requests = Vec::new();
    for (name, outcome) in [
        ("ok", RecordOutcome::Ok),
        ("shed", RecordOutcome::Shed),
        ("errors", RecordOutcome::Error),
    ] {
        let of = |r: &&RequestRecord| r.outcome == outcome;
        if name == "ok" || records.iter().any(|r| of(&r)) {
            requests.push(Series {
                name: name.to_owned(),
                points: buckets(records.iter().filter(of), width, one, per_s, n),
            });
        }
    }
    let time = |file, title: &str, y_label, series| Chart {
        file,
        title: title.to_owned(),
        x_label: "seconds into the run",
        y_label,
        cdf: false,
        series,
    };
    let nothing_ok = !records.iter().any(|r| r.outcome == RecordOutcome::Ok);
    if !nothing_ok {
        out.push(time(
            "throughput",
            &format!("Output tokens per second ({width} s buckets)"),
            "output tokens / s",
            throughput,
        ));
    }
    if !records.is_empty() {
        out.push(time(
            "requests",
            &format!("Requests ending per second ({width} s buckets)"),
            "requests / s",
            requests,
        ));
    }
    out.push(time(
        "hit-rate",
        &format!("Prefix cache hit rate ({width} s buckets)"),
        "cached / prompt tokens, %",
        hits,
    ));
    let mut depth: BTreeMap<&str, Vec<(f64, f64)>> = BTreeMap::new();
    for sample in queue {
        for (class, d) in &sample.depth {
            depth
                .entry(class)
                .or_default()
                .push((sample.t_ms / 1e3, *d));
        }
    }
    out.push(time(
        "queue-depth",
        "Requests waiting in the node's class queues",
        "requests waiting",
        depth
            .into_iter()
            .map(|(name, points)| Series {
                name: name.to_owned(),
                points,
            })
            .collect(),
    ));
    out.retain(|c| c.series.iter().any(|s| !s.points.is_empty()));
    out
}

/// Draws every chart of the run into `target`; the files written.
pub fn write(
    target: &PlotTarget,
    records: &[RequestRecord],
    queue: &[QueueSample],
) -> Result<Vec<PathBuf>, BenchError> {
    std::fs::create_dir_all(&target.dir).map_err(|e| BenchError::WritePlots {
        path: target.dir.clone(),
        message: e.to_string(),
    })?;
    let mut written = Vec::new();
    for chart in charts(records, queue) {
        let path = target.path(chart.file);
        let failed = |message: String| BenchError::WritePlots {
            path: path.clone(),
            message,
        };
        let text = svg::render(&chart).map_err(failed)?;
        std::fs::write(&path, text).map_err(|e| failed(e.to_string()))?;
        written.push(path);
    }
    Ok(written)
}

#[cfg(test)]
mod tests;
