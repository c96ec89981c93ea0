//! Storage of track metadata (metadata.json v2) with a revision per write, so that
//! concurrent writers are caught by a compare-and-set instead of losing an update,
//! and the project the track belongs to (none: unrestricted callers only).

use serde_json::Value;
use sqlx::types::Json;

use super::task_lists::now;
use super::{Database, DbResult};

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

impl Database {
    pub async fn track(&self, track_id: &str) -> DbResult<Option<StoredTrack>> {
        let row: Option<(Json<Value>, i64, Option<String>)> = on_pool!(self, pool => {
            sqlx::query_as("SELECT metadata, revision, project_id FROM tracks WHERE track_id = $1")
                .bind(track_id)
                .fetch_optional(pool)
                .await?
        });
        Ok(row.map(|(metadata, revision, project_id)| StoredTrack {
            metadata: metadata.0,
            revision,
            project_id,
        }))
    }

    /// Create a track at revision 1; `false` when one with that id exists (the
    /// primary key decides a race between two creators).
    pub async fn insert_track(
        &self,
        track_id: &str,
        metadata: &Value,
        project_id: Option<&str>,
    ) -> DbResult<bool> {
        let turn = self.writer_turn().await;
        let inserted = on_pool!(self, pool => {
            sqlx::query(
                "INSERT INTO tracks (track_id, metadata, revision, created_at, updated_at, project_id) \
                 VALUES ($1, $2, 1, $3, $3, $4) ON CONFLICT (track_id) DO NOTHING",
            )
            .bind(track_id)
            .bind(Json(metadata))
            .bind(now())
            .bind(project_id)
            .execute(pool)
            .await?
            .rows_affected()
        });
        drop(turn);
        Ok(inserted == 1)
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
    ) -> DbResult<WriteOutcome> {
        let turn = self.writer_turn().await;
        let revision: Option<i64> = on_pool!(self, pool => {
            sqlx::query_scalar(
                "UPDATE tracks SET metadata = $2, revision = revision + 1, updated_at = $4, \
                 project_id = $5 WHERE track_id = $1 AND revision = $3 RETURNING revision",
            )
            .bind(track_id)
            .bind(Json(metadata))
            .bind(expected)
            .bind(now())
            .bind(project_id)
            .fetch_optional(pool)
            .await?
        });
        drop(turn);
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
}
