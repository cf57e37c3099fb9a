//! The node's two listeners: `[http]`, the public one (the OpenAI API, `/health`, `/ready`)
//! with its input limits and timeouts, and `[admin]`, the operational one (`/metrics`,
//! `/debug/state`, `/health`, `/ready`), loopback by default and optionally behind a bearer
//! token read from a file. Their sections and defaults, their validation, the frontend's
//! [`Limits`] and the admin token.

use super::ConfigError;
use crate::frontend::{AdminToken, Limits};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// `[http]`: the OpenAI-compatible frontend (the public listener).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HttpSection {
    /// `host:port` to listen on.
    pub listen: String,
    /// Largest accepted request body (bytes); larger is a 413.
    pub body_limit_bytes: usize,
    /// Longest time a client may take to send a whole request body; slower is a 408 and
    /// the connection is closed. No concurrency permit is held meanwhile.
    pub body_read_timeout_ms: u64,
    /// Longest time a client may take to send a request's headers, and how long an idle
    /// keep-alive connection stays open; then the connection is closed.
    pub header_read_timeout_ms: u64,
    /// A request not finished this long after it arrived is ended (a 504, or one error
    /// event ending its stream) and its booking released.
    pub request_timeout_ms: u64,
    /// Connections open at once; more wait in the listen backlog until one closes.
    pub max_connections: usize,
    /// OpenAI requests handled at once, from a fully read body to the end of the answer;
    /// one more is a 429.
    pub concurrency_limit: usize,
    /// Longest prompt in tokens; longer is a 400 naming the limit. A text prompt whose byte
    /// length alone proves it longer is refused before it is tokenized. Absent: the
    /// shortest context length (`max_model_len`) the fleet's engines announce, or 131072
    /// while none does.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_prompt_tokens: Option<u64>,
    /// Largest `max_tokens` (`max_completion_tokens`) a request may ask for; more is a 400.
    pub max_tokens_limit: u64,
    /// Longest run of letters, of digits, of whitespace or of other symbols in a text
    /// prompt, in bytes (what a tokenizer keeps as one piece); longer is a 400, before
    /// tokenizing.
    pub max_word_bytes: usize,
    /// Output tokens assumed when a request gives no `max_tokens`.
    pub default_max_tokens: u64,
    /// At shutdown, how long in-flight requests and streams may take to finish.
    pub drain_timeout_ms: u64,
    /// At shutdown, how long the node keeps accepting requests after `/ready` turned false,
    /// so a load balancer sees it not ready and stops sending before it stops listening (set
    /// it to your load balancer's failed checks × check interval).
    pub shutdown_delay_ms: u64,
    /// Connecting to a worker.
    pub upstream_connect_timeout_ms: u64,
    /// Longest silence between two reads from a worker.
    pub upstream_read_timeout_ms: u64,
    /// Model names served by `GET /v1/models` (a list, or one comma-separated string as the
    /// environment gives it).
    #[serde(deserialize_with = "super::names")]
    pub models: Vec<String>,
}

impl Default for HttpSection {
    fn default() -> Self {
        let limits = Limits::default();
        Self {
            listen: "0.0.0.0:8080".to_owned(),
            body_limit_bytes: limits.max_body_bytes,
            body_read_timeout_ms: millis(limits.body_read_timeout),
            header_read_timeout_ms: millis(limits.header_read_timeout),
            request_timeout_ms: millis(limits.request_timeout),
            max_connections: limits.max_connections,
            concurrency_limit: limits.max_concurrent_requests,
            max_prompt_tokens: limits.max_prompt_tokens,
            max_tokens_limit: limits.max_tokens_limit,
            max_word_bytes: limits.max_word_bytes,
            default_max_tokens: limits.default_max_tokens,
            drain_timeout_ms: 30_000,
            shutdown_delay_ms: 0,
            upstream_connect_timeout_ms: millis(limits.connect_timeout),
            upstream_read_timeout_ms: millis(limits.read_timeout),
            models: Vec::new(),
        }
    }
}

/// `[admin]`: the operational listener.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AdminSection {
    /// `host:port` of `/metrics`, `/debug/state`, `/health` and `/ready`. Keep it off the
    /// public network (the default is loopback).
    pub listen: String,
    /// A file holding a bearer token (at least 16 bytes, one trailing newline dropped) that
    /// every admin request must carry (`Authorization: Bearer <token>`); without it, a 401.
    /// Absent: no token. Relative to the config file's directory.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token_file: Option<PathBuf>,
}

/// The default admin port (the one OpenTelemetry's Prometheus exporters use).
pub const DEFAULT_ADMIN_PORT: u16 = 9464;

