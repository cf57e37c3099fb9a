//! What a fault scenario measured: every request `router-tools bench` sent (its `--per-request`
//! records, read back from its JSON), cut into phases by send time (before / during / after
//! the fault), what the timeline saw (recovery times, notes), each surviving replica's state
//! at the end, and the scenario's promises, each kept or broken. [`FaultReport::render`]
//! prints it as a table; [`FaultReport::json`] as one JSON line.

use serde_json::{Value, json};
use std::fmt::Write as _;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch (how bench stamps its start).
pub fn unix_ms(t: SystemTime) -> f64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64() * 1e3)
}

/// One request bench sent.
#[derive(Debug, Clone, PartialEq)]
pub struct Sent {
    /// When it was sent, ms since the Unix epoch.
    pub at_ms: f64,
    /// When its answer ended, ms since the Unix epoch.
    pub end_ms: f64,
    /// `ok`, `shed` or `error`.
    pub outcome: String,
    pub status: Option<u64>,
    pub reason: Option<String>,
}

impl Sent {
    pub fn failed(&self) -> bool {
        self.outcome == "error"
    }

    pub fn shed(&self) -> bool {
        self.outcome == "shed"
    }

    /// Sent before `t` and still running at `t` (ms since the epoch).
    pub fn in_flight_at(&self, t: f64) -> bool {
        self.at_ms < t && self.end_ms >= t
    }

    fn describe(&self, origin: f64) -> String {
        format!(
            "sent at {:.2} s: {} {}",
            (self.at_ms - origin) / 1e3,
            self.status
                .map_or_else(|| "no response".to_owned(), |s| s.to_string()),
            self.reason.as_deref().unwrap_or("")
        )
    }
}

/// The requests of bench's `--json --per-request` result.
pub fn parse_bench(json: &Value) -> Result<Vec<Sent>, String> {
    let start = json["started_unix_ms"]
        .as_f64()
        .ok_or("bench's JSON has no started_unix_ms")?;
    let records = json["requests"]
        .as_array()
        .ok_or("bench's JSON has no requests (was --per-request given?)")?;
    Ok(records
        .iter()
        .map(|r| {
            let at_ms = start + r["sent_ms"].as_f64().unwrap_or(0.0);
            Sent {
                at_ms,
                end_ms: at_ms + r["e2e_ms"].as_f64().unwrap_or(0.0),
                outcome: r["outcome"].as_str().unwrap_or("error").to_owned(),
                status: r["status"].as_u64(),
                reason: r["reason"].as_str().map(str::to_owned),
            }
        })
        .collect())
}

/// Requests of one phase.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PhaseCounts {
    pub sent: usize,
    pub ok: usize,
    pub failed: usize,
    pub shed: usize,
}

/// A surviving replica at the end.
#[derive(Debug, Clone, PartialEq)]
pub struct ReplicaEnd {
    pub name: String,
    pub bookings: u64,
    pub reservations: u64,
    pub queued: u64,
    /// `switchyard_http_retries_total` over its classes.
    pub retries: f64,
}

/// One promise of the scenario and whether it held.
#[derive(Debug, Clone, PartialEq)]
pub struct Promise {
    pub what: String,
    pub kept: bool,
    /// What was measured.
    pub detail: String,
}

/// A scenario's run.
#[derive(Debug, Clone)]
pub struct FaultReport {
    pub scenario: String,
    pub setup: String,
    /// Bench's start (ms since the epoch): times are printed from here.
    pub origin_ms: f64,
    /// The fault's window (ms since the epoch).
    pub fault_ms: (f64, f64),
    pub requests: Vec<Sent>,
    /// Named durations the timeline measured (e.g. "HAProxy saw it down").
    pub recovery: Vec<(String, Duration)>,
    pub notes: Vec<String>,
    pub replicas: Vec<ReplicaEnd>,
    /// How long after the load stopped every surviving ledger was idle (`None`: never).
    pub idle_after: Option<Duration>,
    pub promises: Vec<Promise>,
    /// Every process's output, kept when a promise was broken.
    pub outputs: Option<String>,
}

