//! Provider rate limits (docs/jobs.md, "Rate limits"): what each limited
//! executor's shared state says, and runtime changes of its limits, stored in the
//! database so every replica's next admission uses them.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;

use super::{Caller, ErrorKind, ProblemCode, Service, ServiceError};
use crate::db::rate_limits::RateLimitRecord;
use crate::domain::rate_limit::Limits;
pub use crate::domain::rate_limit::WaitingCall;

/// Every executor a rate limit applies to (`GET /v1/rate-limits`).
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct RateLimits {
    pub executors: Vec<RateLimitEntry>,
}

/// One executor's limits and where it stands.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct RateLimitEntry {
    pub executor: String,
    /// Configured or set at runtime; null: none (the provider's headers apply).
    pub requests_per_minute: Option<u64>,
    pub input_tokens_per_minute: Option<u64>,
    pub output_tokens_per_minute: Option<u64>,
    /// How long a call may wait for room before it ends `rate_limited`.
    pub max_wait_secs: u64,
    /// What the provider's rate-limit headers said last.
    #[schema(value_type = Object)]
    pub learned: Value,
    /// Requests that may start now (null when no request limit is known).
    pub remaining_requests: Option<i64>,
    /// Calls admitted and still running.
    pub reserved_requests: i64,
    /// Until when the provider asked every replica to stop sending (RFC 3339).
    pub paused_until: Option<String>,
    /// Calls waiting for room.
    pub waiting: i64,
    /// By project_id.
    pub projects: BTreeMap<String, RateLimitProject>,
}

/// One project's share of an executor's limit.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct RateLimitProject {
    pub share: u64,
    pub waiting: i64,
    pub started_last_minute: i64,
}

/// The calls the dashboard lists at most.
const WAITING_SHOWN: i64 = 200;

impl Service {
    /// The limits page: every entry and the calls waiting (the caller's projects'
    /// only, when its token is limited).
    pub async fn dashboard_rate_limits(
        &self,
        caller: &Caller,
    ) -> Result<(RateLimits, Vec<WaitingCall>), ServiceError> {
        let limits = self.rate_limits(caller).await?;
        let waiting = self.db.rate_waiting_calls(WAITING_SHOWN).await?;
        // An empty project: a call of no project.
        let waiting = caller.only_visible(waiting, |w| {
            Some(w.project_id.as_str()).filter(|p| !p.is_empty())
        });
        Ok((limits, waiting))
    }

    /// The calls of one job waiting for room (the dashboard's job page); the
    /// caller may see the job (checked by the caller of this).
    pub(super) async fn waiting_calls_of_job(
        &self,
        job_id: uuid::Uuid,
    ) -> Result<Vec<WaitingCall>, ServiceError> {
        Ok(self.db.rate_waiting_calls_of_job(job_id).await?)
    }

    /// The executors a rate limit may apply to: configured ones and those whose
    /// answers carry a provider's headers.
    fn limited_executors(&self) -> Vec<(String, Limits)> {
        self.executors
            .names()
            .filter(|name| {
                self.settings.rate_limits.contains_key(*name)
                    || self
                        .executors
                        .resolve(Some(name))
                        .is_some_and(|e| e.speaks_rate_headers())
            })
            .map(|name| {
                let configured = self.settings.rate_limits.get(name).cloned();
                (name.to_owned(), configured.unwrap_or_default())
            })
            .collect()
    }

    /// `GET /v1/rate-limits`: a token limited to projects sees only its projects'
    /// entries under `projects`.
    pub async fn rate_limits(&self, caller: &Caller) -> Result<RateLimits, ServiceError> {
        let records = self
            .db
            .rate_limit_records(&self.limited_executors())
            .await?;
        Ok(RateLimits {
            executors: records.into_iter().map(|r| entry(caller, r)).collect(),
        })
    }

