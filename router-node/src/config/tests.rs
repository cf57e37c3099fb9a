#![allow(clippy::unwrap_used)]

use super::*;
use std::path::Path;

fn no_env() -> [(&'static str, &'static str); 0] {
    []
}

fn parse(text: &str) -> Result<Config, ConfigError> {
    let config = Config::from_toml_str(text, Path::new("node.toml"))?;
    config.validate()?;
    Ok(config)
}

fn write(dir: &Path, name: &str, text: &str) -> std::path::PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

fn temp_dir(tag: &str) -> std::path::PathBuf {
    let dir =
        std::env::temp_dir().join(format!("switchyard-config-{tag}-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn an_empty_file_is_the_defaults() {
    assert_eq!(parse("").unwrap(), Config::default());
}

#[test]
fn an_unknown_key_is_named_with_the_file() {
    let err = parse("[http]\nlisen = \"0.0.0.0:1\"\n").unwrap_err();
    let text = err.to_string();
    assert!(text.contains("node.toml"), "{text}");
    assert!(text.contains("lisen"), "{text}");
    assert!(text.contains("in [http]"), "{text}");
    let err = parse("[nodes]\ncluster = \"a\"\n").unwrap_err();
    assert!(err.to_string().contains("nodes"), "{err}");
}

#[test]
fn an_unknown_key_in_an_array_entry_names_the_entry() {
    let text = "[admin]\nlisten = \"127.0.0.1:0\"\n\n[[engines]]\nkind = \"vllm\"\n\
                url = \"http://a:1\"\n\n[[engines]]\nkind = \"vllm\"\nurl = \"http://b:1\"\n\
                modle_dir = \"/m\"\n";
    let err = parse(text).unwrap_err().to_string();
    assert!(err.contains("in engines[1]"), "{err}");
    assert!(!err.contains("[admin]"), "{err}");
    assert!(err.contains("modle_dir"), "{err}");
}

#[test]
fn a_wrong_type_is_named() {
    let err = parse("[node]\nblock_size = \"sixteen\"\n").unwrap_err();
    assert!(err.to_string().contains("block_size"), "{err}");
    let err = parse("[bus]\nkind = \"carrier-pigeon\"\n").unwrap_err();
    assert!(err.to_string().contains("carrier-pigeon"), "{err}");
}

#[test]
fn bad_values_name_their_key() {
    let cases = [
        (
            "[selection]\ntemperature = -1.0\n",
            "selection.temperature must be >= 0",
        ),
        (
            "[selection]\noverlap_credit = nan\n",
            "selection.overlap_credit must be a finite",
        ),
        ("[node]\nblock_size = 0\n", "node.block_size must be >= 1"),
        ("[node]\ncluster = \"a.b\"\n", "node.cluster"),
        (
            "[http]\nlisten = \"nowhere\"\n",
            "http.listen must be host:port",
        ),
        (
            "[http]\nconcurrency_limit = 0\n",
            "http.concurrency_limit must be >= 1",
        ),
        (
            "[peer_sync]\nheartbeat_ms = 500\nlease_ms = 400\n",
            "peer_sync.lease_ms must be greater",
        ),
        (
            "[scheduler]\nrecheck_ms = 0\n",
            "scheduler.recheck_ms must be >= 1",
        ),
        (
            "[scheduler]\ndecode_reservations = false\n",
            "scheduler.room_credits",
        ),
        (
            "[telemetry]\nlog_filter = \"info,=[\"\n",
            "telemetry.log_filter",
        ),
        (
            "[telemetry]\notlp_endpoint = \"collector:4317\"\n",
            "telemetry.otlp_endpoint",
        ),
        ("[bus]\nnats_url = \"localhost\"\n", "bus.nats_url"),
    ];
    for (text, expected) in cases {
        let err = parse(text).unwrap_err();
        assert!(err.to_string().starts_with(expected), "{text:?}: {err}");
        assert!(err.key().is_some(), "{text:?}: {err}");
    }
}

#[test]
fn defaults_round_trip_through_print_config() {
    let text = Config::default().to_toml().unwrap();
    for section in [
        "[node]",
        "[http]",
        "[bus]",
        "[selection]",
        "[peer_sync]",
        "[scheduler]",
        "[telemetry]",
    ] {
        assert!(text.contains(section), "{section} missing:\n{text}");
    }
    assert_eq!(parse(&text).unwrap(), Config::default());
}

#[test]
fn a_full_config_round_trips() {
    let text = r#"
[node]
cluster = "prod"
router_id = "6f1c1a8e-8d3f-4b8e-9a55-3d2a0c1b2e10"
topology = "disaggregated"
block_size = 32

[http]
listen = "127.0.0.1:8000"
models = ["llama"]

[bus]
kind = "in-process"

[policy]
path = "/etc/switchyard/policy.yaml"

[selection]
temperature = 0.5

[telemetry]
log_format = "json"
otlp_endpoint = "http://collector:4318/v1/traces"
otlp_protocol = "http"
"#;
    let config = parse(text).unwrap();
    assert_eq!(config.node.topology, TopologyKind::Disaggregated);
    assert_eq!(config.bus.kind, BusKind::InProcess);
    assert_eq!(config.telemetry.otlp_protocol, OtlpProtocol::Http);
    let again = parse(&config.to_toml().unwrap()).unwrap();
    assert_eq!(again, config);
    let node = config.node_config(router_core::PolicyProfile::fallback());
    assert_eq!(
        node.router_id.0.to_string(),
        "6f1c1a8e-8d3f-4b8e-9a55-3d2a0c1b2e10"
    );
    assert_eq!(node.block_size, 32);
    assert_eq!(node.topology, router_actors::Topology::Disaggregated);
}

#[test]
fn a_booking_is_leased_a_minute_past_the_request_deadline() {
    let config = parse("[http]\nrequest_timeout_ms = 5000\n").unwrap();
    let node = config.node_config(router_core::PolicyProfile::fallback());
    assert_eq!(node.booking_lease, Some(std::time::Duration::from_secs(65)));
}

#[test]
fn a_missing_file_names_it() {
    let err =
        Config::load_with_env(Some(Path::new("/nonexistent/node.toml")), no_env()).unwrap_err();
    assert!(err.to_string().contains("/nonexistent/node.toml"), "{err}");
}

#[test]
fn a_relative_keys_file_is_relative_to_the_config_file_and_its_errors_name_the_key() {
    let dir = temp_dir("keys");
    let digest = "ab".repeat(32);
    let entry = format!("[[keys]]\nname = \"a\"\nsha256 = \"{digest}\"\nclasses = [\"default\"]\n");
    write(&dir, "keys.toml", &entry);
    let path = write(&dir, "node.toml", "[auth]\nkeys_file = \"keys.toml\"\n");
    let config = Config::load_with_env(Some(&path), no_env()).unwrap();
    assert_eq!(
        config.auth.keys_file.as_deref(),
        Some(dir.join("keys.toml").as_path())
    );
    let profile = std::sync::Arc::new(config.policy_profile().unwrap());
    let keys = config.auth.key_store(profile.clone()).unwrap().unwrap();
    assert_eq!(keys.keys().names().collect::<Vec<_>>(), ["a"]);
    // No file named: no keys (open).
    assert!(
        Config::default()
            .auth
            .key_store(profile.clone())
            .unwrap()
            .is_none()
    );
    write(&dir, "keys.toml", &entry.replace("default", "gold"));
    let err = config.auth.key_store(profile).unwrap_err();
    assert_eq!(err.key(), Some("auth.keys_file"));
    assert!(err.to_string().contains("`classes` names `gold`"), "{err}");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_relative_policy_path_is_relative_to_the_config_file() {
    let dir = temp_dir("policy");
    write(
        &dir,
        "policy.toml",
        "default_class = \"a\"\n[[classes]]\nname = \"a\"\nslo_ms = 100\nquantum = 1\n",
    );
    let path = write(&dir, "node.toml", "[policy]\npath = \"policy.toml\"\n");
    let config = Config::load_with_env(Some(&path), no_env()).unwrap();
    assert_eq!(
        config.policy.path.as_deref(),
        Some(dir.join("policy.toml").as_path())
    );
    let profile = config.policy_profile().unwrap();
    assert_eq!(profile.classes().len(), 1);
    // A missing profile names `policy.path`.
    let path = write(&dir, "bad.toml", "[policy]\npath = \"missing.yaml\"\n");
    let err = Config::load_with_env(Some(&path), no_env())
        .unwrap()
        .policy_profile()
        .unwrap_err();
    assert!(err.to_string().starts_with("policy.path"), "{err}");
    // So do an unknown extension and a profile that does not validate, with the file.
    write(&dir, "policy.json", "{}");
    write(&dir, "invalid.yml", "default_class: nope\n");
    for (name, says) in [
        ("policy.json", "unsupported extension"),
        ("invalid.yml", "`default_class` names `nope`"),
    ] {
        let node = write(&dir, "n.toml", &format!("[policy]\npath = \"{name}\"\n"));
        let err = Config::load_with_env(Some(&node), no_env())
            .unwrap()
            .policy_profile()
            .unwrap_err();
        assert_eq!(err.key(), Some("policy.path"), "{err}");
        let shown = err.to_string();
        assert!(
            shown.contains(&*dir.join(name).to_string_lossy()),
            "{shown}"
        );
        assert!(shown.contains(says), "{shown}");
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn the_example_policy_loads_with_its_classifiers() {
    let text = include_str!("../../policy.example.toml");
    let profile = router_core::PolicyProfile::from_toml_str(text).unwrap();
    assert_eq!(profile.classes().len(), 2);
    let rules: Vec<_> = profile
        .classifiers()
        .iter()
        .map(|r| r.name.as_str())
        .collect();
    assert_eq!(
        rules,
        [
            "free-tier-gpt4",
            "long-prompts",
            "offline-jobs",
            "acme",
            "everyone-else"
        ]
    );
}

#[test]
fn a_classifier_mistake_in_the_policy_file_names_the_rule() {
    let dir = temp_dir("policy-rule");
    write(
        &dir,
        "policy.toml",
        "default_class = \"a\"\n[[classes]]\nname = \"a\"\nslo_ms = 100\nquantum = 1\n\
         [[classifiers]]\nname = \"short\"\nprompt_tokens = { min = 10, max = 5 }\nclass = \"a\"\n",
    );
    let path = write(&dir, "node.toml", "[policy]\npath = \"policy.toml\"\n");
    let err = Config::load_with_env(Some(&path), no_env())
        .unwrap()
        .policy_profile()
        .unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("classifier `short`") && text.contains("prompt_tokens"),
        "{text}"
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn the_example_file_is_the_defaults() {
    let text = include_str!("../../node.example.toml");
    assert_eq!(parse(text).unwrap(), Config::default());
}

#[test]
fn the_disagg_convention_is_vllm_or_sglang_and_sglang_needs_the_disaggregated_topology() {
    assert_eq!(
        parse("").unwrap().disagg.convention,
        crate::frontend::DisaggConvention::Vllm
    );
    let config =
        parse("[node]\ntopology = \"disaggregated\"\n[disagg]\nconvention = \"sglang\"\n").unwrap();
    assert_eq!(
        config.disagg.convention,
        crate::frontend::DisaggConvention::Sglang
    );
    let err = parse("[disagg]\nconvention = \"sglang\"\n").unwrap_err();
    assert!(err.to_string().starts_with("disagg.convention"), "{err}");
    let err = parse("[disagg]\nconvention = \"tgi\"\n").unwrap_err();
    assert!(err.to_string().contains("tgi"), "{err}");
}

#[test]
fn engines_are_read_and_bad_entries_name_their_key() {
    let ok = parse(
        "[[engines]]\nkind = \"vllm\"\nurl = \"http://10.0.0.5:8000/\"\nkv_events = \"tcp://10.0.0.5:5557\"\n\
         [[engines]]\nkind = \"sglang\"\nurl = \"http://10.0.0.6:30000\"\nid = 7\n",
    )
    .unwrap();
    assert_eq!(ok.engines.len(), 2);
    let link = ok.engines[0].link_config(Some(ok.node.block_size));
    assert_eq!(link.url, "http://10.0.0.5:8000", "trailing slash dropped");
    assert_eq!(link.kv_events.as_deref(), Some("tcp://10.0.0.5:5557"));
    assert_eq!(link.expected_block_size, Some(16));
    assert_eq!(
        ok.engines[0].link_config(Some(16)).worker,
        router_engine::link::worker_id_for("http://10.0.0.5:8000"),
        "the same id a `router-node link` sidecar derives"
    );
    assert_eq!(
        ok.engines[1].link_config(Some(16)).worker,
        router_core::WorkerId(7)
    );

    let cases = [
        (
            "[[engines]]\nkind = \"vllm\"\nurl = \"10.0.0.5:8000\"\n",
            "engines[0].url",
        ),
        (
            "[[engines]]\nkind = \"vllm\"\nurl = \"http://a:1\"\nkv_events = \"http://a:5557\"\n",
            "engines[0].kv_events",
        ),
        (
            "[[engines]]\nkind = \"vllm\"\nurl = \"http://a:1\"\n[[engines]]\nkind = \"vllm\"\nurl = \"http://b:1\"\nrole = \"prefill\"\n",
            "engines[1].role",
        ),
        (
            "[[engines]]\nkind = \"vllm\"\nurl = \"http://a:1\"\npoll_ms = 1000\nlease_ms = 500\n",
            "engines[0].lease_ms",
        ),
    ];
    for (text, key) in cases {
        let error = parse(text).unwrap_err();
        assert_eq!(error.key(), Some(key), "{error}");
    }
    let unknown = parse("[[engines]]\nkind = \"tgi\"\nurl = \"http://a:1\"\n").unwrap_err();
    assert!(unknown.to_string().contains("tgi"), "{unknown}");
}
