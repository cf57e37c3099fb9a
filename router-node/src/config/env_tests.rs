//! The environment layer: the rule on every section, aliases, empty values, errors naming the
//! variable and the key, and the layering over the file.

#![allow(clippy::unwrap_used)]

use super::super::*;
use std::path::{Path, PathBuf};

fn load(file: Option<&Path>, vars: &[(&str, &str)]) -> Result<Config, ConfigError> {
    Config::load_with_env(file, vars.iter().map(|(k, v)| (*k, *v)))
}

fn with_file(text: &str) -> (PathBuf, PathBuf) {
    let dir = std::env::temp_dir().join(format!("switchyard-env-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("node.toml");
    std::fs::write(&path, text).unwrap();
    (dir, path)
}

#[test]
fn the_rule_names_every_key_by_section_and_key() {
    assert_eq!(
        env_var("http.body_limit_bytes"),
        "SWITCHYARD_HTTP__BODY_LIMIT_BYTES"
    );
    assert_eq!(
        env_var("peer_sync.lease_ms"),
        "SWITCHYARD_PEER_SYNC__LEASE_MS"
    );
}

#[test]
fn a_variable_sets_its_key_in_every_section() {
    let config = load(
        None,
        &[
            ("SWITCHYARD_NODE__CLUSTER", "prod-1"),
            (
                "SWITCHYARD_NODE__ROUTER_ID",
                "6f1c1a8e-8d3f-4b8e-9a55-3d2a0c1b2e10",
            ),
            ("SWITCHYARD_NODE__TOPOLOGY", "disaggregated"),
            ("SWITCHYARD_NODE__BLOCK_SIZE", "32"),
            ("SWITCHYARD_HTTP__BODY_LIMIT_BYTES", "8192"),
            ("SWITCHYARD_HTTP__SHUTDOWN_DELAY_MS", "5000"),
            ("SWITCHYARD_HTTP__MODELS", "llama, qwen"),
            ("SWITCHYARD_BUS__KIND", "in-process"),
            ("SWITCHYARD_POLICY__PATH", "/etc/switchyard/policy.toml"),
            ("SWITCHYARD_SELECTION__TEMPERATURE", "0.25"),
            ("SWITCHYARD_PEER_SYNC__LEASE_MS", "9000"),
            ("SWITCHYARD_SCHEDULER__ROOM_CREDITS", "false"),
            ("SWITCHYARD_TELEMETRY__LOG_FORMAT", "json"),
            ("SWITCHYARD_TELEMETRY__LOG_FILTER", "router_node=debug,info"),
            ("SWITCHYARD_TOKENIZER__ENCODING", "cl100k_base"),
            ("SWITCHYARD_DISAGG__CONVENTION", "sglang"),
        ],
    )
    .unwrap();
    assert_eq!(config.node.cluster, "prod-1");
    assert_eq!(
        config.node.router_id.unwrap().to_string(),
        "6f1c1a8e-8d3f-4b8e-9a55-3d2a0c1b2e10"
    );
    assert_eq!(config.node.topology, TopologyKind::Disaggregated);
    assert_eq!(config.node.block_size, 32);
    assert_eq!(config.http.body_limit_bytes, 8192);
    assert_eq!(config.http.shutdown_delay_ms, 5000);
    assert_eq!(config.http.models, ["llama", "qwen"]);
    assert_eq!(config.bus.kind, BusKind::InProcess);
    assert_eq!(
        config.policy.path.as_deref(),
        Some(Path::new("/etc/switchyard/policy.toml"))
    );
    assert_eq!(config.selection.temperature, 0.25);
    assert_eq!(config.peer_sync.lease_ms, 9000);
    assert!(!config.scheduler.room_credits);
    assert_eq!(config.telemetry.log_format, LogFormat::Json);
    assert_eq!(config.telemetry.log_filter, "router_node=debug,info");
    assert_eq!(
        config.tokenizer.encoding,
        router_tokenizer::TiktokenEncoding::Cl100kBase
    );
    assert_eq!(
        config.disagg.convention,
        crate::frontend::DisaggConvention::Sglang
    );
    // Everything not named keeps its default.
    assert_eq!(config.http.listen, HttpSection::default().listen);
    assert_eq!(
        config.peer_sync.heartbeat_ms,
        PeerSyncSection::default().heartbeat_ms
    );
}

#[test]
fn a_string_key_takes_digits_as_text() {
    let config = load(None, &[("SWITCHYARD_NODE__CLUSTER", "007")]).unwrap();
    assert_eq!(config.node.cluster, "007");
}

#[test]
fn the_environment_wins_over_the_file_and_the_file_over_the_defaults() {
    let (dir, path) = with_file(
        "[node]\ncluster = \"from-file\"\n[http]\nlisten = \"127.0.0.1:1\"\nbody_limit_bytes = 100\n\
         concurrency_limit = 7\n[bus]\nnats_url = \"nats://file:4222\"\n\
         [[engines]]\nkind = \"vllm\"\nurl = \"http://127.0.0.1:8000\"\n",
    );
    let config = load(
        Some(&path),
        &[
            ("SWITCHYARD_HTTP__BODY_LIMIT_BYTES", "200"),
            ("SWITCHYARD_BUS__NATS_URL", "nats://env:4222"),
        ],
    )
    .unwrap();
    assert_eq!(config.http.body_limit_bytes, 200);
    assert_eq!(config.bus.nats_url, "nats://env:4222");
    assert_eq!(config.node.cluster, "from-file");
    assert_eq!(config.http.concurrency_limit, 7);
    assert_eq!(config.engines.len(), 1, "the file's [[engines]] stay");
    // No variable: exactly the file.
    let text = std::fs::read_to_string(&path).unwrap();
    let file = Config::from_toml_str(&text, &path).unwrap();
    assert_eq!(load(Some(&path), &[]).unwrap(), file);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn the_older_names_are_aliases_and_the_rule_wins() {
    let config = load(
        None,
        &[
            (ENV_CLUSTER, "from-alias"),
            (ENV_HTTP_LISTEN, "127.0.0.1:9999"),
            (ENV_NATS_URL, "nats://user:secret@env:4222"),
            (ENV_OTLP_ENDPOINT, "http://otel:4317"),
        ],
    )
    .unwrap();
    assert_eq!(config.node.cluster, "from-alias");
    assert_eq!(config.http.listen, "127.0.0.1:9999");
    assert_eq!(config.bus.nats_url, "nats://user:secret@env:4222");
    assert_eq!(
        config.telemetry.otlp_endpoint.as_deref(),
        Some("http://otel:4317")
    );
    for order in [
        [(ENV_CLUSTER, "alias"), ("SWITCHYARD_NODE__CLUSTER", "rule")],
        [("SWITCHYARD_NODE__CLUSTER", "rule"), (ENV_CLUSTER, "alias")],
    ] {
        assert_eq!(load(None, &order).unwrap().node.cluster, "rule");
    }
}

#[test]
fn an_empty_value_is_unset_and_other_variables_are_left_alone() {
    let (dir, path) = with_file("[node]\ncluster = \"from-file\"\n");
    let config = load(
        Some(&path),
        &[
            ("SWITCHYARD_NODE__CLUSTER", ""),
            (ENV_CLUSTER, "  "),
            (ENV_CONFIG, "/elsewhere.toml"),
            ("SWITCHYARD_ROUTER_NODE_BIN", "/bin/true"),
            ("HTTP__LISTEN", "nowhere"),
        ],
    )
    .unwrap();
    assert_eq!(config.node.cluster, "from-file");
    assert_eq!(config.http.listen, HttpSection::default().listen);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_value_that_does_not_parse_names_the_variable_and_the_key() {
    let cases = [
        (
            "SWITCHYARD_HTTP__BODY_LIMIT_BYTES",
            "lots",
            "http.body_limit_bytes",
        ),
        (
            "SWITCHYARD_HTTP__BODY_LIMIT_BYTES",
            "1.5",
            "http.body_limit_bytes",
        ),
        (
            "SWITCHYARD_HTTP__BODY_LIMIT_BYTES",
            "-3",
            "http.body_limit_bytes",
        ),
        ("SWITCHYARD_NODE__TOPOLOGY", "ring", "node.topology"),
        (
            "SWITCHYARD_SELECTION__TEMPERATURE",
            "warm",
            "selection.temperature",
        ),
        ("SWITCHYARD_NODE__ROUTER_ID", "not-a-uuid", "node.router_id"),
        (
            "SWITCHYARD_HTTP__BODY_LIMT_BYTES",
            "1",
            "http.body_limt_bytes",
        ),
        ("SWITCHYARD_HTTPS__LISTEN", "127.0.0.1:1", "https.listen"),
        ("SWITCHYARD_HTTP__LISTEN__PORT", "1", "http.listen.port"),
        ("SWITCHYARD_ENGINES__URL", "http://e:8000", "engines.url"),
    ];
    for (var, value, key) in cases {
        // A second, good variable: the error must find the bad one itself.
        let err = load(None, &[(var, value), ("SWITCHYARD_NODE__BLOCK_SIZE", "16")]).unwrap_err();
        let text = err.to_string();
        assert!(
            matches!(err, ConfigError::Env { .. }),
            "{var}={value}: {text}"
        );
        assert!(text.contains(var), "{var}={value}: {text}");
        assert_eq!(err.key(), Some(key), "{var}={value}: {text}");
    }
}

#[test]
fn an_out_of_range_value_keeps_its_message_and_names_the_variable() {
    let err = load(None, &[("SWITCHYARD_HTTP__LISTEN", "no port")]).unwrap_err();
    let text = err.to_string();
    assert!(text.starts_with("http.listen must be host:port"), "{text}");
    assert!(text.contains("SWITCHYARD_HTTP__LISTEN"), "{text}");
    assert_eq!(err.key(), Some("http.listen"));
    let err = load(None, &[(ENV_HTTP_LISTEN, "no port")]).unwrap_err();
    assert!(err.to_string().contains(ENV_HTTP_LISTEN), "{err}");
    let err = load(None, &[("SWITCHYARD_AUTH__RELOAD_INTERVAL_MS", "10")]).unwrap_err();
    let text = err.to_string();
    assert!(
        text.starts_with("auth.reload_interval_ms must be 0")
            && text.contains("SWITCHYARD_AUTH__RELOAD_INTERVAL_MS"),
        "{text}"
    );
    let config = load(None, &[("SWITCHYARD_AUTH__KEYS_FILE", "/etc/keys.toml")]).unwrap();
    assert_eq!(
        config.auth.keys_file.as_deref(),
        Some(Path::new("/etc/keys.toml"))
    );
    let err = load(None, &[("SWITCHYARD_PEER_SYNC__LEASE_MS", "1")]).unwrap_err();
    assert!(
        err.to_string()
            .starts_with("peer_sync.lease_ms must be greater"),
        "{err}"
    );
    // A bad value from the file is not blamed on the environment.
    let (dir, path) = with_file("[http]\nconcurrency_limit = 0\n");
    let err = load(Some(&path), &[("SWITCHYARD_HTTP__BODY_LIMIT_BYTES", "10")]).unwrap_err();
    assert!(!err.to_string().contains("SWITCHYARD"), "{err}");
    let _ = std::fs::remove_dir_all(dir);
}

/// Every key of every section, optional ones included: `docs/configuration.md` must list its
/// variable, so a new key cannot go undocumented.
#[test]
fn every_key_and_its_variable_is_in_the_configuration_page() {
    let page = include_str!("../../../docs/configuration.md");
    let mut config = Config::default();
    config.node.router_id = Some(uuid::Uuid::nil());
    config.policy.path = Some("p.toml".into());
    config.telemetry.otlp_endpoint = Some("http://c:4317".into());
    config.admin.token_file = Some("admin.token".into());
    let t = &mut config.tokenizer;
    t.model_dir = Some("m".into());
    t.path = Some("t.json".into());
    t.chat_template = Some("c.jinja".into());
    t.bos_token = Some("<s>".into());
    config.http.max_prompt_tokens = Some(4096);
    config.node.worker_threads = Some(2);
    t.eos_token = Some("</s>".into());
    let auth = &mut config.bus.auth;
    auth.credentials_file = Some("n.creds".into());
    auth.nkey_seed_file = Some("n.nk".into());
    auth.user = Some("u".into());
    auth.password_file = Some("p".into());
    auth.token_file = Some("t".into());
    config.auth.keys_file = Some("keys.toml".into());
    let tls = &mut config.bus.tls;
    tls.ca_file = Some("ca.pem".into());
    tls.cert_file = Some("c.pem".into());
    tls.key_file = Some("k.pem".into());
    let table: toml::Table = toml::from_str(&config.to_toml().unwrap()).unwrap();
    let mut keys = 0;
    let mut leaves = Vec::new();
    for (section, value) in &table {
        let toml::Value::Table(entries) = value else {
            panic!("{section} is not a section");
        };
        for (key, value) in entries {
            match value {
                // A table inside the section (`[bus.auth]`): one level more.
                toml::Value::Table(inner) => {
                    leaves.extend(inner.keys().map(|k| format!("{section}.{key}.{k}")));
                }
                _ => leaves.push(format!("{section}.{key}")),
            }
        }
    }
    for key in &leaves {
        let var = env_var(key);
        assert!(
            page.contains(&format!("| `{key}` | `{var}` |")),
            "docs/configuration.md has no row for {key} ({var})"
        );
        keys += 1;
    }
    assert_eq!(
        keys, 66,
        "a key was added or removed: update the page and this count"
    );
}

#[test]
fn the_tables_inside_bus_take_one_more_level_and_the_allow_list_takes_commas() {
    let config = load(
        None,
        &[
            ("SWITCHYARD_BUS__TLS__REQUIRED", "true"),
            ("SWITCHYARD_BUS__TLS__CA_FILE", "/etc/nats/ca.pem"),
            (
                "SWITCHYARD_REGISTRY__ALLOWED_ENDPOINTS",
                "10.0.0.0/8, *.engines.internal",
            ),
        ],
    )
    .unwrap();
    assert!(config.bus.tls.required);
    assert_eq!(
        config.bus.tls.ca_file.as_deref(),
        Some(Path::new("/etc/nats/ca.pem"))
    );
    assert_eq!(
        config.registry.allowed_endpoints,
        ["10.0.0.0/8", "*.engines.internal"]
    );
    // A key of a nested table needs its three parts.
    let err = load(None, &[("SWITCHYARD_BUS__TLS__CA", "x")]).unwrap_err();
    assert!(err.to_string().contains("SWITCHYARD_BUS__TLS__CA"), "{err}");
    let err = load(None, &[("SWITCHYARD_BUS__AUTH__USER__NAME", "x")]).unwrap_err();
    assert!(err.to_string().contains("is not a config key"), "{err}");
}
