//! The foundation: ops routes, problem+json for every error, request ids, metrics,
//! compression, docs, migrations and start-up failures — on both databases.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use crate::common::{Backend, FreshDatabase, TestApp, expect_problem};
use serde_json::Value;

async fn healthz_and_readyz_answer_ok(app: TestApp) {
    let health = app.get("/healthz").await;
    assert_eq!(health.status(), 200);
    assert_eq!(health.json::<Value>().await.unwrap()["status"], "ok");
    let ready = app.get("/readyz").await;
    assert_eq!(ready.status(), 200);
    app.shutdown().await;
}

async fn readyz_is_503_when_the_database_is_gone(app: TestApp) {
    app.db.close().await;
    let problem = app.get_problem("/readyz", 503, "not_ready").await;
    assert!(problem["detail"].as_str().unwrap().contains("database"));
    // Liveness does not depend on the database.
    assert_eq!(app.get("/healthz").await.status(), 200);
}

async fn unknown_routes_and_methods_are_problems(app: TestApp) {
    let problem = app.get_problem("/nope", 404, "route_not_found").await;
    assert!(problem["detail"].as_str().unwrap().contains("/nope"));
    let wrong_method = app.client.delete(app.url("/healthz")).send().await.unwrap();
    expect_problem(wrong_method, 405, "method_not_allowed").await;
    app.get_problem("/v1/does-not-exist", 404, "route_not_found")
        .await;
    app.shutdown().await;
}

async fn root_sends_browsers_to_the_dashboard(app: TestApp) {
    let no_follow = crate::common::browser();
    let browser = no_follow
        .get(app.url("/"))
        .header("accept", "text/html,application/xhtml+xml,*/*;q=0.8")
        .send()
        .await
        .unwrap();
    assert_eq!(browser.status(), 303);
    assert_eq!(browser.headers()["location"], "/ui/");
    let api = no_follow
        .get(app.url("/"))
        .header("accept", "application/json")
        .send()
        .await
        .unwrap();
    expect_problem(api, 404, "route_not_found").await;
    let refused_html = no_follow
        .get(app.url("/"))
        .header("accept", "text/html;q=0, application/problem+json")
        .send()
        .await
        .unwrap();
    expect_problem(refused_html, 404, "route_not_found").await;
    app.shutdown().await;
}

async fn request_ids_are_generated_and_propagated(app: TestApp) {
    let generated = app.get("/healthz").await;
    let id = generated.headers()["x-request-id"]
        .to_str()
        .unwrap()
        .to_owned();
    assert_eq!(id.len(), 36, "a UUID: {id}");
    let propagated = app
        .client
        .get(app.url("/healthz"))
        .header("x-request-id", "caller-chosen-42")
        .send()
        .await
        .unwrap();
    assert_eq!(propagated.headers()["x-request-id"], "caller-chosen-42");
    // Errors carry the id too.
    let problem = app.get("/nope").await;
    assert!(problem.headers().contains_key("x-request-id"));
    app.shutdown().await;
}

