//! `[[models]]` and the pools a node runs: one pool per model, each with its own tokenizer
//! and chat template, block size, KV index, class queues and gates, on bus subjects of its
//! own (`<cluster>.pool.<token>`).
//!
//! ```toml
//! [[models]]
//! name = "llama-3-8b"               # what clients send as `model`
//! model_dir = "/models/llama-3-8b"  # its tokenizer and chat template (else [tokenizer]'s)
//! block_size = 16                   # absent: learned from its [[engines]], else node.block_size
//! topology = "aggregated"           # absent: node.topology
//! local_prefill_below_tokens = 512   # absent: [disagg]'s (conditional disaggregation)
//! ```
//!
//! An `[[engines]]` entry joins a pool by `model` (a `[[models]]` name; an entry naming a
//! model with no `[[models]]` entry makes one, with the engine's `model_dir`) or by
//! `model_dir` alone (the engines serving one directory share a pool, known to clients by
//! the names the engines serve). Entries with neither, and workers announced on the
//! cluster's own subjects, form the default pool: the single-model configuration, `[tokenizer]`
//! and `node.block_size`, which takes requests for any model no other pool serves. It runs
//! when some engine is in it or no pool is declared at all.

use super::load::ConfigError;
use super::{Config, TopologyKind};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// One `[[models]]` entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelSection {
    /// The model's name, as clients send it in `model` and its engines serve it.
    pub name: String,
    /// Its tokenizer and chat template (relative to the config file's directory); absent:
    /// `[tokenizer]`'s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_dir: Option<PathBuf>,
    /// Tokens per KV block of its engines; absent: learned from its `[[engines]]`, else
    /// `node.block_size`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub block_size: Option<u32>,
    /// Absent: `node.topology`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topology: Option<TopologyKind>,
    /// Conditional disaggregation for this model's pool; absent: `[disagg]`'s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local_prefill_below_tokens: Option<u64>,
    /// Absent: `[disagg]`'s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local_prefill_when_prefill_waits: Option<bool>,
}

/// A pool the node runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolPlan {
    /// `None`: the default pool. Otherwise what names its subjects (`pool_cluster`): the
    /// model's name, or the model directory its engines serve.
    pub key: Option<String>,
    /// Names clients send for it, as configured (the names its engines serve are learned
    /// at run time).
    pub names: Vec<String>,
    /// Its tokenizer and chat template; `None`: `[tokenizer]`'s.
    pub model_dir: Option<PathBuf>,
    /// `None`: learned from its engines before the pool starts.
    pub block_size: Option<u32>,
    pub topology: TopologyKind,
    /// When its disaggregated requests are prefilled by their decode worker.
    pub local_prefill: router_core::LocalPrefillRule,
    /// Its `[[engines]]` entries, by index.
    pub engines: Vec<usize>,
}

impl PoolPlan {
    /// What names the pool in logs, metrics (`model`) and `/debug/state`.
    pub fn label(&self) -> &str {
        self.key.as_deref().unwrap_or("default")
    }
}

impl Config {
    /// The pools this configuration runs: the `[[models]]` entries and the pools their
    /// engines make, then the default pool when it runs (module docs).
    pub fn pool_plans(&self) -> Vec<PoolPlan> {
        let node = &self.node;
        let local_prefill = self.disagg.local_prefill();
        let mut plans: Vec<PoolPlan> = self
            .models
            .iter()
            .map(|m| PoolPlan {
                key: Some(m.name.clone()),
                names: vec![m.name.clone()],
                model_dir: m.model_dir.clone(),
                block_size: m.block_size,
                topology: m.topology.unwrap_or(node.topology),
                local_prefill: router_core::LocalPrefillRule {
                    below_uncached_tokens: m
                        .local_prefill_below_tokens
                        .unwrap_or(local_prefill.below_uncached_tokens),
                    when_prefill_waits: m
                        .local_prefill_when_prefill_waits
                        .unwrap_or(local_prefill.when_prefill_waits),
                },
                engines: Vec::new(),
            })
            .collect();
        let mut default_engines = Vec::new();
        for (index, engine) in self.engines.iter().enumerate() {
            let at = match (&engine.model, &engine.model_dir) {
                (Some(name), _) => plans.iter().position(|p| p.names.contains(name)),
                (None, Some(dir)) => plans.iter().position(|p| p.model_dir.as_ref() == Some(dir)),
                (None, None) => {
                    default_engines.push(index);
                    continue;
                }
            };
            let at = at.unwrap_or_else(|| {
                let key = engine.model.clone().unwrap_or_else(|| {
                    let dir = engine.model_dir.as_ref().map(|d| d.display().to_string());
                    dir.unwrap_or_default()
                });
                plans.push(PoolPlan {
                    names: engine.model.iter().cloned().collect(),
                    key: Some(key),
                    model_dir: engine.model_dir.clone(),
                    block_size: None,
                    topology: node.topology,
                    local_prefill,
                    engines: Vec::new(),
                });
                plans.len() - 1
            });
            plans[at].engines.push(index);
        }
        for plan in &mut plans {
            // Nothing to learn it from: the node's.
            if plan.block_size.is_none() && plan.engines.is_empty() {
                plan.block_size = Some(node.block_size);
            }
        }
        if plans.is_empty() || !default_engines.is_empty() {
            plans.push(PoolPlan {
                key: None,
                names: Vec::new(),
                model_dir: None,
                block_size: Some(node.block_size),
                topology: node.topology,
                local_prefill,
                engines: default_engines,
            });
        }
        plans
    }

