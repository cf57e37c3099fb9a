//! Request classifiers as an operator writes them and a client meets them: rule order,
//! every condition, refusals, header overrides and the load-time errors naming the rule.

use super::*;
use crate::ids::ClassId;
use std::borrow::Cow;

pub(super) const PROFILE: &str = r#"
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

[[classifiers]]
name = "free-gpt4"
model = "gpt-4"
body_field = { name = "metadata.tier", value = "free" }
refuse = { status = 403, message = "gpt-4 is not on the free tier" }

[[classifiers]]
name = "long-prompts"
prompt_tokens = { min = 8000 }
class = "batch"

[[classifiers]]
name = "gold-tenant"
header = { name = "X-Tenant", value = ["acme", "globex"] }
class = "interactive"
allow_header_override = ["batch"]

[[classifiers]]
name = "short-chat"
endpoint = "chat"
max_tokens = { max = 256 }
model = ["small", "tiny"]
class = "interactive"

[[classifiers]]
name = "priority-users"
body_field = { name = "priority", value = [1, true] }
class = "interactive"
"#;

/// One request's facts, owned, for tests.
#[derive(Debug, Clone)]
pub(super) struct Req {
    pub model: String,
    pub endpoint: Endpoint,
    pub prompt_tokens: u64,
    pub max_tokens: u64,
    pub requested: Option<String>,
    pub headers: Vec<(String, String)>,
    pub body: Vec<(BodyField, String)>,
    /// The API key's name and default class.
    pub key: Option<String>,
    pub default_class: Option<ClassId>,
}

impl Req {
    pub fn new(model: &str) -> Self {
        Self {
            model: model.to_owned(),
            endpoint: Endpoint::Completions,
            prompt_tokens: 100,
            max_tokens: 1024,
            requested: None,
            headers: Vec::new(),
            body: Vec::new(),
            key: None,
            default_class: None,
        }
    }

    fn header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.to_owned(), value.to_owned()));
        self
    }

    fn body(mut self, field: &str, value: &str) -> Self {
        let field = BodyField::parse(field).expect("a valid field");
        self.body.push((field, value.to_owned()));
        self
    }

    pub(super) fn asking(mut self, class: &str) -> Self {
        self.requested = Some(class.to_owned());
        self
    }

    pub fn classify(&self, p: &PolicyProfile) -> Result<Classification, ClassifyError> {
        let header = |name: &str| {
            self.headers
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case(name))
                .map(|(_, v)| v.as_str())
        };
        let body = |field: &BodyField| {
            self.body
                .iter()
                .find(|(f, _)| f == field)
                .map(|(_, v)| Cow::Borrowed(v.as_str()))
        };
        p.classify(&RequestFacts {
            model: &self.model,
            endpoint: self.endpoint,
            prompt_tokens: self.prompt_tokens,
            max_tokens: self.max_tokens,
            requested: self.requested.as_deref(),
            key: self.key.as_deref(),
            default_class: self.default_class,
            header: &header,
            body_field: &body,
        })
    }
}

fn profile() -> PolicyProfile {
    PolicyProfile::from_toml_str(PROFILE).expect("valid profile")
}

fn by_rule(class: u16, rule: &str) -> Result<Classification, ClassifyError> {
    Ok(Classification::Classified {
        class: ClassId(class),
        rule: Some(rule.to_owned()),
        source: ClassSource::Rule,
    })
}

const INTERACTIVE: u16 = 0;
const STANDARD: u16 = 1;
const BATCH: u16 = 2;

#[test]
fn the_first_matching_rule_decides_and_no_match_is_the_default() {
    let p = profile();
    assert_eq!(
        Req::new("m").classify(&p),
        Ok(Classification::Classified {
            class: ClassId(STANDARD),
            rule: None,
            source: ClassSource::Default,
        })
    );
    let mut long = Req::new("m").header("x-tenant", "acme");
    long.prompt_tokens = 8000;
    assert_eq!(long.classify(&p), by_rule(BATCH, "long-prompts"));
    long.prompt_tokens = 7999;
    assert_eq!(long.classify(&p), by_rule(INTERACTIVE, "gold-tenant"));
}

