//! Loop plans: build the task DAG's levels and parallel groups, render and read
//! plan.md. Pure: no storage, no project.

use serde::Serialize;
use utoipa::ToSchema;

use super::{Caller, ProblemCode, ProblemDetails, Service, ServiceError};
use crate::domain::loop_plan::{
    self, Dag, LoopPlan, LoopPlanRequest, PlanError, PlanErrorKind, Progress,
};

#[derive(Serialize, ToSchema)]
pub struct ParsedPlanResponse {
    pub dag: Dag,
    pub progress: Progress,
}

fn plan_error(err: PlanError) -> ServiceError {
    let code = match err.kind {
        PlanErrorKind::InvalidRequest => ProblemCode::InvalidBody,
        PlanErrorKind::InvalidPlanMarkdown => ProblemCode::InvalidPlanMarkdown,
        PlanErrorKind::InvalidTracksMarkdown => ProblemCode::InvalidTracksMd,
    };
    let problem = ServiceError::unprocessable(code, err.message);
    match err.line {
        Some(line) => problem.line(line),
        None => problem,
    }
}

impl Service {
    /// A loop-plan request written as YAML (the form `plangate plan` reads too).
    pub fn parse_loop_plan_yaml(
        &self,
        _caller: &Caller,
        text: &str,
    ) -> Result<LoopPlanRequest, ServiceError> {
        loop_plan::parse_request_yaml(text).map_err(plan_error)
    }

    /// The plan; `dag_invalid` with every error when the DAG is unusable.
    pub fn generate_loop_plan(
        &self,
        _caller: &Caller,
        request: &LoopPlanRequest,
    ) -> Result<LoopPlan, ServiceError> {
        let plan = loop_plan::plan(request);
        if !plan.is_valid() {
            let first = plan
                .errors
                .first()
                .map(|e| e.message.clone())
                .unwrap_or_default();
            return Err(ServiceError::unprocessable(
                ProblemCode::DagInvalid,
                format!("the task DAG is invalid: {first}"),
            )
            .with_details(ProblemDetails::PlanViolations(plan.errors)));
        }
        Ok(plan)
    }

    /// The plan.md text of a plan.
    pub fn render_plan_markdown(&self, plan: &LoopPlan) -> String {
        loop_plan::render_markdown(plan)
    }

    /// Read a plan.md back: its DAG and the task markers.
    pub fn parse_plan_markdown(
        &self,
        _caller: &Caller,
        text: &str,
    ) -> Result<ParsedPlanResponse, ServiceError> {
        let parsed = loop_plan::parse_markdown(text).map_err(plan_error)?;
        Ok(ParsedPlanResponse {
            dag: parsed.dag,
            progress: parsed.progress,
        })
    }
}
