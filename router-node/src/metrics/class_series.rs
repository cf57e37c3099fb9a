//! One class's per-request series (requests by endpoint, admission latency, queue wait and
//! route time, time to first token, inter-token gaps, duration by outcome, prompt / cached /
//! output tokens), looked up once per class instead of once per observation: a family lookup builds a label vector and a string and hashes them, about
//! a dozen times per request otherwise. Each series is still created on its first use, so
//! `/metrics` shows exactly the series it showed before.

use super::RequestOutcome;
use super::families::{Counters, HistogramFamily, HttpFamilies, Labels};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::histogram::Histogram;
use std::collections::HashMap;
use std::sync::{Arc, OnceLock, RwLock};

/// Outcomes, in the order of [`RequestOutcome::index`].
const OUTCOMES: usize = 5;

/// A class's series, each created on first use.
#[derive(Debug, Default)]
pub(crate) struct ClassSeries {
    class: String,
    ttft: OnceLock<Histogram>,
    itl: OnceLock<Histogram>,
    duration: [OnceLock<Histogram>; OUTCOMES],
    prompt_tokens: OnceLock<Counter>,
    cached_tokens: OnceLock<Counter>,
    output_tokens: OnceLock<Counter>,
    /// `requests_total` by endpoint (`completions`, `chat_completions`).
    requests: [OnceLock<Counter>; 2],
    admission_latency: OnceLock<Histogram>,
    queue_wait: OnceLock<Histogram>,
    route: OnceLock<Histogram>,
}

fn class_labels(class: &str) -> Labels {
    vec![("class", class.to_owned())]
}

fn histogram<'a>(
    slot: &'a OnceLock<Histogram>,
    family: &HistogramFamily,
    labels: impl FnOnce() -> Labels,
) -> &'a Histogram {
    slot.get_or_init(|| family.get_or_create_owned(&labels()))
}

fn counter<'a>(slot: &'a OnceLock<Counter>, family: &Counters, class: &str) -> &'a Counter {
    slot.get_or_init(|| family.get_or_create_owned(&class_labels(class)))
}

impl ClassSeries {
    pub(crate) fn class(&self) -> &str {
        &self.class
    }

    pub(super) fn ttft(&self, http: &HttpFamilies) -> &Histogram {
        histogram(&self.ttft, &http.ttft, || class_labels(&self.class))
    }

    pub(super) fn itl(&self, http: &HttpFamilies) -> &Histogram {
        histogram(&self.itl, &http.itl, || class_labels(&self.class))
    }

    pub(super) fn duration(&self, http: &HttpFamilies, outcome: RequestOutcome) -> &Histogram {
        histogram(&self.duration[outcome.index()], &http.duration, || {
            let mut labels = class_labels(&self.class);
            labels.push(("outcome", outcome.label().to_owned()));
            labels
        })
    }

    pub(super) fn prompt_tokens(&self, http: &HttpFamilies) -> &Counter {
        counter(&self.prompt_tokens, &http.prompt_tokens, &self.class)
    }

    pub(super) fn cached_tokens(&self, http: &HttpFamilies) -> &Counter {
        counter(&self.cached_tokens, &http.cached_tokens, &self.class)
    }

    pub(super) fn output_tokens(&self, http: &HttpFamilies) -> &Counter {
        counter(&self.output_tokens, &http.output_tokens, &self.class)
    }

    /// `requests_total` of `endpoint` (any endpoint label; the two OpenAI routes' are kept).
    pub(super) fn requests(&self, http: &HttpFamilies, endpoint: &'static str) -> Counter {
        let labels = || {
            vec![
                ("endpoint", endpoint.to_owned()),
                ("class", self.class.clone()),
            ]
        };
        let slot = match endpoint {
            "completions" => &self.requests[0],
            "chat_completions" => &self.requests[1],
            _ => return http.requests.get_or_create_owned(&labels()),
        };
        slot.get_or_init(|| http.requests.get_or_create_owned(&labels()))
            .clone()
    }

    pub(super) fn admission_latency(&self, http: &HttpFamilies) -> &Histogram {
        histogram(&self.admission_latency, &http.admission_latency, || {
            class_labels(&self.class)
        })
    }

    pub(super) fn queue_wait(&self, http: &HttpFamilies) -> &Histogram {
        histogram(&self.queue_wait, &http.queue_wait, || {
            class_labels(&self.class)
        })
    }

    pub(super) fn route(&self, http: &HttpFamilies) -> &Histogram {
        histogram(&self.route, &http.route, || class_labels(&self.class))
    }
}

/// Every class's series seen so far (class names are bounded: the profile's and `unknown`).
#[derive(Debug, Default)]
pub(crate) struct ClassSeriesCache(RwLock<HashMap<String, Arc<ClassSeries>>>);

impl ClassSeriesCache {
    /// `class`'s series.
    pub(crate) fn get(&self, class: &str) -> Arc<ClassSeries> {
        if let Ok(known) = self.0.read()
            && let Some(series) = known.get(class)
        {
            return Arc::clone(series);
        }
        let fresh = || {
            Arc::new(ClassSeries {
                class: class.to_owned(),
                ..ClassSeries::default()
            })
        };
        match self.0.write() {
            Ok(mut known) => Arc::clone(known.entry(class.to_owned()).or_insert_with(fresh)),
            // A poisoned map still serves: series created here are the family's own.
            Err(_) => fresh(),
        }
    }
}