#[test]
fn every_condition_of_a_rule_must_hold() {
    let p = profile();
    let mut chat = Req::new("tiny");
    chat.endpoint = Endpoint::Chat;
    chat.max_tokens = 256;
    assert_eq!(chat.classify(&p), by_rule(INTERACTIVE, "short-chat"));
    let default = Ok(Classification::Classified {
        class: ClassId(STANDARD),
        rule: None,
        source: ClassSource::Default,
    });
    let mut over = chat.clone();
    over.max_tokens = 257;
    assert_eq!(over.classify(&p), default);
    let mut completions = chat.clone();
    completions.endpoint = Endpoint::Completions;
    assert_eq!(completions.classify(&p), default);
    let mut other_model = chat;
    other_model.model = "small-2".into();
    assert_eq!(other_model.classify(&p), default);
    assert_eq!(
        Req::new("m").header("x-tenant", "initech").classify(&p),
        default
    );
}

#[test]
fn body_fields_match_top_level_and_metadata_values_as_text() {
    let p = profile();
    let free = Req::new("gpt-4").body("metadata.tier", "free");
    assert_eq!(
        free.classify(&p),
        Ok(Classification::Refused {
            status: 403,
            message: "gpt-4 is not on the free tier".into(),
            rule: "free-gpt4".into(),
        })
    );
    // A top-level `tier` is not `metadata.tier`.
    assert!(matches!(
        Req::new("gpt-4").body("tier", "free").classify(&p),
        Ok(Classification::Classified { rule: None, .. })
    ));
    for value in ["1", "true"] {
        let r = Req::new("m").body("priority", value);
        assert_eq!(r.classify(&p), by_rule(INTERACTIVE, "priority-users"));
    }
    assert!(matches!(
        Req::new("m").body("priority", "2").classify(&p),
        Ok(Classification::Classified { rule: None, .. })
    ));
}

#[test]
fn a_refusal_holds_whatever_class_the_client_asks_for() {
    let p = profile();
    let r = Req::new("gpt-4")
        .body("metadata.tier", "free")
        .asking("interactive");
    assert!(matches!(r.classify(&p), Ok(Classification::Refused { .. })));
}

#[test]
fn a_client_cannot_promote_itself_by_header() {
    let p = profile();
    let err = Req::new("m").asking("interactive").classify(&p);
    assert_eq!(
        err,
        Err(ClassifyError::NotPermitted {
            class: "interactive".into(),
            rule: None,
        })
    );
    assert_eq!(err.map_err(|e| e.status()), Err(403));
    let mut long = Req::new("m").asking("interactive");
    long.prompt_tokens = 9000;
    let err = long
        .classify(&p)
        .expect_err("long-prompts allows no override");
    assert_eq!(err.status(), 403);
    assert!(err.to_string().contains("long-prompts"), "{err}");
}

#[test]
fn a_rule_may_let_the_header_pick_the_classes_it_lists() {
    let p = profile();
    let gold = Req::new("m").header("x-tenant", "globex");
    assert_eq!(
        gold.clone().asking("batch").classify(&p),
        Ok(Classification::Classified {
            class: ClassId(BATCH),
            rule: Some("gold-tenant".into()),
            source: ClassSource::Header,
        })
    );
    // Asking for the class the rule gives anyway is no promotion.
    assert_eq!(
        gold.clone().asking("interactive").classify(&p),
        by_rule(INTERACTIVE, "gold-tenant")
    );
    assert_eq!(
        gold.clone()
            .asking("standard")
            .classify(&p)
            .map_err(|e| e.status()),
        Err(403)
    );
    let unknown = gold.asking("platinum").classify(&p).expect_err("unknown");
    assert_eq!(unknown.status(), 400);
    assert_eq!(
        unknown.unknown().map(|u| u.class.as_str()),
        Some("platinum")
    );
}

