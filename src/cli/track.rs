//! `plangate track import|show|step`: tracks in-process on the configured database
//! (as `plangate mcp` opens it), for a stdio user with no server to `PUT
//! /v1/tracks/{id}` to. Same use cases as the REST routes and the MCP tools, with the
//! local user unrestricted.
//!
//! Answers are JSON on stdout. A refusal is one line on stderr, `plangate: CODE:
//! detail` with the REST problem's `code` (and its extra members as JSON, e.g.
//! `legal`). Exit status: 0 done; 1 refused (what REST answers with a 4xx); 2 could
//! not run (settings, database, unreadable file).

use std::io::{Read, Write};
use std::path::Path;
use std::sync::Arc;

use serde_json::{Value, json};

use super::args::TrackCommand;
use crate::agents::Executors;
use crate::config::Settings;
use crate::domain::track_state::{Completion, StepOutcome};
use crate::service::tracks::{Precondition, StepWrite, TrackVersion, parse_track_id};
use crate::service::{Caller, ErrorKind, ProblemCode, Service, ServiceError};

pub const EXIT_OK: u8 = 0;
pub const EXIT_REFUSED: u8 = 1;
pub const EXIT_FAILED: u8 = 2;

/// Runs one track command on `settings`' database.
pub fn run(settings: Settings, command: TrackCommand) -> u8 {
    // Read the file first: a bad one costs no database connection.
    let document = match &command {
        TrackCommand::Import { file, .. } => match read_document(file) {
            Ok(document) => Some(document),
            Err(Failure { exit, message }) => {
                eprintln!("plangate: {message}");
                return exit;
            }
        },
        _ => None,
    };
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("plangate: {e}");
            return EXIT_FAILED;
        }
    };
    let outcome = rt.block_on(async move {
        let cannot_start = |message: String| Failure {
            exit: EXIT_FAILED,
            message,
        };
        let executors =
            Executors::from_settings(&settings).map_err(|e| cannot_start(e.to_string()))?;
        let db = crate::service::open_database(&settings)
            .await
            .map_err(|e| cannot_start(format!("cannot open the database: {e}")))?;
        let service = Service::new(db.clone(), Arc::new(settings), executors);
        let answer = execute(&service, command, document).await;
        db.close().await;
        answer.map_err(Failure::from)
    });
    match outcome {
        Ok(answer) => {
            let mut out = std::io::stdout().lock();
            let text = serde_json::to_string_pretty(&answer).unwrap_or_default();
            if writeln!(out, "{text}").and_then(|()| out.flush()).is_err() {
                return EXIT_FAILED;
            }
            EXIT_OK
        }
        Err(Failure { exit, message }) => {
            eprintln!("plangate: {message}");
            exit
        }
    }
}

struct Failure {
    exit: u8,
    message: String,
}

impl From<ServiceError> for Failure {
    /// `CODE: detail {extra}`: 1 for what REST refuses with a 4xx, 2 for the rest.
    fn from(error: ServiceError) -> Self {
        let exit = match error.kind {
            ErrorKind::Unavailable | ErrorKind::Internal => EXIT_FAILED,
            _ => EXIT_REFUSED,
        };
        let mut message = format!("{}: {}", error.code, error.detail);
        let members = error.members();
        if !members.is_empty() {
            message.push(' ');
            message.push_str(&Value::Object(members).to_string());
        }
        Failure { exit, message }
    }
}

/// The metadata file (`-`: stdin) as JSON: unreadable is exit 2, not JSON is
/// `malformed_json` as a REST body would be.
fn read_document(file: &Path) -> Result<Value, Failure> {
    let mut bytes = Vec::new();
    let read = if file == Path::new("-") {
        std::io::stdin().lock().read_to_end(&mut bytes).map(|_| ())
    } else {
        std::fs::read(file).map(|b| bytes = b)
    };
    read.map_err(|e| Failure {
        exit: EXIT_FAILED,
        message: format!("cannot read {}: {e}", file.display()),
    })?;
    serde_json::from_slice(&bytes).map_err(|e| Failure {
        exit: EXIT_REFUSED,
        message: format!(
            "{}: {} is not JSON: {e}",
            ProblemCode::MalformedJson,
            file.display()
        ),
    })
}

fn pinned(if_match: Option<i64>) -> Precondition {
    if_match.map_or(Precondition::None, Precondition::Revision)
}

async fn execute(
    service: &Service,
    command: TrackCommand,
    document: Option<Value>,
) -> Result<Value, ServiceError> {
    // The local user owns the database, as over `plangate mcp`.
    let caller = Caller::unrestricted();
    match command {
        TrackCommand::Import {
            id,
            project,
            if_match,
            ..
        } => {
            let document = document.unwrap_or(Value::Null);
            let id = match id {
                Some(id) => id,
                None => document_id(&document)?,
            };
            let version = service
                .import_track(
                    &caller,
                    parse_track_id(&id)?,
                    project.as_deref(),
                    document,
                    pinned(if_match),
                )
                .await?;
            let mut answer = summary(&version);
            answer["created"] = Value::Bool(version.created);
            Ok(answer)
        }
        TrackCommand::Show { id } => {
            let version = service.track(&caller, parse_track_id(&id)?).await?;
            let mut answer = summary(&version);
            answer["metadata"] = json!(version.metadata);
            Ok(answer)
        }
        TrackCommand::Step {
            id,
            step,
            action,
            outcome,
            agent,
            if_match,
        } => {
            let completion = outcome
                .as_deref()
                .map(parse_outcome)
                .transpose()?
                .map(Completion::new);
            let write = StepWrite::from_action(action, agent.as_deref(), completion.as_ref())?;
            let version = service
                .step_track(
                    &caller,
                    parse_track_id(&id)?,
                    &step,
                    write,
                    pinned(if_match),
                )
                .await?;
            Ok(summary(&version))
        }
    }
}

fn summary(version: &TrackVersion) -> Value {
    json!(version.summary())
}

/// Without `--id`, the document's own `track_id`.
fn document_id(document: &Value) -> Result<String, ServiceError> {
    match document.get("track_id") {
        Some(Value::String(id)) => Ok(id.clone()),
        _ => Err(ServiceError::unprocessable(
            ProblemCode::InvalidMetadata,
            "the document names no track_id (a string); give --id",
        )
        .field("track_id")),
    }
}

/// `PASSED`, `FAILED` or `BLOCKED`, in any case.
fn parse_outcome(text: &str) -> Result<StepOutcome, ServiceError> {
    serde_json::from_value(Value::String(text.to_ascii_uppercase())).map_err(|_| {
        ServiceError::invalid_field(
            "outcome",
            format!("outcome must be PASSED, FAILED or BLOCKED, got {text:?}"),
        )
    })
}
