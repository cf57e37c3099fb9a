//! Loading, validating and resolving policy profiles as an operator would meet them.

use super::*;
use crate::ids::ClassId;

const TOML: &str = r#"
default_class = "interactive"

[[classes]]
name = "interactive"
slo_ms = 2000
quantum = 512
prefill_busy_threshold_frac = 1.5
decode_busy_threshold_frac = 0.8
request_queue_limit_per_worker = 64

[[classes]]
name = "batch"
slo_ms = 60000
quantum = 128
prefill_busy_threshold = 4096
token_queue_limit_per_worker = 100000

[reject_thresholds]
decode_blocks_frac = 0.95
"#;

#[test]
fn toml_profile_loads_with_typed_thresholds() {
    let p = PolicyProfile::from_toml_str(TOML).expect("valid profile");
    assert_eq!(p.classes().len(), 2);
    let interactive = p.class(ClassId(0));
    assert_eq!(interactive.slo.as_millis(), 2000);
    assert_eq!(interactive.prefill_busy_line(8192), 12_288);
    assert_eq!(interactive.decode_room_line(Some(1000)), Some(800));
    assert_eq!(interactive.decode_room_line(None), None);
    let batch = p.class(ClassId(1));
    assert_eq!(batch.prefill_busy_line(8192), 4096);
    assert_eq!(batch.decode_room_line(Some(1000)), None);
    assert!(!batch.never_queue);
    assert!(p.reject_thresholds().rank_over(0, 951, Some(1000), 8192));
    assert!(!p.reject_thresholds().rank_over(0, 950, Some(1000), 8192));
}

#[test]
fn yaml_profile_is_equivalent_to_toml() {
    let yaml = r#"
default_class: interactive
classes:
  - { name: interactive, slo_ms: 2000, quantum: 512, prefill_busy_threshold_frac: 1.5,
      decode_busy_threshold_frac: 0.8, request_queue_limit_per_worker: 64 }
  - { name: batch, slo_ms: 60000, quantum: 128, prefill_busy_threshold: 4096,
      token_queue_limit_per_worker: 100000 }
reject_thresholds: { decode_blocks_frac: 0.95 }
"#;
    assert_eq!(
        PolicyProfile::from_yaml_str(yaml),
        PolicyProfile::from_toml_str(TOML)
    );
}

#[test]
fn the_extension_picks_the_format_the_text_is_parsed_as() {
    assert_eq!(
        PolicyFormat::from_extension("toml"),
        Some(PolicyFormat::Toml)
    );
    assert_eq!(
        PolicyFormat::from_extension("yml"),
        Some(PolicyFormat::Yaml)
    );
    assert_eq!(
        PolicyFormat::from_extension("yaml"),
        Some(PolicyFormat::Yaml)
    );
    assert_eq!(PolicyFormat::from_extension("json"), None);
    assert_eq!(
        PolicyProfile::parse(TOML, PolicyFormat::Toml),
        PolicyProfile::from_toml_str(TOML)
    );
    // TOML text read as YAML is a parse error, not a profile.
    assert!(matches!(
        PolicyProfile::parse(TOML, PolicyFormat::Yaml),
        Err(PolicyError::Parse(_))
    ));
}

#[test]
fn unknown_keys_are_errors_naming_the_key() {
    let err = PolicyProfile::from_toml_str(
        "default_class = \"a\"\n[[classes]]\nname = \"a\"\nslo_ms = 1\nquantum = 1\nslo = 5\n",
    )
    .expect_err("unknown key");
    assert!(err.to_string().contains("slo"), "{err}");
    let err = PolicyProfile::from_yaml_str("default_class: a\nclasess: []\n").expect_err("typo");
    assert!(err.to_string().contains("clasess"), "{err}");
}

