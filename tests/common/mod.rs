//! Test harness: the real server on 127.0.0.1:0 against a fresh database per test —
//! a new SQLite file or a new Postgres database on the machine's server — and the
//! one way to run a test on both back-ends, [`both_backends!`].

pub mod process;
pub mod sse;

use std::net::SocketAddr;
use std::path::PathBuf;

use plangate::config::{FileConfig, ServeArgs, Settings};
use plangate::db::Database;
use serde_json::Value;
use tokio::net::TcpListener;
use tokio::sync::oneshot;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

/// Where fresh Postgres databases are created (trust auth on the CI machine).
pub fn pg_admin_url() -> String {
    std::env::var("PLANGATE_TEST_PG_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".to_owned())
}

/// A fresh, empty database of the given kind; dropped with the value.
pub struct FreshDatabase {
    pub url: String,
    pg_name: Option<String>,
    _dir: Option<tempfile::TempDir>,
}

impl FreshDatabase {
    pub async fn new(backend: Backend) -> Self {
        match backend {
            Backend::Sqlite => {
                let dir = tempfile::tempdir().expect("tempdir");
                let path: PathBuf = dir.path().join("plangate.db");
                FreshDatabase {
                    url: format!("sqlite://{}", path.display()),
                    pg_name: None,
                    _dir: Some(dir),
                }
            }
            Backend::Postgres => {
                let name = format!("plangate_test_{}", uuid::Uuid::new_v4().simple());
                let admin = pg_admin_url();
                let mut conn = <sqlx::PgConnection as sqlx::Connection>::connect(&admin)
                    .await
                    .unwrap_or_else(|e| {
                        panic!("Postgres at {admin} is needed for the postgres tests: {e}")
                    });
                sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
                    .execute(&mut conn)
                    .await
                    .expect("create test database");
                let base = admin.rsplit_once('/').map(|(b, _)| b).unwrap_or(&admin);
                FreshDatabase {
                    url: format!("{base}/{name}"),
                    pg_name: Some(name),
                    _dir: None,
                }
            }
        }
    }
}

impl FreshDatabase {
    /// The same database for another server: dropping it leaves the database to
    /// its owner.
    fn shared(&self) -> FreshDatabase {
        FreshDatabase {
            url: self.url.clone(),
            pg_name: None,
            _dir: None,
        }
    }
}

impl Drop for FreshDatabase {
    fn drop(&mut self) {
        let Some(name) = self.pg_name.take() else {
            return;
        };
        // Drop is synchronous; a small runtime on its own thread does the async drop.
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            rt.block_on(async move {
                if let Ok(mut conn) =
                    <sqlx::PgConnection as sqlx::Connection>::connect(&pg_admin_url()).await
                {
                    let _ = sqlx::query(sqlx::AssertSqlSafe(format!(
                        "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
                    )))
                    .execute(&mut conn)
                    .await;
                }
            });
        })
        .join();
    }
}

pub fn settings_for(url: &str) -> Settings {
    let args = ServeArgs {
        database_url: Some(url.to_owned()),
        bind: Some("127.0.0.1:0".to_owned()),
        ..Default::default()
    };
    Settings::merge(&args, FileConfig::default()).expect("test settings")
}

pub struct TestApp {
    pub addr: SocketAddr,
    pub base: String,
    pub client: reqwest::Client,
    pub backend: Backend,
    pub db: Database,
    stop: Option<oneshot::Sender<()>>,
    server: Option<tokio::task::JoinHandle<()>>,
    pub database: FreshDatabase,
}

