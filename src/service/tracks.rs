//! Tracks: metadata.json v2 per track, and its loop-state steps.
//!
//! Every write is a compare-and-set on the stored revision. With a pinned revision
//! a stale one is `stale_etag`; without, the change is re-applied to the newest
//! document (re-checking the transition), so no concurrent write is lost.

use serde_json::Value;

use super::{Caller, ErrorKind, ProblemCode, Service, ServiceError};
use crate::db::DbError;
use crate::db::task_lists::now;
use crate::db::tracks::{StoredTrack, WriteOutcome};
use crate::domain::track_state::{
    self, Completion, Metadata, Step, TrackError, TrackErrorCode, TrackId, TransitionCode,
    TransitionError,
};

/// Compare-and-set retries for writers that pinned no revision.
const MAX_WRITE_RETRIES: usize = 8;

/// Which stored version a write may replace (HTTP: `If-Match`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Precondition {
    /// Whatever is stored (or nothing, for an import).
    None,
    /// A track that exists, whatever its version (`If-Match: *`).
    Exists,
    /// Exactly this revision; a tag that is not ours is an impossible revision.
    Revision(i64),
}

/// A track's metadata with its revision (HTTP: the `ETag`).
#[derive(Debug, Clone)]
pub struct TrackVersion {
    pub metadata: Metadata,
    pub revision: i64,
    /// For an import: whether the track was created (else replaced).
    pub created: bool,
}

fn track_id(raw: &str) -> Result<TrackId, ServiceError> {
    TrackId::parse(raw)
        .map_err(|e| ServiceError::bad_request(ProblemCode::InvalidTrackId, e.message))
}

fn track_error(err: TrackError) -> ServiceError {
    let code = match err.code {
        TrackErrorCode::InvalidTrackId => ProblemCode::InvalidTrackId,
        TrackErrorCode::InvalidMetadata => ProblemCode::InvalidMetadata,
        TrackErrorCode::UnsupportedVersion => ProblemCode::UnsupportedVersion,
        TrackErrorCode::TrackIdMismatch => ProblemCode::TrackIdMismatch,
    };
    ServiceError::unprocessable(code, err.message)
}

fn transition_error(err: TransitionError) -> ServiceError {
    let (kind, code) = match err.code {
        TransitionCode::IllegalTransition => (ErrorKind::Conflict, ProblemCode::IllegalTransition),
        TransitionCode::UnknownStep => (ErrorKind::Conflict, ProblemCode::UnknownStep),
        TransitionCode::TrackClosed => (ErrorKind::Conflict, ProblemCode::TrackClosed),
        TransitionCode::InvalidInput => (ErrorKind::Unprocessable, ProblemCode::InvalidField),
    };
    ServiceError::new(kind, code, err.message)
        .with("current_step", err.current_step)
        .with("step_status", err.step_status)
        .with("legal", err.legal)
}

fn precondition_failed(current: Option<i64>) -> ServiceError {
    let detail = match current {
        Some(revision) => format!(
            "If-Match does not name the current version (ETag \"{revision}\"); read the track again and retry"
        ),
        None => "the track does not exist".to_owned(),
    };
    ServiceError::new(
        ErrorKind::PreconditionFailed,
        ProblemCode::StaleEtag,
        detail,
    )
}

fn decode(track: &StoredTrack) -> Result<Metadata, ServiceError> {
    serde_json::from_value(track.metadata.clone()).map_err(|e| {
        ServiceError::from(DbError::Corrupt(format!(
            "stored track metadata does not parse: {e}"
        )))
    })
}

fn encode(metadata: &Metadata) -> Result<Value, ServiceError> {
    serde_json::to_value(metadata).map_err(|e| {
        ServiceError::from(DbError::Corrupt(format!(
            "metadata does not serialise: {e}"
        )))
    })
}