/// The shortest admin token accepted.
const MIN_TOKEN_BYTES: usize = 16;

impl Default for AdminSection {
    fn default() -> Self {
        Self {
            listen: format!("127.0.0.1:{DEFAULT_ADMIN_PORT}"),
            token_file: None,
        }
    }
}

impl HttpSection {
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        if !is_listen_address(&self.listen) {
            return Err(ConfigError::invalid(
                "http.listen",
                format!("must be host:port, got {:?}", self.listen),
            ));
        }
        for (key, value) in [
            ("http.body_limit_bytes", self.body_limit_bytes as u64),
            ("http.body_read_timeout_ms", self.body_read_timeout_ms),
            ("http.header_read_timeout_ms", self.header_read_timeout_ms),
            ("http.request_timeout_ms", self.request_timeout_ms),
            ("http.max_connections", self.max_connections as u64),
            ("http.concurrency_limit", self.concurrency_limit as u64),
            (
                "http.max_prompt_tokens",
                self.max_prompt_tokens.unwrap_or(1),
            ),
            ("http.max_tokens_limit", self.max_tokens_limit),
            ("http.max_word_bytes", self.max_word_bytes as u64),
            ("http.default_max_tokens", self.default_max_tokens),
            (
                "http.upstream_connect_timeout_ms",
                self.upstream_connect_timeout_ms,
            ),
            (
                "http.upstream_read_timeout_ms",
                self.upstream_read_timeout_ms,
            ),
        ] {
            if value == 0 {
                return Err(ConfigError::invalid(key, "must be >= 1"));
            }
        }
        // tokio's Semaphore refuses more permits than this.
        for (key, value) in [
            ("http.concurrency_limit", self.concurrency_limit),
            ("http.max_connections", self.max_connections),
        ] {
            if value > tokio::sync::Semaphore::MAX_PERMITS {
                return Err(ConfigError::invalid(
                    key,
                    format!("must be <= {}", tokio::sync::Semaphore::MAX_PERMITS),
                ));
            }
        }
        if self.default_max_tokens > self.max_tokens_limit {
            return Err(ConfigError::invalid(
                "http.default_max_tokens",
                format!(
                    "must be <= http.max_tokens_limit ({}), got {}",
                    self.max_tokens_limit, self.default_max_tokens
                ),
            ));
        }
        Ok(())
    }

    /// The frontend's limits.
    pub fn limits(&self) -> Limits {
        Limits {
            max_concurrent_requests: self.concurrency_limit,
            max_body_bytes: self.body_limit_bytes,
            body_read_timeout: Duration::from_millis(self.body_read_timeout_ms),
            header_read_timeout: Duration::from_millis(self.header_read_timeout_ms),
            request_timeout: Duration::from_millis(self.request_timeout_ms),
            max_connections: self.max_connections,
            max_prompt_tokens: self.max_prompt_tokens,
            max_tokens_limit: self.max_tokens_limit,
            max_word_bytes: self.max_word_bytes,
            default_max_tokens: self.default_max_tokens,
            connect_timeout: Duration::from_millis(self.upstream_connect_timeout_ms),
            read_timeout: Duration::from_millis(self.upstream_read_timeout_ms),
            ..Limits::default()
        }
    }
}

impl AdminSection {
    pub(super) fn validate(&self, http: &HttpSection) -> Result<(), ConfigError> {
        if !is_listen_address(&self.listen) {
            return Err(ConfigError::invalid(
                "admin.listen",
                format!("must be host:port, got {:?}", self.listen),
            ));
        }
        if self.listen == http.listen && !self.listen.ends_with(":0") {
            return Err(ConfigError::invalid(
                "admin.listen",
                format!(
                    "must differ from http.listen ({:?}): the operational endpoints have a \
                     listener of their own",
                    http.listen
                ),
            ));
        }
        Ok(())
    }

    /// A relative `token_file` is relative to `dir` (the config file's).
    pub(super) fn resolve_relative_paths(&mut self, dir: &Path) {
        if let Some(path) = &mut self.token_file
            && path.is_relative()
        {
            *path = dir.join(&*path);
        }
    }