impl TestApp {
    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.base, path)
    }

    pub async fn get(&self, path: &str) -> reqwest::Response {
        self.client.get(self.url(path)).send().await.expect("GET")
    }

    /// `GET path`'s JSON body (whatever the status: the test asserts on it).
    pub async fn get_json<T: serde::de::DeserializeOwned>(&self, path: &str) -> T {
        self.get(path).await.json().await.expect("a JSON body")
    }

    /// `POST path` with a JSON body; the answer's JSON body.
    pub async fn post_for_json<T: serde::de::DeserializeOwned>(
        &self,
        path: &str,
        body: &Value,
    ) -> T {
        self.post_json(path, body)
            .await
            .json()
            .await
            .expect("a JSON body")
    }

    /// `GET path`, asserting the answer is the problem `status`/`code`: the problem.
    pub async fn get_problem(&self, path: &str, status: u16, code: &str) -> Value {
        expect_problem(self.get(path).await, status, code).await
    }

    /// `POST path` with a JSON body, asserting the answer is the problem
    /// `status`/`code`: the problem.
    pub async fn post_problem(&self, path: &str, body: &Value, status: u16, code: &str) -> Value {
        expect_problem(self.post_json(path, body).await, status, code).await
    }

    pub async fn post_json(&self, path: &str, body: &serde_json::Value) -> reqwest::Response {
        self.send_json(reqwest::Method::POST, path, body).await
    }

    /// `method path` with a JSON body.
    pub async fn send_json(
        &self,
        method: reqwest::Method,
        path: &str,
        body: &serde_json::Value,
    ) -> reqwest::Response {
        let what = method.to_string();
        self.client
            .request(method, self.url(path))
            .json(body)
            .send()
            .await
            .expect(&what)
    }

    /// `method path` as `token`, with a JSON body if any.
    pub async fn send_as(
        &self,
        token: &str,
        method: reqwest::Method,
        path: &str,
        body: Option<&Value>,
    ) -> reqwest::Response {
        let mut request = self
            .client
            .request(method, self.url(path))
            .bearer_auth(token);
        if let Some(body) = body {
            request = request.json(body);
        }
        request.send().await.expect("request")
    }

    /// Signs in to the dashboard with `token` as its login form does; answers the
    /// session cookie (`name=value`).
    pub async fn sign_in(&self, token: &str) -> String {
        let set_cookie = self.sign_in_header(token).await;
        set_cookie.split(';').next().unwrap().to_owned()
    }

    /// The `Set-Cookie` header a dashboard sign-in with `token` answers, after
    /// checking that it keeps the token out and the cookie from scripts and other
    /// sites.
    pub async fn sign_in_header(&self, token: &str) -> String {
        let response = browser()
            .post(self.url("/ui/login"))
            .header("origin", self.base.clone())
            .form(&[("token", token), ("next", "/ui/")])
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 303, "login");
        let cookie = response
            .headers()
            .get("set-cookie")
            .expect("a session cookie")
            .to_str()
            .unwrap()
            .to_owned();
        assert!(!cookie.contains(token), "{cookie}");
        assert!(cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"));
        cookie
    }

    /// `GET path` as `token`.
    pub async fn get_as(&self, token: &str, path: &str) -> reqwest::Response {
        self.send_as(token, reqwest::Method::GET, path, None).await
    }

    /// `POST /v1/task-lists/{list_id}/claim` with `body`.
    pub async fn claim(&self, list_id: &str, body: &Value) -> reqwest::Response {
        self.post_json(&format!("/v1/task-lists/{list_id}/claim"), body)
            .await
    }

    /// POST a body sent as is, under the given content type.
    pub async fn post_body(
        &self,
        path: &str,
        content_type: &str,
        body: impl Into<reqwest::Body>,
    ) -> reqwest::Response {
        self.send_body(reqwest::Method::POST, path, content_type, body)
            .await
    }

    /// `method path` with a body sent as is, under the given content type.
    pub async fn send_body(
        &self,
        method: reqwest::Method,
        path: &str,
        content_type: &str,
        body: impl Into<reqwest::Body>,
    ) -> reqwest::Response {
        let what = method.to_string();
        self.client
            .request(method, self.url(path))
            .header("content-type", content_type)
            .body(body)
            .send()
            .await
            .expect(&what)
    }

    /// Long-polls a refine job until it is terminal (or 120 s pass).
    pub async fn wait_job(&self, id: &str) -> serde_json::Value {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
        loop {
            let job: Value = self
                .get(&format!("/v1/refine-jobs/{id}?wait=5"))
                .await
                .json()
                .await
                .unwrap();
            let status = job["status"].as_str().unwrap_or_default().to_owned();
            if ["succeeded", "failed", "cancelled"].contains(&status.as_str()) {
                return job;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "job {id} stuck in {status}: {job}"
            );
        }
    }

    /// `POST /v1/refine-jobs`, expecting 202 and a `Location` naming the job: the job.
    pub async fn submit_refine_job(&self, body: &Value) -> Value {
        let response = self.post_json("/v1/refine-jobs", body).await;
        assert_eq!(response.status(), 202, "{:?}", response.text().await);
        let location = response.headers()["location"].to_str().unwrap().to_owned();
        let job: Value = response.json().await.expect("the job");
        assert_eq!(
            location,
            format!("/v1/refine-jobs/{}", job["id"].as_str().unwrap())
        );
        job
    }

    /// `GET /v1/refine-jobs/{id}/assignments`: one record per L0.
    pub async fn refine_job_assignments(&self, id: &str) -> Vec<Value> {
        let path = format!("/v1/refine-jobs/{id}/assignments");
        let records: Value = self.get(&path).await.json().await.expect("records");
        records.as_array().expect("an array").clone()
    }

    /// `GET /v1/projects/{project}/usage`.
    pub async fn project_usage(&self, project: &str) -> Value {
        let path = format!("/v1/projects/{project}/usage");
        self.get(&path).await.json().await.expect("usage")
    }

    /// One JSON-RPC request to an MCP endpoint on a fresh connection, with no
    /// `initialize` before it (stateless), as `token` if any: the response object.
    pub async fn mcp_rpc(
        &self,
        path: &str,
        token: Option<&str>,
        method: &str,
        params: Value,
    ) -> Value {
        let body =
            serde_json::json!({"jsonrpc": "2.0", "id": 7, "method": method, "params": params});
        let response = self.mcp_post(path, token, &body).await;
        let status = response.status().as_u16();
        assert!(status < 500, "{method}: status {status}");
        let message: Value = response.json().await.expect("JSON-RPC answer");
        assert_eq!(message["jsonrpc"], "2.0", "{message}");
        assert_eq!(message["id"], 7, "{message}");
        message
    }

    /// A JSON-RPC message POSTed to an MCP endpoint as a client sends it (accepting
    /// JSON or an event stream), as `token` if any.
    pub async fn mcp_post(
        &self,
        path: &str,
        token: Option<&str>,
        body: &Value,
    ) -> reqwest::Response {
        let mut request = self
            .client
            .post(self.url(path))
            .header("accept", "application/json, text/event-stream")
            .json(body);
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        request.send().await.expect("POST /mcp")
    }

    /// An MCP `tools/call` on `path` as `token`: whether it is a tool error, and
    /// its answer (JSON, or the text when it is none).
    pub async fn call_tool_as(
        &self,
        path: &str,
        token: Option<&str>,
        name: &str,
        arguments: Value,
    ) -> (bool, Value) {
        let params = serde_json::json!({"name": name, "arguments": arguments});
        let message = self.mcp_rpc(path, token, "tools/call", params).await;
        let result = &message["result"];
        assert!(result.is_object(), "tools/call {name}: {message}");
        let text = result["content"][0]["text"].as_str().expect("text content");
        let value = serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_owned()));
        (result["isError"] == true, value)
    }

    /// [`call_tool_as`](Self::call_tool_as) on `/mcp` without a token.
    pub async fn call_tool(&self, name: &str, arguments: Value) -> (bool, Value) {
        self.call_tool_as("/mcp", None, name, arguments).await
    }

    pub async fn patch_json(&self, path: &str, body: &serde_json::Value) -> reqwest::Response {
        self.send_json(reqwest::Method::PATCH, path, body).await
    }

    /// Another server (replica) on this one's database, with its own settings
    /// tweaked; shut it down before this one.
    pub async fn spawn_replica(&self, tweak: impl FnOnce(&mut Settings)) -> TestApp {
        spawn_app_on(self.database.shared(), self.backend, tweak).await
    }

    /// Stop the server as SIGTERM would and wait for it to finish draining.
    pub async fn shutdown(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(server) = self.server.take() {
            let _ = server.await;
        }
    }

    /// Stop the server and hand back its database instead of dropping it.
    pub async fn stop_keeping_database(mut self) -> FreshDatabase {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(server) = self.server.take() {
            let _ = server.await;
        }
        self.db.close().await;
        self.database
    }
}

