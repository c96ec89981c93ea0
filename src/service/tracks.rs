//! Tracks: metadata.json v2 per track, and its loop-state steps.
//!
//! Every write is a compare-and-set on the stored revision. With a pinned revision
//! a stale one is `stale_etag`; without, the change is re-applied to the newest
//! document (re-checking the transition), so no concurrent write is lost.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

use super::{Caller, ErrorKind, ProblemCode, ProblemDetails, Service, ServiceError};
use crate::db::DbError;
use crate::db::task_lists::now;
use crate::db::tracks::{StoredTrack, TrackEvent, WriteOutcome};
use crate::domain::ids::Ident;
use crate::domain::storable::find_nul;
pub use crate::domain::track_state::StoredTrackEvent;
use crate::domain::track_state::{
    self, CheckpointStatus, Completion, CurrentStep, Metadata, Step, TrackError, TrackErrorCode,
    TrackEventAction, TrackId, TrackStatus, TransitionCode, TransitionError,
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

impl TrackVersion {
    /// What an agent needs to go on: where the loop stands and what may come next.
    pub fn summary(&self) -> TrackSummary {
        let meta = &self.metadata;
        TrackSummary {
            track_id: meta.track_id.to_string(),
            status: meta.status,
            current_step: meta.loop_state.current_step,
            step_status: meta.loop_state.step_status,
            revision: self.revision,
            legal_next: track_state::legal_next_steps(meta),
        }
    }
}

/// The compact answer of the MCP tools and the CLI (not the whole document).
#[derive(Debug, Clone, Serialize)]
pub struct TrackSummary {
    pub track_id: String,
    pub status: TrackStatus,
    pub current_step: CurrentStep,
    pub step_status: CheckpointStatus,
    pub revision: i64,
    /// e.g. `["start PLAN"]`; empty for a closed track.
    pub legal_next: Vec<String>,
}

/// `GET /v1/tracks/{id}/history`.
#[derive(Debug, Serialize, ToSchema)]
pub struct TrackHistory {
    pub track_id: String,
    /// Oldest first. Writes made before the server kept history (migration 0013)
    /// are not in it.
    pub events: Vec<StoredTrackEvent>,
}

/// A step write: the transition it applies and the history entry it leaves.
#[derive(Debug, Clone, Copy)]
pub enum StepWrite<'a> {
    Start { agent: &'a str },
    Complete(&'a Completion),
}

impl<'a> StepWrite<'a> {
    /// Start (with `agent`) or complete (with `completion`), for the transports that
    /// take both actions in one call; the member of the other action is refused,
    /// naming it, before anything is read.
    pub fn from_action(
        action: StepAction,
        agent: Option<&'a str>,
        completion: Option<&'a Completion>,
    ) -> Result<Self, ServiceError> {
        let refuse =
            |field: &str, detail: &str| ServiceError::invalid_field(field, detail.to_owned());
        match (action, agent, completion) {
            (StepAction::Start, _, Some(_)) => Err(refuse(
                "outcome",
                "outcome goes with action complete, not start",
            )),
            (StepAction::Start, None, None) => {
                Err(refuse("agent", "agent is required with action start"))
            }
            (StepAction::Start, Some(agent), None) => Ok(StepWrite::Start { agent }),
            (StepAction::Complete, Some(_), _) => Err(refuse(
                "agent",
                "agent goes with action start, not complete",
            )),
            (StepAction::Complete, None, None) => Err(refuse(
                "outcome",
                "outcome is required with action complete",
            )),
            (StepAction::Complete, None, Some(completion)) => Ok(StepWrite::Complete(completion)),
        }
    }

    fn apply(self, meta: &Metadata, step: Step) -> Result<Metadata, TransitionError> {
        match self {
            StepWrite::Start { agent } => track_state::start_step(meta, step, agent, now()),
            StepWrite::Complete(completion) => {
                track_state::complete_step(meta, step, completion, now())
            }
        }
    }

    fn event(self, step: Step, after: &Metadata) -> TrackEvent<'a> {
        let (action, agent, completion) = match self {
            StepWrite::Start { agent } => (TrackEventAction::Started, Some(agent), None),
            StepWrite::Complete(c) => (TrackEventAction::Completed, None, Some(c)),
        };
        TrackEvent {
            action,
            step: Some(step),
            outcome: completion.map(|c| c.outcome),
            agent,
            notes: completion.and_then(|c| c.notes.as_deref()),
            commit_sha: completion.and_then(|c| c.commit_sha.as_deref()),
            status: after.status,
            current_step: after.loop_state.current_step,
        }
    }
}

fn import_event(metadata: &Metadata) -> TrackEvent<'static> {
    TrackEvent {
        action: TrackEventAction::Imported,
        step: None,
        outcome: None,
        agent: None,
        notes: None,
        commit_sha: None,
        status: metadata.status,
        current_step: metadata.loop_state.current_step,
    }
}

