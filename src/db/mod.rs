//! Storage: one interface over a Postgres and a SQLite implementation.
//!
//! `sqlx::Any` cannot decode uuid/jsonb/timestamptz, so the interface is an enum over
//! the two pools. Each query is written once: `on_pool!` pastes the same body into
//! both arms, so it is type-checked against each driver (docs/architecture.md).
//! The db layer speaks domain types and its own `*Record` rows, never HTTP.

// First, so that every module below sees its macros (`on_pool!`, `begin_write!`).
#[macro_use]
mod tx;

pub mod notify;
// Before the modules whose transactions store webhook events (its macros).
#[macro_use]
pub mod outbox;
// Before `refine_jobs`, whose L0 gate uses its macros.
#[macro_use]
pub mod rate_limits;
// Before `refine_runs`, which inserts jobs with its `insert_jobs!`.
#[macro_use]
pub mod refine_jobs;
pub mod refine_runs;
// Before `task_claims`, `task_lists` and `dashboard`, which use its macros.
#[macro_use]
pub mod readiness;
// Before `task_lists`, whose transition uses its macros.
#[macro_use]
pub mod task_claims;
pub mod dashboard;
pub mod task_lists;
pub mod tracks;
pub mod ui_sessions;
pub mod usage;
pub mod webhooks;

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use crate::domain::job::JobStatus;
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions, PgRow};
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteRow,
    SqliteSynchronous,
};

static PG_MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/postgres");
static SQLITE_MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/sqlite");

#[derive(Debug, thiserror::Error)]
pub enum DbError {
    /// The database did not answer (connection refused, pool timeout, restart).
    #[error("database unavailable: {0}")]
    Unavailable(sqlx::Error),
    /// A uniqueness or state constraint refused the write.
    #[error("conflict: {0}")]
    Conflict(String),
    #[error("migration failed: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    #[error("invalid database URL: {0}")]
    Url(String),
    #[error("database error: {0}")]
    Other(sqlx::Error),
    /// Stored data that the code cannot read back (a bug or a hand edit).
    #[error("corrupt row: {0}")]
    Corrupt(String),
}

impl From<sqlx::Error> for DbError {
    fn from(err: sqlx::Error) -> Self {
        match &err {
            sqlx::Error::Io(_)
            | sqlx::Error::PoolTimedOut
            | sqlx::Error::PoolClosed
            | sqlx::Error::Tls(_)
            | sqlx::Error::WorkerCrashed => DbError::Unavailable(err),
            // 57P01 admin_shutdown, 57P03 cannot_connect_now: Postgres restarting.
            sqlx::Error::Database(db)
                if matches!(db.code().as_deref(), Some("57P01" | "57P02" | "57P03")) =>
            {
                DbError::Unavailable(err)
            }
            // SQLITE_BUSY or SQLITE_LOCKED (any extended code): the lock stayed taken
            // past busy_timeout — by another process, since this one's writers take
            // turns (docs/architecture.md, "Writers on SQLite"). Retryable: 503.
            sqlx::Error::Database(db) if is_sqlite_busy(db.as_ref()) => DbError::Unavailable(err),
            _ => DbError::Other(err),
        }
    }
}

pub type DbResult<T> = Result<T, DbError>;

impl DbError {
    /// Postgres ended the transaction to break a lock cycle (40P01) or a
    /// serialisation failure (40001): nothing was written, running it again is safe.
    pub(crate) fn is_retryable(&self) -> bool {
        match self {
            DbError::Other(sqlx::Error::Database(db)) => {
                matches!(db.code().as_deref(), Some("40P01" | "40001"))
            }
            _ => false,
        }
    }
}

/// Runs `attempt` again (a few times) while it fails with a retryable error
/// ([`DbError::is_retryable`]); row locks taken in different orders by writers of
/// one list (a completion decrementing a dependent another writer holds) can meet
/// in a cycle, which Postgres breaks by failing one of them.
pub(crate) async fn retrying<T, F, Fut>(mut attempt: F) -> DbResult<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = DbResult<T>>,
{
    let mut tries = 0;
    loop {
        match attempt().await {
            Err(e) if e.is_retryable() && tries < 4 => tries += 1,
            other => return other,
        }
    }
}

