//! Jinja chat templates (minijinja), rendered as HuggingFace's `apply_chat_template` does.
//!
//! The template sees what the engine's template sees: `messages` (the request's `messages`
//! array as given: objects with `role`, `content` and any other field), `tools` and
//! `documents` when the request has them, `add_generation_prompt` (the request's, `true`
//! unless it says otherwise: the router counts the prompt the model is about to continue),
//! `continue_final_message` when set, every key of the request's `chat_template_kwargs`,
//! and `bos_token` / `eos_token` when configured (undefined otherwise, which renders as
//! nothing). As in HuggingFace's
//! environment, `trim_blocks` and `lstrip_blocks` are on, `raise_exception(message)` fails
//! the rendering, and Python's string and dict methods (`.strip()`, `.items()`, ...) work.

use crate::error::PromptError;
use crate::request::messages_array;
use minijinja::{Environment, Error, ErrorKind};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;

const NAME: &str = "chat_template";

/// A compiled chat template.
pub struct ChatTemplate {
    env: Environment<'static>,
    bos_token: Option<String>,
    eos_token: Option<String>,
}

impl std::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatTemplate")
            .field("bos_token", &self.bos_token)
            .field("eos_token", &self.eos_token)
            .finish_non_exhaustive()
    }
}

/// Why a chat template could not be used.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ChatTemplateError(String);

impl ChatTemplate {
    /// Compiles `source`; a syntax error is reported with its line.
    pub fn new(
        source: impl Into<String>,
        bos_token: Option<String>,
        eos_token: Option<String>,
    ) -> Result<Self, ChatTemplateError> {
        let mut env = Environment::new();
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("raise_exception", raise_exception);
        env.add_template_owned(NAME, source.into())
            .map_err(|e| ChatTemplateError(describe(&e)))?;
        Ok(Self {
            env,
            bos_token,
            eos_token,
        })
    }

    /// Reads and compiles the template file at `path`.
    pub fn from_path(
        path: &Path,
        bos_token: Option<String>,
        eos_token: Option<String>,
    ) -> Result<Self, ChatTemplateError> {
        let source = std::fs::read_to_string(path).map_err(|e| ChatTemplateError(e.to_string()))?;
        Self::new(source, bos_token, eos_token)
    }

    /// Renders the request's `messages` alone; every error (a 400) names `messages`.
    pub fn render(&self, messages: Option<&Value>) -> Result<String, PromptError> {
        let mut body = serde_json::Map::new();
        if let Some(messages) = messages {
            body.insert("messages".to_owned(), messages.clone());
        }
        self.render_body(&body)
    }

    /// Renders a chat request with everything its body gives the template (see the module
    /// doc); an error (a 400) names the field.
    pub fn render_body(
        &self,
        body: &serde_json::Map<String, Value>,
    ) -> Result<String, PromptError> {
        let messages = messages_array(body.get("messages"))?;
        let mut context: BTreeMap<String, minijinja::Value> = BTreeMap::new();
        match body.get("chat_template_kwargs") {
            None | Some(Value::Null) => {}
            Some(Value::Object(kwargs)) => {
                for (key, value) in kwargs {
                    context.insert(key.clone(), minijinja::Value::from_serialize(value));
                }
            }
            Some(_) => {
                return Err(PromptError::field(
                    "chat_template_kwargs",
                    "must be an object",
                ));
            }
        }
        context.insert(
            "messages".to_owned(),
            minijinja::Value::from_serialize(messages),
        );
        for key in ["tools", "documents", "continue_final_message"] {
            if let Some(value) = body.get(key).filter(|v| !v.is_null()) {
                context.insert(key.to_owned(), minijinja::Value::from_serialize(value));
            }
        }
        let generation = match body.get("add_generation_prompt") {
            None | Some(Value::Null) => true,
            Some(Value::Bool(b)) => *b,
            Some(_) => {
                return Err(PromptError::field(
                    "add_generation_prompt",
                    "must be a boolean",
                ));
            }
        };
        context.insert(
            "add_generation_prompt".to_owned(),
            minijinja::Value::from(generation),
        );
        // Unconfigured tokens stay undefined (rendered as nothing), not `none`.
        if let Some(bos) = &self.bos_token {
            context.insert("bos_token".to_owned(), minijinja::Value::from(bos.as_str()));
        }
        if let Some(eos) = &self.eos_token {
            context.insert("eos_token".to_owned(), minijinja::Value::from(eos.as_str()));
        }
        let rendered = self
            .env
            .get_template(NAME)
            .and_then(|template| template.render(context));
        rendered.map_err(|e| {
            PromptError::field(
                "messages",
                format!("cannot be rendered by the chat template: {}", describe(&e)),
            )
        })
    }
}

/// `raise_exception(message)` as in HuggingFace's templates.
fn raise_exception(message: String) -> Result<String, Error> {
    Err(Error::new(ErrorKind::InvalidOperation, message))
}

/// The error with its detail and line, without the source listing of `{:#}`.
fn describe(e: &Error) -> String {
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(inner) = source {
        text.push_str(": ");
        text.push_str(&inner.to_string());
        source = inner.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_template_gets_the_request_s_tools_kwargs_and_generation_flag() {
        let template = ChatTemplate::new(
            "{% for m in messages %}{{ m.role }}:{{ m.content }};{% endfor %}\
             {% if tools %}tools={{ tools | length }};{% endif %}\
             {% if enable_thinking %}think;{% endif %}\
             {% if add_generation_prompt %}assistant:{% endif %}",
            None,
            None,
        )
        .expect("compiles");
        let body = json!({
            "messages": [{"role": "user", "content": "hi"}],
            "tools": [{"type": "function", "function": {"name": "f"}}],
            "chat_template_kwargs": {"enable_thinking": true},
        });
        let Value::Object(body) = body else {
            panic!("an object")
        };
        assert_eq!(
            template.render_body(&body).expect("renders"),
            "user:hi;tools=1;think;assistant:"
        );
        let mut body = body;
        body.insert("add_generation_prompt".to_owned(), json!(false));
        body.remove("tools");
        assert_eq!(
            template.render_body(&body).expect("renders"),
            "user:hi;think;"
        );
        body.insert("chat_template_kwargs".to_owned(), json!(3));
        let err = template
            .render_body(&body)
            .expect_err("kwargs must be an object");
        assert_eq!(err.field, "chat_template_kwargs");
    }
}
