//! Server-sent event streams as the tests read them (docs/api.md, "List events"
//! and "Refine job events"): opened with an optional `Last-Event-ID`, split into
//! frames separated by a blank line, each frame's fields read by name.

use super::TestApp;

/// `GET path` as an event stream, resuming after `last_event_id` if given;
/// asserts the stream opened (200, `text/event-stream`).
pub async fn open(app: &TestApp, path: &str, last_event_id: Option<&str>) -> reqwest::Response {
    let mut request = app.client.get(app.url(path));
    if let Some(id) = last_event_id {
        request = request.header("last-event-id", id);
    }
    let response = request.send().await.unwrap();
    assert_eq!(response.status(), 200);
    assert!(
        response.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/event-stream")
    );
    response
}

/// A frame's `name:` field, trimmed, if it has one.
pub fn field(frame: &str, name: &str) -> Option<String> {
    frame
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{name}:")))
        .map(|v| v.trim().to_owned())
}

/// `GET path` as an event stream (resuming after `last_event_id` if given): its
/// first `n` frames, read as soon as they have come.
pub async fn frames(
    app: &TestApp,
    path: &str,
    last_event_id: Option<&str>,
    n: usize,
) -> Vec<String> {
    use futures::StreamExt as _;
    let mut body = open(app, path, last_event_id).await.bytes_stream();
    let mut seen = String::new();
    while seen.matches("\n\n").count() < n {
        let chunk = body.next().await.expect("an event").unwrap();
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }
    seen.split("\n\n").take(n).map(str::to_owned).collect()
}

/// `GET path` as an event stream: its first frame.
pub async fn first_frame(app: &TestApp, path: &str) -> String {
    frames(app, path, None, 1).await.remove(0)
}
