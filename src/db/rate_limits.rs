//! Provider rate limits in the database (docs/jobs.md, "Rate limits"): one
//! `rate_limit_state` row per executor, locked by every admission (`FOR UPDATE` on
//! Postgres; SQLite's `BEGIN IMMEDIATE` serializes every writer), so the replicas
//! share one set of buckets, one fair queue and one provider pause. The decisions
//! are `domain::rate_limit`'s.
//!
//! Admission (inside the L0 gate's transaction, [`rate_admit!`]): refill the
//! buckets, drop expired rows, register the call as waiting (fair-queuing tags)
//! unless it is, then start queue heads while the buckets and the pause allow: the
//! caller's own call starts at once; another replica's head is *granted* and starts
//! when its job asks next (within [`GRANT_TTL_MS`], else the grant lapses). Since a
//! granted call starts up to that late, the buckets count it with that lateness
//! (`Rates::effective`), which keeps any 60 s window of actual starts at
//! `rpm + 1` at most.

use std::time::Duration;

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::{Database, DbResult};
use crate::domain::rate_limit::{
    Buckets, CallState, Cost, Learned, Limits, ProviderSignal, Rates, WaitingCall,
};

/// How long a grant waits for its call's job to ask again.
pub const GRANT_TTL_MS: i64 = 600;
/// How often a waiting call asks again at most (a grant is picked up within it).
pub const WAIT_POLL: Duration = Duration::from_millis(250);
/// A waiting call's row lives this long past its last ask: a dead replica's
/// waiting calls leave the queue within it.
pub const WAITING_TTL_MS: i64 = 5_000;
/// A settled call's row waits this long for the next admission to collect it.
pub const DONE_TTL_MS: i64 = 3_600_000;
/// The most queue heads one admission starts or grants.
const MAX_GRANTS: usize = 8;

/// One call asking to start on a limited executor.
#[derive(Debug, Clone)]
pub struct RateAsk {
    pub executor: String,
    /// The configured limits (a runtime change stored in the row overlays them).
    pub configured: Limits,
    pub project_id: String,
    pub job_id: Uuid,
    pub assignment_id: String,
    pub cost: Cost,
    /// How long a started call's row lives (its timeout plus the lease): the
    /// concurrency it holds after a pause returns within it if its replica dies.
    pub running_ttl_ms: i64,
}

impl RateAsk {
    pub fn call_id(&self) -> String {
        format!("{}:{}", self.job_id, self.assignment_id)
    }
}

/// The admission's answer.
#[derive(Debug, Clone, PartialEq)]
pub enum RateVerdict {
    Start,
    /// Ask again after this long.
    Wait(Duration),
    /// Waited longer than `max_wait_secs`: the call ends `rate_limited`.
    TimedOut {
        waited: Duration,
        executor: String,
    },
}

/// `overrides, learned, levels ×3, refilled_at, virtual_time, paused_until, release_cap`.
pub(crate) type StateRow = (
    String,
    String,
    Option<f64>,
    Option<f64>,
    Option<f64>,
    i64,
    f64,
    Option<i64>,
    Option<i64>,
);

/// One executor's shared state, as read under its row lock.
#[derive(Debug, Clone)]
pub(crate) struct RateState {
    pub overrides: Limits,
    pub learned: Learned,
    pub buckets: Buckets,
    pub virtual_time: f64,
    pub paused_until: Option<i64>,
    pub release_cap: Option<i64>,
}

impl RateState {
    pub(crate) fn from_row(row: StateRow) -> Self {
        RateState {
            overrides: serde_json::from_str(&row.0).unwrap_or_default(),
            learned: serde_json::from_str(&row.1).unwrap_or_default(),
            buckets: Buckets {
                requests: row.2,
                input_tokens: row.3,
                output_tokens: row.4,
                at_ms: row.5,
            },
            virtual_time: row.6,
            paused_until: row.7,
            release_cap: row.8,
        }
    }

