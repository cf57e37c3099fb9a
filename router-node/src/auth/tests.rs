#![allow(clippy::unwrap_used)]

//! Unit tests of the API keys' pure parts: the keys file's validation (each error naming
//! the entry and the key), lookup by the presented key, entitlements, reloads (what they
//! report, what they keep, a key's buckets among them), and key material. The buckets
//! themselves: `limits_tests.rs`.

use super::*;
use router_core::ClassId;

const PROFILE: &str = r#"
default_class = "interactive"
[[classes]]
name = "interactive"
slo_ms = 2000
quantum = 100
[[classes]]
name = "batch"
slo_ms = 10000
quantum = 10
"#;

const KEY_A: &str = "sy-team-a-0123456789abcdef0123456789abcdef";
const KEY_B: &str = "sy-team-b-0123456789abcdef0123456789abcdef";

fn profile() -> Arc<PolicyProfile> {
    Arc::new(PolicyProfile::from_toml_str(PROFILE).expect("valid profile"))
}

fn entry(name: &str, key: &str, rest: &str) -> String {
    format!(
        "[[keys]]\nname = \"{name}\"\nsha256 = \"{}\"\n{rest}\n",
        to_hex(&hash_key(key))
    )
}

fn two_keys() -> String {
    entry("team-a", KEY_A, "classes = [\"interactive\"]")
        + &entry(
            "team-b",
            KEY_B,
            "classes = [\"interactive\", \"batch\"]\ndefault_class = \"batch\"",
        )
}

fn parse(text: &str) -> Result<KeySet, KeysError> {
    KeySet::parse(text, &profile(), None)
}

#[test]
fn a_presented_key_is_found_by_its_digest_and_nothing_else_is() {
    let set = parse(&two_keys()).expect("valid");
    assert_eq!(set.len(), 2);
    assert_eq!(set.find(KEY_A).map(|k| k.name()), Some("team-a"));
    assert_eq!(set.find(KEY_B).map(|k| k.name()), Some("team-b"));
    for wrong in [
        "",
        "sy-team-a",
        &KEY_A[..KEY_A.len() - 1],
        &KEY_A.to_uppercase(),
    ] {
        assert!(set.find(wrong).is_none(), "{wrong:?}");
    }
    // The digest itself is not a key.
    assert!(set.find(&to_hex(&hash_key(KEY_A))).is_none());
}

#[test]
fn a_key_may_use_its_classes_only_and_has_its_default() {
    let set = parse(&two_keys()).expect("valid");
    let (a, b) = (set.named("team-a").unwrap(), set.named("team-b").unwrap());
    assert!(a.may_use(ClassId(0)));
    assert!(!a.may_use(ClassId(1)));
    assert!(b.may_use(ClassId(0)) && b.may_use(ClassId(1)));
    assert_eq!(a.default_class(), None);
    assert_eq!(b.default_class(), Some(ClassId(1)));
    assert_eq!(
        b.class_names().collect::<Vec<_>>(),
        ["interactive", "batch"]
    );
}

#[test]
fn every_mistake_names_the_entry_the_key_and_what_is_wrong() {
    let good = entry("ok", KEY_B, "classes = [\"batch\"]");
    let hash_a = to_hex(&hash_key(KEY_A));
    let cases = [
        (
            entry("a", KEY_A, "classes = [\"gold\"]"),
            "entry 2 (`a`): `classes` names `gold`, which is not a configured class (known: interactive, batch)",
        ),
        (
            entry("a", KEY_A, "classes = []"),
            "entry 2 (`a`): `classes` is empty",
        ),
        (
            entry("a", KEY_A, "classes = [\"batch\", \"batch\"]"),
            "`classes` lists `batch` twice",
        ),
        (
            entry(
                "a",
                KEY_A,
                "classes = [\"batch\"]\ndefault_class = \"interactive\"",
            ),
            "`default_class` names `interactive`, which is not one of this key's classes",
        ),
        (
            entry("ok", KEY_A, "classes = [\"batch\"]"),
            "entry 2 (`ok`): `name` is also the name of entry 1",
        ),
        (
            entry("a", KEY_B, "classes = [\"batch\"]"),
            "entry 2 (`a`): `sha256` is also the digest of key `ok`",
        ),
        (
            format!(
                "[[keys]]\nname = \"a\"\nsha256 = \"{}\"\nclasses = [\"batch\"]\n",
                &hash_a[1..]
            ),
            "`sha256` must be 64 hex digits",
        ),
        (
            format!(
                "[[keys]]\nname = \"a\"\nsha256 = \"{}g\"\nclasses = [\"batch\"]\n",
                &hash_a[1..]
            ),
            "`sha256` must be 64 hex digits",
        ),
        (
            entry("none", KEY_A, "classes = [\"batch\"]"),
            "`name` `none` is reserved",
        ),
        (
            entry("a b", KEY_A, "classes = [\"batch\"]"),
            "(`a b`): `name` must be",
        ),
        (
            entry("a", KEY_A, "classes = [\"batch\"]\nrequests_per_s = 0"),
            "`requests_per_s` must be a number above 0",
        ),
        (
            entry("a", KEY_A, "classes = [\"batch\"]\ntokens_per_s = -5.0"),
            "`tokens_per_s` must be a number above 0",
        ),
        (
            entry("a", KEY_A, "classes = [\"batch\"]\ntokens_burst = 10"),
            "`tokens_burst` needs `tokens_per_s`",
        ),
        (
            entry(
                "a",
                KEY_A,
                "classes = [\"batch\"]\nrequests_per_s = 1\nrequests_burst = 0",
            ),
            "`requests_burst` must be at least 1",
        ),
        (
            entry("a", KEY_A, "classes = [\"batch\"]\nclases = [\"batch\"]"),
            "unknown field `clases`",
        ),
        (entry("a", KEY_A, ""), "missing field `classes`"),
    ];
    for (second, expected) in cases {
        let text = format!("{good}{second}");
        let err = parse(&text).expect_err(&second).to_string();
        assert!(err.contains(expected), "{second}\n=> {err}");
        // Never the key; the digest only when the text itself is quoted by the parser.
        assert!(!err.contains(KEY_A) && !err.contains(KEY_B), "{err}");
    }
}

