//! What an engine says about its capacity and load, read from its own reports (pure).
//!
//! - vLLM's Prometheus `/metrics`: `vllm:cache_config_info{block_size, num_gpu_blocks, ...} 1`
//!   gives the KV block size and the blocks per rank; `vllm:num_requests_running`,
//!   `vllm:num_requests_waiting` and `vllm:kv_cache_usage_perc` (0-1) the load. Every series is
//!   labelled by `engine`, the data-parallel rank.
//! - SGLang's `/metrics`: `sglang:num_running_reqs`, `sglang:num_queue_reqs` and
//!   `sglang:token_usage` (0-1), labelled by `dp_rank` when it runs several; its capacity comes
//!   from its server-info JSON (`page_size`, `max_total_num_tokens`).
//!
//! This load is the engine's own view, kept apart from the router's bookings: it is shown and
//! exported, never added to the ledger.

use prom_text_format_parser::{Metric, ScrapeParseError, parse_scrape};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// KV capacity per rank as the engine reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Capacity {
    /// Tokens per KV block.
    pub block_size: u32,
    /// KV blocks per data-parallel rank.
    pub blocks: u64,
}

/// One rank's load as the engine reports it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct RankLoad {
    pub running: u64,
    pub waiting: u64,
    /// KV cache in use, 0-1.
    pub kv_usage: f64,
}

/// One scrape, read.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct EngineReport {
    /// From vLLM's cache config series (SGLang: `None`, see [`sglang_capacity`]).
    pub capacity: Option<Capacity>,
    /// By data-parallel rank.
    pub ranks: BTreeMap<u32, RankLoad>,
    /// Prompt tokens the engine has prefilled since it started, over all ranks (vLLM's and
    /// SGLang's `prompt_tokens_total` counter), when it reports them: an engine whose count
    /// grows serves requests, so it should be storing KV blocks and saying so.
    pub prompt_tokens: Option<u64>,
    /// Its LoRA adapter slots (vLLM's `vllm:lora_requests_info`: the newest sample's
    /// `running_lora_adapters` and `max_lora`), when it reports them.
    pub adapters: Option<router_core::AdapterResidency>,
    /// Lines the parser could not read (the rest of the scrape is still used).
    pub unreadable: usize,
}

/// Which engine's metric names to read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EngineKind {
    Vllm,
    Sglang,
}

impl EngineKind {
    pub fn name(self) -> &'static str {
        match self {
            Self::Vllm => "vllm",
            Self::Sglang => "sglang",
        }
    }
}

struct Names {
    prompt_tokens: &'static str,
    running: &'static str,
    waiting: &'static str,
    usage: &'static str,
    rank_label: &'static str,
}

fn names(kind: EngineKind) -> Names {
    match kind {
        EngineKind::Vllm => Names {
            prompt_tokens: "vllm:prompt_tokens",
            running: "vllm:num_requests_running",
            waiting: "vllm:num_requests_waiting",
            usage: "vllm:kv_cache_usage_perc",
            rank_label: "engine",
        },
        EngineKind::Sglang => Names {
            prompt_tokens: "sglang:prompt_tokens",
            running: "sglang:num_running_reqs",
            waiting: "sglang:num_queue_reqs",
            usage: "sglang:token_usage",
            rank_label: "dp_rank",
        },
    }
}

fn label<'a>(labels: &'a [prom_text_format_parser::Label], key: &str) -> Option<&'a str> {
    labels
        .iter()
        .find(|l| l.key == key)
        .map(|l| l.value.as_str())
}

/// Non-negative finite values as counts; anything else as 0.
fn count(value: f64) -> u64 {
    if value.is_finite() && value > 0.0 {
        value.round() as u64
    } else {
        0
    }
}