    pub fn limits(&self, configured: &Limits) -> Limits {
        configured.overlaid(&self.overrides)
    }

    /// The rates the buckets refill at (see the module doc for the request rate).
    pub fn rates(&self, configured: &Limits) -> Rates {
        Rates::effective(
            &self.limits(configured),
            &self.learned,
            Duration::from_millis(GRANT_TTL_MS as u64),
        )
    }
}

pub(crate) const STATE_SELECT: &str = "SELECT overrides, learned, requests_level, \
    input_tokens_level, output_tokens_level, refilled_at, virtual_time, paused_until, \
    release_cap FROM rate_limit_state WHERE executor = $1";

pub(crate) fn now_ms() -> i64 {
    Utc::now().timestamp_millis()
}

pub(crate) fn ms_time(ms: i64) -> Option<DateTime<Utc>> {
    DateTime::from_timestamp_millis(ms)
}

/// Locks (creating it when missing) the executor's row; evaluates to a
/// [`RateState`] whose buckets are refilled to `$now`.
macro_rules! rate_lock {
    ($db:expr, $tx:expr, $executor:expr, $configured:expr, $now:expr) => {{
        let executor: &str = $executor;
        let now: i64 = $now;
        sqlx::query(
            "INSERT INTO rate_limit_state (executor, refilled_at) VALUES ($1, $2) \
             ON CONFLICT (executor) DO NOTHING",
        )
        .bind(executor)
        .bind(now)
        .execute(&mut *$tx)
        .await?;
        let row: $crate::db::rate_limits::StateRow = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "{}{}",
            $crate::db::rate_limits::STATE_SELECT,
            $db.row_lock()
        )))
        .bind(executor)
        .fetch_one(&mut *$tx)
        .await?;
        let mut state = $crate::db::rate_limits::RateState::from_row(row);
        let rates = state.rates($configured);
        state.buckets = state.buckets.refilled(&rates, now);
        state
    }};
}

/// Stores a [`RateState`]'s mutable parts.
macro_rules! rate_save {
    ($tx:expr, $executor:expr, $state:expr) => {{
        let state: &$crate::db::rate_limits::RateState = $state;
        sqlx::query(
            "UPDATE rate_limit_state SET learned = $2, requests_level = $3, \
             input_tokens_level = $4, output_tokens_level = $5, refilled_at = $6, \
             virtual_time = $7, paused_until = $8, release_cap = $9 WHERE executor = $1",
        )
        .bind($executor)
        .bind(serde_json::to_string(&state.learned).unwrap_or_else(|_| "{}".into()))
        .bind(state.buckets.requests)
        .bind(state.buckets.input_tokens)
        .bind(state.buckets.output_tokens)
        .bind(state.buckets.at_ms)
        .bind(state.virtual_time)
        .bind(state.paused_until)
        .bind(state.release_cap)
        .execute(&mut *$tx)
        .await?;
    }};
}

