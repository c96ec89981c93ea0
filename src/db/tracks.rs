//! Storage of track metadata (metadata.json v2) with a revision per write, so that
//! concurrent writers are caught by a compare-and-set instead of losing an update.

use serde_json::Value;
use sqlx::types::Json;

use super::task_lists::now;
use super::{Database, DbError, DbResult};

/// A stored document and the revision it was read at.
#[derive(Debug, Clone)]
pub struct StoredTrack {
    pub metadata: Value,
    pub revision: i64,
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
        let row: Option<(Json<Value>, i64)> = on_pool!(self, pool => {
            sqlx::query_as("SELECT metadata, revision FROM tracks WHERE track_id = $1")
                .bind(track_id)
                .fetch_optional(pool)
                .await?
        });
        Ok(row.map(|(metadata, revision)| StoredTrack {
            metadata: metadata.0,
            revision,
        }))
    }

    /// Create or replace a track's document. With `expected`, only if the stored
    /// revision is that one (`None` inside means "must not exist yet").
    pub async fn put_track(
        &self,
        track_id: &str,
        metadata: &Value,
        expected: Option<Option<i64>>,
    ) -> DbResult<WriteOutcome> {
        let at = now();
        match expected {
            Some(Some(revision)) => self.update_track(track_id, metadata, revision).await,
            Some(None) | None => {
                // Insert first: the primary key decides a race between two creators.
                let turn = self.writer_turn().await;
                let inserted = on_pool!(self, pool => {
                    sqlx::query(
                        "INSERT INTO tracks (track_id, metadata, revision, created_at, updated_at) \
                         VALUES ($1, $2, 1, $3, $3) ON CONFLICT (track_id) DO NOTHING",
                    )
                    .bind(track_id)
                    .bind(Json(metadata))
                    .bind(at)
                    .execute(pool)
                    .await?
                    .rows_affected()
                });
                drop(turn);
                if inserted == 1 {
                    return Ok(WriteOutcome::Written {
                        revision: 1,
                        created: true,
                    });
                }
                if expected.is_some() {
                    let current = self.track(track_id).await?.map(|t| t.revision);
                    return Ok(WriteOutcome::Stale { current });
                }
                // Unconditional replace (re-import): bump the revision atomically.
                let turn = self.writer_turn().await;
                let revision: Option<i64> = on_pool!(self, pool => {
                    sqlx::query_scalar(
                        "UPDATE tracks SET metadata = $2, revision = revision + 1, updated_at = $3 \
                         WHERE track_id = $1 RETURNING revision",
                    )
                    .bind(track_id)
                    .bind(Json(metadata))
                    .bind(at)
                    .fetch_optional(pool)
                    .await?
                });
                drop(turn);
                revision
                    .map(|revision| WriteOutcome::Written {
                        revision,
                        created: false,
                    })
                    .ok_or_else(|| {
                        DbError::Conflict(format!(
                            "track {track_id:?} was deleted during the write"
                        ))
                    })
            }
        }
    }

    /// Compare-and-set: write only if the stored revision is `expected`.
    pub async fn update_track(
        &self,
        track_id: &str,
        metadata: &Value,
        expected: i64,
    ) -> DbResult<WriteOutcome> {
        let turn = self.writer_turn().await;
        let revision: Option<i64> = on_pool!(self, pool => {
            sqlx::query_scalar(
                "UPDATE tracks SET metadata = $2, revision = revision + 1, updated_at = $4 \
                 WHERE track_id = $1 AND revision = $3 RETURNING revision",
            )
            .bind(track_id)
            .bind(Json(metadata))
            .bind(expected)
            .bind(now())
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