#[test]
fn a_file_that_is_not_a_list_of_keys_is_refused() {
    for text in [
        "[keys]\nname = \"x\"\n",
        "keys = 5\n",
        "[[key]]\nname = \"x\"\n",
    ] {
        assert!(matches!(parse(text), Err(KeysError::Parse(_))), "{text}");
    }
}

#[test]
fn an_empty_file_is_a_set_without_keys() {
    assert!(parse("").expect("valid").is_empty());
    assert!(parse("keys = []\n").expect("valid").is_empty());
}

fn store(text: &str) -> KeyStore {
    KeyStore::from_text(Path::new("keys.toml"), text, profile()).expect("valid")
}

#[test]
fn a_reload_swaps_the_set_and_says_which_names_came_and_went() {
    let store = store(&two_keys());
    let held = store.authenticate(KEY_A).expect("team-a");
    let text = entry("team-b", KEY_B, "classes = [\"batch\"]")
        + &entry("team-c", KEY_A, "classes = [\"batch\"]");
    assert_eq!(
        store.apply(Ok(text.clone()), false),
        Reload::Loaded {
            keys: 2,
            added: vec!["team-c".into()],
            removed: vec!["team-a".into()],
        }
    );
    assert_eq!(
        store.authenticate(KEY_A).map(|k| k.name().to_owned()),
        Some("team-c".into())
    );
    // A request that holds the old key keeps it.
    assert_eq!(held.name(), "team-a");
    // The same text again is nothing to a poll; SIGHUP reloads it anyway.
    assert_eq!(store.apply(Ok(text.clone()), false), Reload::Unchanged);
    assert!(matches!(
        store.apply(Ok(text), true),
        Reload::Loaded { keys: 2, .. }
    ));
}

#[test]
fn a_failed_reload_keeps_the_keys_in_use_and_is_reported_once_per_change() {
    let store = store(&two_keys());
    let broken = two_keys() + &entry("team-c", KEY_A, "classes = [\"gold\"]");
    let Reload::Failed(message) = store.apply(Ok(broken.clone()), false) else {
        panic!("a bad file was loaded");
    };
    assert!(
        message.contains("`team-c`") && message.contains("`gold`"),
        "{message}"
    );
    assert_eq!(store.keys().len(), 2);
    assert!(store.authenticate(KEY_B).is_some());
    assert_eq!(
        store.snapshot().last_reload_error.as_deref(),
        Some(message.as_str())
    );
    // Polls of the same broken text stay quiet; SIGHUP says it again.
    assert_eq!(store.apply(Ok(broken.clone()), false), Reload::Unchanged);
    assert!(matches!(store.apply(Ok(broken), true), Reload::Failed(_)));
    // A file that cannot be read: reported once, then quiet.
    let gone = || Err(KeysError::File("cannot read it: gone".into()));
    assert!(matches!(store.apply(gone(), false), Reload::Failed(_)));
    assert_eq!(store.apply(gone(), false), Reload::Unchanged);
    // Back to the text in use: loaded again, the error cleared.
    assert!(matches!(
        store.apply(Ok(two_keys()), false),
        Reload::Loaded { .. }
    ));
    assert_eq!(store.snapshot().last_reload_error, None);
}