async fn metrics_count_requests_by_matched_route(app: TestApp) {
    app.get("/healthz").await;
    app.get("/nope/123").await;
    let text = app.get("/metrics").await.text().await.unwrap();
    assert!(
        text.contains(r#"http_requests_total{method="GET",route="/healthz",status="200"}"#),
        "{text}"
    );
    assert!(text.contains(r#"route="unmatched",status="404""#), "{text}");
    assert!(
        text.contains("http_request_duration_seconds_bucket"),
        "{text}"
    );
    // Raw paths never become labels.
    assert!(!text.contains("/nope/123"));
    app.shutdown().await;
}

async fn responses_are_gzipped_on_request(app: TestApp) {
    // A client that does not decode, so the header stays visible.
    let raw = reqwest::Client::builder().no_gzip().build().unwrap();
    let response = raw
        .get(app.url("/openapi.json"))
        .header("accept-encoding", "gzip")
        .send()
        .await
        .unwrap();
    assert_eq!(response.headers()["content-encoding"], "gzip");
    // Under 1 KiB a body goes as it is: gzip would save no packet, only cost CPU.
    // (A problem document: bigger than tower-http's default threshold of 32 bytes.)
    let small = raw
        .get(app.url(&format!("/v1/refine-jobs/{}", uuid::Uuid::now_v7())))
        .header("accept-encoding", "gzip")
        .send()
        .await
        .unwrap();
    assert_eq!(small.status(), 404);
    assert!(
        small.headers().get("content-encoding").is_none(),
        "{:?}",
        small.headers()
    );
    let body = small.bytes().await.unwrap();
    assert!((32..1024).contains(&body.len()), "{} bytes", body.len());
    app.shutdown().await;
}

async fn docs_render_from_local_assets(app: TestApp) {
    let redirect = crate::common::browser()
        .get(app.url("/docs"))
        .send()
        .await
        .unwrap();
    assert!(redirect.status().is_redirection());
    let page = app.get("/docs/").await;
    assert_eq!(page.status(), 200);
    let html = page.text().await.unwrap();
    // Every asset the page loads is served by plangate itself.
    for asset in [
        "swagger-ui.css",
        "swagger-ui-bundle.js",
        "swagger-ui-standalone-preset.js",
        "swagger-initializer.js",
    ] {
        assert!(html.contains(asset), "page names {asset}");
        let response = app.get(&format!("/docs/{asset}")).await;
        assert_eq!(response.status(), 200, "{asset}");
        assert!(
            response.bytes().await.unwrap().len() > 100,
            "{asset} has content"
        );
    }
    assert!(
        !html.contains("http://") && !html.contains("https://"),
        "no external URL: {html}"
    );
    let init = app
        .get("/docs/swagger-initializer.js")
        .await
        .text()
        .await
        .unwrap();
    assert!(init.contains("/openapi.json"), "{init}");
    assert!(init.contains("\"validatorUrl\": \"none\""), "{init}");
    app.shutdown().await;
}

async fn openapi_document_is_served(app: TestApp) {
    let doc: Value = app.get_json("/openapi.json").await;
    assert_eq!(doc["openapi"], "3.1.0");
    assert!(doc["paths"]["/healthz"]["get"].is_object());
    app.shutdown().await;
}

async fn migrations_created_the_schema(app: TestApp) {
    let url = app.database.url.clone();
    let created = schema(&url).await;
    let tables: BTreeSet<String> = created.keys().cloned().collect();
    assert_eq!(tables, tables_in_migrations(app.backend));
    assert_eq!(
        applied_migrations(&url).await,
        migration_files(app.backend).len()
    );
    // Applied at start; a second run (another replica, `plangate migrate`) is a no-op.
    app.db.migrate().await.expect("migrations are idempotent");
    app.db.check_ready().await.expect("ready after migrating");
    assert_eq!(schema(&url).await, created);
    assert_eq!(
        applied_migrations(&url).await,
        migration_files(app.backend).len()
    );
    app.shutdown().await;
}

/// SQL is written once for both back-ends: the same tables with the same columns.
#[tokio::test]
async fn both_databases_get_the_same_tables_and_columns() {
    let sqlite = FreshDatabase::new(Backend::Sqlite).await;
    let postgres = FreshDatabase::new(Backend::Postgres).await;
    for database in [&sqlite, &postgres] {
        let db = plangate::db::Database::connect(&database.url)
            .await
            .unwrap();
        db.migrate().await.unwrap();
        db.close().await;
    }
    let (sqlite, postgres) = (schema(&sqlite.url).await, schema(&postgres.url).await);
    assert!(sqlite.contains_key("tasks"), "{sqlite:?}");
    assert_eq!(sqlite, postgres);
}

fn migration_dir(backend: Backend) -> PathBuf {
    let kind = match backend {
        Backend::Sqlite => "sqlite",
        Backend::Postgres => "postgres",
    };
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("migrations")
        .join(kind)
}

fn migration_files(backend: Backend) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(migration_dir(backend))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == "sql"))
        .collect();
    files.sort();
    files
}

/// The tables the migration files create (and do not drop again).
fn tables_in_migrations(backend: Backend) -> BTreeSet<String> {
    let mut tables = BTreeSet::new();
    for file in migration_files(backend) {
        let sql = std::fs::read_to_string(&file).unwrap().to_lowercase();
        let words: Vec<&str> = sql
            .split(|c: char| c.is_whitespace() || c == '(' || c == ';')
            .filter(|w| !w.is_empty())
            .collect();
        for (i, pair) in words.windows(2).enumerate() {
            if pair[1] != "table" || !["create", "drop"].contains(&pair[0]) {
                continue;
            }
            let name = words[i + 2..]
                .iter()
                .find(|w| !["if", "not", "exists"].contains(w))
                .unwrap();
            if pair[0] == "create" {
                tables.insert(name.to_string());
            } else {
                tables.remove(*name);
            }
        }
    }
    assert!(
        !tables.is_empty(),
        "no CREATE TABLE in {backend:?} migrations"
    );
    tables
}