impl Service {
    /// Import (create or replace) a track's metadata; v1 documents are upgraded to
    /// v2. Re-importing re-opens a `blocked` or `complete` track.
    pub async fn import_track(
        &self,
        _caller: &Caller,
        raw_id: &str,
        document: Value,
        precondition: Precondition,
    ) -> Result<TrackVersion, ServiceError> {
        let id = track_id(raw_id)?;
        let metadata = track_state::import_for_track(&id, document, now()).map_err(track_error)?;
        let expected = match precondition {
            Precondition::None => None,
            Precondition::Revision(revision) => Some(Some(revision)),
            // Replace only a track that exists, whatever its version: pin the one
            // stored now.
            Precondition::Exists => match self.db.track(id.as_str()).await? {
                Some(track) => Some(Some(track.revision)),
                None => return Err(precondition_failed(None)),
            },
        };
        match self
            .db
            .put_track(id.as_str(), &encode(&metadata)?, expected)
            .await?
        {
            WriteOutcome::Written { revision, created } => Ok(TrackVersion {
                metadata,
                revision,
                created,
            }),
            WriteOutcome::Stale { current } => Err(precondition_failed(current)),
        }
    }

    /// A track's metadata v2 with its revision.
    pub async fn track(
        &self,
        _caller: &Caller,
        raw_id: &str,
    ) -> Result<TrackVersion, ServiceError> {
        let id = track_id(raw_id)?;
        let track = self
            .db
            .track(id.as_str())
            .await?
            .ok_or_else(|| ServiceError::not_found("track", id.as_str()))?;
        Ok(TrackVersion {
            metadata: decode(&track)?,
            revision: track.revision,
            created: false,
        })
    }

    /// Start the current step (sets it `IN_PROGRESS` with the agent).
    pub async fn start_step(
        &self,
        _caller: &Caller,
        raw_id: &str,
        raw_step: &str,
        agent: &str,
        precondition: Precondition,
    ) -> Result<TrackVersion, ServiceError> {
        self.apply_step(raw_id, raw_step, precondition, |meta, step| {
            track_state::start_step(meta, step, agent, now())
        })
        .await
    }

    /// Complete the current step with PASSED, FAILED or BLOCKED; the loop advances.
    pub async fn complete_step(
        &self,
        _caller: &Caller,
        raw_id: &str,
        raw_step: &str,
        completion: &Completion,
        precondition: Precondition,
    ) -> Result<TrackVersion, ServiceError> {
        self.apply_step(raw_id, raw_step, precondition, |meta, step| {
            track_state::complete_step(meta, step, completion, now())
        })
        .await
    }

    /// Read, apply a pure transition, compare-and-set; re-read and re-apply when
    /// another writer got in between (unless the caller pinned a revision).
    async fn apply_step(
        &self,
        raw_id: &str,
        raw_step: &str,
        precondition: Precondition,
        transition: impl Fn(&Metadata, Step) -> Result<Metadata, TransitionError>,
    ) -> Result<TrackVersion, ServiceError> {
        let id = track_id(raw_id)?;
        let pinned = match precondition {
            Precondition::Revision(revision) => Some(revision),
            Precondition::None | Precondition::Exists => None,
        };
        for _ in 0..MAX_WRITE_RETRIES {
            let track = self
                .db
                .track(id.as_str())
                .await?
                .ok_or_else(|| ServiceError::not_found("track", id.as_str()))?;
            if let Some(expected) = pinned
                && expected != track.revision
            {
                return Err(precondition_failed(Some(track.revision)));
            }
            let current = decode(&track)?;
            let step = Step::parse(raw_step)
                .ok_or_else(|| transition_error(track_state::unknown_step(&current, raw_step)))?;
            let next = transition(&current, step).map_err(transition_error)?;
            match self
                .db
                .update_track(id.as_str(), &encode(&next)?, track.revision)
                .await?
            {
                WriteOutcome::Written { revision, .. } => {
                    return Ok(TrackVersion {
                        metadata: next,
                        revision,
                        created: false,
                    });
                }
                WriteOutcome::Stale { current } if pinned.is_some() => {
                    return Err(precondition_failed(current));
                }
                WriteOutcome::Stale { .. } => continue,
            }
        }
        Err(ServiceError::conflict(
            ProblemCode::WriteContention,
            "the track changed under every retry; try again",
        ))
    }
}
