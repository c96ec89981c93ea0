//! Budgets in the database (docs/jobs.md, "Budgets"): one read of every budget
//! scope that applies — the job, its run, its project's day — what it has spent
//! and has reserved for running calls ([`read_budget_state!`], the one query
//! shape), decided by [`decide`] (the one decision). The gate in front of every L0
//! start reads it in one locked transaction and, when the call may start, stores
//! its start with its reservation; the other questions (is a budget spent, was
//! it overrun, may a new job name its project) read it alone
//! ([`Database::budget_state`]).
//!
//! A reservation is the `reserved_cost_usd` of an L0 row while it is `running`.
//! It needs no release of its own: the write that stores the L0's outcome moves
//! the row out of `running` (and its cost into what was spent), and a job that is
//! handed back, reaped or ended moves its `running` rows to `pending` or `failed`
//! (`reset_running_l0s!`), so a lost lease cannot hold a reservation past the
//! reaper.
//!
//! Locks: SQLite's `BEGIN IMMEDIATE` serializes every gate of the database file
//! (any process). Postgres takes a transaction advisory lock per shared scope —
//! the run, then the project — before the fenced bump locks the job row, always
//! in that order, so two gates of one scope queue instead of both deciding on the
//! same read; the job scope is the job's own, already serialized by its lease.

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::{Fenced, JobLease, JobProgress, LeaseLost, PendingProgress};
use crate::db::Database;
use crate::db::rate_limits::{RateAsk, RateVerdict};
use crate::db::task_lists::now;
use crate::domain::refine::L0ErrorCode;
use crate::domain::usage::{
    BudgetQuestion, BudgetVerdict, ScopeLimit, ScopeSpend, decide, expected_call_cost,
};

/// The budgets that apply to one job's L0 starts.
#[derive(Debug, Clone, Default)]
pub struct BudgetScopes {
    /// The request's budget: over the job's L0s, or over the run's when `run_id`.
    pub request: Option<ScopeLimit>,
    pub run_id: Option<Uuid>,
    /// The project, its daily limit, and the start of today (UTC).
    pub project_day: Option<(String, ScopeLimit, DateTime<Utc>)>,
    /// The configured most one call of the job's executor may cost.
    pub call_ceiling_usd: Option<f64>,
}

impl BudgetScopes {
    /// Whether any budget applies.
    pub fn any(&self) -> bool {
        self.request.is_some() || self.project_day.is_some()
    }
}

/// What the gate did.
#[derive(Debug, Clone, PartialEq)]
pub enum Gated {
    /// The L0's start is stored (with its reservation): start it.
    Started(JobProgress),
    /// Ask again once a running call ends (a budget), or after this long (a rate
    /// limit, whose queue keeps the call's place).
    Wait(Option<std::time::Duration>),
    /// Start no further L0: why.
    Stop(String),
    /// This L0 waited longer than its executor's `max_wait_secs`: it ends
    /// `rate_limited` without starting (why).
    RateLimited(String),
}

/// `(spent, output tokens, running, reserved, unreserved running, max cost seen)`.
type ScopeRow = (f64, i64, i64, f64, i64, Option<f64>);

/// The select list of a scope's state over `refine_l0_runs l`.
const SCOPE_SUMS: &str = "SELECT COALESCE(SUM(l.cost_usd), 0.0), \
    CAST(COALESCE(SUM(l.output_tokens), 0) AS BIGINT), \
    CAST(COALESCE(SUM(CASE WHEN l.status = 'running' THEN 1 ELSE 0 END), 0) AS BIGINT), \
    COALESCE(SUM(CASE WHEN l.status = 'running' THEN l.reserved_cost_usd END), 0.0), \
    CAST(COALESCE(SUM(CASE WHEN l.status = 'running' AND l.reserved_cost_usd IS NULL \
        THEN 1 ELSE 0 END), 0) AS BIGINT), \
    MAX(l.cost_usd) \
    FROM refine_l0_runs l WHERE ";

fn spend(row: ScopeRow) -> ScopeSpend {
    ScopeSpend {
        spent_usd: row.0,
        output_tokens: row.1,
        running: row.2,
        reserved_usd: row.3,
        unreserved_running: row.4,
    }
}

/// Every budget scope's state, for [`decide`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BudgetState {
    /// Each scope that applies with what it spent and reserved: the request's
    /// budget first, then the project's day.
    pub scopes: Vec<(ScopeLimit, ScopeSpend)>,
    /// The most one call of the job (of its run, for a run's job) cost so far.
    pub max_seen_usd: Option<f64>,
}