/// The admission of one call, inside an open write transaction: evaluates to
/// `(RateVerdict, RateState)`; with `Start` the caller's row is already `running`
/// and the state saved. The caller commits.
macro_rules! rate_admit {
    ($db:expr, $tx:expr, $ask:expr) => {{
        use $crate::db::rate_limits::{GRANT_TTL_MS, RateVerdict, WAIT_POLL, WAITING_TTL_MS};
        let ask: &$crate::db::rate_limits::RateAsk = $ask;
        let now = $crate::db::rate_limits::now_ms();
        let mut state = rate_lock!($db, $tx, &ask.executor, &ask.configured, now);
        let limits = state.limits(&ask.configured);
        let rates = state.rates(&ask.configured);
        let me = ask.call_id();
        // Calls that ended since: give back what they reserved and did not use.
        let (unused_in, unused_out, done): (i64, i64, i64) = sqlx::query_as(
            "SELECT CAST(COALESCE(SUM(input_tokens), 0) AS BIGINT), \
             CAST(COALESCE(SUM(output_tokens), 0) AS BIGINT), COUNT(*) \
             FROM rate_limit_calls WHERE executor = $1 AND state = 'done'",
        )
        .bind(&ask.executor)
        .fetch_one(&mut *$tx)
        .await?;
        if done > 0 {
            state.buckets.give_back(
                &rates,
                $crate::domain::rate_limit::Cost {
                    input_tokens: unused_in,
                    output_tokens: unused_out,
                },
            );
            state.learned.answered = true;
            sqlx::query("DELETE FROM rate_limit_calls WHERE executor = $1 AND state = 'done'")
                .bind(&ask.executor)
                .execute(&mut *$tx)
                .await?;
        }
        sqlx::query("DELETE FROM rate_limit_calls WHERE executor = $1 AND expires_at < $2")
            .bind(&ask.executor)
            .bind(now)
            .execute(&mut *$tx)
            .await?;
        // Grants their calls did not pick up in time wait again, and give back
        // what they took (none of them started).
        let (lapsed, lapsed_in, lapsed_out): (i64, i64, i64) = sqlx::query_as(
            "SELECT COUNT(*), CAST(COALESCE(SUM(input_tokens), 0) AS BIGINT), \
             CAST(COALESCE(SUM(output_tokens), 0) AS BIGINT) FROM rate_limit_calls \
             WHERE executor = $1 AND state = 'granted' AND granted_at < $2",
        )
        .bind(&ask.executor)
        .bind(now - GRANT_TTL_MS)
        .fetch_one(&mut *$tx)
        .await?;
        if lapsed > 0 {
            state.buckets.refund(
                &rates,
                lapsed,
                $crate::domain::rate_limit::Cost {
                    input_tokens: lapsed_in,
                    output_tokens: lapsed_out,
                },
            );
            sqlx::query(
                "UPDATE rate_limit_calls SET state = 'waiting', granted_at = NULL \
                 WHERE executor = $1 AND state = 'granted' AND granted_at < $2",
            )
            .bind(&ask.executor)
            .bind(now - GRANT_TTL_MS)
            .execute(&mut *$tx)
            .await?;
        }
        let mine: Option<($crate::domain::rate_limit::CallState, i64)> =
            sqlx::query_as("SELECT state, waiting_since FROM rate_limit_calls WHERE id = $1")
                .bind(&me)
                .fetch_optional(&mut *$tx)
                .await?;
        let (my_state, waiting_since) = match mine {
            Some((s, since)) => {
                sqlx::query("UPDATE rate_limit_calls SET expires_at = $2 WHERE id = $1")
                    .bind(&me)
                    .bind(now + WAITING_TTL_MS)
                    .execute(&mut *$tx)
                    .await?;
                (s, since)
            }
            None => {
                let last: Option<f64> = sqlx::query_scalar(
                    "SELECT last_finish FROM rate_limit_projects \
                     WHERE executor = $1 AND project_id = $2",
                )
                .bind(&ask.executor)
                .bind(&ask.project_id)
                .fetch_optional(&mut *$tx)
                .await?;
                let (start, finish) = $crate::domain::rate_limit::fair_tags(
                    state.virtual_time,
                    last,
                    limits.share(&ask.project_id),
                );
                sqlx::query(
                    "INSERT INTO rate_limit_projects (executor, project_id, last_finish) \
                     VALUES ($1, $2, $3) ON CONFLICT (executor, project_id) \
                     DO UPDATE SET last_finish = $3",
                )
                .bind(&ask.executor)
                .bind(&ask.project_id)
                .bind(finish)
                .execute(&mut *$tx)
                .await?;
                sqlx::query(
                    "INSERT INTO rate_limit_calls (id, executor, project_id, job_id, state, \
                     start_tag, finish_tag, waiting_since, expires_at, input_tokens, \
                     output_tokens) VALUES ($1, $2, $3, $4, 'waiting', $5, $6, $7, $8, $9, $10)",
                )
                .bind(&me)
                .bind(&ask.executor)
                .bind(&ask.project_id)
                .bind(ask.job_id.to_string())
                .bind(start)
                .bind(finish)
                .bind(now)
                .bind(now + WAITING_TTL_MS)
                .bind(ask.cost.input_tokens)
                .bind(ask.cost.output_tokens)
                .execute(&mut *$tx)
                .await?;
                ($crate::domain::rate_limit::CallState::Waiting, now)
            }
        };
        let mut verdict: Option<RateVerdict> = None;
        if my_state == $crate::domain::rate_limit::CallState::Granted {
            verdict = Some(RateVerdict::Start);
        } else if my_state == $crate::domain::rate_limit::CallState::Running {
            // Asked again after its start was stored elsewhere: start.
            verdict = Some(RateVerdict::Start);
        } else if now - waiting_since
            > i64::try_from(limits.max_wait().as_millis()).unwrap_or(i64::MAX)
        {
            sqlx::query("DELETE FROM rate_limit_calls WHERE id = $1")
                .bind(&me)
                .execute(&mut *$tx)
                .await?;
            verdict = Some(RateVerdict::TimedOut {
                waited: std::time::Duration::from_millis((now - waiting_since).max(0) as u64),
                executor: ask.executor.clone(),
            });
        }
        let mut wait = WAIT_POLL;
        if verdict.is_none() {
            for _ in 0..$crate::db::rate_limits::max_grants() {
                if let Some(until) = state.paused_until.filter(|u| *u > now) {
                    wait = std::time::Duration::from_millis((until - now) as u64);
                    break;
                }
                // Nothing configured and no answer yet: one at a time.
                let cap = state.release_cap.or_else(|| {
                    (!limits.limits_anything()
                        && !state.learned.answered
                        && state.learned.requests_limit.is_none())
                    .then_some(1)
                });
                if let Some(cap) = cap {
                    // A call's states (granted, running), not a job's.
                    let busy: i64 = sqlx::query_scalar(
                        "SELECT COUNT(*) FROM rate_limit_calls WHERE executor = $1 \
                         AND state IN ('granted', 'running')",
                    )
                    .bind(&ask.executor)
                    .fetch_one(&mut *$tx)
                    .await?;
                    if busy >= cap.max(1) {
                        break;
                    }
                }
                let head: Option<(String, f64, i64, i64, String)> = sqlx::query_as(
                    "SELECT id, start_tag, input_tokens, output_tokens, project_id \
                     FROM rate_limit_calls WHERE executor = $1 AND state = 'waiting' \
                     ORDER BY finish_tag, id LIMIT 1",
                )
                .bind(&ask.executor)
                .fetch_optional(&mut *$tx)
                .await?;
                let Some((head_id, start_tag, input_tokens, output_tokens, project)) = head else {
                    break;
                };
                let cost = $crate::domain::rate_limit::Cost {
                    input_tokens,
                    output_tokens,
                };
                let w = state.buckets.wait_for(&rates, cost);
                if !w.is_zero() {
                    wait = w;
                    break;
                }
                state.buckets.take(cost);
                state.virtual_time = state.virtual_time.max(start_tag);
                let minute = now / 60_000;
                sqlx::query(
                    "UPDATE rate_limit_projects SET \
                     started_minute_before = CASE WHEN minute = $3 THEN started_minute_before \
                        WHEN minute = $3 - 1 THEN started_this_minute ELSE 0 END, \
                     started_this_minute = CASE WHEN minute = $3 THEN started_this_minute + 1 \
                        ELSE 1 END, minute = $3 \
                     WHERE executor = $1 AND project_id = $2",
                )
                .bind(&ask.executor)
                .bind(&project)
                .bind(minute)
                .execute(&mut *$tx)
                .await?;
                if head_id == me {
                    verdict = Some(RateVerdict::Start);
                    break;
                }
                sqlx::query(
                    "UPDATE rate_limit_calls SET state = 'granted', granted_at = $2 WHERE id = $1",
                )
                .bind(&head_id)
                .bind(now)
                .execute(&mut *$tx)
                .await?;
            }
        }
        if verdict == Some(RateVerdict::Start) {
            sqlx::query(
                "UPDATE rate_limit_calls SET state = 'running', granted_at = NULL, \
                 expires_at = $2 WHERE id = $1",
            )
            .bind(&me)
            .bind(now + ask.running_ttl_ms)
            .execute(&mut *$tx)
            .await?;
        }
        rate_save!($tx, &ask.executor, &state);
        let verdict = verdict.unwrap_or(RateVerdict::Wait(
            wait.clamp(std::time::Duration::from_millis(5), WAIT_POLL),
        ));
        (verdict, state)
    }};
}