/// Table name → its column names (sorted), as the database itself reports them;
/// sqlx's bookkeeping table aside.
async fn schema(url: &str) -> BTreeMap<String, Vec<String>> {
    use sqlx::Connection as _;
    let rows: Vec<(String, String)> = if url.starts_with("sqlite:") {
        let mut conn = sqlx::SqliteConnection::connect(url).await.unwrap();
        sqlx::query_as(
            // `xinfo`: `table_info` leaves out generated columns (`tasks.unblocked`).
            "SELECT m.name, p.name FROM sqlite_master m, pragma_table_xinfo(m.name) p \
             WHERE m.type = 'table' AND m.name NOT LIKE 'sqlite_%' \
             AND m.name <> '_sqlx_migrations'",
        )
        .fetch_all(&mut conn)
        .await
        .unwrap()
    } else {
        let mut conn = sqlx::PgConnection::connect(url).await.unwrap();
        sqlx::query_as(
            "SELECT table_name::text, column_name::text FROM information_schema.columns \
             WHERE table_schema = 'public' AND table_name <> '_sqlx_migrations'",
        )
        .fetch_all(&mut conn)
        .await
        .unwrap()
    };
    let mut tables: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (table, column) in rows {
        tables.entry(table).or_default().push(column);
    }
    for columns in tables.values_mut() {
        columns.sort();
    }
    tables
}

/// How many migrations sqlx recorded as applied successfully.
async fn applied_migrations(url: &str) -> usize {
    use sqlx::Connection as _;
    let query = "SELECT COUNT(*) FROM _sqlx_migrations WHERE success";
    let count: i64 = if url.starts_with("sqlite:") {
        let mut conn = sqlx::SqliteConnection::connect(url).await.unwrap();
        sqlx::query_scalar(query)
            .fetch_one(&mut conn)
            .await
            .unwrap()
    } else {
        let mut conn = sqlx::PgConnection::connect(url).await.unwrap();
        sqlx::query_scalar(query)
            .fetch_one(&mut conn)
            .await
            .unwrap()
    };
    usize::try_from(count).unwrap()
}

both_backends!(
    healthz_and_readyz_answer_ok,
    readyz_is_503_when_the_database_is_gone,
    unknown_routes_and_methods_are_problems,
    root_sends_browsers_to_the_dashboard,
    request_ids_are_generated_and_propagated,
    metrics_count_requests_by_matched_route,
    responses_are_gzipped_on_request,
    docs_render_from_local_assets,
    openapi_document_is_served,
    migrations_created_the_schema,
);

fn plangate() -> std::process::Command {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_plangate"));
    // The caller's environment must not leak settings into these runs.
    for (key, _) in std::env::vars() {
        if key.starts_with("PLANGATE_") || key == "DATABASE_URL" {
            cmd.env_remove(key);
        }
    }
    cmd
}

#[test]
fn unreachable_database_fails_at_start_with_one_line() {
    let output = plangate()
        .env("DATABASE_URL", "postgres://nobody@127.0.0.1:1/x")
        .env("PLANGATE_BIND", "127.0.0.1:0")
        .env("PLANGATE_LOG_FORMAT", "json")
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "one line: {stderr}");
    assert!(
        lines[0].starts_with("plangate: cannot open the database"),
        "{stderr}"
    );
}

#[test]
fn unreadable_or_bad_config_fails_at_start_with_one_line() {
    let missing = plangate()
        .args(["serve", "--config", "/nonexistent/plangate.toml"])
        .output()
        .unwrap();
    assert!(!missing.status.success());
    let stderr = String::from_utf8_lossy(&missing.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("cannot read config file /nonexistent/plangate.toml"));

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.toml");
    std::fs::write(&path, "workers = \"many\"\n").unwrap();
    let bad = plangate().arg("--config").arg(&path).output().unwrap();
    assert!(!bad.status.success());
    let stderr = String::from_utf8_lossy(&bad.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("invalid config file"), "{stderr}");

    let bad_bind = plangate()
        .env("PLANGATE_BIND", "localhost")
        .output()
        .unwrap();
    assert!(!bad_bind.status.success());
    assert!(String::from_utf8_lossy(&bad_bind.stderr).contains("PLANGATE_BIND"));
}

/// A malformed `PLANGATE_*` variable stops every command with one line naming the
/// variable; nothing falls back silently to the defaults.
#[test]
fn a_malformed_variable_is_an_error_that_names_it() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("missing.json");
    for command in [
        vec!["serve"],
        vec!["migrate"],
        vec!["refine", "c.json", "p.json", "run"],
        vec!["refine-run", "plan.json", "run"],
    ] {
        for (variable, value) in [("PLANGATE_WORKERS", "many"), ("PLANGATE_LEASE_SECS", "-1")] {
            let output = plangate()
                .current_dir(dir.path())
                .args(&command)
                .env(variable, value)
                .env("DATABASE_URL", format!("sqlite://{}", file.display()))
                .output()
                .unwrap();
            assert_eq!(output.status.code(), Some(2), "{command:?} {variable}");
            let stderr = String::from_utf8_lossy(&output.stderr);
            assert_eq!(stderr.lines().count(), 1, "{stderr}");
            assert!(
                stderr.starts_with(&format!("plangate: invalid {variable}=\"{value}\"")),
                "{command:?}: {stderr}"
            );
        }
    }
    assert!(!file.exists(), "no command ran");
}

