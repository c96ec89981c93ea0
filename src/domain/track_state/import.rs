//! Importing a `metadata.json`: v1 is upgraded to v2, v2 is validated.
//!
//! - No `version` (or `version: 1`) is v1. The upgrade keeps every field it does not
//!   own (e.g. v1's `description`) and fills: `version: 2`; `type: "feature"` and
//!   `status: "new"` when missing; `created_at: now` when missing; `updated_at: now`
//!   (the document changed); `loop_state` fresh at PLAN / NOT_STARTED — or, when an
//!   agent already wrote a partial `loop_state` (the seed's update protocol does),
//!   that one with defaults for what it lacks; `discovered_work`/`blockers` `[]`.
//!   A v1 `complete` track gets `current_step: COMPLETE` (`step_status: PASSED`).
//! - `version: 2` is read as is (`updated_at` kept); missing `loop_state` parts,
//!   `discovered_work` and `blockers` take their defaults.
//! - Any other version is `unsupported_version`.
//! - Both must then hold: a valid [`TrackId`], `max_fix_cycles` and
//!   `max_plan_revisions` ≥ 1, and `status: complete` exactly when `current_step` is
//!   `COMPLETE`. Timestamps are RFC 3339 with an offset (stored in UTC).

use chrono::{DateTime, Utc};
use serde_json::{Map, Value};

use super::{
    CheckpointStatus, CurrentStep, LoopState, METADATA_VERSION, Metadata, TrackError,
    TrackErrorCode, TrackId, TrackStatus,
};

fn invalid(message: impl Into<String>) -> TrackError {
    TrackError::new(TrackErrorCode::InvalidMetadata, message)
}

fn timestamp(now: DateTime<Utc>) -> Value {
    Value::String(now.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true))
}

/// Imports a v1 or v2 document (rules in the module documentation).
pub fn import(document: Value, now: DateTime<Utc>) -> Result<Metadata, TrackError> {
    let Value::Object(mut object) = document else {
        return Err(invalid("metadata must be a JSON object"));
    };
    let version = match object.get("version") {
        None | Some(Value::Null) => 1,
        Some(Value::Number(number)) => match number.as_u64() {
            Some(version @ (1 | 2)) => version,
            _ => {
                return Err(TrackError::new(
                    TrackErrorCode::UnsupportedVersion,
                    format!("metadata version {number} is not supported; use 1 or 2"),
                ));
            }
        },
        Some(other) => {
            return Err(TrackError::new(
                TrackErrorCode::UnsupportedVersion,
                format!("metadata version must be the number 1 or 2, got {other}"),
            ));
        }
    };
    if version == 1 {
        upgrade_v1(&mut object, now)?;
    }
    let metadata: Metadata = serde_json::from_value(Value::Object(object))
        .map_err(|error| invalid(format!("invalid metadata: {error}")))?;
    validate(&metadata)?;
    Ok(metadata)
}

/// [`import`] for `PUT /v1/tracks/{track_id}`: a document without `track_id` gets
/// the path's; one with a different id is refused.
pub fn import_for_track(
    track_id: &TrackId,
    mut document: Value,
    now: DateTime<Utc>,
) -> Result<Metadata, TrackError> {
    if let Value::Object(object) = &mut document {
        match object.get("track_id") {
            None | Some(Value::Null) => {
                object.insert("track_id".into(), Value::String(track_id.to_string()));
            }
            Some(Value::String(given)) if given == track_id.as_str() => {}
            Some(other) => {
                return Err(TrackError::new(
                    TrackErrorCode::TrackIdMismatch,
                    format!(
                        "metadata track_id {other} does not match the track {}",
                        track_id.as_str()
                    ),
                ));
            }
        }
    }
    import(document, now)
}

fn upgrade_v1(object: &mut Map<String, Value>, now: DateTime<Utc>) -> Result<(), TrackError> {
    let status = match object.get("status") {
        None | Some(Value::Null) => TrackStatus::New,
        Some(Value::String(text)) => TrackStatus::parse(text).ok_or_else(|| {
            invalid(format!(
                "unknown v1 status {}; use new, in_progress, blocked or complete",
                Value::String(text.clone())
            ))
        })?,
        Some(other) => return Err(invalid(format!("status must be a string, got {other}"))),
    };
    object.insert("version".into(), Value::from(METADATA_VERSION));
    object.insert("status".into(), Value::String(status.as_str().to_owned()));
    if object.get("type").is_none_or(Value::is_null) {
        object.insert("type".into(), Value::String("feature".into()));
    }
    if object.get("created_at").is_none_or(Value::is_null) {
        object.insert("created_at".into(), timestamp(now));
    }
    object.insert("updated_at".into(), timestamp(now));
    if object.get("loop_state").is_none_or(Value::is_null) {
        let mut loop_state = LoopState::default();
        if status == TrackStatus::Complete {
            loop_state.current_step = CurrentStep::Complete;
            loop_state.step_status = CheckpointStatus::Passed;
        }
        let value = serde_json::to_value(loop_state)
            .map_err(|error| invalid(format!("cannot build loop_state: {error}")))?;
        object.insert("loop_state".into(), value);
    }
    for list in ["discovered_work", "blockers"] {
        if object.get(list).is_none_or(Value::is_null) {
            object.insert(list.into(), Value::Array(Vec::new()));
        }
    }
    Ok(())
}

fn validate(metadata: &Metadata) -> Result<(), TrackError> {
    let loop_state = &metadata.loop_state;
    if loop_state.max_fix_cycles == 0 || loop_state.max_plan_revisions == 0 {
        return Err(invalid(
            "max_fix_cycles and max_plan_revisions must be at least 1",
        ));
    }
    let complete_step = loop_state.current_step == CurrentStep::Complete;
    if complete_step != (metadata.status == TrackStatus::Complete) {
        return Err(invalid(format!(
            "status {} contradicts current_step {}: a track is complete exactly when its \
             current_step is COMPLETE",
            metadata.status.as_str(),
            loop_state.current_step.as_str()
        )));
    }
    Ok(())
}
