//! What refine-job and refine-run submissions share: the FATAL-style parse errors,
//! executor and output-directory resolution, idempotency keys and body hashes, the
//! L0 batch layout and long-polling.

use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};
use utoipa::ToSchema;
use uuid::Uuid;

use super::caller::TokenFingerprint;
use super::{Caller, ErrorKind, ProblemCode, ProblemDetails, Service, ServiceError};
use crate::agents::Executor;
use crate::db::DbError;
use crate::db::refine_jobs::BudgetScopes;
use crate::db::refine_jobs::Created;
use crate::domain::ids::Ident;
use crate::domain::job::JobStatus;
use crate::domain::refine::{PhaseContext, RefineInputError, batches};
use crate::domain::usage::{
    Budget, BudgetAction, BudgetQuestion, BudgetVerdict, DailyLimitSpent, ScopeLimit, decide,
    secs_to_next_utc_day, utc_day_start,
};
use crate::jobs::request::confine;

/// Longest long-poll `wait`, in seconds (docs/jobs.md).
pub const MAX_WAIT_SECS: u64 = 30;
/// How often a waiting request looks at the database when nothing local woke it
/// (the job may be worked by another replica).
pub(super) const WAIT_POLL: Duration = Duration::from_millis(200);
const MAX_IDEMPOTENCY_KEY_BYTES: usize = 256;

/// A create that may have been a replay of an earlier one with the same
/// idempotency key and body.
#[derive(Debug, Clone)]
pub struct Accepted<T> {
    pub value: T,
    /// True when the key named an earlier create with the same body: `value` is
    /// that create's resource (HTTP: `Idempotent-Replayed: true`).
    pub replayed: bool,
}

impl<T> Accepted<T> {
    /// What a create with an idempotency key found: new, a replay, or a refusal.
    pub(super) fn from_created(created: Created<T>) -> Result<Self, ServiceError> {
        match created {
            Created::New(value) => Ok(Accepted {
                value,
                replayed: false,
            }),
            Created::Existing(value) => Ok(Accepted {
                value,
                replayed: true,
            }),
            Created::KeyReused => Err(key_reused()),
        }
    }
}

// Flattened into both create schemas, this states the shape for the OpenAPI
// document; the use cases read the raw body themselves (so that every failure is a
// FATAL naming the field) and accept exactly their own members plus `FIELDS`.
/// What a refine-job and a refine-run submission share: the project and cycle,
/// the idempotency key and the budget.
#[derive(ToSchema)]
pub struct SubmissionOptions {
    #[schema(value_type = Option<crate::domain::ids::Ident>)]
    pub project_id: Option<String>,
    #[schema(value_type = Option<crate::domain::ids::Ident>)]
    pub team_pk: Option<String>,
    /// Same as the `Idempotency-Key` header.
    pub idempotency_key: Option<String>,
    /// Start no further L0 once the L0 calls have cost this much (US dollars;
    /// calls of unknown cost count 0): a job's own calls, or for a run those of
    /// all its phase jobs. A job stopped by it ends `failed` with
    /// `budget_exceeded`, keeping the outcomes of the L0s that finished; a run then
    /// ends `failed` with what finished merged.
    #[schema(exclusive_minimum = 0.0)]
    pub max_cost_usd: Option<f64>,
    /// Likewise for the output tokens those L0 calls have produced.
    #[schema(minimum = 1)]
    pub max_output_tokens: Option<i64>,
    /// What a reached budget does to the L0s still running: let them finish
    /// (default; their cost is committed) or kill them. Only with a limit.
    pub budget_action: Option<BudgetAction>,
}

impl SubmissionOptions {
    pub const FIELDS: [&str; 6] = [
        "project_id",
        "team_pk",
        "idempotency_key",
        "max_cost_usd",
        "max_output_tokens",
        "budget_action",
    ];
}

