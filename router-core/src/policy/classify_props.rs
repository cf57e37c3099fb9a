//! Properties of classification over random rule lists and requests: it agrees with a plain
//! reading of the rules (first match in order), a header never lifts a request into a class
//! its rule does not list, and rules added at the end never change earlier decisions.

use super::classify_tests::Req;
use super::*;
use crate::ids::ClassId;
use proptest::prelude::*;

const CLASSES: [&str; 3] = ["a", "b", "c"];
const MODELS: [&str; 3] = ["m0", "m1", "m2"];

#[derive(Debug, Clone)]
struct Rule {
    models: Option<Vec<usize>>,
    range: Option<(u64, u64)>,
    /// `None`: refuse.
    class: Option<usize>,
    allow: Vec<usize>,
}

fn rule() -> impl Strategy<Value = Rule> {
    (
        proptest::option::of(proptest::sample::subsequence(vec![0usize, 1, 2], 1..=3)),
        proptest::option::of((0u64..100, 0u64..100)),
        proptest::option::of(0usize..3),
        proptest::sample::subsequence(vec![0usize, 1, 2], 0..=3),
    )
        .prop_map(|(models, range, class, allow)| Rule {
            models,
            range: range.map(|(x, y)| (x.min(y), x.max(y))),
            allow: if class.is_some() { allow } else { Vec::new() },
            class,
        })
}

/// Rules where only the last may be a catch-all (a catch-all earlier gets a model).
fn rules() -> impl Strategy<Value = Vec<Rule>> {
    proptest::collection::vec(rule(), 0..6).prop_map(|mut rules| {
        let n = rules.len();
        for r in rules.iter_mut().take(n.saturating_sub(1)) {
            if r.models.is_none() && r.range.is_none() {
                r.models = Some(vec![0]);
            }
        }
        rules
    })
}

fn profile(rules: &[Rule]) -> PolicyProfile {
    let class = |name: &str| ClassConfig {
        name: name.to_owned(),
        slo_ms: 1000,
        quantum: 1,
        prefill_busy_threshold: None,
        prefill_busy_threshold_frac: None,
        decode_busy_threshold_frac: None,
        busy_worker_ratio: None,
        request_queue_limit_per_worker: None,
        token_queue_limit_per_worker: None,
        never_queue: false,
        engine_priority: None,
    };
    let classifiers = rules
        .iter()
        .enumerate()
        .map(|(i, r)| ClassifierConfig {
            name: format!("r{i}"),
            model: r
                .models
                .as_ref()
                .map(|m| Values(m.iter().map(|&i| MODELS[i].to_owned()).collect())),
            endpoint: None,
            prompt_tokens: r.range.map(|(min, max)| RangeConfig {
                min: Some(min),
                max: Some(max),
            }),
            max_tokens: None,
            header: None,
            body_field: None,
            key: None,
            class: r.class.map(|c| CLASSES[c].to_owned()),
            refuse: r.class.is_none().then(|| RefuseConfig {
                status: 429,
                message: "no".to_owned(),
            }),
            allow_header_override: r.allow.iter().map(|&c| CLASSES[c].to_owned()).collect(),
        })
        .collect();
    PolicyProfile::from_file(PolicyFile {
        default_class: Some("a".to_owned()),
        classes: CLASSES.iter().map(|n| class(n)).collect(),
        reject_thresholds: RejectThresholdsConfig::default(),
        classifiers,
    })
    .expect("generated rules are valid")
}

/// The rules read plainly: the index of the first whose conditions hold.
fn first_match(rules: &[Rule], model: usize, prompt: u64) -> Option<usize> {
    rules.iter().position(|r| {
        r.models.as_ref().is_none_or(|m| m.contains(&model))
            && r.range.is_none_or(|(lo, hi)| lo <= prompt && prompt <= hi)
    })
}

fn request(model: usize, prompt: u64, asking: Option<usize>) -> Req {
    let mut r = Req::new(MODELS[model]);
    r.prompt_tokens = prompt;
    r.requested = asking.map(|c| CLASSES[c].to_owned());
    r
}

proptest! {
    #[test]
    fn classification_is_the_first_matching_rule(
        rules in rules(),
        model in 0usize..3,
        prompt in 0u64..110,
    ) {
        let p = profile(&rules);
        let got = request(model, prompt, None).classify(&p);
        let want = match first_match(&rules, model, prompt) {
            None => Classification::Classified {
                class: ClassId(0),
                rule: None,
                source: ClassSource::Default,
            },
            Some(i) => match rules[i].class {
                Some(c) => Classification::Classified {
                    class: ClassId(c as u16),
                    rule: Some(format!("r{i}")),
                    source: ClassSource::Rule,
                },
                None => Classification::Refused {
                    status: 429,
                    message: "no".into(),
                    rule: format!("r{i}"),
                },
            },
        };
        prop_assert_eq!(got, Ok(want));
    }

    #[test]
    fn a_header_picks_only_what_the_matched_rule_allows(
        rules in rules(),
        model in 0usize..3,
        prompt in 0u64..110,
        asking in 0usize..3,
    ) {
        let p = profile(&rules);
        let got = request(model, prompt, Some(asking)).classify(&p);
        let matched = first_match(&rules, model, prompt).map(|i| &rules[i]);
        match matched {
            Some(r) if r.class.is_none() => {
                let refused = matches!(got, Ok(Classification::Refused { .. }));
                prop_assert!(refused, "{:?}", got);
            }
            _ => {
                let given = matched.and_then(|r| r.class).unwrap_or(0);
                // Without rules the header is free, as before classifiers.
                let allowed = rules.is_empty() || matched.is_some_and(|r| r.allow.contains(&asking));
                if asking == given || allowed {
                    let ok = matches!(
                        got,
                        Ok(Classification::Classified { class, .. }) if class == ClassId(asking as u16)
                    );
                    prop_assert!(ok, "{:?}", got);
                } else {
                    prop_assert_eq!(got.map_err(|e| e.status()), Err(403));
                }
            }
        }
    }

    #[test]
    fn rules_added_at_the_end_never_change_earlier_decisions(
        rules in rules(),
        extra in rule(),
        model in 0usize..3,
        prompt in 0u64..110,
    ) {
        let catch_all_last = rules.last().is_some_and(|r| r.models.is_none() && r.range.is_none());
        prop_assume!(!catch_all_last);
        prop_assume!(first_match(&rules, model, prompt).is_some());
        let mut longer = rules.clone();
        longer.push(extra);
        let req = request(model, prompt, None);
        prop_assert_eq!(req.classify(&profile(&rules)), req.classify(&profile(&longer)));
    }
}
