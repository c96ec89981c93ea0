//! The per-project daily limit at submission (docs/jobs.md, "Usage, cost and
//! budgets"): a job or run that would start with its project's limit for the
//! current UTC day already spent is refused until the next day.

use chrono::Utc;

use crate::config::Settings;
use crate::db::{Database, DbResult};
use crate::domain::usage::{secs_to_next_utc_day, utc_day_start};

/// The project's daily limit is spent.
#[derive(Debug, Clone, PartialEq)]
pub struct DailyLimitSpent {
    pub project_id: String,
    pub limit_usd: f64,
    pub spent_usd: f64,
    /// Seconds to the next UTC midnight.
    pub retry_after_secs: u64,
}

/// `Ok(Err(..))` when `project_id` has a daily limit that today's known costs
/// have reached; `Ok(Ok(()))` otherwise (also without a project or a limit).
pub async fn check_daily_limit(
    db: &Database,
    settings: &Settings,
    project_id: Option<&str>,
) -> DbResult<Result<(), DailyLimitSpent>> {
    let Some(project) = project_id else {
        return Ok(Ok(()));
    };
    let Some(limit) = settings.budgets.daily_limit(project) else {
        return Ok(Ok(()));
    };
    let now = Utc::now();
    let spent = db.project_cost_since(project, utc_day_start(now)).await?;
    if spent < limit {
        return Ok(Ok(()));
    }
    Ok(Err(DailyLimitSpent {
        project_id: project.to_owned(),
        limit_usd: limit,
        spent_usd: spent,
        retry_after_secs: secs_to_next_utc_day(now),
    }))
}