fn is_sqlite_busy(error: &dyn sqlx::error::DatabaseError) -> bool {
    error
        .try_downcast_ref::<sqlx::sqlite::SqliteError>()
        .and_then(|e| sqlx::error::DatabaseError::code(e)?.parse::<i32>().ok())
        .is_some_and(|code| matches!(code & 0xff, 5 | 6))
}

/// A set of job statuses (`domain::job::JobStatus::IN_FLIGHT` …) as SQL text,
/// `('running', 'cancelling')`, so that no status list is spelled out in SQL. Literal
/// rather than bound: the partial indexes (`refine_jobs_leased`,
/// `refine_runs_unmerged`) carry the same text, and the planner uses such an index
/// only when the query's predicate implies it.
pub(crate) fn status_list(set: &[JobStatus]) -> String {
    let names: Vec<String> = set.iter().map(|s| format!("'{}'", s.as_str())).collect();
    format!("({})", names.join(", "))
}

/// Binds each value into `(v1, v2, …)`: the `IN` list of a statement whose length
/// is known only at run time. The caller keeps the list under SQLite's bind limit.
pub(crate) fn push_bound_list<'t, DB, T>(
    q: &mut sqlx::QueryBuilder<DB>,
    values: impl IntoIterator<Item = T>,
) where
    DB: sqlx::Database,
    T: sqlx::Encode<'t, DB> + sqlx::Type<DB>,
{
    q.push("(");
    let mut list = q.separated(", ");
    for value in values {
        list.push_bind(value);
    }
    q.push(")");
}

/// The statement that counts `table`'s rows by `(key, status)` for the given
/// keys: one read for a page of lists' or jobs' status counts.
pub(crate) fn status_counts_of<DB>(
    table: &str,
    key: &str,
    keys: impl IntoIterator<Item = uuid::Uuid>,
) -> sqlx::QueryBuilder<DB>
where
    DB: sqlx::Database,
    for<'e> uuid::Uuid: sqlx::Encode<'e, DB> + sqlx::Type<DB>,
{
    let mut q = sqlx::QueryBuilder::new(format!(
        "SELECT {key}, status, COUNT(*) FROM {table} WHERE {key} IN "
    ));
    push_bound_list(&mut q, keys);
    q.push(format!(" GROUP BY {key}, status"));
    q
}

/// Ends a newest-first read of a table keyed by time-ordered v7 ids: rows older
/// than `before` (the last id of the previous page, if any), at most `limit`.
pub(crate) fn push_newest_first<DB>(
    q: &mut sqlx::QueryBuilder<DB>,
    before: Option<uuid::Uuid>,
    limit: u32,
) where
    DB: sqlx::Database,
    for<'e> uuid::Uuid: sqlx::Encode<'e, DB> + sqlx::Type<DB>,
    for<'e> i64: sqlx::Encode<'e, DB> + sqlx::Type<DB>,
{
    if let Some(before) = before {
        q.push(" AND id < ").push_bind(before);
    }
    q.push(" ORDER BY id DESC LIMIT ")
        .push_bind(i64::from(limit));
}

/// `AND <column> IN (...)` for a project-limited reader (`None`: every project;
/// an empty list: none); rows with no project are for unrestricted readers only.
pub(crate) fn push_allowed<DB>(
    q: &mut sqlx::QueryBuilder<DB>,
    column: &str,
    allowed: Option<&[String]>,
) where
    DB: sqlx::Database,
    for<'e> String: sqlx::Encode<'e, DB> + sqlx::Type<DB>,
{
    let Some(allowed) = allowed else { return };
    if allowed.is_empty() {
        q.push(" AND FALSE");
        return;
    }
    q.push(format!(" AND {column} IN "));
    push_bound_list(q, allowed.iter().cloned());
}

/// A row type both back-ends decode: what the generic readers below return.
pub(crate) trait Row:
    Send + Unpin + for<'r> sqlx::FromRow<'r, PgRow> + for<'r> sqlx::FromRow<'r, SqliteRow>
{
}

impl<T> Row for T where
    T: Send + Unpin + for<'r> sqlx::FromRow<'r, PgRow> + for<'r> sqlx::FromRow<'r, SqliteRow>
{
}

/// A value both back-ends bind: the key of the readers below (an id, a name).
pub(crate) trait Bindable:
    Send
    + for<'q> sqlx::Encode<'q, sqlx::Postgres>
    + sqlx::Type<sqlx::Postgres>
    + for<'q> sqlx::Encode<'q, sqlx::Sqlite>
    + sqlx::Type<sqlx::Sqlite>
{
}

