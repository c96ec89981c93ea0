//! Storage of track metadata (metadata.json v2) with a revision per write, so that
//! concurrent writers are caught by a compare-and-set instead of losing an update,
//! and the project the track belongs to (none: unrestricted callers only). Every
//! write appends one row to the track's history in the same transaction.

use serde_json::Value;
use sqlx::types::Json;

use super::task_lists::now;
use super::{Database, DbError, DbResult};
use crate::domain::track_state::{
    CurrentStep, Step, StepOutcome, StoredTrackEvent, TrackEventAction, TrackStatus,
};

/// A stored document, the revision it was read at and its project.
#[derive(Debug, Clone)]
pub struct StoredTrack {
    pub metadata: Value,
    pub revision: i64,
    pub project_id: Option<String>,
}

/// What a conditional write found.
#[derive(Debug)]
pub enum WriteOutcome {
    Written {
        revision: i64,
        created: bool,
    },
    /// The stored revision is not the one the writer expected.
    Stale {
        current: Option<i64>,
    },
}

/// What one write did, for the track's history (the revision and time are the write's).
#[derive(Debug, Clone, Copy)]
pub struct TrackEvent<'a> {
    pub action: TrackEventAction,
    pub step: Option<Step>,
    pub outcome: Option<StepOutcome>,
    pub agent: Option<&'a str>,
    pub notes: Option<&'a str>,
    pub commit_sha: Option<&'a str>,
    /// The track's status and current step after the write.
    pub status: TrackStatus,
    pub current_step: CurrentStep,
}

/// Appends `$event` (a [`TrackEvent`]) for the write that made `$revision`, inside `$tx`.
macro_rules! insert_track_event {
    ($tx:ident, $track_id:expr, $revision:expr, $at:expr, $event:expr) => {{
        let event: TrackEvent<'_> = $event;
        sqlx::query(
            "INSERT INTO track_events (id, track_id, revision, at, action, step, outcome, agent, \
             notes, commit_sha, status, current_step) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)",
        )
        .bind(uuid::Uuid::now_v7())
        .bind($track_id)
        .bind($revision)
        .bind($at)
        .bind(event.action.as_str())
        .bind(event.step.map(Step::as_str))
        .bind(event.outcome.map(StepOutcome::as_str))
        .bind(event.agent)
        .bind(event.notes)
        .bind(event.commit_sha)
        .bind(event.status.as_str())
        .bind(event.current_step.as_str())
        .execute(&mut *$tx)
        .await?;
    }};
}

impl Database {
    pub async fn track(&self, track_id: &str) -> DbResult<Option<StoredTrack>> {
        let sql = "SELECT metadata, revision, project_id FROM tracks WHERE track_id = $1";
        let row: Option<(Json<Value>, i64, Option<String>)> = self.row_by(sql, track_id).await?;
        Ok(row.map(|(metadata, revision, project_id)| StoredTrack {
            metadata: metadata.0,
            revision,
            project_id,
        }))
    }

    /// Create a track at revision 1 with its first history entry; `false` when one
    /// with that id exists (the primary key decides a race between two creators).
    pub async fn insert_track(
        &self,
        track_id: &str,
        metadata: &Value,
        project_id: Option<&str>,
        event: TrackEvent<'_>,
    ) -> DbResult<bool> {
        on_pool!(self, pool => {
            let (_turn, mut tx) = begin_write!(self, pool);
            let at = now();
            let inserted = sqlx::query(
                "INSERT INTO tracks (track_id, metadata, revision, created_at, updated_at, project_id) \
                 VALUES ($1, $2, 1, $3, $3, $4) ON CONFLICT (track_id) DO NOTHING",
            )
            .bind(track_id)
            .bind(Json(metadata))
            .bind(at)
            .bind(project_id)
            .execute(&mut *tx)
            .await?
            .rows_affected()
                == 1;
            if inserted {
                insert_track_event!(tx, track_id, 1_i64, at, event);
            }
            tx.commit().await?;
            Ok::<_, DbError>(inserted)
        })
    }

    /// Compare-and-set: write the document and project only if the stored revision
    /// is `expected` (so the project the writer was authorized against is still the
    /// stored one: it changes only with a revision).
    pub async fn update_track(
        &self,
        track_id: &str,
        metadata: &Value,
        expected: i64,
        project_id: Option<&str>,
        event: TrackEvent<'_>,
    ) -> DbResult<WriteOutcome> {
        let revision: Option<i64> = on_pool!(self, pool => {
            let (_turn, mut tx) = begin_write!(self, pool);
            let at = now();
            let revision: Option<i64> = sqlx::query_scalar(
                "UPDATE tracks SET metadata = $2, revision = revision + 1, updated_at = $4, \
                 project_id = $5 WHERE track_id = $1 AND revision = $3 RETURNING revision",
            )
            .bind(track_id)
            .bind(Json(metadata))
            .bind(expected)
            .bind(at)
            .bind(project_id)
            .fetch_optional(&mut *tx)
            .await?;
            if let Some(revision) = revision {
                insert_track_event!(tx, track_id, revision, at, event);
            }
            tx.commit().await?;
            revision
        });
        match revision {
            Some(revision) => Ok(WriteOutcome::Written {
                revision,
                created: false,
            }),
            None => Ok(WriteOutcome::Stale {
                current: self.track(track_id).await?.map(|t| t.revision),
            }),
        }
    }

    /// A track's history, oldest first (empty for a track written before history
    /// was kept, or one that does not exist: the caller reads the track first).
    pub async fn track_history(&self, track_id: &str) -> DbResult<Vec<StoredTrackEvent>> {
        let sql = "SELECT at, revision, action, step, outcome, agent, notes, commit_sha, status, \
                   current_step FROM track_events WHERE track_id = $1 ORDER BY at, id";
        self.rows_by(sql, track_id).await
    }
}
