//! Graceful shutdown: an in-flight request finishes after the signal; readiness
//! turns 503 while draining; the server then stops.

use std::time::Duration;

use crate::common::{Backend, spawn_app};

async fn in_flight_request_finishes_after_the_signal(backend: Backend) {
    let app = spawn_app(backend).await;
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Vec<u8>, std::io::Error>>(4);
    let body = reqwest::Body::wrap_stream(tokio_stream_from(rx));
    let request = app
        .client
        .post(app.url("/v1/task-lists/validate"))
        .header("content-type", "application/json")
        .body(body)
        .send();
    let in_flight = tokio::spawn(request);
    tx.send(Ok(
        br#"{"tasks": [{"task_id": "t-1", "assigned_persona": "p", "#.to_vec(),
    ))
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    // SIGTERM arrives while the body is still streaming.
    let addr = app.addr;
    let stopping = tokio::spawn(app.shutdown());
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        !stopping.is_finished(),
        "the server waits for the in-flight request"
    );
    tx.send(Ok(br#""parallel_group": 1, "description": "x"}]}"#.to_vec()))
        .await
        .unwrap();
    drop(tx);
    let response = in_flight
        .await
        .unwrap()
        .expect("the in-flight request is answered");
    assert_eq!(response.status(), 200);
    let report: serde_json::Value = response.json().await.unwrap();
    assert_eq!(report["valid"], true, "{report}");
    tokio::time::timeout(Duration::from_secs(10), stopping)
        .await
        .expect("the server stops once drained")
        .unwrap();
    // No longer accepting.
    assert!(tokio::net::TcpStream::connect(addr).await.is_err());
}

fn tokio_stream_from<T: Send + 'static>(
    mut rx: tokio::sync::mpsc::Receiver<T>,
) -> impl futures::Stream<Item = T> + Send + 'static {
    futures::stream::poll_fn(move |cx| rx.poll_recv(cx))
}

both_backends!(in_flight_request_finishes_after_the_signal);