impl<T> Bindable for T where
    T: Send
        + for<'q> sqlx::Encode<'q, sqlx::Postgres>
        + sqlx::Type<sqlx::Postgres>
        + for<'q> sqlx::Encode<'q, sqlx::Sqlite>
        + sqlx::Type<sqlx::Sqlite>
{
}

impl Database {
    /// The row `sql` reads with `$1` bound to `key`, if any: the reads by one key,
    /// written once for both back-ends.
    pub(crate) async fn row_by<T: Row>(
        &self,
        sql: &str,
        key: impl Bindable,
    ) -> DbResult<Option<T>> {
        Ok(on_pool!(self, pool => {
            sqlx::query_as(sqlx::AssertSqlSafe(sql)).bind(key).fetch_optional(pool).await?
        }))
    }

    /// Every row `sql` reads with `$1` bound to `key`.
    pub(crate) async fn rows_by<T: Row>(&self, sql: &str, key: impl Bindable) -> DbResult<Vec<T>> {
        Ok(on_pool!(self, pool => {
            sqlx::query_as(sqlx::AssertSqlSafe(sql)).bind(key).fetch_all(pool).await?
        }))
    }

    /// [`Database::row_by`] of a one-column read: its value.
    pub(crate) async fn value_by<T>(&self, sql: &str, key: impl Bindable) -> DbResult<Option<T>>
    where
        (T,): Row,
    {
        Ok(self.row_by(sql, key).await?.map(|(value,)| value))
    }
}

/// A read of `sql` (up to its `WHERE` conditions) of the `allowed` projects' rows
/// by `column` ([`push_allowed`]), to go on building.
pub(crate) fn allowed_rows<DB>(
    sql: impl Into<String>,
    column: &str,
    allowed: Option<&[String]>,
) -> sqlx::QueryBuilder<DB>
where
    DB: sqlx::Database,
    for<'e> String: sqlx::Encode<'e, DB> + sqlx::Type<DB>,
{
    let mut q = sqlx::QueryBuilder::new(sql);
    push_allowed(&mut q, column, allowed);
    q
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DatabaseKind {
    Postgres,
    Sqlite,
}

impl DatabaseKind {
    /// The back-end a database URL names, by its scheme.
    pub fn of_url(url: &str) -> Option<Self> {
        if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            Some(DatabaseKind::Postgres)
        } else if url.starts_with("sqlite:") {
            Some(DatabaseKind::Sqlite)
        } else {
            None
        }
    }
}

#[derive(Clone, Debug)]
pub enum Database {
    Postgres(PgPool),
    Sqlite(SqliteDb),
}

/// An SQLite pool and its writers' queue.
///
/// SQLite has one write lock per file, and a connection that finds it taken polls
/// (its busy handler sleeps, up to 100 ms a time) instead of queueing: with many
/// writers a poller can lose every round until `busy_timeout` ends and the request
/// fails with "database is locked" (docs/architecture.md, "Writers on SQLite"). So
/// the writers of this process take turns here first, in arrival order (tokio's
/// mutex is fair), and only the one whose turn it is asks SQLite for the lock.
#[derive(Clone, Debug)]
pub struct SqliteDb {
    pub pool: SqlitePool,
    writers: Arc<tokio::sync::Mutex<()>>,
}

/// The turn of one writer ([`Database::writer_turn`]): held until its transaction
/// ends. Always `None` on Postgres, whose row locks queue writers themselves.
pub(crate) type WriterTurn = Option<tokio::sync::OwnedMutexGuard<()>>;

/// SQLite's `synchronous` setting: when a commit waits for the disk
/// (docs/configuration.md, "Durability on SQLite").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SqliteSync {
    /// Never waits: a process crash keeps commits, an OS crash or a power loss may
    /// corrupt the file.
    Off,
    /// With WAL, waits at checkpoints only: a process crash keeps every commit, an
    /// OS crash or a power loss may lose the last ones (the file stays sound). The
    /// default: `full` doubled a write's time under load (docs/configuration.md).
    #[default]
    Normal,
    /// Waits for the WAL on every commit: an acknowledged write survives a power
    /// loss.
    Full,
    /// `Full`, and the directory too after a rollback journal is deleted.
    Extra,
}

