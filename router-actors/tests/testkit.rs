//! The nats-server harness refuses, with install instructions, a binary that is missing or
//! too old, and starts a real one. One test, run alone in this binary, because it writes and
//! then executes small scripts (executing a file that another thread of the same process may
//! still hold open for writing fails with ETXTBSY).

use router_actors::testkit::{NatsServer, check_version};
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

fn fake_binary(dir: &Path, name: &str, version_line: &str) -> PathBuf {
    let path = dir.join(name);
    fs::write(&path, format!("#!/bin/sh\necho '{version_line}'\n")).expect("write script");
    fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).expect("chmod");
    path
}

#[tokio::test]
async fn harness_rejects_missing_and_old_servers_and_starts_a_real_one() {
    let dir = std::env::temp_dir().join(format!(
        "switchyard-testkit-{}",
        uuid::Uuid::new_v4().simple()
    ));
    fs::create_dir_all(&dir).expect("temp dir");

    let missing = NatsServer::start_binary(&dir.join("no-such-nats-server")).await;
    let message = missing.expect_err("a missing binary is an error");
    assert!(message.contains("scripts/install-nats.sh"), "{message}");

    let old = fake_binary(&dir, "old-nats-server", "nats-server: v2.9.10");
    let message = NatsServer::start_binary(&old)
        .await
        .expect_err("2.9 is too old");
    assert!(
        message.contains("2.9.10") && message.contains(">= 2.10"),
        "{message}"
    );
    assert!(message.contains("scripts/install-nats.sh"), "{message}");

    let garbage = fake_binary(&dir, "not-nats", "hello");
    let message = NatsServer::start_binary(&garbage)
        .await
        .expect_err("no version");
    assert!(message.contains("scripts/install-nats.sh"), "{message}");

    let recent = fake_binary(&dir, "new-nats-server", "nats-server: v2.15.1");
    assert_eq!(check_version(&recent).await.as_deref(), Ok("2.15.1"));
    fs::remove_dir_all(&dir).expect("cleanup");

    // The real one: found, recent, started, reachable; and gone after drop.
    let server = NatsServer::start().await.unwrap_or_else(|e| panic!("{e}"));
    let url = server.url().to_owned();
    let bus = router_actors::bus::nats::NatsBus::connect(&url)
        .await
        .expect("connect");
    drop(bus);
    drop(server);
    let again = router_actors::bus::nats::NatsBus::connect(&url).await;
    assert!(again.is_err(), "the server still answers after drop");
}