/// The tokens of [`spawn_app_with_tokens`]: unrestricted, and limited to `proj-a`.
pub const ADMIN: &str = "admin-token-aaaaaaaaaaaa";
pub const LIMITED: &str = "limited-token-bbbbbbbbbb";

/// A server that asks for a bearer token: [`ADMIN`] or [`LIMITED`].
pub async fn spawn_app_with_tokens(backend: Backend) -> TestApp {
    spawn_app_with(backend, |s| {
        s.api_tokens = vec![
            plangate::config::ApiToken::unrestricted(ADMIN),
            plangate::config::ApiToken::limited(LIMITED, &["proj-a"]),
        ];
    })
    .await
}

/// Limited to `proj-a` and to `proj-b`: with [`ADMIN`], the tokens of
/// [`spawn_app_with_project_tokens`].
pub const TOKEN_A: &str = "token-a-bbbbbbbbbbbbbbbb";
pub const TOKEN_B: &str = "token-b-cccccccccccccccc";

/// A server that asks for [`ADMIN`], [`TOKEN_A`] (`proj-a`) or [`TOKEN_B`]
/// (`proj-b`); `tweak` changes the rest of its settings.
pub async fn spawn_app_with_project_tokens(
    backend: Backend,
    tweak: impl FnOnce(&mut Settings),
) -> TestApp {
    spawn_app_with(backend, |s| {
        s.api_tokens = vec![
            plangate::config::ApiToken::unrestricted(ADMIN),
            plangate::config::ApiToken::limited(TOKEN_A, &["proj-a"]),
            plangate::config::ApiToken::limited(TOKEN_B, &["proj-b"]),
        ];
        tweak(s);
    })
    .await
}