impl FaultReport {
    /// Before, during and after the fault, by send time.
    pub fn phases(&self) -> [(&'static str, PhaseCounts); 3] {
        let (from, to) = self.fault_ms;
        let count = |keep: &dyn Fn(f64) -> bool| {
            let mut c = PhaseCounts::default();
            for r in self.requests.iter().filter(|r| keep(r.at_ms)) {
                c.sent += 1;
                match r.outcome.as_str() {
                    "ok" => c.ok += 1,
                    "shed" => c.shed += 1,
                    _ => c.failed += 1,
                }
            }
            c
        };
        [
            ("before", count(&|t| t < from)),
            ("during", count(&|t| (from..to).contains(&t))),
            ("after", count(&|t| t >= to)),
        ]
    }

    /// Adds a promise.
    pub fn promise(&mut self, what: &str, kept: bool, detail: String) {
        self.promises.push(Promise {
            what: what.to_owned(),
            kept,
            detail,
        });
    }

    /// The promises that did not hold.
    pub fn broken(&self) -> Vec<&Promise> {
        self.promises.iter().filter(|p| !p.kept).collect()
    }

    /// The failed and shed requests, described.
    pub fn failures(&self) -> Vec<String> {
        self.requests
            .iter()
            .filter(|r| r.failed() || r.shed())
            .map(|r| r.describe(self.origin_ms))
            .collect()
    }

    pub fn render(&self) -> String {
        let mut s = String::new();
        let secs = |t: f64| (t - self.origin_ms) / 1e3;
        let _ = writeln!(s, "scenario {}: {}", self.scenario, self.setup);
        let _ = writeln!(
            s,
            "fault from {:.2} s to {:.2} s after bench started\n",
            secs(self.fault_ms.0),
            secs(self.fault_ms.1)
        );
        let _ = writeln!(
            s,
            "{:<8} {:>7} {:>7} {:>7} {:>7}",
            "phase", "sent", "ok", "failed", "shed"
        );
        for (name, c) in self.phases() {
            let _ = writeln!(
                s,
                "{name:<8} {:>7} {:>7} {:>7} {:>7}",
                c.sent, c.ok, c.failed, c.shed
            );
        }
        let _ = writeln!(s);
        for (what, took) in &self.recovery {
            let _ = writeln!(s, "{what}: {:.3} s", took.as_secs_f64());
        }
        for note in &self.notes {
            let _ = writeln!(s, "{note}");
        }
        let failures = self.failures();
        if failures.is_empty() {
            let _ = writeln!(s, "failed or shed requests: none");
        } else {
            let _ = writeln!(s, "failed or shed requests ({}):", failures.len());
            for f in failures.iter().take(20) {
                let _ = writeln!(s, "  {f}");
            }
        }
        let idle = self.idle_after.map_or_else(
            || "not idle".to_owned(),
            |d| format!("idle {:.1} s after the load stopped", d.as_secs_f64()),
        );
        let _ = writeln!(s, "\nsurviving replicas at the end ({idle}):");
        for r in &self.replicas {
            let _ = writeln!(
                s,
                "  {}: bookings {}, reservations {}, queued {}, retries {}",
                r.name, r.bookings, r.reservations, r.queued, r.retries
            );
        }
        let _ = writeln!(s, "\npromises:");
        for p in &self.promises {
            let mark = if p.kept { "kept  " } else { "BROKEN" };
            let _ = writeln!(s, "  [{mark}] {} ({})", p.what, p.detail);
        }
        s
    }

    /// Every figure as one JSON value.
    pub fn json(&self) -> Value {
        let phases: Vec<Value> = self
            .phases()
            .iter()
            .map(|(name, c)| {
                json!({"phase": name, "sent": c.sent, "ok": c.ok, "failed": c.failed,
                       "shed": c.shed})
            })
            .collect();
        json!({
            "scenario": self.scenario,
            "setup": self.setup,
            "fault_s": [(self.fault_ms.0 - self.origin_ms) / 1e3,
                        (self.fault_ms.1 - self.origin_ms) / 1e3],
            "phases": phases,
            "recovery_s": self.recovery.iter()
                .map(|(k, d)| json!({"what": k, "s": d.as_secs_f64()}))
                .collect::<Vec<_>>(),
            "failures": self.failures(),
            "replicas": self.replicas.iter().map(|r| json!({
                "name": r.name, "bookings": r.bookings, "reservations": r.reservations,
                "queued": r.queued, "retries": r.retries})).collect::<Vec<_>>(),
            "idle_after_s": self.idle_after.map(|d| d.as_secs_f64()),
            "promises": self.promises.iter().map(|p| json!({
                "what": p.what, "kept": p.kept, "detail": p.detail})).collect::<Vec<_>>(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_fall_in_the_phase_of_their_send_time() {
        let bench = json!({"started_unix_ms": 1000, "requests": [
            {"sent_ms": 0, "e2e_ms": 10, "outcome": "ok", "status": 200},
            {"sent_ms": 500, "e2e_ms": 900, "outcome": "error", "status": 502,
             "reason": "http_502"},
            {"sent_ms": 1500, "e2e_ms": 10, "outcome": "shed", "status": 503,
             "reason": "no_capacity"},
            {"sent_ms": 2500, "e2e_ms": 10, "outcome": "ok", "status": 200}]});
        let requests = parse_bench(&bench).expect("records");
        assert!(requests[1].in_flight_at(1600.0));
        assert!(!requests[0].in_flight_at(1600.0));
        let mut report = FaultReport {
            scenario: "test".into(),
            setup: String::new(),
            origin_ms: 1000.0,
            fault_ms: (1400.0, 2600.0),
            requests,
            recovery: Vec::new(),
            notes: Vec::new(),
            replicas: Vec::new(),
            idle_after: None,
            promises: Vec::new(),
            outputs: None,
        };
        let [before, during, after] = report.phases();
        let counts = |sent, ok, failed, shed| PhaseCounts {
            sent,
            ok,
            failed,
            shed,
        };
        assert_eq!(before.1, counts(1, 1, 0, 0));
        assert_eq!(during.1, counts(2, 0, 1, 1));
        assert_eq!(after.1, counts(1, 1, 0, 0));
        assert_eq!(report.failures().len(), 2);
        report.promise("a", true, String::new());
        report.promise("b", false, "why".into());
        assert_eq!(report.broken().len(), 1);
        let text = report.render();
        assert!(text.contains("[BROKEN] b (why)"), "{text}");
        assert!(parse_bench(&json!({"started_unix_ms": 1})).is_err());
    }
}