    /// The token every admin request must carry, read from `token_file` (one trailing
    /// newline dropped); `None` without one. A file that cannot be read, or holds fewer
    /// than 16 bytes, is an error naming `admin.token_file`.
    pub fn token(&self) -> Result<Option<AdminToken>, ConfigError> {
        let Some(path) = &self.token_file else {
            return Ok(None);
        };
        let bad = |reason: String| ConfigError::invalid("admin.token_file", reason);
        let text = std::fs::read_to_string(path)
            .map_err(|e| bad(format!("{}: cannot be read: {e}", path.display())))?;
        let token = text
            .strip_suffix('\n')
            .map(|t| t.strip_suffix('\r').unwrap_or(t))
            .unwrap_or(&text);
        if token.len() < MIN_TOKEN_BYTES || token.chars().any(char::is_whitespace) {
            return Err(bad(format!(
                "{}: must hold a token of at least {MIN_TOKEN_BYTES} bytes without blanks \
                 (e.g. `openssl rand -hex 32`)",
                path.display()
            )));
        }
        Ok(Some(AdminToken::new(token)))
    }

    /// Whether `listen` is a loopback address (`127.0.0.0/8`, `::1`, `localhost`).
    pub fn is_loopback(&self) -> bool {
        let host = self
            .listen
            .rsplit_once(':')
            .map_or(self.listen.as_str(), |(host, _)| host);
        let host = host.trim_start_matches('[').trim_end_matches(']');
        host == "localhost"
            || host
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback())
    }
}

/// `host:port` with a numeric port (an IP literal, or a name resolved when binding).
pub(super) fn is_listen_address(listen: &str) -> bool {
    if listen.parse::<std::net::SocketAddr>().is_ok() {
        return true;
    }
    let Some((host, port)) = listen.rsplit_once(':') else {
        return false;
    };
    port.parse::<u16>().is_ok() && !host.is_empty() && !host.contains(char::is_whitespace)
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use crate::config::Config;
    use std::path::Path;

    fn parse(text: &str) -> Result<Config, crate::config::ConfigError> {
        let config = Config::from_toml_str(text, Path::new("/etc/sy/node.toml"))?;
        config.validate()?;
        Ok(config)
    }

    #[test]
    fn bad_limits_and_listeners_are_errors_naming_their_key() {
        for (text, key) in [
            (
                "[http]\nbody_read_timeout_ms = 0\n",
                "http.body_read_timeout_ms",
            ),
            ("[http]\nmax_connections = 0\n", "http.max_connections"),
            ("[http]\nmax_prompt_tokens = 0\n", "http.max_prompt_tokens"),
            (
                "[http]\nrequest_timeout_ms = 0\n",
                "http.request_timeout_ms",
            ),
            (
                "[http]\nmax_tokens_limit = 100\ndefault_max_tokens = 256\n",
                "http.default_max_tokens",
            ),
            ("[admin]\nlisten = \"no port\"\n", "admin.listen"),
            (
                "[http]\nlisten = \"127.0.0.1:8080\"\n[admin]\nlisten = \"127.0.0.1:8080\"\n",
                "admin.listen",
            ),
        ] {
            let error = parse(text).expect_err(text);
            assert_eq!(error.key(), Some(key), "{text}: {error}");
        }
        // Port 0 on both: two different ports once bound.
        let both = "[http]\nlisten = \"127.0.0.1:0\"\n[admin]\nlisten = \"127.0.0.1:0\"\n";
        assert!(parse(both).is_ok());
    }

    #[test]
    fn the_admin_token_comes_from_its_file_and_a_short_one_is_refused() {
        let dir = std::env::temp_dir().join(format!("sy-admin-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).expect("dir");
        let config_path = dir.join("node.toml");
        std::fs::write(&config_path, "[admin]\ntoken_file = \"admin.token\"\n").expect("write");
        let load = || {
            Config::load_with_env(Some(&config_path), std::iter::empty::<(String, String)>())
                .expect("valid")
        };
        let missing = load().admin.token().expect_err("no such file");
        assert_eq!(missing.key(), Some("admin.token_file"));
        assert!(missing.to_string().contains("admin.token"), "{missing}");
        std::fs::write(dir.join("admin.token"), "short\n").expect("write");
        let short = load().admin.token().expect_err("too short");
        assert!(short.to_string().contains("16 bytes"), "{short}");
        std::fs::write(dir.join("admin.token"), "0123456789abcdef0123\n").expect("write");
        let token = load().admin.token().expect("readable").expect("set");
        assert!(token.matches("Bearer 0123456789abcdef0123"));
        assert!(!token.matches("Bearer 0123456789abcdef012"));
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn loopback_admin_addresses_are_recognised() {
        for (listen, loopback) in [
            ("127.0.0.1:9464", true),
            ("[::1]:9464", true),
            ("localhost:9464", true),
            ("0.0.0.0:9464", false),
            ("10.0.0.5:9464", false),
        ] {
            let admin = super::AdminSection {
                listen: listen.to_owned(),
                token_file: None,
            };
            assert_eq!(admin.is_loopback(), loopback, "{listen}");
        }
    }
}