#[test]
fn debug_state_shows_names_classes_and_limits_never_keys_or_digests() {
    let text = entry(
        "team-a",
        KEY_A,
        "classes = [\"interactive\"]\nrequests_per_s = 2.5\ntokens_per_s = 100\ntokens_burst = 1000",
    );
    let shown = serde_json::to_string(&store(&text).snapshot()).unwrap();
    assert!(shown.contains(r#""name":"team-a""#), "{shown}");
    assert!(
        shown.contains(r#""requests":{"per_s":2.5,"burst":3}"#),
        "{shown}"
    );
    assert!(
        shown.contains(r#""tokens":{"per_s":100.0,"burst":1000}"#),
        "{shown}"
    );
    assert!(
        !shown.contains(KEY_A) && !shown.contains(&to_hex(&hash_key(KEY_A))),
        "{shown}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_reload_keeps_a_keys_buckets_unless_its_limits_change() {
    let limited = |rate: u32| {
        entry(
            "a",
            KEY_A,
            &format!("classes = [\"batch\"]\nrequests_per_s = {rate}\nrequests_burst = 1"),
        )
    };
    let store = store(&limited(1));
    assert!(
        store
            .authenticate(KEY_A)
            .unwrap()
            .limits()
            .request()
            .is_ok()
    );
    // Same limits (another key added): the bucket stays empty.
    let more = limited(1) + &entry("b", KEY_B, "classes = [\"batch\"]");
    assert!(matches!(
        store.apply(Ok(more), false),
        Reload::Loaded { .. }
    ));
    assert!(
        store
            .authenticate(KEY_A)
            .unwrap()
            .limits()
            .request()
            .is_err()
    );
    // New limits: a new, full bucket.
    assert!(matches!(
        store.apply(Ok(limited(2)), false),
        Reload::Loaded { .. }
    ));
    assert!(
        store
            .authenticate(KEY_A)
            .unwrap()
            .limits()
            .request()
            .is_ok()
    );
}

#[test]
fn new_keys_are_random_and_their_entries_load() {
    let entry = KeyEntry {
        name: "team-a".into(),
        classes: vec!["interactive".into(), "batch".into()],
        default_class: Some("batch".into()),
        tokens_per_s: Some(100.0),
        ..KeyEntry::default()
    };
    let (key, text) = new_key(entry.clone()).expect("a key");
    let (other, _) = new_key(entry).expect("a key");
    assert_ne!(key, other);
    assert!(
        key.starts_with(KEY_PREFIX) && key.len() == KEY_PREFIX.len() + 64,
        "{key}"
    );
    assert!(!text.contains(&key), "{text}");
    let set = parse(&text).expect("the printed entry loads");
    let found = set.find(&key).expect("the key authenticates");
    assert_eq!(found.name(), "team-a");
    assert_eq!(found.default_class(), Some(ClassId(1)));
    assert_eq!(
        hash_input(format!("{key}\n").as_bytes()),
        Ok(to_hex(&hash_key(&key)))
    );
}

#[test]
fn a_key_to_hash_is_long_visible_ascii_with_one_newline_dropped() {
    let key = "k".repeat(MIN_KEY_CHARS);
    for input in [key.clone(), format!("{key}\n"), format!("{key}\r\n")] {
        assert_eq!(read_key(&input), Ok(key.as_str()));
    }
    let short = "k".repeat(MIN_KEY_CHARS - 1);
    for bad in [
        "",
        "\n",
        &short,
        &format!("{key} x"),
        &format!("{key}\n\n"),
        &format!("{key}é"),
    ] {
        let err = read_key(bad).expect_err(bad);
        assert!(!err.contains(&key), "{err}");
    }
    assert_eq!(parse_digest(&"Ab".repeat(32)), Some([0xab; 32]));
    assert_eq!(parse_digest(&"ab".repeat(31)), None);
    assert_eq!(parse_digest(&format!("{}+1", "ab".repeat(31))), None);
}

#[cfg(unix)]
#[test]
fn a_keys_file_every_user_may_write_is_refused() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = std::env::temp_dir().join(format!("switchyard-keys-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("keys.toml");
    std::fs::write(&path, two_keys()).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    assert_eq!(
        KeyStore::load(&path, profile()).map(|s| s.keys().len()),
        Ok(2)
    );
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).unwrap();
    let err = KeyStore::load(&path, profile()).expect_err("world-writable");
    assert!(err.to_string().contains("writable by every user"), "{err}");
    let err = KeyStore::load(&dir.join("missing.toml"), profile()).expect_err("missing");
    assert!(err.to_string().contains("cannot read it"), "{err}");
    let _ = std::fs::remove_dir_all(dir);
}