/// Reads one `/metrics` scrape of a `kind` engine.
pub fn read_metrics(kind: EngineKind, text: &str) -> EngineReport {
    let (metrics, errors) = parse_scrape(text);
    let mut report = EngineReport {
        unreadable: match errors {
            None => 0,
            Some(ScrapeParseError::Collect(lines)) => lines.len(),
            // The text as a whole is not the exposition format: nothing was read.
            Some(ScrapeParseError::Parse(_)) => text.lines().count().max(1),
        },
        ..EngineReport::default()
    };
    let names = names(kind);
    for metric in &metrics {
        if kind == EngineKind::Vllm && metric.name == "vllm:cache_config_info" {
            report.capacity = report.capacity.or_else(|| vllm_capacity(metric));
            continue;
        }
        if kind == EngineKind::Vllm && metric.name == "vllm:lora_requests_info" {
            report.adapters = vllm_adapters(metric);
            continue;
        }
        // A counter: the parser may give its family name or the sample's `_total` one.
        if metric.name.strip_suffix("_total").unwrap_or(&metric.name) == names.prompt_tokens {
            let total: f64 = metric
                .samples
                .iter()
                .filter_map(|s| s.value.value.as_str().parse::<f64>().ok())
                .map(|v| count(v) as f64)
                .sum();
            report.prompt_tokens = Some(report.prompt_tokens.unwrap_or(0) + count(total));
            continue;
        }
        let field: fn(&mut RankLoad, f64) = if metric.name == names.running {
            |r, v| r.running = count(v)
        } else if metric.name == names.waiting {
            |r, v| r.waiting = count(v)
        } else if metric.name == names.usage {
            |r, v| {
                r.kv_usage = if v.is_finite() {
                    v.clamp(0.0, 1.0)
                } else {
                    0.0
                }
            }
        } else {
            continue;
        };
        for sample in &metric.samples {
            let rank = label(&sample.labels, names.rank_label)
                .and_then(|r| r.parse::<u32>().ok())
                .unwrap_or(0);
            let Ok(value) = sample.value.value.as_str().parse::<f64>() else {
                report.unreadable += 1;
                continue;
            };
            field(report.ranks.entry(rank).or_default(), value);
        }
    }
    report
}

/// vLLM's adapter slots: the gauge's value is the time of each state it saw, so the newest
/// sample is the current one (`running_lora_adapters` comma-separated, `max_lora`).
fn vllm_adapters(metric: &Metric) -> Option<router_core::AdapterResidency> {
    let newest = metric
        .samples
        .iter()
        .filter_map(|s| Some((s.value.value.as_str().parse::<f64>().ok()?, s)))
        .filter(|(v, _)| v.is_finite())
        .max_by(|a, b| a.0.total_cmp(&b.0))?
        .1;
    let running = label(&newest.labels, "running_lora_adapters")
        .unwrap_or_default()
        .split(',')
        .map(str::trim)
        .filter(|a| !a.is_empty() && a.len() <= router_core::worker::MAX_MODEL_NAME)
        .take(router_core::worker::MAX_LORAS)
        .map(str::to_owned)
        .collect();
    let slots = label(&newest.labels, "max_lora").and_then(|m| m.parse().ok());
    Some(router_core::AdapterResidency { running, slots })
}

/// vLLM keeps one of its `num_gpu_blocks` as a null block that never holds KV: the usable
/// capacity is one less.
fn vllm_capacity(metric: &Metric) -> Option<Capacity> {
    let sample = metric.samples.first()?;
    let block_size = label(&sample.labels, "block_size")?.parse().ok()?;
    let blocks: u64 = label(&sample.labels, "num_gpu_blocks")?.parse().ok()?;
    Some(Capacity {
        block_size,
        blocks: blocks.saturating_sub(1),
    })
}

/// SGLang's server info: its page (block) size and token capacity, at the top level (the
/// scheduler's info merged in) or in the first rank's `internal_states`.
#[derive(Debug, Clone, Deserialize)]
struct SglangInfo {
    page_size: Option<u32>,
    max_total_num_tokens: Option<u64>,
    #[serde(default)]
    internal_states: Vec<SglangState>,
}

#[derive(Debug, Clone, Deserialize)]
struct SglangState {
    max_total_num_tokens: Option<u64>,
}

/// Reads SGLang's server-info JSON into a capacity (`None`: the fields are missing). A page
/// size left unset is 1 token, SGLang's own default.
pub fn sglang_capacity(json: &[u8]) -> Option<Capacity> {
    let info: SglangInfo = serde_json::from_slice(json).ok()?;
    let block_size = info.page_size.unwrap_or(1).max(1);
    let tokens = info
        .max_total_num_tokens
        .or_else(|| info.internal_states.first()?.max_total_num_tokens)?;
    Some(Capacity {
        block_size,
        blocks: tokens / u64::from(block_size),
    })
}

/// One entry of an OpenAI `/v1/models` answer: its name, the base model of an adapter
/// (vLLM lists each loaded LoRA adapter with `parent`), its context length.
#[derive(Debug, Clone, Deserialize)]
struct ModelEntry {
    id: String,
    #[serde(default)]
    parent: Option<String>,
    max_model_len: Option<u64>,
}

#[derive(Debug, Clone, Deserialize)]
struct ModelList {
    data: Vec<ModelEntry>,
}

/// What an engine serves, from its `/v1/models` answer.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ServedModels {
    /// The base model's name (the first entry without a `parent`).
    pub base: Option<String>,
    /// Its LoRA adapters (the entries with a `parent`), sorted.
    pub adapters: Vec<String>,
    /// The longest sequence it takes (vLLM's and SGLang's entries carry `max_model_len`):
    /// the smallest among its entries, `None` when none says.
    pub max_model_len: Option<u64>,
}

