//! Graceful shutdown: an in-flight request finishes after the signal; readiness
//! turns 503 while draining; the server then stops.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::common::{Backend, spawn_app};

async fn in_flight_request_finishes_after_the_signal(backend: Backend) {
    let app = spawn_app(backend).await;
    let first = br#"{"tasks": [{"task_id": "t-1", "assigned_persona": "p", "#;
    let rest = br#""parallel_group": 1, "description": "x"}]}"#;
    // A raw connection, so the test knows the request is in the handler before the
    // signal: the server sends `100 Continue` only once the handler reads the body
    // (a fixed sleep raced the accept loop on a loaded machine).
    let mut conn = TcpStream::connect(app.addr).await.unwrap();
    let head = format!(
        "POST /v1/task-lists/validate HTTP/1.1\r\nhost: {}\r\ncontent-type: application/json\r\n\
         content-length: {}\r\nexpect: 100-continue\r\nconnection: close\r\n\r\n",
        app.addr,
        first.len() + rest.len()
    );
    conn.write_all(head.as_bytes()).await.unwrap();
    let mut continued = [0u8; 25];
    conn.read_exact(&mut continued).await.unwrap();
    assert!(
        continued.starts_with(b"HTTP/1.1 100 Continue"),
        "{}",
        String::from_utf8_lossy(&continued)
    );
    conn.write_all(first).await.unwrap();
    // SIGTERM arrives while the body is still streaming.
    let addr = app.addr;
    let stopping = tokio::spawn(app.shutdown());
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        !stopping.is_finished(),
        "the server waits for the in-flight request"
    );
    conn.write_all(rest).await.unwrap();
    let mut response = String::new();
    conn.read_to_string(&mut response).await.unwrap();
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    assert!(response.contains(r#""valid":true"#), "{response}");
    tokio::time::timeout(Duration::from_secs(10), stopping)
        .await
        .expect("the server stops once drained")
        .unwrap();
    // No longer accepting.
    assert!(tokio::net::TcpStream::connect(addr).await.is_err());
}

both_backends!(in_flight_request_finishes_after_the_signal);