#[test]
fn without_classifiers_the_header_or_the_default_decides_as_before() {
    let p = PolicyProfile::from_toml_str(
        "default_class = \"a\"\n[[classes]]\nname = \"a\"\nslo_ms = 1\nquantum = 1\n[[classes]]\nname = \"b\"\nslo_ms = 1\nquantum = 1\n",
    )
    .expect("valid");
    let classified = |class, source| {
        Ok(Classification::Classified {
            class: ClassId(class),
            rule: None,
            source,
        })
    };
    assert_eq!(
        Req::new("m").classify(&p),
        classified(0, ClassSource::Default)
    );
    assert_eq!(
        Req::new("m").asking("").classify(&p),
        classified(0, ClassSource::Default)
    );
    assert_eq!(
        Req::new("m").asking("b").classify(&p),
        classified(1, ClassSource::Header)
    );
    let err = Req::new("m").asking("c").classify(&p).expect_err("unknown");
    assert_eq!((err.status(), err.unknown().is_some()), (400, true));
    let fallback = PolicyProfile::fallback();
    assert_eq!(
        Req::new("m").asking("anything").classify(&fallback),
        classified(0, ClassSource::Default)
    );
}

#[test]
fn a_profile_without_classes_may_still_refuse() {
    let p = PolicyProfile::from_toml_str(
        "[[classifiers]]\nname = \"no-huge\"\nprompt_tokens = { min = 100000 }\nrefuse = { status = 413, message = \"prompt too long\" }\n",
    )
    .expect("valid");
    let mut huge = Req::new("m").asking("whatever");
    huge.prompt_tokens = 100_000;
    assert!(matches!(
        huge.classify(&p),
        Ok(Classification::Refused { status: 413, .. })
    ));
    huge.prompt_tokens = 99_999;
    assert!(matches!(
        huge.classify(&p),
        Ok(Classification::Classified {
            class: ClassId(0),
            ..
        })
    ));
}

#[test]
fn yaml_rules_are_equivalent_to_toml() {
    let yaml = r#"
default_class: standard
classes:
  - { name: interactive, slo_ms: 2000, quantum: 512 }
  - { name: standard, slo_ms: 10000, quantum: 256 }
  - { name: batch, slo_ms: 60000, quantum: 128 }
classifiers:
  - name: free-gpt4
    model: gpt-4
    body_field: { name: metadata.tier, value: free }
    refuse: { status: 403, message: gpt-4 is not on the free tier }
  - { name: long-prompts, prompt_tokens: { min: 8000 }, class: batch }
  - name: gold-tenant
    header: { name: X-Tenant, value: [acme, globex] }
    class: interactive
    allow_header_override: [batch]
  - name: short-chat
    endpoint: chat
    max_tokens: { max: 256 }
    model: [small, tiny]
    class: interactive
  - { name: priority-users, body_field: { name: priority, value: [1, true] }, class: interactive }
"#;
    assert_eq!(PolicyProfile::from_yaml_str(yaml), Ok(profile()));
}

/// A profile with classes `a` and `b` and the given rules.
fn with_rules(rules: &str) -> Result<PolicyProfile, PolicyError> {
    PolicyProfile::from_toml_str(&format!(
        "default_class = \"a\"\n[[classes]]\nname = \"a\"\nslo_ms = 1\nquantum = 1\n[[classes]]\nname = \"b\"\nslo_ms = 1\nquantum = 1\n{rules}"
    ))
}