/// Reads a `/v1/models` answer; `None` when it is not an OpenAI model list.
pub fn read_models(json: &[u8]) -> Option<ServedModels> {
    let list: ModelList = serde_json::from_slice(json).ok()?;
    let usable = |id: &String| !id.is_empty() && id.len() <= router_core::worker::MAX_MODEL_NAME;
    let base = list
        .data
        .iter()
        .find(|m| m.parent.is_none() && usable(&m.id))
        .map(|m| m.id.clone());
    let mut adapters: Vec<String> = list
        .data
        .iter()
        .filter(|m| m.parent.is_some() && usable(&m.id))
        .map(|m| m.id.clone())
        .take(router_core::worker::MAX_LORAS)
        .collect();
    adapters.sort();
    adapters.dedup();
    let max_model_len = list
        .data
        .iter()
        .filter_map(|m| m.max_model_len)
        .filter(|&n| n > 0)
        .min();
    Some(ServedModels {
        base,
        adapters,
        max_model_len,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_adapter_slots_are_the_newest_sample_of_the_lora_gauge() {
        let text = "# TYPE vllm:lora_requests_info gauge\n\
            vllm:lora_requests_info{max_lora=\"2\",running_lora_adapters=\"sql,chat\",waiting_lora_adapters=\"\"} 1.7964687529705534e+09\n\
            vllm:lora_requests_info{max_lora=\"2\",running_lora_adapters=\"\",waiting_lora_adapters=\"\"} 1.796468752980275e+09\n\
            vllm:lora_requests_info{max_lora=\"2\",running_lora_adapters=\"sql\",waiting_lora_adapters=\"\"} 1.796468753e+09\n";
        let report = read_metrics(EngineKind::Vllm, text);
        assert_eq!(
            report.adapters,
            Some(router_core::AdapterResidency {
                running: vec!["sql".to_owned()],
                slots: Some(2),
            })
        );
        assert_eq!(read_metrics(EngineKind::Vllm, "").adapters, None);
    }

    #[test]
    fn the_model_its_adapters_and_context_length_from_the_model_list() {
        let vllm = br#"{"object":"list","data":[{"id":"m","object":"model","max_model_len":2048,
                        "root":"/models/m","parent":null},{"id":"sql","parent":"m",
                        "max_model_len":2048},{"id":"chat","parent":"m"}]}"#;
        assert_eq!(
            read_models(vllm),
            Some(ServedModels {
                base: Some("m".to_owned()),
                adapters: vec!["chat".to_owned(), "sql".to_owned()],
                max_model_len: Some(2048),
            })
        );
        let max_len = |json: &[u8]| read_models(json).and_then(|m| m.max_model_len);
        assert_eq!(max_len(br#"{"data":[{"id":"m"}]}"#), None);
        assert_eq!(max_len(br#"{"data":[{"id":"m","max_model_len":0}]}"#), None);
        assert_eq!(read_models(b"<html>"), None);
    }

    #[test]
    fn sglang_capacity_from_either_place() {
        let top = br#"{"page_size": 16, "max_total_num_tokens": 16384, "dp_size": 1}"#;
        assert_eq!(
            sglang_capacity(top),
            Some(Capacity {
                block_size: 16,
                blocks: 1024
            })
        );
        let nested = br#"{"page_size": null, "internal_states": [{"max_total_num_tokens": 500}]}"#;
        assert_eq!(
            sglang_capacity(nested),
            Some(Capacity {
                block_size: 1,
                blocks: 500
            })
        );
        assert_eq!(sglang_capacity(br#"{"page_size": 16}"#), None);
        assert_eq!(sglang_capacity(b"not json"), None);
    }

    #[test]
    fn sglang_load_by_dp_rank() {
        let text = "# TYPE sglang:num_running_reqs gauge\n\
                    sglang:num_running_reqs{model_name=\"m\",dp_rank=\"1\"} 3.0\n\
                    # TYPE sglang:num_queue_reqs gauge\n\
                    sglang:num_queue_reqs{model_name=\"m\",dp_rank=\"1\"} 4.0\n\
                    # TYPE sglang:token_usage gauge\n\
                    sglang:token_usage{model_name=\"m\",dp_rank=\"1\"} 0.5\n";
        let report = read_metrics(EngineKind::Sglang, text);
        assert_eq!(report.capacity, None);
        let rank = report.ranks.get(&1).expect("rank 1");
        assert_eq!((rank.running, rank.waiting), (3, 4));
        assert!((rank.kv_usage - 0.5).abs() < 1e-9);
    }

    #[test]
    fn a_scrape_that_is_not_prometheus_text_reads_as_nothing() {
        let report = read_metrics(EngineKind::Vllm, "<html>502 Bad Gateway</html>\n");
        assert!(report.ranks.is_empty());
        assert_eq!(report.capacity, None);
        assert!(report.unreadable > 0);
    }
}
