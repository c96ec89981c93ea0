//! Storage of refine runs (refine.md §7): a run row and its phase jobs.

use uuid::Uuid;

use super::{Database, DbResult};

impl Database {
    pub async fn refine_run_exists(&self, id: Uuid) -> DbResult<bool> {
        let n: i64 = on_pool!(self, |pool| {
            sqlx::query_scalar("SELECT COUNT(*) FROM refine_runs WHERE id = $1")
                .bind(id)
                .fetch_one(pool)
                .await?
        });
        Ok(n > 0)
    }
}