/// Start or complete, with the member that goes with each: one request for the
/// transports that take both actions in one call (the `track_step` tool, `plangate
/// track step`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum StepAction {
    Start,
    Complete,
}

crate::domain::wire_strings!(StepAction {
    Start => "start",
    Complete => "complete",
});

/// A track id from a transport (path segment, tool argument); 400 `invalid_track_id`
/// saying what is wrong. Adapters parse it, the use cases take [`TrackId`].
pub fn parse_track_id(raw: &str) -> Result<TrackId, ServiceError> {
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
    ServiceError::new(kind, code, err.message).with_details(ProblemDetails::StepTransition {
        current_step: err.current_step,
        step_status: err.step_status,
        legal: err.legal,
    })
}

impl Precondition {
    /// The revision a write must replace, if the caller named one.
    fn pinned(self) -> Option<i64> {
        match self {
            Precondition::Revision(revision) => Some(revision),
            Precondition::None | Precondition::Exists => None,
        }
    }
}

/// A 412 when the caller pinned a revision that is not the stored one.
fn check_pinned(pinned: Option<i64>, stored: i64) -> Result<(), ServiceError> {
    match pinned {
        Some(expected) if expected != stored => Err(precondition_failed(Some(stored))),
        _ => Ok(()),
    }
}