/// A client that shows redirects instead of following them, as a test of a
/// browser's view needs.
pub fn browser() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

pub async fn spawn_app(backend: Backend) -> TestApp {
    spawn_app_with(backend, |_| {}).await
}

pub async fn spawn_app_with(backend: Backend, tweak: impl FnOnce(&mut Settings)) -> TestApp {
    spawn_app_on(FreshDatabase::new(backend).await, backend, tweak).await
}

/// The server on a database that already exists (e.g. one a stopped server left,
/// see [`TestApp::stop_keeping_database`]).
pub async fn spawn_app_on(
    database: FreshDatabase,
    backend: Backend,
    tweak: impl FnOnce(&mut Settings),
) -> TestApp {
    let mut settings = settings_for(&database.url);
    tweak(&mut settings);
    let db = plangate::service::open_database(&settings)
        .await
        .expect("open test database");
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (stop, stopped) = oneshot::channel::<()>();
    let server = tokio::spawn({
        let db = db.clone();
        async move {
            plangate::app::serve(listener, settings, db, async {
                let _ = stopped.await;
            })
            .await
            .expect("server runs");
        }
    });
    TestApp {
        addr,
        base: format!("http://{addr}"),
        client: reqwest::Client::new(),
        backend,
        db,
        stop: Some(stop),
        server: Some(server),
        database,
    }
}

/// What a test function receives, built fresh for one back-end: the bare
/// [`Backend`] (for tests that configure their own server) or a running [`TestApp`].
/// A test module may implement it for its own fixture.
pub trait Fixture: Sized {
    fn set_up(backend: Backend) -> impl std::future::Future<Output = Self>;
}

impl Fixture for Backend {
    async fn set_up(backend: Backend) -> Self {
        backend
    }
}

impl Fixture for TestApp {
    async fn set_up(backend: Backend) -> Self {
        spawn_app(backend).await
    }
}