#[test]
fn rule_mistakes_are_load_errors_naming_the_rule_and_the_key() {
    let cases = [
        ("class = \"c\"", "class"),
        (
            "class = \"a\"\nallow_header_override = [\"z\"]",
            "allow_header_override",
        ),
        (
            "prompt_tokens = { min = 10, max = 9 }\nclass = \"a\"",
            "prompt_tokens",
        ),
        ("max_tokens = {}\nclass = \"a\"", "max_tokens"),
        (
            "refuse = { status = 200, message = \"no\" }",
            "refuse.status",
        ),
        (
            "refuse = { status = 600, message = \"no\" }",
            "refuse.status",
        ),
        (
            "refuse = { status = 403, message = \"no\" }\nallow_header_override = [\"b\"]",
            "allow_header_override",
        ),
        (
            "class = \"a\"\nrefuse = { status = 403, message = \"no\" }",
            "class",
        ),
        ("model = \"m\"", "class"),
        ("model = []\nclass = \"a\"", "model"),
        (
            "header = { name = \"bad header\" }\nclass = \"a\"",
            "header.name",
        ),
        (
            "header = { name = \"x\", value = [] }\nclass = \"a\"",
            "header.value",
        ),
        (
            "body_field = { name = \"a.b\" }\nclass = \"a\"",
            "body_field.name",
        ),
        (
            "body_field = { name = \"metadata.\" }\nclass = \"a\"",
            "body_field.name",
        ),
    ];
    for (body, key) in cases {
        let rules = format!("[[classifiers]]\nname = \"r1\"\n{body}\n");
        match with_rules(&rules) {
            Err(PolicyError::InvalidRule { rule, key: k, .. }) => {
                assert_eq!((rule.as_str(), k), ("r1", key), "{body}");
            }
            other => panic!("{body}: expected an error on {key}, got {other:?}"),
        }
    }
    let reserved = with_rules("[[classifiers]]\nname = \"none\"\nclass = \"a\"\n");
    assert!(
        matches!(&reserved, Err(PolicyError::InvalidRule { key: "name", .. })),
        "{reserved:?}"
    );
    let err = with_rules("[[classifiers]]\nname = \"r1\"\nclass = \"c\"\n").expect_err("unknown");
    assert_eq!(
        err.to_string(),
        "policy classifier `r1`: `class` names `c`, which is not a configured class"
    );
}

#[test]
fn unreachable_and_duplicate_rules_are_load_errors() {
    let unreachable = "[[classifiers]]\nname = \"everything\"\nclass = \"a\"\n[[classifiers]]\nname = \"later\"\nmodel = \"m\"\nclass = \"b\"\n";
    assert_eq!(
        with_rules(unreachable),
        Err(PolicyError::UnreachableRule {
            rule: "later".into(),
            after: "everything".into(),
        })
    );
    let dup = "[[classifiers]]\nname = \"r\"\nmodel = \"m\"\nclass = \"a\"\n[[classifiers]]\nname = \"r\"\nmodel = \"n\"\nclass = \"b\"\n";
    assert_eq!(
        with_rules(dup),
        Err(PolicyError::DuplicateRule { rule: "r".into() })
    );
    // A catch-all last is fine: it is how an operator allows overrides for everyone else.
    let last = "[[classifiers]]\nname = \"r\"\nmodel = \"m\"\nclass = \"b\"\n[[classifiers]]\nname = \"rest\"\nclass = \"a\"\nallow_header_override = [\"b\"]\n";
    let p = with_rules(last).expect("valid");
    assert!(matches!(
        Req::new("x").asking("b").classify(&p),
        Ok(Classification::Classified {
            class: ClassId(1),
            source: ClassSource::Header,
            ..
        })
    ));
}

#[test]
fn unknown_keys_in_a_rule_are_errors_naming_the_key() {
    let err = with_rules("[[classifiers]]\nname = \"r\"\nclass = \"a\"\nmodels = \"m\"\n")
        .expect_err("typo");
    assert!(err.to_string().contains("models"), "{err}");
    let err =
        with_rules("[[classifiers]]\nname = \"r\"\nclass = \"a\"\nendpoint = \"embeddings\"\n")
            .expect_err("bad endpoint");
    assert!(err.to_string().contains("embeddings"), "{err}");
}
