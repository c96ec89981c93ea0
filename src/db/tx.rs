//! The transaction helpers every db module uses: `on_pool!` and `begin_write!`.
//!
//! They are macros, not functions, because one body must be compiled once per
//! back-end: each arm of `Database` holds its own pool and connection types
//! (`Transaction<'_, Postgres>`, `Transaction<'_, Sqlite>`), and a generic function
//! over both would need a `where` clause for every type it binds or decodes.
//! Pasting the body into each arm type-checks the same SQL text against each driver,
//! so the SQL is written once. Declared `#[macro_use]` first in `db/mod.rs`, so every
//! db module sees them.

/// Runs `$body` once per back-end with `$pool` bound to that back-end's pool:
/// `on_pool!(db, pool => { … })`. Not a closure: the body is pasted into the arms of
/// a `match`, so a `return` or `?` inside it leaves the enclosing function — hence
/// the match-arm syntax.
macro_rules! on_pool {
    ($db:expr, $pool:ident => $body:block) => {
        match $db {
            $crate::db::Database::Postgres($pool) => $body,
            $crate::db::Database::Sqlite(sqlite) => {
                let $pool = &sqlite.pool;
                $body
            }
        }
    };
}

/// Opens a write transaction inside an `on_pool!` arm; evaluates to `(turn, tx)`,
/// the writer's turn ([`Database::writer_turn`](crate::db::Database::writer_turn))
/// to keep until the transaction ends. Every transaction that writes opens this way,
/// on SQLite:
/// - after its turn, so the writers of this process queue in order instead of
///   polling for the lock and timing out (docs/architecture.md, "Writers on SQLite");
/// - with `BEGIN IMMEDIATE`, which takes the write lock up front: a deferred
///   transaction that reads and then writes fails at once with SQLITE_BUSY (no busy
///   wait) when another connection wrote since its read.
///
/// On Postgres it is a plain transaction whose locking reads lock their rows
/// ([`Database::row_lock`](crate::db::Database::row_lock)).
macro_rules! begin_write {
    ($db:expr, $pool:ident) => {{
        let turn = $db.writer_turn().await;
        let tx = match $db {
            $crate::db::Database::Sqlite(_) => $pool.begin_with("BEGIN IMMEDIATE").await?,
            $crate::db::Database::Postgres(_) => $pool.begin().await?,
        };
        (turn, tx)
    }};
}

/// Reads the row of `$table` whose `id` is `$id` inside the write transaction
/// `$tx`, locked ([`Database::row_lock`](crate::db::Database::row_lock)) until it
/// ends: `locked_row!(db, tx, "refine_jobs", "status, attempt", id)` evaluates to
/// the row's `$columns` (as the type asked for), `None` when there is none.
macro_rules! locked_row {
    ($db:expr, $tx:ident, $table:literal, $columns:expr, $id:expr) => {
        sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT {} FROM {} WHERE id = $1{}",
            $columns,
            $table,
            $db.row_lock()
        )))
        .bind($id)
        .fetch_optional(&mut *$tx)
        .await?
    };
}