impl SqliteSync {
    pub const NAMES: [&str; 4] = ["off", "normal", "full", "extra"];

    pub fn parse(text: &str) -> Option<Self> {
        match text.trim().to_ascii_lowercase().as_str() {
            "off" => Some(SqliteSync::Off),
            "normal" => Some(SqliteSync::Normal),
            "full" => Some(SqliteSync::Full),
            "extra" => Some(SqliteSync::Extra),
            _ => None,
        }
    }

    fn pragma(self) -> SqliteSynchronous {
        match self {
            SqliteSync::Off => SqliteSynchronous::Off,
            SqliteSync::Normal => SqliteSynchronous::Normal,
            SqliteSync::Full => SqliteSynchronous::Full,
            SqliteSync::Extra => SqliteSynchronous::Extra,
        }
    }
}

/// How long a request waits for a pooled connection before answering 503.
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(5);

impl Database {
    /// Connect eagerly so that a wrong URL fails at start, not at the first request.
    pub async fn connect(url: &str) -> DbResult<Self> {
        Self::connect_with(url, SqliteSync::default()).await
    }

    /// [`connect`](Self::connect) with SQLite's `synchronous` setting (ignored on
    /// Postgres).
    pub async fn connect_with(url: &str, sync: SqliteSync) -> DbResult<Self> {
        let kind = DatabaseKind::of_url(url).ok_or_else(|| {
            DbError::Url("invalid DATABASE_URL: must start with sqlite:// or postgres://".into())
        })?;
        match kind {
            DatabaseKind::Postgres => {
                let options = PgConnectOptions::from_str(url)
                    .map_err(|e| DbError::Url(e.to_string()))?
                    .application_name("plangate");
                let pool = PgPoolOptions::new()
                    .max_connections(16)
                    .acquire_timeout(ACQUIRE_TIMEOUT)
                    .connect_with(options)
                    .await?;
                Ok(Database::Postgres(pool))
            }
            DatabaseKind::Sqlite => {
                let options = SqliteConnectOptions::from_str(url)
                    .map_err(|e| DbError::Url(e.to_string()))?
                    .create_if_missing(true)
                    .journal_mode(SqliteJournalMode::Wal)
                    .synchronous(sync.pragma())
                    .foreign_keys(true)
                    .busy_timeout(Duration::from_secs(10));
                let pool = SqlitePoolOptions::new()
                    .max_connections(8)
                    .acquire_timeout(ACQUIRE_TIMEOUT)
                    .connect_with(options)
                    .await?;
                Ok(Database::Sqlite(SqliteDb {
                    pool,
                    writers: Arc::default(),
                }))
            }
        }
    }

    /// Waits for this writer's turn on SQLite (see [`SqliteDb`]); take it before the
    /// connection, so queued writers hold no pooled connection the readers need.
    /// Never taken twice by one task: it is not re-entrant.
    pub(crate) async fn writer_turn(&self) -> WriterTurn {
        match self {
            Database::Sqlite(sqlite) => Some(sqlite.writers.clone().lock_owned().await),
            Database::Postgres(_) => None,
        }
    }

