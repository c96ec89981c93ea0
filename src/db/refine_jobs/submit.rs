//! Submitting a refine job: one transaction, idempotent by key.

use uuid::Uuid;

use super::{Created, NewRefineJob, StoredJob};
use crate::db::task_lists::now;
use crate::db::{Database, DbError, DbResult};

impl Database {
    /// Inserts a job and its pending L0 rows in one transaction. With an
    /// idempotency key the unique constraint decides: a second create with the same
    /// key finds the first instead of inserting.
    pub async fn create_refine_job(&self, new: &NewRefineJob<'_>) -> DbResult<Created<StoredJob>> {
        let at = now();
        let inserted = on_pool!(self, pool => {
            let mut tx = pool.begin().await?;
            let inserted = insert_job!(tx, new, at);
            if inserted {
                tx.commit().await?;
            }
            inserted
        });
        if inserted {
            return self
                .refine_job(new.id)
                .await?
                .map(Created::New)
                .ok_or_else(|| DbError::Corrupt("a created job vanished".into()));
        }
        let key = new.idempotency_key.unwrap_or_default();
        let found: Option<(Uuid, Option<String>)> = on_pool!(self, pool => {
            sqlx::query_as("SELECT id, request_hash FROM refine_jobs WHERE idempotency_key = $1")
                .bind(key)
                .fetch_optional(pool)
                .await?
        });
        match found {
            Some((id, hash)) if hash.as_deref() == new.request_hash => Ok(self
                .refine_job(id)
                .await?
                .map_or(Created::KeyReused, Created::Existing)),
            Some(_) => Ok(Created::KeyReused),
            // Deleted by retention between the two statements: a conflict, retryable.
            None => Err(DbError::Conflict(
                "the idempotency key's job was just deleted; retry".into(),
            )),
        }
    }

    /// Whether a job holds this idempotency key (a create with it replays).
    pub async fn refine_job_key_exists(&self, key: &str) -> DbResult<bool> {
        let n: i64 = on_pool!(self, pool => {
            sqlx::query_scalar("SELECT COUNT(*) FROM refine_jobs WHERE idempotency_key = $1")
                .bind(key)
                .fetch_one(pool)
                .await?
        });
        Ok(n > 0)
    }
}