/// The first member of `body` that is neither one of `own` nor of
/// [`SubmissionOptions::FIELDS`], with its FATAL listing them all in that order.
pub(super) fn unknown_field<'a>(
    body: &'a Map<String, Value>,
    own: &[&str],
) -> Option<(&'a str, ServiceError)> {
    let known = |k: &str| own.contains(&k) || SubmissionOptions::FIELDS.contains(&k);
    let unknown = body.keys().find(|k| !known(k))?;
    let expected: Vec<&str> = own
        .iter()
        .chain(&SubmissionOptions::FIELDS)
        .copied()
        .collect();
    let error = fatal(format!(
        "unknown field {unknown:?} (expected one of {})",
        expected.join(", ")
    ));
    Some((unknown.as_str(), error))
}

/// `FATAL: failed to parse request body: {detail}` as a 422 `invalid_context`.
pub(super) fn fatal(detail: impl std::fmt::Display) -> ServiceError {
    ServiceError::unprocessable(
        ProblemCode::InvalidContext,
        format!("FATAL: failed to parse request body: {detail}"),
    )
}

pub(super) fn input_error(e: RefineInputError, prefix: &str) -> ServiceError {
    let path = e.path.as_ref().map(|p| format!("{prefix}.{p}"));
    let detail = match &path {
        Some(p) => format!("{p}: {}", e.reason),
        None => format!("{prefix}: {}", e.reason),
    };
    let err = fatal(detail);
    match path {
        Some(p) => err.field(p),
        None => err.field(prefix),
    }
}

/// An optional string member; anything else is a FATAL naming the field.
pub(super) fn opt_str<'a>(
    body: &'a Map<String, Value>,
    field: &str,
) -> Result<Option<&'a str>, ServiceError> {
    match body.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(fatal(format!("{field}: must be a string")).field(field)),
    }
}

pub(super) fn key_reused() -> ServiceError {
    ServiceError::unprocessable(
        ProblemCode::IdempotencyKeyReused,
        "this Idempotency-Key was used with a different body",
    )
}

/// An `{id}` that must be a UUID; 400 `invalid_path` naming what it is. Adapters
/// parse with it, so the use cases take typed ids.
pub fn parse_id(raw: &str, what: &str) -> Result<Uuid, ServiceError> {
    raw.parse().map_err(|_| {
        ServiceError::bad_request(
            ProblemCode::InvalidPath,
            format!("{raw:?} is not a {what} id (UUID)"),
        )
    })
}

/// Where an event stream resumes: its `Last-Event-ID` (raw, as a transport
/// received it) read by `parse`; `None` when absent, `invalid_last_event_id`
/// saying `expected` when it does not read.
pub(super) fn resume_point<T>(
    raw: Option<&[u8]>,
    parse: impl FnOnce(&str) -> Option<T>,
    expected: &str,
) -> Result<Option<T>, ServiceError> {
    raw.map(|raw| {
        header_text(raw)
            .and_then(|v| parse(v.trim()))
            .ok_or_else(|| ServiceError::bad_request(ProblemCode::InvalidLastEventId, expected))
    })
    .transpose()
}

/// Visible ASCII (and tab), as an HTTP header value must be to be read as text.
pub(super) fn header_text(raw: &[u8]) -> Option<&str> {
    raw.iter()
        .all(|&b| b == b'\t' || (32..127).contains(&b))
        .then(|| std::str::from_utf8(raw).ok())
        .flatten()
}

/// The key from the `Idempotency-Key` header (raw bytes) or the body field (equal
/// if both).
pub(super) fn idempotency_key(
    header: Option<&[u8]>,
    field: Option<&str>,
) -> Result<Option<String>, ServiceError> {
    let header = match header {
        None => None,
        Some(raw) => Some(header_text(raw).ok_or_else(|| {
            ServiceError::bad_request(
                ProblemCode::InvalidIdempotencyKey,
                "Idempotency-Key must be visible ASCII",
            )
        })?),
    };
    let key = match (header, field) {
        (Some(h), Some(f)) if h != f => {
            return Err(ServiceError::unprocessable(
                ProblemCode::InvalidIdempotencyKey,
                "the Idempotency-Key header and the idempotency_key field differ",
            ));
        }
        (Some(k), _) | (None, Some(k)) => Some(k),
        (None, None) => None,
    };
    match key {
        Some(k)
            if k.trim().is_empty()
                || k.len() > MAX_IDEMPOTENCY_KEY_BYTES
                || k.chars().any(char::is_control) =>
        {
            Err(ServiceError::unprocessable(
                ProblemCode::InvalidIdempotencyKey,
                format!(
                    "an idempotency key is 1 to {MAX_IDEMPOTENCY_KEY_BYTES} bytes without control characters"
                ),
            ))
        }
        other => Ok(other.map(str::to_owned)),
    }
}