    /// `[[models]]` and the pools' engines: names unique and usable, sizes positive, each
    /// engine's role one its pool's topology has, one model directory per pool.
    pub(super) fn validate_models(&self) -> Result<(), ConfigError> {
        for (i, m) in self.models.iter().enumerate() {
            let key = |field: &str| format!("models[{i}].{field}");
            if m.name.is_empty() || m.name.len() > router_core::worker::MAX_MODEL_NAME {
                return Err(ConfigError::invalid(
                    &key("name"),
                    format!("must be 1 to {} bytes", router_core::worker::MAX_MODEL_NAME),
                ));
            }
            if self.models[..i].iter().any(|o| o.name == m.name) {
                return Err(ConfigError::invalid(
                    &key("name"),
                    format!(
                        "{:?} is already the name of another [[models]] entry",
                        m.name
                    ),
                ));
            }
            if m.block_size == Some(0) {
                return Err(ConfigError::invalid(&key("block_size"), "must be >= 1"));
            }
        }
        for plan in self.pool_plans() {
            for &index in &plan.engines {
                let engine = &self.engines[index];
                engine.validate(index, plan.topology)?;
                if let (Some(dir), Some(own)) = (&plan.model_dir, &engine.model_dir)
                    && dir != own
                {
                    return Err(ConfigError::invalid(
                        &format!("engines[{index}].model_dir"),
                        format!(
                            "is {}, but its model {:?} is served from {}: one pool, one model \
                             directory",
                            own.display(),
                            plan.label(),
                            dir.display()
                        ),
                    ));
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::path::Path;

    fn parse(text: &str) -> Result<Config, ConfigError> {
        let config = Config::from_toml_str(text, Path::new("node.toml"))?;
        config.validate()?;
        Ok(config)
    }

    #[test]
    fn todays_single_model_configuration_is_the_default_pool_alone() {
        let config =
            parse("[node]\nblock_size = 32\n[[engines]]\nkind = \"vllm\"\nurl = \"http://a:1\"\n")
                .unwrap();
        let plans = config.pool_plans();
        assert_eq!(plans.len(), 1);
        assert_eq!(plans[0].key, None);
        assert_eq!(plans[0].block_size, Some(32));
        assert_eq!(plans[0].engines, vec![0]);
        assert_eq!(
            Config::default().pool_plans().len(),
            1,
            "no engines: default"
        );
    }

    #[test]
    fn engines_naming_their_model_directory_make_one_pool_per_directory() {
        let text = "[[engines]]\nkind = \"vllm\"\nurl = \"http://a:1\"\nmodel_dir = \"/m/a\"\n\
                    [[engines]]\nkind = \"vllm\"\nurl = \"http://b:1\"\nmodel_dir = \"/m/b\"\n\
                    [[engines]]\nkind = \"vllm\"\nurl = \"http://c:1\"\nmodel_dir = \"/m/a\"\n";
        let plans = parse(text).unwrap().pool_plans();
        assert_eq!(
            plans.len(),
            2,
            "no default pool: every engine is in a model's"
        );
        assert_eq!(plans[0].key.as_deref(), Some("/m/a"));
        assert_eq!(plans[0].engines, vec![0, 2]);
        assert_eq!(plans[0].block_size, None, "learned from the engines");
        assert!(plans[0].names.is_empty(), "learned from the engines");
        assert_eq!(plans[1].engines, vec![1]);
    }

    #[test]
    fn models_entries_take_their_engines_and_keep_their_own_settings() {
        let text = "[[models]]\nname = \"big\"\nblock_size = 64\ntopology = \"disaggregated\"\n\
                    local_prefill_below_tokens = 256\n\
                    [[models]]\nname = \"small\"\n\
                    [[engines]]\nkind = \"vllm\"\nurl = \"http://a:1\"\nmodel = \"big\"\nrole = \"prefill\"\n";
        let plans = parse(text).unwrap().pool_plans();
        assert_eq!(plans.len(), 2);
        assert_eq!(plans[0].names, vec!["big".to_owned()]);
        assert_eq!(plans[0].block_size, Some(64));
        assert_eq!(plans[0].topology, TopologyKind::Disaggregated);
        assert_eq!(plans[0].local_prefill.below_uncached_tokens, 256, "its own");
        assert_eq!(
            plans[1].local_prefill.below_uncached_tokens, 0,
            "[disagg]'s"
        );
        assert_eq!(plans[0].engines, vec![0]);
        assert_eq!(plans[1].block_size, Some(16), "no engines: node.block_size");
    }

    #[test]
    fn bad_models_are_named() {
        let err = parse("[[models]]\nname = \"\"\n").unwrap_err().to_string();
        assert!(err.contains("models[0].name"), "{err}");
        let err = parse("[[models]]\nname = \"a\"\n[[models]]\nname = \"a\"\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("models[1].name"), "{err}");
        let err = parse("[[models]]\nname = \"a\"\nblock_size = 0\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("models[0].block_size"), "{err}");
        // A prefill engine in an aggregated model's pool.
        let err = parse(
            "[[models]]\nname = \"a\"\n[[engines]]\nkind = \"vllm\"\nurl = \"http://a:1\"\n\
             model = \"a\"\nrole = \"prefill\"\n",
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("engines[0].role"), "{err}");
        let err = parse(
            "[[models]]\nname = \"a\"\nmodel_dir = \"/m/a\"\n[[engines]]\nkind = \"vllm\"\n\
             url = \"http://a:1\"\nmodel = \"a\"\nmodel_dir = \"/m/b\"\n",
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("engines[0].model_dir"), "{err}");
    }
}
