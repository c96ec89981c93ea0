//! Problem answers that several operations document alike, declared once: an
//! operation names a set in its `responses(...)` instead of repeating each row.

use std::collections::BTreeMap;

use utoipa::openapi::{ContentBuilder, Ref, RefOr, ResponseBuilder, response::Response};

use crate::http::problem::PROBLEM_JSON;

/// One `application/problem+json` answer, exactly as an inline
/// `(status = …, description = …, body = Problem, content_type = …)` row writes it.
fn problem(description: &str) -> RefOr<Response> {
    let content = ContentBuilder::new()
        .schema(Some(Ref::from_schema_name("Problem")))
        .build();
    ResponseBuilder::new()
        .description(description)
        .content(PROBLEM_JSON, content)
        .build()
        .into()
}

/// The 403 of a token limited to other projects.
const FORBIDDEN: &str = "The token is limited to other projects (`forbidden_project`)";

/// Declares unit types whose `IntoResponses` are the given problem rows.
macro_rules! problem_sets {
    ($($(#[$doc:meta])* $name:ident { $($status:literal => $description:expr),+ $(,)? })+) => {$(
        $(#[$doc])*
        pub struct $name;

        impl utoipa::IntoResponses for $name {
            fn responses() -> BTreeMap<String, RefOr<Response>> {
                [$(($status.to_owned(), problem($description))),+].into_iter().collect()
            }
        }
    )+};
}

problem_sets! {
    /// The answers a JSON-body route can give before its handler runs (malformed
    /// JSON, a body over the limit, a body that is not JSON), documented once.
    JsonBodyRejections {
        "400" => "Malformed JSON",
        "413" => "Body over the limit",
        "415" => "Body is not application/json",
    }
    /// The 403 of every operation that acts on a project: the token is limited to
    /// other projects (`forbidden_project`). Add it to the `responses` of such
    /// operations; the sets of a route on one job, run, task, list, webhook or
    /// track include it, since looking the resource up checks its project.
    ForbiddenProject { "403" => FORBIDDEN }
    /// A route that reads or writes the database.
    DatabaseUnavailable { "503" => "Database unavailable" }
    /// A route on one refine job whose own 400 says more than the id.
    NoSuchJob {
        "403" => FORBIDDEN,
        "404" => "No such job",
        "503" => "Database unavailable",
    }
    /// A route on one refine run whose own 400 says more than the id.
    NoSuchRun {
        "403" => FORBIDDEN,
        "404" => "No such run",
        "503" => "Database unavailable",
    }
    /// A route on one refine job, by its path id.
    JobById {
        "400" => "Not a job id",
        "403" => FORBIDDEN,
        "404" => "No such job",
        "503" => "Database unavailable",
    }
    /// A route on one refine run, by its path id.
    RunById {
        "400" => "Not a run id",
        "403" => FORBIDDEN,
        "404" => "No such run",
        "503" => "Database unavailable",
    }
    /// Submitting a refine job or run: the rejections the two share.
    RefineSubmission {
        "400" => "Unreadable Idempotency-Key header",
        "413" => "Body over the size limit",
        "415" => "Not application/json",
        "503" => "Database unavailable",
    }
    /// A route on one stored task by its id.
    NoSuchTask {
        "403" => FORBIDDEN,
        "404" => "No such task",
    }
    /// A route on one task list by its id.
    NoSuchList {
        "403" => FORBIDDEN,
        "404" => "No such list",
    }
    /// A route on a task addressed inside its list.
    NoSuchListTask {
        "403" => FORBIDDEN,
        "404" => "No such list, or no such task in it (`field` names which)",
    }
    /// A route on one webhook, by its path id.
    WebhookById {
        "400" => "Not a webhook id",
        "403" => FORBIDDEN,
        "404" => "No such webhook",
        "503" => "Database unavailable",
    }
    /// A JSON-body route on a task or list by its server id, after
    /// [`JsonBodyRejections`]: its 400 covers the id too.
    BadIdOrJson { "400" => "Not a UUID or malformed JSON" }
    /// A JSON-body route on a task addressed inside its list, after
    /// [`JsonBodyRejections`]: its 400 covers the list id too.
    BadListIdOrJson { "400" => "`id` is not a UUID (`parameter` names it), or malformed JSON" }
    /// A route on a project (and maybe one of its cycles) by its `project_id`.
    InvalidProjectOrCycle { "422" => "Invalid project_id or team_pk" }
    /// A route that honours `If-Match`.
    StaleIfMatch { "412" => "Stale If-Match" }
    /// A route on one track by its id.
    TrackById {
        "400" => "Invalid track id",
        "403" => FORBIDDEN,
        "404" => "No such track",
    }
    /// Starting or completing a track's step.
    StepRefusals {
        "403" => FORBIDDEN,
        "404" => "No such track",
        "409" => "Unknown step, illegal transition or closed track; `legal` lists what may be done",
        "412" => "Stale If-Match",
        "422" => "Invalid body",
    }
    /// Changing a task's status, by its id or in its list.
    TaskUpdateRefusals {
        "409" => "`illegal_transition` (`allowed` lists the legal targets), or `task_claimed` (`holder` names who holds the task)",
        "422" => "Unknown status or category, a category without `abandoned`, or a bad `holder`",
    }
    /// Renewing a claim, by the task's id or in its list.
    HeartbeatRefusals {
        "409" => "`task_claimed` (another `holder` holds it) or `task_not_claimed` (no live claim: its lease ran out, or it finished)",
        "422" => "`invalid_field` (`holder`, `lease_s`)",
    }
}

/// A submission that would spend past the project's daily limit (docs/jobs.md).
pub struct BudgetExhausted;

impl utoipa::IntoResponses for BudgetExhausted {
    fn responses() -> BTreeMap<String, RefOr<Response>> {
        use utoipa::openapi::header::HeaderBuilder;
        let RefOr::T(mut response) = problem(
            "`budget_exhausted`: the project's daily limit is spent; the problem carries \
             `limit_usd`, `spent_usd` and `retry_after_secs`",
        ) else {
            unreachable!("problem() builds an inline response")
        };
        let retry_after = HeaderBuilder::new()
            .schema(Some(<u64 as utoipa::PartialSchema>::schema()))
            .description(Some("Seconds to the next UTC midnight"))
            .build();
        response
            .headers
            .insert("Retry-After".to_owned(), retry_after.into());
        [("429".to_owned(), response.into())].into_iter().collect()
    }
}