    /// `PUT /v1/rate-limits/{executor}`: any subset of the limits, `max_wait_secs`
    /// and `shares` (an unrestricted token only). Effective at every replica's
    /// next admission.
    pub async fn set_rate_limit(
        &self,
        caller: &Caller,
        executor: &str,
        body: &Value,
    ) -> Result<RateLimitEntry, ServiceError> {
        if caller.allowed_projects().is_some() {
            return Err(ServiceError::new(
                ErrorKind::Forbidden,
                ProblemCode::ForbiddenProject,
                "changing a rate limit takes a token that is not limited to projects",
            ));
        }
        let known = self.limited_executors();
        let Some((_, configured)) = known.iter().find(|(name, _)| name == executor) else {
            return Err(ServiceError::not_found("rate-limited executor", executor));
        };
        let change = parse_change(body)?;
        self.db.rate_set_overrides(executor, &change).await?;
        let records = self
            .db
            .rate_limit_records(&[(executor.to_owned(), configured.clone())])
            .await?;
        let record = records
            .into_iter()
            .next()
            .ok_or_else(|| ServiceError::not_found("rate-limited executor", executor))?;
        Ok(entry(caller, record))
    }
}

fn invalid(field: &str, why: &str) -> ServiceError {
    ServiceError::unprocessable(ProblemCode::InvalidField, format!("{field} {why}")).field(field)
}

/// A positive integer, or why not.
fn positive(field: &str, value: &Value) -> Result<u64, ServiceError> {
    match value.as_u64() {
        Some(n) if n >= 1 => Ok(n),
        _ => Err(invalid(field, "must be a positive integer")),
    }
}

/// The change a `PUT` body asks for; 422 naming the field for anything else.
fn parse_change(body: &Value) -> Result<Limits, ServiceError> {
    let Some(object) = body.as_object() else {
        return Err(ServiceError::unprocessable(
            ProblemCode::InvalidBody,
            "the body must be a JSON object",
        ));
    };
    let mut change = Limits::default();
    for (key, value) in object {
        match key.as_str() {
            "requests_per_minute" => change.requests_per_minute = Some(positive(key, value)?),
            "input_tokens_per_minute" => {
                change.input_tokens_per_minute = Some(positive(key, value)?)
            }
            "output_tokens_per_minute" => {
                change.output_tokens_per_minute = Some(positive(key, value)?)
            }
            "max_wait_secs" => change.max_wait_secs = Some(positive(key, value)?),
            "shares" => {
                let Some(shares) = value.as_object() else {
                    return Err(invalid("shares", "must be an object of project_id: weight"));
                };
                for (project, weight) in shares {
                    if project.is_empty() || project.contains('\0') {
                        return Err(invalid("shares", "has an empty or invalid project_id"));
                    }
                    let share = positive(&format!("shares.{project}"), weight)?;
                    change.shares.insert(project.clone(), share);
                }
            }
            other => return Err(invalid(other, "is not a rate-limit field")),
        }
    }
    Ok(change)
}

fn entry(caller: &Caller, r: RateLimitRecord) -> RateLimitEntry {
    RateLimitEntry {
        requests_per_minute: r.limits.requests_per_minute,
        input_tokens_per_minute: r.limits.input_tokens_per_minute,
        output_tokens_per_minute: r.limits.output_tokens_per_minute,
        max_wait_secs: r.limits.max_wait().as_secs(),
        learned: serde_json::to_value(&r.learned).unwrap_or(Value::Null),
        remaining_requests: r.remaining_requests,
        reserved_requests: r.reserved_requests,
        paused_until: r
            .paused_until
            .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)),
        waiting: r.waiting,
        projects: r
            .projects
            .into_iter()
            .filter(|(p, ..)| caller.may_access(p))
            .map(|(p, share, waiting, started)| {
                (
                    p,
                    RateLimitProject {
                        share,
                        waiting,
                        started_last_minute: started,
                    },
                )
            })
            .collect(),
        executor: r.executor,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_change_names_the_bad_field() {
        let ok = parse_change(&json!({"requests_per_minute": 50, "shares": {"a": 3}})).unwrap();
        assert_eq!(ok.requests_per_minute, Some(50));
        assert_eq!(ok.shares["a"], 3);
        for (body, field) in [
            (json!({"requests_per_minute": -1}), "requests_per_minute"),
            (json!({"max_wait_secs": 1.5}), "max_wait_secs"),
            (
                json!({"input_tokens_per_minute": "10"}),
                "input_tokens_per_minute",
            ),
            (
                json!({"output_tokens_per_minute": 0}),
                "output_tokens_per_minute",
            ),
            (json!({"shares": {"a": -2}}), "shares.a"),
            (json!({"shares": 3}), "shares"),
            (json!({"rpm": 3}), "rpm"),
        ] {
            let e = parse_change(&body).unwrap_err();
            assert_eq!(e.details.field(), Some(field), "{body}");
        }
        assert!(parse_change(&json!([1])).is_err());
    }
}