pub(crate) fn max_grants() -> usize {
    MAX_GRANTS
}

/// The state row, the calls by `(project, state, count)` and the projects by
/// `(project, minute, started this minute, started the minute before)`.
type RecordRows = (
    Option<StateRow>,
    Vec<(String, CallState, i64)>,
    Vec<(String, i64, i64, i64)>,
);

/// One executor's limits and state, as `GET /v1/rate-limits` shows them.
#[derive(Debug, Clone)]
pub struct RateLimitRecord {
    pub executor: String,
    pub limits: Limits,
    pub learned: Learned,
    pub remaining_requests: Option<i64>,
    pub reserved_requests: i64,
    pub paused_until: Option<DateTime<Utc>>,
    pub waiting: i64,
    /// `(project, share, waiting, started in the last minute)`.
    pub projects: Vec<(String, u64, i64, i64)>,
}

impl Database {
    /// One admission on its own (the L0 gate runs the same step inside its
    /// transaction, after the budgets): registers the call as waiting unless it
    /// is, and says whether it starts now.
    pub async fn rate_admit(&self, ask: &RateAsk) -> DbResult<RateVerdict> {
        on_pool!(self, pool => {
            let (_turn, mut tx) = begin_write!(self, pool);
            let (verdict, _) = rate_admit!(self, tx, ask);
            tx.commit().await?;
            Ok(verdict)
        })
    }

