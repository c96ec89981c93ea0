//! Dashboard render time for a 10,000-task list, end to end: the real server on
//! SQLite, `GET /ui/task-lists/{id}` (read + dispatch rules + HTML/SVG render),
//! the per-wave summary and one opened wave. Also prints the embedded assets' size.
//! `cargo bench --bench ui_render` (about half a minute in a release build).

use std::time::{Duration, Instant};

use plangate::config::{FileConfig, ServeArgs, Settings};
use serde_json::{Value, json};

const TASKS: usize = 10_000;
const WAVES: usize = 20;
const ROUNDS: usize = 15;

fn tasks() -> Value {
    let per_wave = TASKS / WAVES;
    let list: Vec<Value> = (0..TASKS)
        .map(|i| {
            let (wave, k) = (i / per_wave + 1, i % per_wave);
            let deps: Vec<String> = if wave > 1 {
                vec![format!("W{}-T{k}", wave - 1)]
            } else {
                vec![]
            };
            json!({
                "task_id": format!("W{wave}-T{k}"), "assigned_persona": "coder",
                "parallel_group": wave, "depends_on": deps, "reads": [],
                "writes": [format!("src/w{wave}/t{k}.rs")],
                "description": format!("Task {k} of wave {wave}: <do it> & check."),
            })
        })
        .collect();
    Value::Array(list)
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

async fn time_get(client: &reqwest::Client, url: &str) -> (Duration, usize) {
    let mut samples = Vec::with_capacity(ROUNDS);
    let mut size = 0;
    for _ in 0..ROUNDS {
        let started = Instant::now();
        let response = client.get(url).send().await.expect("GET");
        assert!(
            response.status().is_success(),
            "{url}: {}",
            response.status()
        );
        size = response.bytes().await.expect("body").len();
        samples.push(started.elapsed());
    }
    (median(samples), size)
}

#[tokio::main]
async fn main() {
    let dir = tempfile::tempdir().expect("tempdir");
    let url = format!("sqlite://{}", dir.path().join("bench.db").display());
    let args = ServeArgs {
        database_url: Some(url),
        bind: Some("127.0.0.1:0".to_owned()),
        ..Default::default()
    };
    let settings = Settings::merge(&args, FileConfig::default()).expect("settings");
    let db = plangate::service::open_database(&settings)
        .await
        .expect("database");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let base = format!("http://{}", listener.local_addr().expect("addr"));
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(plangate::app::serve(listener, settings, db, async {
        let _ = stopped.await;
    }));

    let client = reqwest::Client::new();
    let body =
        json!({"project_id": "bench", "team_pk": "c1", "created_by": "bench", "tasks": tasks()});
    let created: Value = client
        .post(format!("{base}/v1/task-lists"))
        .json(&body)
        .send()
        .await
        .expect("POST")
        .json()
        .await
        .expect("json");
    let id = created["id"].as_str().expect("list id");

    let (summary, summary_bytes) = time_get(&client, &format!("{base}/ui/task-lists/{id}")).await;
    let (wave, wave_bytes) = time_get(&client, &format!("{base}/ui/task-lists/{id}?wave=3")).await;
    let (api, _) = time_get(&client, &format!("{base}/v1/task-lists/{id}")).await;
    println!("ui_render: {TASKS} tasks in {WAVES} waves, median of {ROUNDS} GETs on SQLite");
    println!(
        "  /ui/task-lists/{{id}} (per-wave summary): {:>7.1} ms, {summary_bytes} bytes",
        summary.as_secs_f64() * 1e3
    );
    println!(
        "  /ui/task-lists/{{id}}?wave=3 ({} tasks drawn + table): {:>7.1} ms, {wave_bytes} bytes",
        TASKS / WAVES,
        wave.as_secs_f64() * 1e3
    );
    println!(
        "  /v1/task-lists/{{id}} (JSON, for comparison):  {:>7.1} ms",
        api.as_secs_f64() * 1e3
    );
    println!(
        "  ratio summary page / JSON read: {:.2}",
        summary.as_secs_f64() / api.as_secs_f64()
    );
    let mut total = 0;
    for (name, _, bytes) in plangate::ui::assets::ASSETS {
        println!("  asset {name}: {} bytes", bytes.len());
        total += bytes.len();
    }
    println!("  embedded assets total: {total} bytes");
    let _ = stop.send(());
    let _ = server.await;
}
