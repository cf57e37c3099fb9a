//! Eight parallel copies of a 3.9 MB prompt of `a` + U+0301 (one o200k piece) against a real
//! `router-node serve` process: each answer's status and time, and the node's memory idle and
//! at its peak (the figures of BENCHMARKS.md's "Input limits" section).
//!
//! Starts `router-node serve` (the binary beside this example's directory, or `$NODE_BIN`) on
//! the in-process bus with the default limits and tokenizer, waits until it serves and its
//! memory settles, reads its resident memory (`VmRSS`), resets its high-water mark
//! (`/proc/<pid>/clear_refs`), sends the eight requests at once on eight connections, three
//! rounds one after the other (the first meets a node that has served nothing yet: its
//! threads' first allocations and lazily built tables; the others a node that has), and
//! reads the high-water mark (`VmHWM`) again. Linux only (`/proc`).
//!
//! `cargo build --release -p router-node --bin router-node --example piece_flood &&
//! target/release/examples/piece_flood`

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const COPIES: usize = 8;
const ROUNDS: usize = 3;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let bin = match std::env::var_os("NODE_BIN") {
        Some(bin) => std::path::PathBuf::from(bin),
        None => std::env::current_exe()?
            .parent()
            .and_then(|examples| examples.parent())
            .ok_or("no target directory")?
            .join("router-node"),
    };
    let dir = std::env::temp_dir().join(format!("piece-flood-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let config = dir.join("node.toml");
    std::fs::write(
        &config,
        "[node]\ncluster = \"piece-flood\"\n\n[http]\nlisten = \"127.0.0.1:0\"\n\n\
         [admin]\nlisten = \"127.0.0.1:0\"\n\n[bus]\nkind = \"in-process\"\n\n\
         [telemetry]\nlog_format = \"json\"\n",
    )?;
    let mut node = Command::new(&bin)
        .args(["serve", "--config"])
        .arg(&config)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("{}: {e}", bin.display()))?;
    let pid = node.id();
    // The logs (JSON, on stderr): where it serves, then drained so the node never blocks.
    let mut logs = BufReader::new(node.stderr.take().ok_or("no stderr")?).lines();
    let mut listen = None;
    for line in logs.by_ref() {
        let line = line?;
        let Ok(event) = serde_json::from_str::<serde_json::Value>(&line) else {
            continue;
        };
        if event["fields"]["message"] == "serving the OpenAI API" {
            listen = event["fields"]["listen"].as_str().map(str::to_owned);
            break;
        }
    }
    let listen = listen.ok_or("the node never said where it serves")?;
    std::thread::spawn(move || logs.for_each(drop));
    // The tokenizer's tables are built in the background at start: wait until memory settles.
    let mut idle = status_kib(pid, "VmRSS")?;
    loop {
        std::thread::sleep(Duration::from_secs(2));
        let now = status_kib(pid, "VmRSS")?;
        if now.abs_diff(idle) * 50 < idle {
            idle = now;
            break;
        }
        idle = now;
    }
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5")?;
    let prompt = "a\u{301}".repeat(1_300_000);
    let body = serde_json::to_vec(&serde_json::json!({"model": "m", "prompt": prompt}))?;
    let head = format!(
        "POST /v1/completions HTTP/1.1\r\nhost: {listen}\r\ncontent-type: application/json\r\n\
         content-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    );
    let body = std::sync::Arc::new(body);
    println!(
        "body: {} bytes, {COPIES} copies at once, {ROUNDS} rounds",
        head.len() + body.len()
    );
    for round in 1..=ROUNDS {
        let clients: Vec<_> = (0..COPIES)
            .map(|_| {
                let (listen, head, body) = (listen.clone(), head.clone(), body.clone());
                std::thread::spawn(move || -> std::io::Result<(String, Duration)> {
                    let mut conn = TcpStream::connect(&listen)?;
                    let started = Instant::now();
                    conn.write_all(head.as_bytes())?;
                    conn.write_all(&body)?;
                    let mut answer = String::new();
                    conn.read_to_string(&mut answer)?;
                    let took = started.elapsed();
                    let status = answer.lines().next().unwrap_or("").to_owned();
                    let reason = answer
                        .split("\"reason\":\"")
                        .nth(1)
                        .and_then(|r| r.split('"').next())
                        .unwrap_or("");
                    Ok((format!("{status} {reason}"), took))
                })
            })
            .collect();
        let mut slowest = Duration::ZERO;
        for client in clients {
            let (status, took) = client.join().map_err(|_| "a client panicked")??;
            println!(
                "round {round}: {status:<40} {:>8.1} ms",
                took.as_secs_f64() * 1000.0
            );
            slowest = slowest.max(took);
        }
        let note = if round == 1 {
            " (a node that served nothing yet)"
        } else {
            ""
        };
        println!(
            "round {round}: the slowest answer in {:.1} ms{note}",
            slowest.as_secs_f64() * 1000.0
        );
    }
    let peak = status_kib(pid, "VmHWM")?;
    println!(
        "node memory: idle {:.0} MB, peak {:.0} MB ({:.2}x idle)",
        idle as f64 / 1024.0,
        peak as f64 / 1024.0,
        peak as f64 / idle as f64
    );
    node.kill()?;
    node.wait()?;
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}

/// A `/proc/<pid>/status` field in KiB.
fn status_kib(pid: u32, field: &str) -> Result<u64, Box<dyn std::error::Error>> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let line = status
        .lines()
        .find(|l| l.starts_with(field))
        .ok_or_else(|| format!("no {field}"))?;
    let kib = line
        .split_whitespace()
        .nth(1)
        .ok_or_else(|| format!("{field} has no value"))?;
    Ok(kib.parse()?)
}