/// Another writer got in first: a 412 when the caller pinned a revision, else
/// `Ok` so that the write loop reads again and retries.
fn stale(outcome: WriteOutcome, pinned: Option<i64>) -> Result<(), ServiceError> {
    match outcome {
        WriteOutcome::Stale { current } if pinned.is_some() => Err(precondition_failed(current)),
        _ => Ok(()),
    }
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
    ///
    /// `project_id` (raw, as the transport received it) sets the track's project;
    /// a replace without one keeps the stored project. A limited caller must name
    /// one of its projects to create, and may replace only its projects' tracks
    /// (docs/api.md, "Tracks").
    pub async fn import_track(
        &self,
        caller: &Caller,
        id: TrackId,
        project_id: Option<&str>,
        document: Value,
        precondition: Precondition,
    ) -> Result<TrackVersion, ServiceError> {
        // REST refuses these in its body extractor; MCP and the CLI come here
        // directly, and Postgres cannot store U+0000 (domain::storable).
        if let Some(at) = find_nul(&document) {
            let message = at.message();
            return Err(ServiceError::invalid_field(at.pointer, message));
        }
        let named = Ident::parse_optional("project_id", project_id)?;
        let named = named.as_ref().map(Ident::as_str);
        // Naming a project the caller may not act on is refused before anything else.
        if let Some(project) = named {
            caller.check_project(project)?;
        }
        let metadata = track_state::import_for_track(&id, document, now()).map_err(track_error)?;
        let document = encode(&metadata)?;
        let pinned = precondition.pinned();
        for _ in 0..MAX_WRITE_RETRIES {
            let Some(track) = self.db.track(id.as_str()).await? else {
                if precondition != Precondition::None {
                    return Err(precondition_failed(None));
                }
                caller.check_optional_project(named)?;
                if self
                    .db
                    .insert_track(id.as_str(), &document, named, import_event(&metadata))
                    .await?
                {
                    return Ok(TrackVersion {
                        metadata,
                        revision: 1,
                        created: true,
                    });
                }
                // Created meanwhile by another import: replace it, if ours to.
                continue;
            };
            caller.check_optional_project(track.project_id.as_deref())?;
            let project = named.or(track.project_id.as_deref());
            caller.check_optional_project(project)?;
            check_pinned(pinned, track.revision)?;
            match self
                .db
                .update_track(
                    id.as_str(),
                    &document,
                    track.revision,
                    project,
                    import_event(&metadata),
                )
                .await?
            {
                WriteOutcome::Written { revision, .. } => {
                    return Ok(TrackVersion {
                        metadata,
                        revision,
                        created: false,
                    });
                }
                outcome => stale(outcome, pinned)?,
            }
        }
        Err(write_contention())
    }

    /// The stored track, if the caller may see its project (a track without one:
    /// unrestricted callers only).
    async fn load_track(&self, caller: &Caller, id: &TrackId) -> Result<StoredTrack, ServiceError> {
        let track = self.db.track(id.as_str()).await?;
        caller.visible(track, "track", id.as_str(), |t| t.project_id.as_deref())
    }

    /// A track's metadata v2 with its revision.
    pub async fn track(&self, caller: &Caller, id: TrackId) -> Result<TrackVersion, ServiceError> {
        let track = self.load_track(caller, &id).await?;
        Ok(TrackVersion {
            metadata: decode(&track)?,
            revision: track.revision,
            created: false,
        })
    }

    /// A track's history, oldest first: imports, steps started and completed with
    /// their agent, verdict and notes (docs/api.md, "Tracks").
    pub async fn track_history(
        &self,
        caller: &Caller,
        id: TrackId,
    ) -> Result<TrackHistory, ServiceError> {
        self.load_track(caller, &id).await?;
        let events = self.db.track_history(id.as_str()).await?;
        Ok(TrackHistory {
            track_id: id.to_string(),
            events,
        })
    }

    /// Start the current step (`IN_PROGRESS` with the agent) or complete it with
    /// PASSED, FAILED or BLOCKED (the loop advances).
    pub async fn step_track(
        &self,
        caller: &Caller,
        id: TrackId,
        raw_step: &str,
        write: StepWrite<'_>,
        precondition: Precondition,
    ) -> Result<TrackVersion, ServiceError> {
        if let StepWrite::Start { agent } = write
            && agent.contains('\0')
        {
            return Err(ServiceError::invalid_field(
                "agent",
                "agent holds U+0000 (NUL), which cannot be stored",
            ));
        }
        self.apply_step(caller, id, raw_step, precondition, write)
            .await
    }

    /// Read, apply a pure transition, compare-and-set; re-read and re-apply when
    /// another writer got in between (unless the caller pinned a revision).
    async fn apply_step(
        &self,
        caller: &Caller,
        id: TrackId,
        raw_step: &str,
        precondition: Precondition,
        write: StepWrite<'_>,
    ) -> Result<TrackVersion, ServiceError> {
        let pinned = precondition.pinned();
        for _ in 0..MAX_WRITE_RETRIES {
            let track = self.load_track(caller, &id).await?;
            check_pinned(pinned, track.revision)?;
            let current = decode(&track)?;
            let step = Step::parse(raw_step)
                .ok_or_else(|| transition_error(track_state::unknown_step(&current, raw_step)))?;
            let next = write.apply(&current, step).map_err(transition_error)?;
            match self
                .db
                .update_track(
                    id.as_str(),
                    &encode(&next)?,
                    track.revision,
                    track.project_id.as_deref(),
                    write.event(step, &next),
                )
                .await?
            {
                WriteOutcome::Written { revision, .. } => {
                    return Ok(TrackVersion {
                        metadata: next,
                        revision,
                        created: false,
                    });
                }
                outcome => stale(outcome, pinned)?,
            }
        }
        Err(write_contention())
    }
}

fn write_contention() -> ServiceError {
    ServiceError::conflict(
        ProblemCode::WriteContention,
        "the track changed under every retry; try again",
    )
}