/// An `async fn` of one or two fixtures; `Args` only tells the two shapes apart.
pub trait BackendTest<Args> {
    fn run(self, backend: Backend) -> impl std::future::Future<Output = ()>;
}

impl<F, Fut, A> BackendTest<(A,)> for F
where
    F: FnOnce(A) -> Fut,
    Fut: std::future::Future<Output = ()>,
    A: Fixture,
{
    async fn run(self, backend: Backend) {
        self(A::set_up(backend).await).await
    }
}

impl<F, Fut, A, B> BackendTest<(A, B)> for F
where
    F: FnOnce(A, B) -> Fut,
    Fut: std::future::Future<Output = ()>,
    (A, B): Fixture,
{
    async fn run(self, backend: Backend) {
        let (a, b) = <(A, B)>::set_up(backend).await;
        self(a, b).await
    }
}

/// Runs `$body` with `$conn` a `&mut` connection of the back-end's own type to
/// the test's database (`$app.database`): a statement the API does not offer,
/// written once and checked against both drivers.
macro_rules! with_connection {
    ($app:expr, $conn:ident => $body:expr) => {
        match $app.backend {
            $crate::common::Backend::Postgres => {
                let mut conn =
                    <sqlx::PgConnection as sqlx::Connection>::connect(&$app.database.url)
                        .await
                        .expect("connect");
                let $conn = &mut conn;
                $body
            }
            $crate::common::Backend::Sqlite => {
                let mut conn =
                    <sqlx::SqliteConnection as sqlx::Connection>::connect(&$app.database.url)
                        .await
                        .expect("connect");
                let $conn = &mut conn;
                $body
            }
        }
    };
}