/// An idempotency key in its scope (docs/api.md, "Idempotency"): the project the
/// create names (or none), the token that sent it (or none, when auth is off) and
/// the key as sent. Stored as one JSON array (`["proj-a","<token>","key"]`) in the
/// `idempotency_key` columns, so their unique constraints decide per scope: one
/// project or token can neither replay nor block another's creates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScopedKey(String);

impl ScopedKey {
    pub fn new(project_id: Option<&str>, caller: &Caller, key: &str) -> Self {
        let part = |p: Option<&str>| p.map_or(Value::Null, Value::from);
        let scope = Value::Array(vec![
            part(project_id),
            part(caller.token().map(TokenFingerprint::as_str)),
            Value::from(key),
        ]);
        ScopedKey(scope.to_string())
    }

    /// The text stored in an `idempotency_key` column.
    pub fn as_stored(&self) -> &str {
        &self.0
    }

    pub fn into_stored(self) -> String {
        self.0
    }
}

/// The idempotency hash of a submission: the body without its `idempotency_key`.
pub(super) fn body_hash(body: &Map<String, Value>) -> String {
    let mut hashed = body.clone();
    hashed.remove("idempotency_key");
    canonical_hash(&Value::Object(hashed))
}

/// SHA-256 of the body with object keys sorted, so a retry that reorders keys is
/// still "the same body". Stable across replicas and releases.
pub fn canonical_hash(value: &Value) -> String {
    fn canonical(v: &Value) -> Value {
        match v {
            Value::Object(m) => {
                let mut keys: Vec<&String> = m.keys().collect();
                keys.sort();
                Value::Object(
                    keys.into_iter()
                        .map(|k| (k.clone(), canonical(&m[k])))
                        .collect(),
                )
            }
            Value::Array(a) => Value::Array(a.iter().map(canonical).collect()),
            other => other.clone(),
        }
    }
    let bytes = serde_json::to_vec(&canonical(value)).unwrap_or_default();
    let digest = Sha256::digest(&bytes);
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

/// `max_cost_usd`, `max_output_tokens` and `budget_action` of a body.
pub(super) fn budget_fields(body: &Map<String, Value>) -> Result<Budget, ServiceError> {
    Budget::from_fields(
        body.get("max_cost_usd"),
        body.get("max_output_tokens"),
        body.get("budget_action"),
    )
    .map_err(|e| fatal(&e).field(e.field))
}

/// `(assignment_id, batch)` in natural order, batches numbered from 1.
pub(super) fn l0_rows(context: &PhaseContext, max_parallel: usize) -> Vec<(String, i32)> {
    let ids: Vec<String> = context.assignments.iter().map(|a| a.id.clone()).collect();
    batches(&ids, max_parallel)
        .into_iter()
        .enumerate()
        .flat_map(|(i, b)| {
            let n = i32::try_from(i + 1).unwrap_or(i32::MAX);
            b.into_iter().map(move |id| (id, n))
        })
        .collect()
}

impl Service {
    /// 429 `budget_exhausted` (with `retry_after_secs` to the next UTC day) when
    /// the project's daily limit is already spent.
    pub(super) async fn check_daily_limit(
        &self,
        project_id: Option<&Ident>,
    ) -> Result<(), ServiceError> {
        let Some(project) = project_id.map(Ident::as_str) else {
            return Ok(());
        };
        let Some(limit) = self.settings.budgets.daily_limit(project) else {
            return Ok(());
        };
        let now = Utc::now();
        let scopes = BudgetScopes {
            project_day: Some((
                project.to_owned(),
                ScopeLimit::project_day(project, limit),
                utc_day_start(now),
            )),
            ..BudgetScopes::default()
        };
        // The same read and decision as every L0 start's (docs/jobs.md, "Budgets").
        let state = self.db.budget_state(&scopes, None).await?;
        let BudgetVerdict::Stop(_) = decide(&state.scopes, BudgetQuestion::Spent) else {
            return Ok(());
        };
        let spent_usd = state.scopes.first().map_or(0.0, |(_, s)| s.spent_usd);
        let spent = DailyLimitSpent {
            project_id: project.to_owned(),
            limit_usd: limit,
            spent_usd,
            retry_after_secs: secs_to_next_utc_day(now),
        };
        let detail = format!(
            "project {project}'s daily limit of ${limit} is spent (${spent_usd:.6} today, UTC); \
             retry after the next UTC midnight"
        );
        Err(ServiceError::new(
            ErrorKind::TooManyRequests,
            ProblemCode::BudgetExhausted,
            detail,
        )
        .with_details(ProblemDetails::BudgetSpent(spent)))
    }

    /// The executor a submission names (else the default); 422 `unknown_executor`.
    pub(super) fn resolve_executor(
        &self,
        name: Option<&str>,
    ) -> Result<Arc<Executor>, ServiceError> {
        self.executors.resolve(name).ok_or_else(|| {
            ServiceError::unprocessable(
                ProblemCode::UnknownExecutor,
                format!(
                    "executor {:?} is not configured (configured: {})",
                    name.unwrap_or_default(),
                    self.executors.names().collect::<Vec<_>>().join(", ")
                ),
            )
            .field("executor")
        })
    }

    /// `output_dir` resolved inside `PLANGATE_OUTPUT_ROOT`; 422 `output_not_allowed`
    /// when the server has no root or the path leaves it.
    pub(super) fn confine_output_dir(
        &self,
        dir: Option<&str>,
    ) -> Result<Option<String>, ServiceError> {
        let Some(dir) = dir else { return Ok(None) };
        let not_allowed = |detail: String| {
            ServiceError::unprocessable(ProblemCode::OutputNotAllowed, detail).field("output_dir")
        };
        let root = self.settings.output_root.as_deref().ok_or_else(|| {
            not_allowed("output_dir is set but the server has no PLANGATE_OUTPUT_ROOT".into())
        })?;
        let resolved = confine(root, dir, false)
            .map_err(|reason| not_allowed(format!("output_dir: {reason}")))?;
        Ok(Some(resolved.display().to_string()))
    }

    /// `context.task_file_path` resolved inside `PLANGATE_WORKSPACE_ROOT`; 422
    /// `task_file_not_allowed` otherwise.
    pub(super) fn confine_task_file(&self, path: &str) -> Result<String, ServiceError> {
        let not_allowed = |detail: String| {
            ServiceError::unprocessable(ProblemCode::TaskFileNotAllowed, detail)
                .field("context.task_file_path")
        };
        let root = self.settings.workspace_root.as_deref().ok_or_else(|| {
            not_allowed(
                "context.task_file_path is set but the server has no PLANGATE_WORKSPACE_ROOT; \
                 send task_text instead"
                    .into(),
            )
        })?;
        let resolved = confine(root, path, true)
            .map_err(|reason| not_allowed(format!("context.task_file_path: {reason}")))?;
        Ok(resolved.display().to_string())
    }

    /// `first` (a job or run, read at `seen`: its version and status), or with
    /// `wait` seconds the resource once its `(version, status)` moves (or the wait
    /// is over): read again with `reload`.
    pub(super) async fn long_poll<T, V, L>(
        &self,
        seen: (i64, JobStatus),
        first: T,
        wait: Option<u64>,
        concerns: impl Fn(Uuid) -> bool,
        version: impl Fn() -> V,
        reload: impl FnOnce() -> L,
    ) -> Result<T, ServiceError>
    where
        V: Future<Output = Result<Option<(i64, JobStatus)>, DbError>>,
        L: Future<Output = Result<T, ServiceError>>,
    {
        let wait = wait.unwrap_or(0);
        let (seen, status) = seen;
        if wait == 0 || status.is_terminal() {
            return Ok(first);
        }
        self.wait_until_changed(Duration::from_secs(wait), concerns, || async {
            Ok(version()
                .await?
                .is_none_or(|(v, s)| v != seen || s.is_terminal()))
        })
        .await?;
        reload().await
    }

    /// Long-poll: returns once `changed()` says so, or after `wait` (capped at 30 s
    /// and kept inside the request timeout). Local writes wake it at once; changes
    /// made by another replica are seen by polling.
    pub(super) async fn wait_until_changed<F, Fut>(
        &self,
        wait: Duration,
        concerns: impl Fn(Uuid) -> bool,
        mut changed: F,
    ) -> Result<(), ServiceError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<bool, ServiceError>>,
    {
        let mut wakeups = self.hub.subscribe();
        let cap = Duration::from_secs(MAX_WAIT_SECS).min(
            self.settings
                .request_timeout
                .saturating_sub(Duration::from_secs(1)),
        );
        let deadline = tokio::time::Instant::now() + wait.min(cap);
        loop {
            if changed().await? || self.is_shutting_down() {
                return Ok(());
            }
            tokio::select! {
                _ = wake_for(&mut wakeups, &concerns) => {}
                _ = tokio::time::sleep(WAIT_POLL) => {}
                _ = tokio::time::sleep_until(deadline) => return Ok(()),
            }
            if tokio::time::Instant::now() >= deadline {
                return Ok(());
            }
        }
    }
}

/// Resolves when a wake-up concerns us (or some were missed: check again).
pub(super) async fn wake_for(
    wakeups: &mut tokio::sync::broadcast::Receiver<Uuid>,
    concerns: &impl Fn(Uuid) -> bool,
) {
    loop {
        match wakeups.recv().await {
            Ok(id) if concerns(id) => return,
            Ok(_) => {}
            Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => return,
            // Closed: never again; the caller's poll and deadline still run.
            Err(tokio::sync::broadcast::error::RecvError::Closed) => {
                std::future::pending::<()>().await
            }
        }
    }
}

#[cfg(test)]
pub(super) mod tests {
    use serde_json::Value;
    use utoipa::PartialSchema;

    use super::SubmissionOptions;

    /// The member names a create schema documents: its own, then (through the
    /// flattened `$ref`) the shared options.
    fn documented<T: PartialSchema>() -> Vec<String> {
        fn names(schema: &Value, out: &mut Vec<String>) {
            if let Some(items) = schema.get("allOf").and_then(Value::as_array) {
                for item in items {
                    names(item, out);
                }
            }
            if schema.get("$ref").and_then(Value::as_str)
                == Some("#/components/schemas/SubmissionOptions")
            {
                names(
                    &serde_json::to_value(SubmissionOptions::schema()).unwrap(),
                    out,
                );
            }
            if let Some(props) = schema.get("properties").and_then(Value::as_object) {
                out.extend(props.keys().cloned());
            }
        }
        let mut out = Vec::new();
        names(&serde_json::to_value(T::schema()).unwrap(), &mut out);
        out.sort();
        out
    }

    /// Asserts that `T`, a create request's schema, documents exactly the members
    /// its use case accepts: `own` and the shared options (refine jobs and runs
    /// call it from their own tests).
    pub(in crate::service) fn assert_documents_exactly<T: PartialSchema>(own: &[&str]) {
        let mut accepted: Vec<String> = own
            .iter()
            .chain(&SubmissionOptions::FIELDS)
            .map(|f| (*f).to_owned())
            .collect();
        accepted.sort();
        assert_eq!(documented::<T>(), accepted);
    }
}
