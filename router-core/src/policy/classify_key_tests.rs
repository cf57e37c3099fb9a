//! Classification of requests authenticated by an API key: a rule matching on the key's
//! name, and the key's default class standing in for the profile's where the profile's
//! would apply (no header without rules; no rule matched), never over a rule's choice.

use super::classify_tests::Req;
use super::*;
use crate::ids::ClassId;

const INTERACTIVE: u16 = 0;
const STANDARD: u16 = 1;
const BATCH: u16 = 2;

const CLASSES: &str = r#"
default_class = "standard"

[[classes]]
name = "interactive"
slo_ms = 2000
quantum = 512

[[classes]]
name = "standard"
slo_ms = 10000
quantum = 256

[[classes]]
name = "batch"
slo_ms = 60000
quantum = 128
"#;

/// `nightly` keys run as batch; long prompts of anyone else too.
const RULES: &str = r#"
[[classifiers]]
name = "nightly-jobs"
key = ["nightly", "backfill"]
class = "batch"

[[classifiers]]
name = "long-prompts"
prompt_tokens = { min = 8000 }
class = "batch"
allow_header_override = ["interactive"]
"#;

fn with_rules() -> PolicyProfile {
    PolicyProfile::from_toml_str(&format!("{CLASSES}{RULES}")).expect("valid profile")
}

fn without_rules() -> PolicyProfile {
    PolicyProfile::from_toml_str(CLASSES).expect("valid profile")
}

fn keyed(name: &str, default: Option<u16>) -> Req {
    let mut r = Req::new("m");
    r.key = Some(name.to_owned());
    r.default_class = default.map(ClassId);
    r
}

fn classified(class: u16, rule: Option<&str>, source: ClassSource) -> Classification {
    Classification::Classified {
        class: ClassId(class),
        rule: rule.map(str::to_owned),
        source,
    }
}

#[test]
fn a_rule_matches_on_the_name_of_the_requests_key() {
    let p = with_rules();
    for name in ["nightly", "backfill"] {
        assert_eq!(
            keyed(name, None).classify(&p),
            Ok(classified(BATCH, Some("nightly-jobs"), ClassSource::Rule)),
            "{name}"
        );
    }
    // Another key, or no key at all, does not match it.
    let default = Ok(classified(STANDARD, None, ClassSource::Default));
    assert_eq!(keyed("nightly-2", None).classify(&p), default);
    assert_eq!(Req::new("m").classify(&p), default);
}

#[test]
fn the_keys_default_class_stands_in_for_the_profiles_and_never_over_a_rule() {
    let p = with_rules();
    // No rule matched: the key's default, not the profile's.
    assert_eq!(
        keyed("team-a", Some(INTERACTIVE)).classify(&p),
        Ok(classified(INTERACTIVE, None, ClassSource::Default))
    );
    // A header naming the key's default is that class; another is not permitted.
    assert_eq!(
        keyed("team-a", Some(INTERACTIVE))
            .asking("interactive")
            .classify(&p),
        Ok(classified(INTERACTIVE, None, ClassSource::Default))
    );
    assert_eq!(
        keyed("team-a", Some(INTERACTIVE))
            .asking("batch")
            .classify(&p),
        Err(ClassifyError::NotPermitted {
            class: "batch".into(),
            rule: None,
        })
    );
    // A matching rule decides whatever the key's default.
    assert_eq!(
        keyed("nightly", Some(INTERACTIVE)).classify(&p),
        Ok(classified(BATCH, Some("nightly-jobs"), ClassSource::Rule))
    );
    let mut long = keyed("team-a", Some(INTERACTIVE));
    long.prompt_tokens = 9000;
    assert_eq!(
        long.classify(&p),
        Ok(classified(BATCH, Some("long-prompts"), ClassSource::Rule))
    );
}

#[test]
fn without_rules_the_header_wins_then_the_keys_default_then_the_profiles() {
    let p = without_rules();
    assert_eq!(
        keyed("team-a", Some(BATCH)).classify(&p),
        Ok(classified(BATCH, None, ClassSource::Default))
    );
    assert_eq!(
        keyed("team-a", Some(BATCH))
            .asking("interactive")
            .classify(&p),
        Ok(classified(INTERACTIVE, None, ClassSource::Header))
    );
    assert_eq!(
        keyed("team-a", None).classify(&p),
        Ok(classified(STANDARD, None, ClassSource::Default))
    );
    // An unknown header class is still an error, whatever the key.
    assert!(matches!(
        keyed("team-a", Some(BATCH)).asking("gold").classify(&p),
        Err(ClassifyError::Unknown(_))
    ));
}

#[test]
fn the_fallback_profile_ignores_a_keys_default() {
    let p = PolicyProfile::fallback();
    assert_eq!(
        keyed("team-a", Some(7)).classify(&p),
        Ok(classified(0, None, ClassSource::Default))
    );
}

#[test]
fn a_key_condition_names_valid_keys_and_at_least_one() {
    for (key, expected) in [
        ("[]", "`key` is an empty list"),
        ("\"\"", "is not a key name"),
        ("[\"ok\", \"bad name\"]", "`bad name` is not a key name"),
    ] {
        let text = format!(
            "{CLASSES}\n[[classifiers]]\nname = \"by-key\"\nkey = {key}\nclass = \"batch\"\n"
        );
        let err = PolicyProfile::from_toml_str(&text).expect_err(key);
        let message = err.to_string();
        assert!(message.contains("`by-key`"), "{key}: {message}");
        assert!(message.contains(expected), "{key}: {message}");
    }
}
