//! A model directory as vLLM serves it (`[tokenizer] model_dir`): the tokenizer, its special
//! tokens and the chat template, read the way transformers reads them.
//!
//! - `tokenizer.json`: the tokenizer, loaded as the engine uses it (`huggingface.rs`).
//! - `tokenizer_config.json`: `chat_template` (a string, or a list of `{name, template}` of
//!   which `default` is used), `bos_token` / `eos_token` (a string or an added-token object
//!   `{"content": ...}`), `add_bos_token` / `add_eos_token` when present.
//! - `chat_template.jinja`: the chat template when `tokenizer_config.json` has none (newer
//!   transformers save it there).
//!
//! A missing `chat_template` leaves the plain rendering. Every error names the file.

use crate::chat_template::ChatTemplate;
use crate::huggingface::{HuggingFaceTokenizer, SpecialTokens};
use crate::prompter::Prompter;
use crate::tokenizer::Tokenizer;
use serde_json::{Map, Value};
use std::path::{Path, PathBuf};

/// What is wrong in a model directory: the file and why.
#[derive(Debug, thiserror::Error)]
#[error("{}: {message}", file.display())]
pub struct ModelDirError {
    pub file: PathBuf,
    pub message: String,
}

impl Prompter {
    /// The tokenizer and chat rendering of the model directory `dir` (module docs).
    pub fn from_model_dir(dir: &Path) -> Result<Self, ModelDirError> {
        let config_file = dir.join("tokenizer_config.json");
        let fail = |file: &Path, message: String| ModelDirError {
            file: file.to_owned(),
            message,
        };
        let text =
            std::fs::read_to_string(&config_file).map_err(|e| fail(&config_file, e.to_string()))?;
        let config: Map<String, Value> = match serde_json::from_str(&text) {
            Ok(Value::Object(map)) => map,
            Ok(_) => return Err(fail(&config_file, "must be a JSON object".to_owned())),
            Err(e) => return Err(fail(&config_file, format!("not valid JSON: {e}"))),
        };
        let special = SpecialTokens {
            bos_token: token(&config, "bos_token").map_err(|m| fail(&config_file, m))?,
            eos_token: token(&config, "eos_token").map_err(|m| fail(&config_file, m))?,
            add_bos_token: flag(&config, "add_bos_token").map_err(|m| fail(&config_file, m))?,
            add_eos_token: flag(&config, "add_eos_token").map_err(|m| fail(&config_file, m))?,
        };
        let tokenizer_file = dir.join("tokenizer.json");
        let describe = format!("huggingface model_dir {}", dir.display());
        let tokenizer = HuggingFaceTokenizer::engine(&tokenizer_file, describe, &special)
            .map_err(|e| fail(&tokenizer_file, e.to_string()))?;
        let source = match chat_template(&config).map_err(|m| fail(&config_file, m))? {
            Some(source) => Some(source),
            None => {
                let file = dir.join("chat_template.jinja");
                match std::fs::read_to_string(&file) {
                    Ok(source) => Some(source),
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
                    Err(e) => return Err(fail(&file, e.to_string())),
                }
            }
        };
        let template = source
            .map(|s| ChatTemplate::new(s, special.bos_token.clone(), special.eos_token.clone()))
            .transpose()
            .map_err(|e| fail(&config_file, format!("chat_template: {e}")))?;
        Ok(Prompter::new(Tokenizer::HuggingFace(tokenizer), template))
    }
}

/// `bos_token` / `eos_token`: a string, an added-token object with a string `content`, or
/// null / absent.
fn token(config: &Map<String, Value>, key: &str) -> Result<Option<String>, String> {
    match config.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(Value::Object(o)) => match o.get("content") {
            Some(Value::String(s)) => Ok(Some(s.clone())),
            _ => Err(format!("{key}: an object must have a string `content`")),
        },
        Some(_) => Err(format!(
            "{key} must be a string or an object with `content`"
        )),
    }
}

fn flag(config: &Map<String, Value>, key: &str) -> Result<Option<bool>, String> {
    match config.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(_) => Err(format!("{key} must be a boolean")),
    }
}

/// `chat_template`: a string, or a list of `{name, template}` whose `default` is used.
fn chat_template(config: &Map<String, Value>) -> Result<Option<String>, String> {
    const SHAPE: &str = "chat_template must be a string or a list of {name, template}";
    let list = match config.get("chat_template") {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::String(s)) => return Ok(Some(s.clone())),
        Some(Value::Array(list)) => list,
        Some(_) => return Err(SHAPE.to_owned()),
    };
    let mut names = Vec::new();
    for entry in list {
        match (entry.get("name"), entry.get("template")) {
            (Some(Value::String(name)), Some(Value::String(template))) => {
                if name == "default" {
                    return Ok(Some(template.clone()));
                }
                names.push(name.as_str());
            }
            _ => return Err(SHAPE.to_owned()),
        }
    }
    Err(format!(
        "chat_template has no template named \"default\" (it has {names:?})"
    ))
}
