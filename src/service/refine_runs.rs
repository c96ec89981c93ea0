//! Refine runs: split a whole plan into one refine job per phase, run them in
//! parallel on the worker pool (any replica), merge once when the last one ends.

use serde_json::Value;
use utoipa::ToSchema;
use uuid::Uuid;

use super::submission::{
    Accepted, ScopedKey, SubmissionOptions, body_hash, budget_fields, fatal, idempotency_key,
    opt_str, unknown_field,
};
use super::{Caller, ProblemCode, ProblemDetails, Service, ServiceError};
use crate::db::refine_jobs::NewRefineJob;
use crate::db::refine_runs::NewRefineRun;
use crate::domain::ids::Ident;
use crate::domain::refine::RunRequest;
pub use crate::domain::refine::StoredRun;
use crate::domain::refine::{assignments_from_value, plan_from_value, split_plan};
use crate::jobs::request::JobRequest;

// The shape for the OpenAPI document: `Service::create_refine_run` reads the raw
// body itself so that every parse failure is a `FATAL: failed to parse request body`.
/// A whole plan to refine: its own members and the shared submission options.
#[derive(ToSchema)]
pub struct CreateRefineRunRequest {
    /// `{task?, source_dir?, phases: [PhaseElaborated], assignments: [AssignmentElaborated]}`.
    #[schema(value_type = Object)]
    pub plan: Value,
    /// The task inline (else the plan's `task` when it is a string).
    pub task_text: Option<String>,
    pub executor: Option<String>,
    /// Each phase's result is also written under it (inside `PLANGATE_OUTPUT_ROOT`).
    pub output_dir: Option<String>,
    #[serde(flatten)]
    pub options: SubmissionOptions,
}

/// [`CreateRefineRunRequest`]'s own members.
pub(super) const CREATE_FIELDS: [&str; 4] = ["plan", "task_text", "executor", "output_dir"];

/// A submission error of a run: the job's FATAL, coded `invalid_plan`.
fn invalid_plan(e: ServiceError) -> ServiceError {
    ServiceError {
        code: ProblemCode::InvalidPlan,
        ..e
    }
}

impl Service {
    /// The run, if the caller may see its project.
    pub(super) async fn load_run(
        &self,
        caller: &Caller,
        id: Uuid,
    ) -> Result<StoredRun, ServiceError> {
        let run = self.db.refine_run(id).await?;
        caller.visible(run, "refine run", &id.to_string(), |r| {
            r.project_id.as_deref()
        })
    }