    /// The calls waiting for room (longest waiting first), at most `limit`.
    pub async fn rate_waiting_calls(&self, limit: i64) -> DbResult<Vec<WaitingCall>> {
        let now = now_ms();
        let rows: Vec<WaitingRow> = on_pool!(self, pool => {
            sqlx::query_as(
                "SELECT executor, id, project_id, job_id, waiting_since, state \
                 FROM rate_limit_calls WHERE state IN ('waiting', 'granted') AND expires_at >= $1 \
                 ORDER BY waiting_since LIMIT $2",
            )
            .bind(now)
            .bind(limit)
            .fetch_all(pool)
            .await?
        });
        Ok(rows.into_iter().map(waiting_record).collect())
    }

    /// One job's calls waiting for room (longest waiting first): the dashboard's
    /// job page. An indexed read of that job's rows (`rate_limit_calls_job`), so
    /// it costs the same however long other jobs' queues are; a job has at most
    /// one waiting call per L0 it may start.
    pub async fn rate_waiting_calls_of_job(&self, job_id: Uuid) -> DbResult<Vec<WaitingCall>> {
        let now = now_ms();
        let rows: Vec<WaitingRow> = on_pool!(self, pool => {
            sqlx::query_as(
                "SELECT executor, id, project_id, job_id, waiting_since, state \
                 FROM rate_limit_calls WHERE job_id = $1 AND state IN ('waiting', 'granted') \
                 AND expires_at >= $2 ORDER BY waiting_since",
            )
            .bind(job_id.to_string())
            .bind(now)
            .fetch_all(pool)
            .await?
        });
        Ok(rows.into_iter().map(waiting_record).collect())
    }