    /// What a claiming read appends: on Postgres lock the rows found and pass over
    /// rows another transaction holds (concurrent claimers take different tasks);
    /// nothing on SQLite, whose `begin_write!` transaction holds the write lock.
    pub(crate) fn skip_locked(&self) -> &'static str {
        match self {
            Database::Postgres(_) => " FOR UPDATE SKIP LOCKED",
            Database::Sqlite(_) => "",
        }
    }

    /// What a locking read (`SELECT … FOR UPDATE`) appends: nothing on SQLite, whose
    /// `begin_write!` transaction already holds the database's write lock.
    pub(crate) fn row_lock(&self) -> &'static str {
        match self {
            Database::Postgres(_) => " FOR UPDATE",
            Database::Sqlite(_) => "",
        }
    }

    pub fn kind(&self) -> DatabaseKind {
        match self {
            Database::Postgres(_) => DatabaseKind::Postgres,
            Database::Sqlite(_) => DatabaseKind::Sqlite,
        }
    }

    /// Apply the embedded migrations of this back-end (idempotent; concurrent
    /// replicas are serialised by sqlx's advisory lock on Postgres).
    pub async fn migrate(&self) -> DbResult<()> {
        match self {
            Database::Postgres(pool) => PG_MIGRATOR.run(pool).await?,
            Database::Sqlite(sqlite) => SQLITE_MIGRATOR.run(&sqlite.pool).await?,
        }
        Ok(())
    }

    /// Readiness: the database answers and every embedded migration is applied.
    pub async fn check_ready(&self) -> DbResult<()> {
        let (applied, expected): (i64, usize) = match self {
            Database::Postgres(pool) => (
                sqlx::query_scalar("SELECT COUNT(*) FROM _sqlx_migrations WHERE success")
                    .fetch_one(pool)
                    .await?,
                PG_MIGRATOR.iter().count(),
            ),
            Database::Sqlite(sqlite) => (
                sqlx::query_scalar("SELECT COUNT(*) FROM _sqlx_migrations WHERE success")
                    .fetch_one(&sqlite.pool)
                    .await?,
                SQLITE_MIGRATOR.iter().count(),
            ),
        };
        if usize::try_from(applied).unwrap_or(0) < expected {
            return Err(DbError::Conflict(format!(
                "{applied} of {expected} migrations applied"
            )));
        }
        Ok(())
    }

    pub async fn close(&self) {
        match self {
            Database::Postgres(pool) => pool.close().await,
            Database::Sqlite(sqlite) => sqlite.pool.close().await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::status_list;
    use crate::domain::job::JobStatus;

    /// The schema names the same statuses as the domain: the CHECK constraints list
    /// them all, and the partial indexes' predicates are the text the queries use.
    #[test]
    fn migrations_match_the_domain_status_sets() {
        let jobs = [
            include_str!("../../migrations/postgres/0003_refine_jobs.sql"),
            include_str!("../../migrations/sqlite/0003_refine_jobs.sql"),
        ];
        let runs_index = [
            include_str!("../../migrations/postgres/0005_scale_indexes.sql"),
            include_str!("../../migrations/sqlite/0005_scale_indexes.sql"),
        ];
        let all = format!("CHECK (status IN {})", status_list(&JobStatus::ALL));
        let in_flight = format!("WHERE status IN {}", status_list(&JobStatus::IN_FLIGHT));
        let mut runs: Vec<JobStatus> = JobStatus::IN_FLIGHT.to_vec();
        runs.extend(JobStatus::TERMINAL);
        let runs = format!("CHECK (status IN {})", status_list(&runs));
        for sql in jobs {
            assert!(sql.contains(&all), "refine_jobs CHECK lists {all}");
            assert!(sql.contains(&runs), "refine_runs CHECK lists {runs}");
            assert!(sql.contains(&format!(
                "refine_jobs_leased ON refine_jobs (lease_expires_at) {in_flight}"
            )));
        }
        for sql in runs_index {
            assert!(sql.contains(&format!(
                "refine_runs_unmerged ON refine_runs (id) {in_flight}"
            )));
        }
        assert_eq!(
            status_list(&JobStatus::IN_FLIGHT),
            "('running', 'cancelling')"
        );
    }

    /// No SQL in `db/` spells out a list of job statuses: it uses `status_list`, so a
    /// new status in `domain::job` cannot be forgotten in one query.
    #[test]
    fn no_job_status_list_is_spelled_out_in_sql() {
        fn sources(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
            for entry in std::fs::read_dir(dir).expect("src/db is readable") {
                let path = entry.expect("a directory entry").path();
                if path.is_dir() {
                    sources(&path, out);
                } else if path.extension().is_some_and(|e| e == "rs") {
                    out.push(path);
                }
            }
        }
        let mut files = Vec::new();
        let db = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/db");
        sources(&db, &mut files);
        assert!(files.len() > 5, "found the db sources");
        let mut found = Vec::new();
        for file in files {
            let text = std::fs::read_to_string(&file).expect("a readable source");
            for (n, line) in text.lines().enumerate() {
                let spelled = JobStatus::ALL
                    .iter()
                    .any(|s| line.contains(&format!("IN ('{}'", s.as_str())));
                if spelled && !line.trim_start().starts_with("//") {
                    found.push(format!("{}:{}: {}", file.display(), n + 1, line.trim()));
                }
            }
        }
        assert!(
            found.is_empty(),
            "build the list with status_list(&JobStatus::…):\n{}",
            found.join("\n")
        );
    }
}
