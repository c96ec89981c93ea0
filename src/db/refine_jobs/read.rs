//! Reading refine jobs: one job, list pages, `(version, status)` for waiters, the
//! event log, per-L0 records and the status counts of the gauge.

use std::collections::HashMap;

use sqlx::QueryBuilder;
use uuid::Uuid;

use super::{
    JOB_COLUMNS, JobEvent, JobFilter, JobProgress, L0_COLUMNS, L0Row, RawJobRow, StoredJob,
    StoredL0, add_count,
};
use crate::db::{Database, DbResult, push_allowed, push_newest_first, status_counts_of};
use crate::domain::job::JobStatus;
use crate::domain::refine::L0Status;
use crate::domain::usage::UsageTotals;

impl Database {
    pub async fn refine_job(&self, id: Uuid) -> DbResult<Option<StoredJob>> {
        let sql = format!("SELECT {JOB_COLUMNS} FROM refine_jobs WHERE id = $1");
        let Some(row) = self.row_by::<RawJobRow>(&sql, id).await? else {
            return Ok(None);
        };
        let progress = on_pool!(self, pool => {
            let mut conn = pool.acquire().await?;
            progress_of!(conn, id)
        });
        let usage = self
            .job_usage(&[id])
            .await?
            .pop()
            .map(|(_, u)| u)
            .unwrap_or_default();
        row.into_job(progress, usage).map(Some)
    }

    /// Newest first (ids are time-ordered v7 uuids), `after` = the last id of the
    /// previous page.
    pub async fn refine_jobs(
        &self,
        filter: &JobFilter,
        limit: u32,
        after: Option<Uuid>,
    ) -> DbResult<Vec<StoredJob>> {
        let rows: Vec<RawJobRow> = on_pool!(self, pool => {
            let mut q =
                QueryBuilder::new(format!("SELECT {JOB_COLUMNS} FROM refine_jobs WHERE TRUE"));
            if let Some(s) = filter.status {
                q.push(" AND status = ").push_bind(s.as_str());
            }
            if let Some(p) = &filter.phase_id {
                q.push(" AND phase_id = ").push_bind(p.clone());
            }
            if let Some(r) = filter.run_id {
                q.push(" AND run_id = ").push_bind(r);
            }
            if let Some(p) = &filter.project_id {
                q.push(" AND project_id = ").push_bind(p.clone());
            }
            if let Some(t) = &filter.team_pk {
                q.push(" AND team_pk = ").push_bind(t.clone());
            }
            push_allowed(&mut q, "project_id", filter.allowed_projects.as_deref());
            push_newest_first(&mut q, after, limit);
            q.build_query_as().fetch_all(pool).await?
        });
        if rows.is_empty() {
            return Ok(Vec::new());
        }
        let counts: Vec<(Uuid, L0Status, i64)> = on_pool!(self, pool => {
            let mut q = status_counts_of("refine_l0_runs", "job_id", rows.iter().map(|r| r.id));
            q.build_query_as().fetch_all(pool).await?
        });
        let mut progress: HashMap<Uuid, JobProgress> = HashMap::new();
        for (id, status, n) in counts {
            add_count(progress.entry(id).or_default(), status, n);
        }
        let ids: Vec<Uuid> = rows.iter().map(|r| r.id).collect();
        let mut usage: HashMap<Uuid, UsageTotals> =
            self.job_usage(&ids).await?.into_iter().collect();
        rows.into_iter()
            .map(|r| {
                let p = progress.get(&r.id).copied().unwrap_or_default();
                let u = usage.remove(&r.id).unwrap_or_default();
                r.into_job(p, u)
            })
            .collect()
    }

    /// The job's `(version, status)`: what `?wait=` and the event stream poll.
    pub async fn refine_job_version(&self, id: Uuid) -> DbResult<Option<(i64, JobStatus)>> {
        self.row_by("SELECT version, status FROM refine_jobs WHERE id = $1", id)
            .await
    }

    pub async fn refine_job_events(
        &self,
        id: Uuid,
        after_seq: i64,
        limit: i64,
    ) -> DbResult<Vec<JobEvent>> {
        Ok(on_pool!(self, pool => {
            sqlx::query_as(
                "SELECT seq, event, data, created_at FROM refine_job_events WHERE job_id = $1 \
                 AND seq > $2 \
                 ORDER BY seq LIMIT $3",
            )
            .bind(id)
            .bind(after_seq)
            .bind(limit)
            .fetch_all(pool)
            .await?
        }))
    }

    /// The request the job was made from, as stored (what a retry is made from).
    pub async fn refine_job_request(&self, id: Uuid) -> DbResult<Option<serde_json::Value>> {
        let sql = "SELECT request FROM refine_jobs WHERE id = $1";
        let row: Option<sqlx::types::Json<serde_json::Value>> = self.value_by(sql, id).await?;
        Ok(row.map(|r| r.0))
    }

    /// The job's `log` events, `(line, when)` in order: when each line was written
    /// (the stored log has no times).
    pub async fn refine_job_log_times(
        &self,
        id: Uuid,
    ) -> DbResult<Vec<(String, chrono::DateTime<chrono::Utc>)>> {
        let sql = "SELECT data, created_at FROM refine_job_events \
                   WHERE job_id = $1 AND event = 'log' ORDER BY seq";
        let rows: Vec<(
            sqlx::types::Json<serde_json::Value>,
            chrono::DateTime<chrono::Utc>,
        )> = self.rows_by(sql, id).await?;
        Ok(rows
            .into_iter()
            .filter_map(|(data, at)| Some((data.0.get("line")?.as_str()?.to_owned(), at)))
            .collect())
    }

    /// Per-L0 records in natural assignment order (`position`).
    pub async fn refine_job_l0s(&self, id: Uuid) -> DbResult<Vec<StoredL0>> {
        let sql =
            format!("SELECT {L0_COLUMNS} FROM refine_l0_runs WHERE job_id = $1 ORDER BY position");
        let rows: Vec<L0Row> = self.rows_by(&sql, id).await?;
        Ok(rows.into_iter().map(StoredL0::from).collect())
    }

    /// Jobs by status (the `refine_jobs` gauge; `queued` is the queue depth): the
    /// counter rows of every job (`refine_counts`, migration 0026), a degraded
    /// success counted as `succeeded`. A few rows, however many jobs are kept.
    pub async fn refine_jobs_by_status(&self) -> DbResult<Vec<(JobStatus, i64)>> {
        Ok(on_pool!(self, pool => {
            sqlx::query_as(
                "SELECT CASE WHEN state = 'degraded' THEN 'succeeded' ELSE state END AS status, \
                 CAST(SUM(n) AS BIGINT) AS jobs FROM refine_counts WHERE kind = 'job' \
                 AND scope = '' GROUP BY 1 HAVING SUM(n) <> 0",
            )
            .fetch_all(pool)
            .await?
        }))
    }
}