/// Reads the state of every scope in `$scopes` through `$ex` (a pool, or
/// `&mut *tx` inside the gate's transaction): the job's own L0s — or its run's,
/// when it has one — and the project's day (today's ended calls and every
/// running one: a reservation made yesterday holds until its call ends). With no
/// job (`$job_id` `None`, a submission) and no run, only the project's day.
macro_rules! read_budget_state {
    ($ex:expr, $scopes:expr, $job_id:expr) => {{
        let scopes: &BudgetScopes = $scopes;
        let job_id: Option<Uuid> = $job_id;
        let own: Option<ScopeRow> = match (scopes.run_id, job_id) {
            (Some(run_id), _) => Some(
                sqlx::query_as(sqlx::AssertSqlSafe(format!(
                    "{SCOPE_SUMS} l.job_id IN (SELECT id FROM refine_jobs WHERE run_id = $1)"
                )))
                .bind(run_id)
                .fetch_one($ex)
                .await?,
            ),
            (None, Some(job_id)) => Some(
                sqlx::query_as(sqlx::AssertSqlSafe(format!("{SCOPE_SUMS} l.job_id = $1")))
                    .bind(job_id)
                    .fetch_one($ex)
                    .await?,
            ),
            (None, None) => None,
        };
        let mut state = BudgetState::default();
        if let Some(own) = own {
            state.max_seen_usd = own.5;
            if let Some(limit) = &scopes.request {
                state.scopes.push((limit.clone(), spend(own)));
            }
        }
        if let Some((project, limit, day_start)) = &scopes.project_day {
            let row: ScopeRow = sqlx::query_as(sqlx::AssertSqlSafe(format!(
                "{SCOPE_SUMS} l.project_id = $1 AND (l.status = 'running' \
                 OR (l.usage_source IS NOT NULL AND l.finished_at >= $2))"
            )))
            .bind(project.as_str())
            .bind(*day_start)
            .fetch_one($ex)
            .await?;
            state.scopes.push((limit.clone(), spend(row)));
        }
        state
    }};
}

/// A Postgres advisory-lock key per shared scope.
fn lock_key(kind: &str, id: &str) -> String {
    format!("plangate budget {kind} {id}")
}

impl Database {
    /// The one admission step in front of every gated L0 start (docs/jobs.md,
    /// "Budgets" and "Rate limits"), in one fenced, locked transaction: every
    /// budget in `scopes` must cover one more call, then the executor's rate limit
    /// (`rate`, when one applies) must have room and the call's turn; only then is
    /// its start stored with its budget reservation. A budget that says no changes
    /// nothing; a rate limit that says wait keeps the call's place in the queue.
    pub async fn gate_l0_start(
        &self,
        lease: JobLease,
        attempt: i32,
        assignment_id: &str,
        progress: JobProgress,
        scopes: &BudgetScopes,
        rate: Option<&RateAsk>,
    ) -> Fenced<Gated> {
        let mut pending = PendingProgress::default();
        let started = pending.start(&[assignment_id.to_owned()], attempt, progress);
        let at = now();
        let is_postgres = matches!(self, Database::Postgres(_));
        on_pool!(self, pool => {
            let (_turn, mut tx) = begin_write!(self, pool);
            if is_postgres {
                let mut keys = Vec::new();
                if let Some(run_id) = scopes.run_id {
                    keys.push(lock_key("run", &run_id.to_string()));
                }
                if let Some((project, _, _)) = &scopes.project_day {
                    keys.push(lock_key("project", project));
                }
                for key in keys {
                    sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))")
                        .bind(key)
                        .execute(&mut *tx)
                        .await?;
                }
            }
            let mut reserve_usd = None;
            if scopes.any() {
                let state = read_budget_state!(&mut *tx, scopes, Some(lease.job_id));
                let expected_usd = expected_call_cost(state.max_seen_usd, scopes.call_ceiling_usd);
                match decide(&state.scopes, BudgetQuestion::Start { expected_usd }) {
                    BudgetVerdict::Go { reserve_usd: r } => reserve_usd = r,
                    BudgetVerdict::Wait => {
                        tx.rollback().await?;
                        return Ok(Ok(Gated::Wait(None)));
                    }
                    BudgetVerdict::Stop(why) => {
                        tx.rollback().await?;
                        return Ok(Ok(Gated::Stop(why)));
                    }
                }
            }
            if let Some(ask) = rate {
                let (verdict, _) = rate_admit!(self, tx, ask);
                match verdict {
                    RateVerdict::Start => {}
                    RateVerdict::Wait(d) => {
                        tx.commit().await?;
                        return Ok(Ok(Gated::Wait(Some(d))));
                    }
                    RateVerdict::TimedOut { waited, executor } => {
                        tx.commit().await?;
                        return Ok(Ok(Gated::RateLimited(L0ErrorCode::RateLimited.reason(
                            &format!(
                                "waited {} s for room on executor {executor} (max_wait_secs)",
                                waited.as_secs()
                            ),
                        ))));
                    }
                }
            }
            // Fenced last: a lost lease rolls the whole decision back.
            let Some(seq) = bump_fenced!(tx, lease, at, pending.events.len()) else {
                tx.rollback().await?;
                return Ok(Err(LeaseLost));
            };
            store_pending!(tx, lease.job_id, seq, &pending, then = (&[], at));
            if reserve_usd.is_some() {
                sqlx::query(
                    "UPDATE refine_l0_runs SET reserved_cost_usd = $3 \
                     WHERE job_id = $1 AND assignment_id = $2",
                )
                .bind(lease.job_id)
                .bind(assignment_id)
                .bind(reserve_usd)
                .execute(&mut *tx)
                .await?;
            }
            tx.commit().await?;
            Ok(Ok(Gated::Started(started)))
        })
    }

    /// What every scope in `scopes` spent and reserved (the gate's read, outside
    /// a transaction), for [`decide`]'s other questions. `job_id` is `None` for a
    /// submission (no job yet: only the project's day is read).
    pub async fn budget_state(
        &self,
        scopes: &BudgetScopes,
        job_id: Option<Uuid>,
    ) -> crate::db::DbResult<BudgetState> {
        Ok(on_pool!(self, pool => { read_budget_state!(pool, scopes, job_id) }))
    }
}