#[test]
fn validation_errors_name_the_class_and_the_field() {
    let cases = [
        ("slo_ms = 0\nquantum = 1", "slo_ms"),
        ("slo_ms = 1\nquantum = 0", "quantum"),
        (
            "slo_ms = 1\nquantum = 1\ndecode_busy_threshold_frac = 1.5",
            "decode_busy_threshold_frac",
        ),
        (
            "slo_ms = 1\nquantum = 1\nprefill_busy_threshold_frac = -1.0",
            "prefill_busy_threshold_frac",
        ),
        (
            "slo_ms = 1\nquantum = 1\nbusy_worker_ratio = 0.5",
            "busy_worker_ratio",
        ),
        (
            "slo_ms = 1\nquantum = 1\nprefill_busy_threshold = 1\nbusy_worker_ratio = 0.0",
            "busy_worker_ratio",
        ),
    ];
    for (body, field) in cases {
        let text = format!("default_class = \"gold\"\n[[classes]]\nname = \"gold\"\n{body}\n");
        match PolicyProfile::from_toml_str(&text) {
            Err(PolicyError::InvalidClassField {
                class, field: f, ..
            }) => {
                assert_eq!((class.as_str(), f), ("gold", field));
            }
            other => panic!("{body}: expected an error on {field}, got {other:?}"),
        }
    }
}

#[test]
fn profile_level_mistakes_are_reported() {
    let dup = "default_class = \"a\"\n[[classes]]\nname = \"a\"\nslo_ms = 1\nquantum = 1\n[[classes]]\nname = \"a\"\nslo_ms = 1\nquantum = 1\n";
    assert_eq!(
        PolicyProfile::from_toml_str(dup),
        Err(PolicyError::DuplicateClass { class: "a".into() })
    );
    let missing = "[[classes]]\nname = \"a\"\nslo_ms = 1\nquantum = 1\n";
    assert_eq!(
        PolicyProfile::from_toml_str(missing),
        Err(PolicyError::MissingDefaultClass)
    );
    let wrong = "default_class = \"b\"\n[[classes]]\nname = \"a\"\nslo_ms = 1\nquantum = 1\n";
    assert_eq!(
        PolicyProfile::from_toml_str(wrong),
        Err(PolicyError::UnknownDefaultClass { class: "b".into() })
    );
    let bad_name =
        "default_class = \"a b\"\n[[classes]]\nname = \"a b\"\nslo_ms = 1\nquantum = 1\n";
    assert!(matches!(
        PolicyProfile::from_toml_str(bad_name),
        Err(PolicyError::InvalidClassField { field: "name", .. })
    ));
    let threshold = "[reject_thresholds]\ndecode_blocks_frac = 2.0\n";
    assert!(matches!(
        PolicyProfile::from_toml_str(threshold),
        Err(PolicyError::InvalidField {
            field: "reject_thresholds.decode_blocks_frac",
            ..
        })
    ));
}

#[test]
fn unknown_class_in_a_request_is_an_error_not_a_fallback() {
    let p = PolicyProfile::from_toml_str(TOML).expect("valid profile");
    assert_eq!(p.resolve(None), Ok(ClassId(0)));
    assert_eq!(p.resolve(Some("")), Ok(ClassId(0)));
    assert_eq!(p.resolve(Some("batch")), Ok(ClassId(1)));
    let err = p.resolve(Some("Batch")).expect_err("case-sensitive");
    assert_eq!(err.class, "Batch");
    assert!(err.known.contains("interactive") && err.known.contains("batch"));
}

#[test]
fn no_profile_means_one_class_that_never_queues_and_ignores_names() {
    let p = PolicyProfile::fallback();
    assert_eq!(p.classes().len(), 1);
    assert!(p.class(ClassId(0)).never_queue);
    assert!(!p.class(ClassId(0)).gated());
    assert_eq!(p.resolve(Some("anything")), Ok(ClassId(0)));
    let empty = PolicyProfile::from_toml_str("").expect("empty file is the fallback");
    assert!(empty.is_fallback());
}

#[test]
fn a_zero_per_worker_limit_means_never_queue() {
    let text = "default_class = \"a\"\n[[classes]]\nname = \"a\"\nslo_ms = 1\nquantum = 1\nprefill_busy_threshold = 10\ntoken_queue_limit_per_worker = 0\n";
    let p = PolicyProfile::from_toml_str(text).expect("valid");
    assert!(p.class(ClassId(0)).never_queue);
}
