//! Refine runs (docs/spec/refine.md §7): triggers the exactly-once merge and counts it.
//! What a run stores and how it merges are the pure `domain::refine` ([`RunRequest`](crate::domain::refine::RunRequest),
//! `merge_run`); the merge runs inside `db`'s transaction.

use uuid::Uuid;

use crate::db::{Database, DbResult};
use crate::domain::job::JobStatus;

/// Merges the run if every phase job is terminal and nobody merged it yet.
pub async fn merge_if_due(db: &Database, run_id: Uuid) -> DbResult<Option<JobStatus>> {
    let merged = db.try_merge_refine_run(run_id).await?;
    if let Some(status) = merged {
        metrics::counter!("refine_runs_finished_total", "status" => status.as_str()).increment(1);
        tracing::info!(%run_id, status = status.as_str(), "refine run merged");
    }
    Ok(merged)
}