    /// Settles a call that ended: its row becomes `done` with the tokens it
    /// reserved and did not use, which the executor's next admission gives back
    /// (under the row lock it holds anyway: a call's end takes no lock of its own).
    pub async fn rate_settle(
        &self,
        executor: &str,
        configured: &Limits,
        call_id: &str,
        unused: Cost,
    ) -> DbResult<()> {
        let now = now_ms();
        let _turn = self.writer_turn().await;
        on_pool!(self, pool => {
            let _ = (executor, configured);
            sqlx::query(
                "UPDATE rate_limit_calls SET state = 'done', input_tokens = $2, \
                 output_tokens = $3, expires_at = $4 WHERE id = $1",
            )
            .bind(call_id)
            .bind(unused.input_tokens)
            .bind(unused.output_tokens)
            .bind(now + DONE_TTL_MS)
            .execute(pool)
            .await?;
        });
        Ok(())
    }

    /// Drops the rows of a job's calls that still wait (the job stopped asking).
    pub async fn rate_forget_waiting(&self, job_id: Uuid) -> DbResult<()> {
        let _turn = self.writer_turn().await;
        on_pool!(self, pool => {
            sqlx::query("DELETE FROM rate_limit_calls WHERE job_id = $1 AND state IN ('waiting', 'granted')")
                .bind(job_id.to_string())
                .execute(pool)
                .await?;
        });
        Ok(())
    }

    /// What a provider's answer said, for every replica: its headers become the
    /// learned limits; a `retry-after`, or a resource it says is used up, pauses the
    /// executor until then and empties its buckets, and the calls after the pause
    /// are released gradually (docs/jobs.md, "Rate limits").
    pub async fn rate_observe(
        &self,
        executor: &str,
        configured: &Limits,
        signal: &ProviderSignal,
    ) -> DbResult<()> {
        let now = now_ms();
        on_pool!(self, pool => {
            let (_turn, mut tx) = begin_write!(self, pool);
            let mut state = rate_lock!(self, tx, executor, configured, now);
            let before = state.learned.clone();
            state.learned.merge(&signal.learned);
            let mut pause_until: Option<i64> = signal
                .retry_after
                .map(|d| now + i64::try_from(d.as_millis()).unwrap_or(i64::MAX / 2));
            if let Some(until) = signal.learned.exhausted_until() {
                let until = until.timestamp_millis();
                if until > now {
                    pause_until = Some(pause_until.map_or(until, |p| p.max(until)));
                }
            }
            if let Some(until) = pause_until
                && state.paused_until.is_none_or(|p| p < until)
            {
                state.paused_until = Some(until);
                state.buckets.drain();
                if signal.too_many {
                    // After a refusal: no more at once than the provider last
                    // said remain, else the capacity it said it has per second,
                    // else one, until an answer succeeds.
                    let cap = before
                        .requests_remaining
                        .filter(|r| *r > 0)
                        .or(state.learned.requests_limit.map(|l| l.div_ceil(60)))
                        .unwrap_or(1);
                    state.release_cap = Some(i64::try_from(cap).unwrap_or(i64::MAX));
                }
            } else if signal.success && state.paused_until.is_none_or(|p| p <= now) {
                state.release_cap = None;
            }
            rate_save!(tx, executor, &state);
            tx.commit().await?;
        });
        Ok(())
    }

    /// Stores a runtime change of an executor's limits (merged into the earlier
    /// ones); effective at the next admission of any replica.
    pub async fn rate_set_overrides(&self, executor: &str, change: &Limits) -> DbResult<Limits> {
        let now = now_ms();
        let configured = Limits::default();
        on_pool!(self, pool => {
            let (_turn, mut tx) = begin_write!(self, pool);
            let state = rate_lock!(self, tx, executor, &configured, now);
            let merged = state.overrides.overlaid(change);
            sqlx::query("UPDATE rate_limit_state SET overrides = $2 WHERE executor = $1")
                .bind(executor)
                .bind(serde_json::to_string(&merged).unwrap_or_else(|_| "{}".into()))
                .execute(&mut *tx)
                .await?;
            tx.commit().await?;
            Ok(merged)
        })
    }

