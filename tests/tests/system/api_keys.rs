//! API keys in a `router-node serve` process, as an operator runs them: keys made with
//! `router-node keys new`, the keys file named in `[auth]`; a new file takes effect at SIGHUP
//! (and only then, with the change poll off) or by itself when the poll sees it changed; the
//! new key then works and the removed one gets 401; a broken file keeps the keys in use and is
//! counted. A bad keys file stops the node at start (exit 2) naming the key, the entry and the
//! field; a node without keys says at start that it is open. `keys hash` prints what
//! `sha256sum` would for the key on its standard input.

use std::io::Write as _;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};
use switchyard_system_tests::support::{self, Proc, RouterNode, Serving, TempDir};

/// A key from `router-node keys new --name NAME --classes CLASSES`: the key (its first line)
/// and the entry for the keys file (the rest).
fn new_key(name: &str, classes: &str) -> (String, String) {
    let out = support::run(&["keys", "new", "--name", name, "--classes", classes]);
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (key, entry) = stdout.split_once('\n').expect("the key, then the entry");
    assert!(!entry.contains(key), "{stdout}");
    (key.to_owned(), entry.to_owned())
}

/// Replaces `path` by `text` at once (written beside it, then renamed over it).
fn replace(path: &Path, text: &str) {
    let next = path.with_extension("next");
    std::fs::write(&next, text).unwrap();
    std::fs::rename(&next, path).unwrap();
}

/// A node on the in-process bus (its admin listener on a free port) (the fallback profile: one class, `default`) whose
/// `[auth]` names `keys`.
fn serve(dir: &TempDir, keys: &Path, reload_interval_ms: u64) -> (Proc, Serving) {
    let config = dir.write(
        "node.toml",
        &format!(
            "[http]\nlisten = \"127.0.0.1:0\"\ndrain_timeout_ms = 2000\n[admin]\nlisten = \"127.0.0.1:0\"\n[bus]\nkind = \"in-process\"\n\
             [telemetry]\nlog_format = \"json\"\n[auth]\nkeys_file = \"{}\"\n\
             reload_interval_ms = {reload_interval_ms}\n",
            keys.display()
        ),
    );
    let mut command = support::router_node();
    command.arg("serve").arg("--config").arg(&config);
    let mut proc = Proc::spawn_command("node", command);
    let serving = RouterNode::wait_serving(&mut proc);
    (proc, serving)
}

/// `GET /v1/models` with `key`: its status.
async fn models(url: &str, key: &str) -> u16 {
    reqwest::Client::new()
        .get(format!("{url}/v1/models"))
        .bearer_auth(key)
        .send()
        .await
        .expect("GET /v1/models")
        .status()
        .as_u16()
}