async fn migrate_command_applies_migrations(backend: Backend) {
    let database = FreshDatabase::new(backend).await;
    for _ in 0..2 {
        let output = plangate()
            .args(["migrate", "--database-url", &database.url])
            .env("PLANGATE_LOG_FORMAT", "json")
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "{backend:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let tables: BTreeSet<String> = schema(&database.url).await.into_keys().collect();
    assert_eq!(tables, tables_in_migrations(backend), "{backend:?}");
    assert_eq!(
        applied_migrations(&database.url).await,
        migration_files(backend).len()
    );
}

#[test]
fn openapi_snapshot_matches_the_code() {
    let generated = plangate::http::openapi().to_pretty_json().unwrap();
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/openapi/openapi.json");
    let committed = std::fs::read_to_string(path).unwrap_or_default();
    assert!(
        committed.trim_end() == generated.trim_end(),
        "openapi/openapi.json differs from the code; regenerate it with \
         `cargo run -- openapi > openapi/openapi.json`"
    );
}

async fn v1_routes_need_a_token_when_tokens_are_configured(backend: Backend) {
    let app = crate::common::spawn_app_with(backend, |s| {
        s.api_tokens = vec!["token-aaaaaaaaaaaaaaaa".into()];
    })
    .await;
    let body = serde_json::json!({"tasks": []});
    let none = app.post_json("/v1/task-lists/validate", &body).await;
    assert_eq!(
        none.headers()["www-authenticate"],
        "Bearer realm=\"plangate\", error_description=\"no bearer token: send \
         `Authorization: Bearer <token>` with a token the server is configured with\""
    );
    expect_problem(none, 401, "unauthorized").await;
    let wrong = app
        .send_as(
            "token-bbbbbbbbbbbbbbbb",
            reqwest::Method::POST,
            "/v1/task-lists/validate",
            Some(&body),
        )
        .await;
    expect_problem(wrong, 401, "unauthorized").await;
    let right = app
        .send_as(
            "token-aaaaaaaaaaaaaaaa",
            reqwest::Method::POST,
            "/v1/task-lists/validate",
            Some(&body),
        )
        .await;
    assert_eq!(right.status(), 200);
    // Ops routes and docs stay open.
    for open in ["/healthz", "/readyz", "/metrics", "/openapi.json", "/docs/"] {
        assert_eq!(app.get(open).await.status(), 200, "{open}");
    }
    app.shutdown().await;
}

/// Every JSON route, with a path that reaches its handler.
const JSON_ROUTES: &[(&str, &str)] = &[
    ("POST", "/v1/task-lists/validate"),
    ("POST", "/v1/task-lists"),
    ("PATCH", "/v1/tasks/0190a4b2-0000-7000-8000-000000000000"),
    ("POST", "/v1/projects/p1/teams"),
    ("POST", "/v1/loop-plans/generate"),
    ("PUT", "/v1/tracks/t1"),
    ("POST", "/v1/tracks/t1/steps/PLAN/start"),
    ("POST", "/v1/tracks/t1/steps/PLAN/complete"),
];

async fn every_json_route_answers_bad_bodies_with_problems(app: TestApp) {
    for (method, path) in JSON_ROUTES {
        let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        let malformed = app
            .send_body(method.clone(), path, "application/json", "{,")
            .await;
        expect_problem(malformed, 400, "malformed_json").await;
        let not_json = app
            .send_body(method.clone(), path, "text/plain", "{}")
            .await;
        expect_problem(not_json, 415, "unsupported_media_type").await;
        let wrong_shape = app
            .send_json(method.clone(), path, &serde_json::json!([1, 2, 3]))
            .await;
        let status = wrong_shape.status().as_u16();
        assert!((400..500).contains(&status), "{method} {path}: {status}");
        assert_eq!(
            wrong_shape.headers()["content-type"],
            "application/problem+json",
            "{method} {path}"
        );
        // Over the limit, announced by Content-Length: answered before the body.
        crate::common::refused_from_headers(&app, method.as_str(), path, 17 * 1024 * 1024).await;
        // A method the route does not have.
        let wrong_method = app.client.delete(app.url(path)).send().await.unwrap();
        expect_problem(wrong_method, 405, "method_not_allowed").await;
    }
    app.shutdown().await;
}

both_backends!(
    every_json_route_answers_bad_bodies_with_problems,
    migrate_command_applies_migrations,
    v1_routes_need_a_token_when_tokens_are_configured,
);