    /// The state of `executors` (name and configured limits), for display.
    pub async fn rate_limit_records(
        &self,
        executors: &[(String, Limits)],
    ) -> DbResult<Vec<RateLimitRecord>> {
        let now = now_ms();
        let minute = now / 60_000;
        let mut out = Vec::with_capacity(executors.len());
        for (executor, configured) in executors {
            let (row, calls, projects): RecordRows = on_pool!(self, pool => {
                let row = sqlx::query_as(STATE_SELECT)
                    .bind(executor)
                    .fetch_optional(pool)
                    .await?;
                let calls = sqlx::query_as(
                    "SELECT project_id, state, COUNT(*) FROM rate_limit_calls \
                     WHERE executor = $1 AND expires_at >= $2 GROUP BY project_id, state",
                )
                .bind(executor)
                .bind(now)
                .fetch_all(pool)
                .await?;
                let projects = sqlx::query_as(
                    "SELECT project_id, minute, started_this_minute, started_minute_before \
                     FROM rate_limit_projects WHERE executor = $1 ORDER BY project_id",
                )
                .bind(executor)
                .fetch_all(pool)
                .await?;
                (row, calls, projects)
            });
            let state = row.map(RateState::from_row);
            let limits = state
                .as_ref()
                .map_or_else(|| configured.clone(), |s| s.limits(configured));
            let learned = state
                .as_ref()
                .map(|s| s.learned.clone())
                .unwrap_or_default();
            let remaining_requests = state.as_ref().and_then(|s| {
                let rates = s.rates(configured);
                s.buckets
                    .refilled(&rates, now)
                    .requests
                    .map(|l| l.max(0.0).floor() as i64)
            });
            let count = |p: Option<&str>, states: &[CallState]| -> i64 {
                calls
                    .iter()
                    .filter(|c| p.is_none_or(|p| c.0 == p) && states.contains(&c.1))
                    .map(|c| c.2)
                    .sum()
            };
            let mut names: Vec<String> = projects.iter().map(|p| p.0.clone()).collect();
            names.extend(calls.iter().map(|c| c.0.clone()));
            names.extend(limits.shares.keys().cloned());
            names.sort();
            names.dedup();
            let projects = names
                .into_iter()
                .map(|name| {
                    // Starts this minute, plus last minute's scaled to the part
                    // of it still inside the last 60 s.
                    let started = projects.iter().find(|p| p.0 == name).map_or(0, |p| {
                        let frac = 1.0 - (now % 60_000) as f64 / 60_000.0;
                        if p.1 == minute {
                            p.2 + (p.3 as f64 * frac).round() as i64
                        } else if p.1 == minute - 1 {
                            (p.2 as f64 * frac).round() as i64
                        } else {
                            0
                        }
                    });
                    let share = limits.share(&name);
                    let waiting = count(Some(&name), &[CallState::Waiting, CallState::Granted]);
                    (name, share, waiting, started)
                })
                .collect();
            out.push(RateLimitRecord {
                executor: executor.clone(),
                remaining_requests,
                reserved_requests: count(None, &[CallState::Running]),
                paused_until: state
                    .as_ref()
                    .and_then(|s| s.paused_until)
                    .filter(|p| *p > now)
                    .and_then(ms_time),
                waiting: count(None, &[CallState::Waiting, CallState::Granted]),
                limits,
                learned,
                projects,
            });
        }
        Ok(out)
    }
}

/// `(executor, id, project_id, job_id, waiting_since, state)` of a waiting call.
type WaitingRow = (String, String, String, String, i64, CallState);

fn waiting_record((executor, id, project_id, job_id, since, state): WaitingRow) -> WaitingCall {
    let assignment_id = id.split_once(':').map_or(id.clone(), |(_, a)| a.to_owned());
    WaitingCall {
        executor,
        job_id,
        assignment_id,
        project_id,
        waiting_since: ms_time(since),
        granted: state == CallState::Granted,
    }
}