/// Polls (bounded) until `key` gets `status` from `/v1/models`.
async fn wait_status(url: &str, key: &str, status: u16, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let got = models(url, key).await;
        if got == status {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: still {got}, wanted {status}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn metrics(url: &str) -> String {
    reqwest::get(format!("{url}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

fn hangup(proc: &Proc) {
    let sent = std::process::Command::new("kill")
        .args(["-HUP", &proc.id().to_string()])
        .status();
    assert!(sent.is_ok_and(|s| s.success()), "cannot send SIGHUP");
}

#[cfg(unix)]
#[tokio::test]
async fn sighup_reloads_the_keys_file_and_a_broken_one_keeps_the_keys_in_use() {
    let dir = TempDir::new("keys");
    let (a, entry_a) = new_key("team-a", "default");
    let (b, entry_b) = new_key("team-b", "default");
    let keys = dir.write("keys.toml", &entry_a);
    // No change poll: only SIGHUP reloads.
    let (proc, serving) = serve(&dir, &keys, 0);
    let url = serving.url;
    assert_eq!(models(&url, &a).await, 200, "{}", proc.output());
    assert_eq!(models(&url, &b).await, 401);

    replace(&keys, &entry_b);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(models(&url, &a).await, 200, "reloaded without SIGHUP");
    hangup(&proc);
    wait_status(&url, &b, 200, "the new key after SIGHUP").await;
    assert_eq!(models(&url, &a).await, 401, "the removed key");

    // A class the profile does not have: the reload fails, team-b stays.
    replace(
        &keys,
        &format!("{entry_b}{}", entry_a.replace("default", "gold")),
    );
    hangup(&proc);
    let deadline = Instant::now() + Duration::from_secs(15);
    let text = loop {
        let text = metrics(&serving.admin_url).await;
        if text.contains(r#"switchyard_auth_reloads_total{outcome="error"} 1"#) {
            break text;
        }
        assert!(
            Instant::now() < deadline,
            "no failed reload counted:\n{text}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(
        text.contains(r#"switchyard_auth_reloads_total{outcome="ok"} 1"#),
        "{text}"
    );
    assert!(text.contains("switchyard_auth_keys 1"), "{text}");
    assert_eq!(models(&url, &b).await, 200);
    assert_eq!(models(&url, &a).await, 401);

    let stopped = proc.stop();
    assert_eq!(stopped.code, Some(0), "{}", stopped.stderr);
    assert!(
        stopped.stderr.contains("API keys not reloaded"),
        "{}",
        stopped.stderr
    );
    assert!(stopped.stderr.contains("`gold`"), "{}", stopped.stderr);
    // The log names keys, never a key.
    assert!(!stopped.stderr.contains(&a) && !stopped.stderr.contains(&b));
}

#[cfg(unix)]
#[tokio::test]
async fn a_changed_keys_file_is_picked_up_by_itself() {
    let dir = TempDir::new("keys");
    let (a, entry_a) = new_key("team-a", "default");
    let (b, entry_b) = new_key("team-b", "default");
    let keys = dir.write("keys.toml", &entry_a);
    let (proc, serving) = serve(&dir, &keys, 100);
    let url = serving.url;
    assert_eq!(models(&url, &a).await, 200, "{}", proc.output());
    assert_eq!(models(&url, &b).await, 401);
    replace(&keys, &entry_b);
    wait_status(&url, &b, 200, "the new key once the file changed").await;
    assert_eq!(models(&url, &a).await, 401, "the removed key");
    let stopped = proc.stop();
    assert_eq!(stopped.code, Some(0), "{}", stopped.stderr);
    assert!(
        stopped.stderr.contains("API keys reloaded"),
        "{}",
        stopped.stderr
    );
}

#[test]
fn a_bad_keys_file_stops_the_node_naming_the_entry_and_the_field() {
    let dir = TempDir::new("keys");
    let (_, entry) = new_key("team-a", "default");
    let cases = [
        (
            entry.replace("default", "gold"),
            "[[keys]] entry 1 (`team-a`): `classes` names `gold`",
        ),
        (
            format!("{entry}{entry}"),
            "[[keys]] entry 2 (`team-a`): `name` is also the name of entry 1",
        ),
        (
            format!("{entry}requests_per_s = -1\n"),
            "`requests_per_s` must be a number above 0",
        ),
    ];
    for (text, expected) in cases {
        let keys = dir.write("keys.toml", &text);
        let config = dir.write(
            "node.toml",
            &format!(
                "[bus]\nkind = \"in-process\"\n[auth]\nkeys_file = \"{}\"\n",
                keys.display()
            ),
        );
        let out = support::run(&["serve", "--config", config.to_str().unwrap()]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{text}: {stderr}");
        assert!(stderr.contains("auth.keys_file"), "{stderr}");
        assert!(stderr.contains(expected), "{expected}: {stderr}");
    }
    let config = dir.write("node.toml", "[auth]\nkeys_file = \"missing.toml\"\n");
    let out = support::run(&["serve", "--config", config.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("missing.toml: cannot read it"), "{stderr}");
}

#[cfg(unix)]
#[tokio::test]
async fn a_node_without_keys_says_it_is_open() {
    let node = RouterNode::start("node", "open-node", &support::NodeBus::InProcess, "");
    let stopped = node.stop();
    assert!(
        stopped
            .stderr
            .lines()
            .any(|l| l.contains("WARN") && l.contains("auth.keys_file is not set")),
        "{}",
        stopped.stderr
    );
}

#[test]
fn keys_hash_prints_the_sha256_of_the_key_on_standard_input() {
    let key = "sy-0123456789abcdef0123456789abcdef";
    let mut child = support::router_node()
        .args(["keys", "hash"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(format!("{key}\n").as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // What `printf %s KEY | sha256sum` prints: the newline is not part of the key.
    assert_eq!(
        String::from_utf8(out.stdout).unwrap().trim(),
        "45955b60d2f6af143868fe2a101c5eec7889d03df7814b292a5118cb166830d4"
    );
}