/// Run each named `async fn` once against SQLite and once against Postgres:
/// `both_backends!(my_test);` defines the tests `my_test::sqlite` and
/// `my_test::postgres`. The function takes a [`TestApp`], a [`Backend`] (to set up
/// its own server) or any other [`Fixture`].
macro_rules! both_backends {
    ($($name:ident),+ $(,)?) => {$(
        mod $name {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn sqlite() {
                $crate::common::BackendTest::run(super::$name, $crate::common::Backend::Sqlite).await;
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn postgres() {
                $crate::common::BackendTest::run(super::$name, $crate::common::Backend::Postgres).await;
            }
        }
    )+};
}

/// A second connection to a SQLite app's database, inside `BEGIN IMMEDIATE`: it
/// holds the write lock (as another process would) until it rolls back or drops.
pub async fn hold_sqlite_write_lock(app: &TestApp) -> sqlx::SqliteConnection {
    use sqlx::Connection as _;
    let mut other = sqlx::SqliteConnection::connect(&app.database.url)
        .await
        .unwrap();
    sqlx::query("BEGIN IMMEDIATE")
        .execute(&mut other)
        .await
        .unwrap();
    other
}

/// The server's id of the task a task list's planner called `local`.
pub fn server_id(list: &serde_json::Value, local: &str) -> String {
    list["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["task_id"] == local)
        .unwrap_or_else(|| panic!("no task {local} in {list}"))["id"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// The planner's ids (`task_id`) of the tasks an answer lists, in its order.
pub fn task_ids(answer: &Value) -> Vec<String> {
    answer["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["task_id"].as_str().unwrap().to_owned())
        .collect()
}

/// A response's header as text; empty when it is absent or not text.
pub fn header(response: &reqwest::Response, name: &str) -> String {
    response
        .headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned()
}

/// `method path` announcing (by `Content-Length`) a JSON body of `length` bytes,
/// sent over a raw connection that never writes the body: the server must answer
/// 413 problem+json from the headers alone. The raw answer.
pub async fn refused_from_headers(
    app: &TestApp,
    method: &str,
    path: &str,
    length: usize,
) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(app.addr).await.unwrap();
    let head = format!(
        "{method} {path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
         content-length: {length}\r\nconnection: close\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.unwrap();
    assert!(
        answer.starts_with("HTTP/1.1 413"),
        "{method} {path}: {answer}"
    );
    assert!(
        answer.contains("application/problem+json"),
        "{method} {path}: {answer}"
    );
    answer
}

/// Assert a response is a 422 `code` problem saying its body did not parse (the
/// `FATAL: failed to parse` line of docs/spec/refine.md); return it.
pub async fn expect_unparsed_body(response: reqwest::Response, code: &str) -> Value {
    let problem = expect_problem(response, 422, code).await;
    let detail = problem["detail"].as_str().unwrap_or_default();
    assert!(
        detail.starts_with("FATAL: failed to parse request body: "),
        "{problem}"
    );
    problem
}

/// Assert a response is problem+json with the given status and code; return it.
pub async fn expect_problem(
    response: reqwest::Response,
    status: u16,
    code: &str,
) -> serde_json::Value {
    assert_eq!(
        response.status().as_u16(),
        status,
        "status of {}",
        response.url()
    );
    assert_eq!(
        header(&response, "content-type"),
        "application/problem+json"
    );
    let body: serde_json::Value = response.json().await.expect("problem body");
    assert_eq!(body["code"], code, "problem: {body}");
    assert_eq!(body["status"], status);
    for member in ["type", "title", "detail"] {
        assert!(body[member].is_string(), "problem lacks {member}: {body}");
    }
    body
}

/// Every row of every table (but sqlx's own) as text, per table: compare two
/// snapshots to prove a request changed nothing in the database.
pub async fn snapshot_tables(app: &TestApp) -> std::collections::BTreeMap<String, Vec<String>> {
    let mut tables = std::collections::BTreeMap::new();
    match app.backend {
        Backend::Postgres => {
            let mut conn = <sqlx::PgConnection as sqlx::Connection>::connect(&app.database.url)
                .await
                .expect("connect");
            let names: Vec<String> = sqlx::query_scalar(
                "SELECT tablename::text FROM pg_tables WHERE schemaname = 'public' \
                 AND tablename NOT LIKE '\\_sqlx%' ORDER BY 1",
            )
            .fetch_all(&mut conn)
            .await
            .expect("tables");
            for name in names {
                let rows: Vec<String> = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
                    "SELECT row_to_json(t)::text FROM {name} t ORDER BY 1"
                )))
                .fetch_all(&mut conn)
                .await
                .expect("rows");
                tables.insert(name, rows);
            }
        }
        Backend::Sqlite => {
            let mut conn = <sqlx::SqliteConnection as sqlx::Connection>::connect(&app.database.url)
                .await
                .expect("connect");
            let names: Vec<String> = sqlx::query_scalar(
                "SELECT name FROM sqlite_master WHERE type = 'table' \
                 AND name NOT LIKE '\\_sqlx%' ESCAPE '\\' AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\' \
                 ORDER BY 1",
            )
            .fetch_all(&mut conn)
            .await
            .expect("tables");
            for name in names {
                let columns: Vec<String> =
                    sqlx::query_scalar("SELECT name FROM pragma_table_info($1) ORDER BY cid")
                        .bind(&name)
                        .fetch_all(&mut conn)
                        .await
                        .expect("columns");
                let quoted: Vec<String> =
                    columns.iter().map(|c| format!("quote(\"{c}\")")).collect();
                let rows: Vec<String> = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
                    "SELECT json_array({}) FROM \"{name}\" ORDER BY 1",
                    quoted.join(", ")
                )))
                .fetch_all(&mut conn)
                .await
                .expect("rows");
                tables.insert(name, rows);
            }
        }
    }
    assert!(tables.len() >= 5, "tables found: {:?}", tables.keys());
    tables
}

/// The fixture L0 (`tests/fixtures/l0/l0.sh`): its answer depends on its arguments.
pub fn l0_script() -> String {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/l0/l0.sh")
        .display()
        .to_string()
}

