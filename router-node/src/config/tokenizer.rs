//! `[tokenizer]`: its validation, and loading the configured tokenizer and chat rendering
//! (a tiktoken encoding, a `tokenizer.json` with an optional chat template, or a model
//! directory) as the frontend's [`Prompter`], with a token cache of `cache_mb`.

use super::{Config, ConfigError, PoolPlan, TokenizerKind, TokenizerSection};
use router_tokenizer::{ChatTemplate, Prompter, TokenCache, Tokenizer};
use std::sync::Arc;

impl TokenizerSection {
    /// The keys that go together; the first conflict is reported by its key.
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        let tok = self;
        if tok.model_dir.is_some() {
            return validate_model_dir(tok);
        }
        match (tok.kind, &tok.path) {
            (TokenizerKind::HuggingFace, None) => {
                return Err(ConfigError::invalid(
                    "tokenizer.path",
                    "is required with tokenizer.kind = \"huggingface\" (a tokenizer.json)",
                ));
            }
            (TokenizerKind::Tiktoken, Some(_)) => {
                return Err(ConfigError::invalid(
                    "tokenizer.path",
                    "is only read with tokenizer.kind = \"huggingface\"; kind is \"tiktoken\"",
                ));
            }
            _ => {}
        }
        if tok.chat_template.is_none() {
            for (key, value) in [
                ("tokenizer.bos_token", &tok.bos_token),
                ("tokenizer.eos_token", &tok.eos_token),
            ] {
                if value.is_some() {
                    return Err(ConfigError::invalid(
                        key,
                        "is only used by tokenizer.chat_template, which is not set",
                    ));
                }
            }
        }
        Ok(())
    }
}

impl Config {
    /// The configured tokenizer and chat rendering, files loaded. An error names
    /// `tokenizer.path`, `tokenizer.chat_template` or `tokenizer.model_dir` and the file.
    pub fn prompter(&self) -> Result<Prompter, ConfigError> {
        let prompter = self.prompter_uncached()?;
        Ok(self.with_token_cache(prompter))
    }

    /// The tokenizer and chat rendering of `plan`'s pool: its model directory's, else
    /// `[tokenizer]`'s; each pool with a token cache of its own (`cache_mb`: ids are the
    /// tokenizer's). An error names the directory.
    pub fn pool_prompter(&self, plan: &PoolPlan) -> Result<Prompter, ConfigError> {
        let Some(dir) = &plan.model_dir else {
            return self.prompter();
        };
        let prompter = Prompter::from_model_dir(dir).map_err(|e| ConfigError::Tokenizer {
            key: "model_dir",
            path: e.file,
            message: e.message,
        })?;
        Ok(self.with_token_cache(prompter))
    }

    fn with_token_cache(&self, prompter: Prompter) -> Prompter {
        match self.tokenizer.cache_mb {
            0 => prompter,
            mb => prompter.with_cache(Arc::new(TokenCache::new(mb.saturating_mul(1 << 20)))),
        }
    }

    fn prompter_uncached(&self) -> Result<Prompter, ConfigError> {
        let tok = &self.tokenizer;
        if let Some(dir) = &tok.model_dir {
            return Prompter::from_model_dir(dir).map_err(|e| ConfigError::Tokenizer {
                key: "tokenizer.model_dir",
                path: e.file,
                message: e.message,
            });
        }
        let tokenizer = match (tok.kind, &tok.path) {
            (TokenizerKind::Tiktoken, _) => Tokenizer::Tiktoken(tok.encoding),
            (TokenizerKind::HuggingFace, None) => {
                return Err(ConfigError::invalid(
                    "tokenizer.path",
                    "is required with tokenizer.kind = \"huggingface\" (a tokenizer.json)",
                ));
            }
            (TokenizerKind::HuggingFace, Some(path)) => {
                Tokenizer::huggingface(path).map_err(|e| ConfigError::Tokenizer {
                    key: "tokenizer.path",
                    path: path.clone(),
                    message: e.to_string(),
                })?
            }
        };
        let chat_template = match &tok.chat_template {
            None => None,
            Some(path) => Some(
                ChatTemplate::from_path(path, tok.bos_token.clone(), tok.eos_token.clone())
                    .map_err(|e| ConfigError::Tokenizer {
                        key: "tokenizer.chat_template",
                        path: path.clone(),
                        message: e.to_string(),
                    })?,
            ),
        };
        Ok(Prompter::new(tokenizer, chat_template))
    }
}

/// With `tokenizer.model_dir` set, the keys it replaces must be absent.
fn validate_model_dir(tok: &TokenizerSection) -> Result<(), ConfigError> {
    for (key, set) in [
        ("tokenizer.path", tok.path.is_some()),
        ("tokenizer.chat_template", tok.chat_template.is_some()),
        ("tokenizer.bos_token", tok.bos_token.is_some()),
        ("tokenizer.eos_token", tok.eos_token.is_some()),
    ] {
        if set {
            return Err(ConfigError::invalid(
                key,
                "cannot be set with tokenizer.model_dir, which supplies it from the model directory",
            ));
        }
    }
    Ok(())
}
