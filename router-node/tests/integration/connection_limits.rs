//! The public listener's connection-level limits over real sockets: with `max_connections`
//! connections open the next one is not served until one closes (counted, and the admin
//! listener still answers), and a client that trickles its headers is disconnected at the
//! header read timeout, which does not cut a response streaming longer than it.

use crate::support::{Node, spawn_node, spawn_worker};
use router_node::frontend::Limits;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const MS: Duration = Duration::from_millis(1);

fn addr(node: &Node) -> String {
    node.url.trim_start_matches("http://").to_owned()
}

/// Sends `GET /health` on `conn` and reads the answer's first bytes, waiting at most `wait`;
/// `None` when nothing came.
async fn health(conn: &mut TcpStream, wait: Duration) -> Option<String> {
    conn.write_all(b"GET /health HTTP/1.1\r\nhost: node\r\n\r\n")
        .await
        .unwrap();
    let mut buf = [0u8; 1024];
    match tokio::time::timeout(wait, conn.read(&mut buf)).await {
        Ok(Ok(n)) if n > 0 => Some(String::from_utf8_lossy(&buf[..n]).into_owned()),
        _ => None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn beyond_max_connections_a_connection_waits_until_one_closes() {
    let limits = Limits {
        max_connections: 2,
        header_read_timeout: Duration::from_secs(30),
        ..Limits::default()
    };
    let node = spawn_node(&[], limits).await;
    let mut first = TcpStream::connect(addr(&node)).await.unwrap();
    let mut second = TcpStream::connect(addr(&node)).await.unwrap();
    // Both are served (and stay open: keep-alive).
    assert!(
        health(&mut first, 2000 * MS)
            .await
            .unwrap()
            .starts_with("HTTP/1.1 200")
    );
    assert!(
        health(&mut second, 2000 * MS)
            .await
            .unwrap()
            .starts_with("HTTP/1.1 200")
    );
    assert_eq!(node.state.metrics.connections("public"), 2);

    // The third is connected by the kernel but not accepted: no answer.
    let mut third = TcpStream::connect(addr(&node)).await.unwrap();
    assert_eq!(health(&mut third, 700 * MS).await, None);
    // The admin listener has its own connections: it still answers, and counts the wait.
    let metrics = node.admin_get("/metrics").await.text().await.unwrap();
    assert!(
        metrics.contains(
            r#"switchyard_http_refused_total{listener="public",reason="connection_limit"} 1"#
        ),
        "{metrics}"
    );
    assert!(
        metrics.contains(r#"switchyard_http_connections{listener="public"} 2"#),
        "{metrics}"
    );

    // One closes: the third is accepted and answered.
    drop(first);
    let mut buf = [0u8; 1024];
    let n = tokio::time::timeout(Duration::from_secs(5), third.read(&mut buf))
        .await
        .expect("served once a connection closed")
        .unwrap();
    assert!(
        String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&buf[..n])
    );
    drop(second);
    drop(third);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_trickles_its_headers_is_cut_at_the_header_timeout() {
    let timeout = 1000 * MS;
    let limits = Limits {
        header_read_timeout: timeout,
        ..Limits::default()
    };
    // A stream of 10 chunks 200 ms apart: twice the header timeout.
    let worker = spawn_worker(10, 200 * MS).await;
    let node = spawn_node(&[&worker.url], limits).await;
    let mut conn = TcpStream::connect(addr(&node)).await.unwrap();
    let started = Instant::now();
    conn.write_all(b"GET /health HTTP/1.1\r\n").await.unwrap();
    let mut buf = [0u8; 256];
    let mut closed = None;
    // One header line every 200 ms: never done.
    for i in 0..50 {
        tokio::select! {
            read = conn.read(&mut buf) => {
                assert!(matches!(read, Ok(0) | Err(_)), "answered: {read:?}");
                closed = Some(started.elapsed());
                break;
            }
            () = tokio::time::sleep(200 * MS) => {
                let _ = conn.write_all(format!("x-slow-{i}: 1\r\n").as_bytes()).await;
            }
        }
    }
    let closed = closed.expect("the server closed the connection");
    // The server's clock starts at accept, a little before `started` (after connect); the
    // upper bound leaves room for a loaded machine.
    assert!(
        closed >= timeout * 9 / 10 && closed < timeout * 5,
        "{closed:?}"
    );
    // The timeout bounds headers, not a response: a long stream runs to its end.
    let streamed = node
        .call(
            "/v1/completions",
            serde_json::json!({"model": "m", "prompt": "long", "stream": true}),
        )
        .await
        .text()
        .await
        .unwrap();
    assert_eq!(
        streamed.matches("\"text\":\"tok\"").count(),
        10,
        "{streamed}"
    );
    assert!(streamed.contains("[DONE]"), "{streamed}");
    // A prompt client on a fresh connection is served.
    assert_eq!(node.get("/health").await.status(), 200);
    let mut idle = TcpStream::connect(addr(&node)).await.unwrap();
    assert!(
        health(&mut idle, 2000 * MS)
            .await
            .unwrap()
            .starts_with("HTTP/1.1 200")
    );
}
