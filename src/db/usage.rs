//! Usage storage queries (docs/jobs.md, "Usage, cost and budgets"): every total is
//! a sum over the L0 rows that carry a stored usage, so a resumed job — which
//! never re-runs an L0 whose outcome is stored — cannot count a call twice.

use chrono::{DateTime, Utc};
use sqlx::QueryBuilder;
use uuid::Uuid;

use super::{Database, DbResult, push_bound_list};
use crate::domain::refine::ExecutorKind;
use crate::domain::usage::{UsageGroup, UsageTotals};

/// The sums of a totals row, in the order of [`TOTALS`].
type SumsRow = (i64, i64, i64, i64, i64, f64, i64, i64, i64);

/// The aggregate select list (alias `l` = `refine_l0_runs`). SUM(bigint) is
/// NUMERIC on Postgres: cast back so both back-ends give INT8.
const TOTALS: &str = "COUNT(*), \
    CAST(COALESCE(SUM(l.input_tokens), 0) AS BIGINT), \
    CAST(COALESCE(SUM(l.output_tokens), 0) AS BIGINT), \
    CAST(COALESCE(SUM(l.cache_read_input_tokens), 0) AS BIGINT), \
    CAST(COALESCE(SUM(l.cache_creation_input_tokens), 0) AS BIGINT), \
    COALESCE(SUM(l.cost_usd), 0.0), \
    CAST(COALESCE(SUM(CASE WHEN l.cost_usd IS NULL THEN 1 ELSE 0 END), 0) AS BIGINT), \
    CAST(COALESCE(SUM(CASE WHEN l.input_tokens IS NULL AND l.output_tokens IS NULL \
        AND l.cache_read_input_tokens IS NULL AND l.cache_creation_input_tokens IS NULL \
        THEN 1 ELSE 0 END), 0) AS BIGINT), \
    CAST(COALESCE(SUM(l.prompt_bytes), 0) AS BIGINT)";

fn totals(row: SumsRow) -> UsageTotals {
    let (calls, input, output, read, write, cost, unpriced, untracked, prompt) = row;
    UsageTotals::from_sums(
        calls, input, output, read, write, cost, unpriced, untracked, prompt,
    )
}

/// `GET /v1/projects/{project_id}/usage` filters.
#[derive(Debug, Clone, Default)]
pub struct UsageFilter {
    pub since: Option<DateTime<Utc>>,
    pub until: Option<DateTime<Utc>>,
    pub team_pk: Option<String>,
}

impl Database {
    /// Totals of each job in `job_ids` (jobs without stored usage get zeros).
    pub async fn job_usage(&self, job_ids: &[Uuid]) -> DbResult<Vec<(Uuid, UsageTotals)>> {
        if job_ids.is_empty() {
            return Ok(Vec::new());
        }
        type JobSumsRow = (Uuid, i64, i64, i64, i64, i64, f64, i64, i64, i64);
        let rows: Vec<JobSumsRow> = on_pool!(self, pool => {
            let mut q = QueryBuilder::new(format!(
                "SELECT l.job_id, {TOTALS} FROM refine_l0_runs l \
                     WHERE l.usage_source IS NOT NULL AND l.job_id IN "
            ));
            push_bound_list(&mut q, job_ids.iter().copied());
            q.push(" GROUP BY l.job_id");
            q.build_query_as().fetch_all(pool).await?
        });
        Ok(job_ids
            .iter()
            .map(|id| {
                let found = rows
                    .iter()
                    .find(|r| r.0 == *id)
                    .map(|r| totals((r.1, r.2, r.3, r.4, r.5, r.6, r.7, r.8, r.9)));
                (*id, found.unwrap_or_default())
            })
            .collect())
    }

    /// Totals over every phase job of a run.
    pub async fn run_usage(&self, run_id: Uuid) -> DbResult<UsageTotals> {
        let sql = format!(
            "SELECT {TOTALS} FROM refine_l0_runs l WHERE l.usage_source IS NOT NULL \
             AND l.job_id IN (SELECT id FROM refine_jobs WHERE run_id = $1)"
        );
        // An aggregate: always one row.
        let row: Option<SumsRow> = self.row_by(&sql, run_id).await?;
        Ok(row.map(totals).unwrap_or_default())
    }

    /// A project's sums by executor and model, and overall, for calls that ended
    /// in `[since, until)` (either bound optional).
    pub async fn project_usage(
        &self,
        project_id: &str,
        filter: &UsageFilter,
    ) -> DbResult<(UsageTotals, Vec<UsageGroup>)> {
        type GroupRow = (
            String,
            ExecutorKind,
            Option<String>,
            i64,
            i64,
            i64,
            i64,
            i64,
            f64,
            i64,
            i64,
            i64,
        );
        // Expanded once per back-end by `on_pool!`, so the builder's type is known.
        macro_rules! usage_query {
            ($select:expr, $group:expr) => {{
                let mut q = QueryBuilder::new(format!(
                    "SELECT {}{TOTALS} FROM refine_l0_runs l \
                     JOIN refine_jobs j ON j.id = l.job_id \
                     WHERE l.usage_source IS NOT NULL AND l.project_id = ",
                    $select
                ));
                q.push_bind(project_id.to_owned());
                if let Some(since) = filter.since {
                    q.push(" AND l.finished_at >= ").push_bind(since);
                }
                if let Some(until) = filter.until {
                    q.push(" AND l.finished_at < ").push_bind(until);
                }
                if let Some(team) = &filter.team_pk {
                    q.push(" AND l.team_pk = ").push_bind(team.clone());
                }
                q.push($group);
                q
            }};
        }
        let (all, groups): (SumsRow, Vec<GroupRow>) = on_pool!(self, pool => {
            let all = usage_query!("", "")
                .build_query_as()
                .fetch_one(pool)
                .await?;
            let groups = usage_query!(
                "j.executor, j.executor_kind, l.usage_model, ",
                " GROUP BY j.executor, j.executor_kind, l.usage_model \
                 ORDER BY j.executor, l.usage_model"
            )
            .build_query_as()
            .fetch_all(pool)
            .await?;
            (all, groups)
        });
        let groups = groups
            .into_iter()
            .map(|g| UsageGroup {
                executor: g.0,
                executor_kind: g.1,
                model: g.2,
                usage: totals((g.3, g.4, g.5, g.6, g.7, g.8, g.9, g.10, g.11)),
            })
            .collect();
        Ok((totals(all), groups))
    }
}