    /// Submit a whole plan (the JSON body as sent, and the raw `Idempotency-Key`
    /// if any): one refine job per phase, run in parallel, merged once.
    pub async fn create_refine_run(
        &self,
        caller: &Caller,
        body: &[u8],
        key_header: Option<&[u8]>,
    ) -> Result<Accepted<StoredRun>, ServiceError> {
        let value: Value = serde_json::from_slice(body).map_err(|e| invalid_plan(fatal(e)))?;
        let Value::Object(body) = value else {
            return Err(invalid_plan(fatal("the body must be a JSON object")));
        };
        if let Some((_, error)) = unknown_field(&body, &CREATE_FIELDS) {
            return Err(invalid_plan(error));
        }
        let plan_value = body
            .get("plan")
            .filter(|v| v.is_object())
            .ok_or_else(|| invalid_plan(fatal("plan: missing or not an object")).field("plan"))?;
        let fail = |e: crate::domain::refine::RefineInputError| {
            let path = e
                .path
                .clone()
                .map_or_else(|| "plan".to_owned(), |p| format!("plan.{p}"));
            invalid_plan(fatal(format!("{path}: {}", e.reason))).field(path)
        };
        let plan = plan_from_value("request body", plan_value).map_err(fail)?;
        if plan.phases.is_empty() {
            return Err(invalid_plan(fatal(
                "plan.phases: empty list; at least one phase is required",
            ))
            .field("plan.phases"));
        }
        let assignments_value = plan_value.get("assignments").ok_or_else(|| {
            invalid_plan(fatal("plan.assignments: missing")).field("plan.assignments")
        })?;
        let assignments = assignments_from_value("request body", "assignments", assignments_value)
            .map_err(fail)?;
        // An assignment naming a phase the plan lacks is an error (nothing is
        // created); one without a phase is reported in the result's `skipped`.
        if let Some((i, a)) = assignments.iter().enumerate().find(|(_, a)| {
            a.phase_id
                .as_deref()
                .is_some_and(|p| plan.phase(p).is_none())
        }) {
            let field = format!("plan.assignments[{i}].phase_id");
            return Err(invalid_plan(fatal(format!(
                "{field}: assignment {} names phase {:?}, which the plan does not have",
                a.id,
                a.phase_id.as_deref().unwrap_or_default()
            )))
            .field(field));
        }
        let split = split_plan(&plan, &assignments);
        if split.contexts.is_empty() {
            return Err(invalid_plan(fatal(
                "plan.assignments: no assignment belongs to a phase of the plan",
            ))
            .field("plan.assignments"));
        }

        let executor = self.resolve_executor(opt_str(&body, "executor")?)?;
        let task_text = opt_str(&body, "task_text")?.map(str::to_owned).or_else(|| {
            plan.extra
                .get("task")
                .and_then(Value::as_str)
                .map(str::to_owned)
        });
        let output_dir = self.confine_output_dir(opt_str(&body, "output_dir")?)?;
        let project_id = Ident::parse_optional("project_id", opt_str(&body, "project_id")?)?;
        let team_pk = Ident::parse_optional("team_pk", opt_str(&body, "team_pk")?)?;
        caller.check_optional_project(project_id.as_ref().map(Ident::as_str))?;
        let key = idempotency_key(key_header, opt_str(&body, "idempotency_key")?)?
            .map(|key| ScopedKey::new(project_id.as_ref().map(Ident::as_str), caller, &key));
        let budget = budget_fields(&body).map_err(invalid_plan)?;
        // A retry of a create that went through replays it, limit or not.
        let replay = match &key {
            Some(key) => self.db.refine_run_key_exists(key.as_stored()).await?,
            None => false,
        };
        if !replay {
            self.check_daily_limit(project_id.as_ref()).await?;
        }
        let request_hash = body_hash(&body);

        let run_id = Uuid::now_v7();
        // The run's span: its phase jobs are its children, whichever worker runs
        // them (docs/observability.md). Only when traces are on.
        let run_span = if crate::telemetry::traces_on() {
            tracing::info_span!(
                "refine_run",
                otel.name = "refine run",
                plangate.run_id = %run_id,
                plangate.project_id = project_id.as_ref().map(Ident::as_str),
            )
        } else {
            tracing::Span::none()
        };
        let trace_parent = crate::telemetry::traceparent_of(&run_span);
        let run_request = serde_json::to_value(RunRequest::new(plan_value.clone(), &split))
            .unwrap_or(Value::Null);
        // The plan without `assignments`: each L0 gets its phase from it, not the
        // whole plan.
        let mut plan_for_jobs = plan_value.clone();
        if let Some(o) = plan_for_jobs.as_object_mut() {
            o.remove("assignments");
        }
        let jobs = split
            .contexts
            .iter()
            .map(|context| {
                let request = JobRequest {
                    context: context.to_value(),
                    refined_plan: Some(plan_for_jobs.clone()),
                    task_file_path: None,
                    task_text: task_text.clone(),
                    output_dir: output_dir.clone(),
                };
                NewRefineJob {
                    run_id: Some(run_id),
                    trace_parent: trace_parent.clone(),
                    ..self.new_refine_job(
                        context,
                        request.to_value(),
                        &executor,
                        project_id.as_ref().map(|p| p.as_str().to_owned()),
                        team_pk.as_ref().map(|t| t.as_str().to_owned()),
                        budget,
                    )
                }
            })
            .collect();
        let new = NewRefineRun {
            id: run_id,
            request: &run_request,
            executor: executor.name(),
            project_id: project_id.as_ref().map(Ident::as_str),
            team_pk: team_pk.as_ref().map(Ident::as_str),
            idempotency_key: key.as_ref().map(ScopedKey::as_stored),
            request_hash: &request_hash,
            jobs,
            budget,
        };
        let created = Accepted::from_created(self.db.create_refine_run(&new).await?)?;
        if !created.replayed {
            metrics::counter!("refine_runs_created_total").increment(1);
            self.wake_workers();
        }
        Ok(Accepted {
            value: self.load_run(caller, created.value).await?,
            replayed: created.replayed,
        })
    }

    /// A refine run: its phase jobs and, once merged, its result. With `wait`
    /// seconds the answer comes as soon as the run or one of its jobs changes.
    pub async fn refine_run(
        &self,
        caller: &Caller,
        id: Uuid,
        wait: Option<u64>,
    ) -> Result<StoredRun, ServiceError> {
        let run = self.load_run(caller, id).await?;
        // Any job may be one of the run's: wake on every change, re-check the version.
        self.long_poll(
            (run.version, run.status),
            run,
            wait,
            |_| true,
            || self.db.refine_run_version(id),
            || self.load_run(caller, id),
        )
        .await
    }

    /// The merged result; `run_not_finished` (with `run_status`) before.
    pub async fn refine_run_result(
        &self,
        caller: &Caller,
        id: Uuid,
    ) -> Result<Value, ServiceError> {
        let run = self.load_run(caller, id).await?;
        match run.result {
            Some(result) => Ok(result),
            None => Err(ServiceError::conflict(
                ProblemCode::RunNotFinished,
                format!(
                    "the run is {}; its result exists once every phase job has ended",
                    run.status.as_str()
                ),
            )
            .with_details(ProblemDetails::RunStatus(run.status))),
        }
    }

    /// Cancel a run: every phase job not yet ended is cancelled; the run ends
    /// `cancelled` (with what finished merged) once they have. Idempotent.
    pub async fn cancel_refine_run(
        &self,
        caller: &Caller,
        id: Uuid,
    ) -> Result<StoredRun, ServiceError> {
        self.load_run(caller, id).await?;
        let jobs = self
            .db
            .cancel_refine_run(id)
            .await?
            .ok_or_else(|| ServiceError::not_found("refine run", &id.to_string()))?;
        for job_id in jobs {
            self.cancel_job(job_id).await?;
        }
        crate::jobs::runs::merge_if_due(&self.db, id).await?;
        self.load_run(caller, id).await
    }
}

#[cfg(test)]
mod tests {
    use super::super::submission::tests::assert_documents_exactly;

    #[test]
    fn the_create_schema_documents_exactly_the_accepted_members() {
        assert_documents_exactly::<super::CreateRefineRunRequest>(&super::CREATE_FIELDS);
    }
}