/// A one-phase, one-assignment refine plan.
pub fn one_phase_plan() -> serde_json::Value {
    serde_json::json!({
        "task": "Ship it",
        "phases": [{"id": "P1", "name": "Phase one", "goal": "g", "scope": ["code"],
                    "technical_approach": "t", "relationship_notes": "", "ordering": 1}],
        "assignments": [{
            "id": "P1-A1", "phase_id": "P1", "name": "One", "goal": "Do it.",
            "technical_approach": "Small steps.", "dependency_notes": "", "overlap_notes": "",
            "proposed_work_packages": [{"id_suffix": "WP1", "name": "w", "estimated_files": ["src/a.rs"]}]
        }]
    })
}

/// Most fixture runs alive at once, from the `--record` events file of
/// `tests/fixtures/l0/l0.sh` in `dir` (none recorded: 0).
pub fn max_concurrency(dir: &std::path::Path) -> usize {
    let text = std::fs::read_to_string(dir.join("events")).unwrap_or_default();
    let mut events: Vec<(u128, i32)> = text
        .lines()
        .filter_map(|l| {
            let parts: Vec<&str> = l.split_whitespace().collect();
            let delta = if parts.first()? == &"start" { 1 } else { -1 };
            Some((parts.get(2)?.parse().ok()?, delta))
        })
        .collect();
    // Ends sort before starts at the same instant.
    events.sort();
    let (mut live, mut max) = (0i32, 0i32);
    for (_, d) in events {
        live += d;
        max = max.max(live);
    }
    max as usize
}

/// An executor profile of `kind` with nothing else set (each default applies);
/// a test sets what it needs with `ExecutorProfile { …, ..executor_profile(kind) }`.
pub fn executor_profile(kind: plangate::config::ExecutorKind) -> plangate::config::ExecutorProfile {
    plangate::config::ExecutorProfile {
        kind,
        argv: vec![],
        base_url: None,
        model: None,
        api_key_env: None,
        timeout_secs: None,
        max_output_bytes: None,
        env_allow: vec![],
        output: Default::default(),
    }
}

/// The fields of a task of a task list (docs/api.md, "Task lists").
pub const TASK_FIELDS: [&str; 8] = [
    "task_id",
    "assigned_persona",
    "parallel_group",
    "depends_on",
    "reads",
    "writes",
    "description",
    "reviews",
];

/// Serves `app` on a free local port (a fake provider or receiver) until the test
/// ends; its address.
pub async fn serve_local(app: axum::Router) -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    addr
}

/// The provider API a fake model server speaks.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Api {
    Openai,
    Anthropic,
}

/// Serves a fake provider (see [`serve_local`]); the base URL an executor
/// profile names: `http://addr{openai_path}` for OpenAI, `http://addr` for Anthropic.
pub async fn serve_provider(api: Api, app: axum::Router, openai_path: &str) -> String {
    let addr = serve_local(app).await;
    match api {
        Api::Openai => format!("http://{addr}{openai_path}"),
        Api::Anthropic => format!("http://{addr}"),
    }
}

/// An L0 request for one assignment of phase `P1` of job `job`, as the engine
/// builds it (the packet names the same assignment and task file).
pub fn l0_request(
    job: u128,
    assignment_id: &str,
    prompt: &str,
    task_file: Option<&str>,
) -> plangate::agents::L0Request {
    use plangate::domain::refine::{Assignment, L0Packet};
    plangate::agents::L0Request {
        job_id: uuid::Uuid::from_u128(job),
        phase_id: "P1".into(),
        assignment_id: assignment_id.into(),
        task_file: task_file.map(Into::into),
        prompt: prompt.into(),
        packet: std::sync::Arc::new(L0Packet {
            target_assignment_id: assignment_id.into(),
            phase_id: "P1".into(),
            assignment: Assignment::new(assignment_id),
            peer_summaries: vec![],
            phase: None,
            task_file_path: task_file.map(Into::into),
            instructions: String::new(),
        }),
        phase_assignments: std::sync::Arc::from(vec![Assignment::new(assignment_id)]),
        rate_feedback: None,
    }
}

/// The `id` of each object of a JSON array.
pub fn ids(list: &Value) -> Vec<String> {
    list.as_array()
        .expect("array")
        .iter()
        .map(|a| a["id"].as_str().expect("id").to_owned())
        .collect()
}
