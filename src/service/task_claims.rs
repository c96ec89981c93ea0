//! Agents at work (docs/api.md "Agents at work" and "Claims"): what to do `next`
//! after a ready answer, claims with leases, heartbeats and the task history.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use uuid::Uuid;

use super::task_refs::TaskRef;
use super::{Caller, ProblemCode, ProblemDetails, Service, ServiceError};
use crate::db::task_claims::{ClaimAsk, ClaimOutcome, HeartbeatOutcome};
use crate::db::task_lists::{dispatch_view, now};
use crate::domain::dispatch::{
    self, BlockedBy, DispatchTask, HeldByOther, MAX_LEASE_SECS, Next, Ready, ReadyMode, Remaining,
    StoredTask, TaskStatus, WAIT_RETRY_SECS,
};
use crate::domain::ids::Ident;

/// Lease of a claim or heartbeat that names none: long enough for a step of real
/// work, short enough that a dead agent's task comes back within minutes.
pub const DEFAULT_LEASE_SECS: u64 = 300;

/// 409 `task_claimed`, naming the holder (docs/api.md "Claims").
pub(super) fn held_by_other(held: HeldByOther) -> ServiceError {
    ServiceError::conflict(ProblemCode::TaskClaimed, held.to_string()).holder(held.holder)
}

/// Claims (and `ready` reads) asked again when one saw nothing ready while its
/// counts say a task must be ([`dispatch::ready_by_counts`]): a race with the
/// commit that opened the next wave, which otherwise costs a read of the whole
/// list at every wave's end.
pub(super) const STALE_READ_RETRIES: usize = 3;

/// What to do after this answer; part of every ready and claim answer.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct NextAnswer {
    /// `dispatch`: tasks are ready. `wait`: nothing ready, tasks running — ask
    /// again after `retry_after_s` or long-poll with `wait`. `done`: every task is
    /// terminal. `blocked`: nothing ready or running and work will never run
    /// (`blocked` says which and why) — re-plan.
    pub next: Next,
    /// Tasks `running`.
    pub in_flight: u64,
    /// With `wait`: seconds after which asking again is worth it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_after_s: Option<u64>,
    /// Tasks of the list by status.
    pub remaining: Remaining,
    /// With `blocked`: the tasks that will not run, in list order.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub blocked: Vec<BlockedTaskView>,
}

impl NextAnswer {
    /// The answer the list's counts alone decide ([`dispatch::next_from_counts`]:
    /// `done`, naming no task), if they do.
    pub(crate) fn from_counts(remaining: Remaining) -> Option<Self> {
        dispatch::next_from_counts(remaining).map(|step| Self {
            next: step.next,
            in_flight: step.in_flight,
            retry_after_s: step.retry_after_s,
            remaining: step.remaining,
            blocked: Vec::new(),
        })
    }
}

/// One task of a `blocked` answer.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct BlockedTaskView {
    pub id: Uuid,
    pub task_id: String,
    pub status: TaskStatus,
    /// The task (its `task_id`) whose failure abandoned this one, or the
    /// dependency that is not done.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub because_of: Option<String>,
    pub reason: String,
}

/// `next` for a list, its dispatch view and the ready answer computed on them.
pub(super) fn next_answer(
    tasks: &[StoredTask],
    view: &[DispatchTask],
    ready: &Ready,
) -> NextAnswer {
    let at = now();
    let index: std::collections::HashMap<Uuid, usize> =
        tasks.iter().enumerate().map(|(i, t)| (t.id, i)).collect();
    let upstream: Vec<Option<usize>> = tasks
        .iter()
        .map(|t| t.upstream_task_id.and_then(|u| index.get(&u).copied()))
        .collect();
    let earliest_lease_s = tasks
        .iter()
        .filter_map(|t| t.claim.as_ref())
        .map(|c| u64::try_from((c.lease_expires_at - at).num_seconds().max(0)).unwrap_or(0) + 1)
        .min();
    let step = dispatch::next_step(view, &upstream, ready, earliest_lease_s);
    let local = |i: usize| tasks.get(i).map(|t| t.task_id.clone());
    let blocked = step
        .blocked
        .iter()
        .filter_map(|b| {
            let task = tasks.get(b.index)?;
            let (because_of, reason) = match b.by {
                BlockedBy::Upstream(u) => {
                    let name = local(u).unwrap_or_default();
                    let what = tasks.get(u).map_or(TaskStatus::Failed, |t| t.status);
                    (
                        Some(name.clone()),
                        format!("abandoned because {name:?} {what}"),
                    )
                }
                BlockedBy::UnmetDependency(d) => {
                    let name = local(d).unwrap_or_default();
                    (
                        Some(name.clone()),
                        format!("pending on {name:?}, which is not done and not running"),
                    )
                }
                BlockedBy::NotOffered => (None, "pending but never offered".to_owned()),
            };
            Some(BlockedTaskView {
                id: task.id,
                task_id: task.task_id.clone(),
                status: task.status,
                because_of,
                reason,
            })
        })
        .collect();
    NextAnswer {
        next: step.next,
        in_flight: step.in_flight,
        retry_after_s: step.retry_after_s,
        remaining: step.remaining,
        blocked,
    }
}

/// `POST /v1/task-lists/{id}/claim`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ClaimRequest {
    /// Who claims (an agent id: letters, digits, `.`, `_`, `-`).
    #[schema(value_type = Ident)]
    pub holder: String,
    /// Claim only a task assigned to this persona (`assigned_persona`).
    pub persona: Option<String>,
    /// Lease in seconds (1 to 86400, default 300): heartbeat before it runs out.
    #[schema(minimum = 1, maximum = 86400)]
    #[serde(default, deserialize_with = "crate::domain::json_int::option_u32")]
    pub lease_s: Option<u32>,
    /// The rule that decides what is ready: `barrier` (default) or `pipeline`.
    pub mode: Option<ReadyMode>,
}

/// A claim's answer: the task now held (null when none was ready) and `next`.
#[derive(Debug, Serialize, ToSchema)]
pub struct ClaimResponse {
    /// The claimed task, now `running`, with its `claim`; null when none was ready.
    pub task: Option<StoredTask>,
    #[serde(flatten)]
    pub next: NextAnswer,
}

/// `POST /v1/tasks/{id}/heartbeat`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct HeartbeatRequest {
    /// The claim's holder.
    #[schema(value_type = Ident)]
    pub holder: String,
    /// New lease from now, in seconds (1 to 86400, default 300).
    #[schema(minimum = 1, maximum = 86400)]
    #[serde(default, deserialize_with = "crate::domain::json_int::option_u32")]
    pub lease_s: Option<u32>,
}

pub use crate::domain::dispatch::StoredTaskEvent;

/// `GET /v1/tasks/{id}/history`.
#[derive(Debug, Serialize, ToSchema)]
pub struct TaskHistory {
    pub id: Uuid,
    /// Oldest first.
    pub events: Vec<StoredTaskEvent>,
}

/// Lease seconds from a request: 1 to [`MAX_LEASE_SECS`], [`DEFAULT_LEASE_SECS`] when absent.
fn lease(lease_s: Option<u32>) -> Result<chrono::Duration, ServiceError> {
    let secs = lease_s.map_or(DEFAULT_LEASE_SECS, u64::from);
    if !(1..=MAX_LEASE_SECS).contains(&secs) {
        return Err(ServiceError::invalid_field(
            "lease_s",
            format!("lease_s must be between 1 and {MAX_LEASE_SECS} seconds, not {secs}"),
        ));
    }
    Ok(chrono::Duration::seconds(secs as i64))
}

/// The claim's answer on the list as it stands after it.
fn claim_answer(tasks: &[StoredTask], mode: ReadyMode, claimed: Option<usize>) -> ClaimResponse {
    let view = dispatch_view(tasks);
    let ready = dispatch::ready(mode, &view);
    let mut next = next_answer(tasks, &view, &ready);
    let task = claimed.and_then(|i| tasks.get(i)).cloned();
    if task.is_some() {
        next.next = Next::Dispatch;
        next.retry_after_s = None;
    } else if next.next == Next::Dispatch {
        // Ready tasks exist, none for this persona: others will move the list.
        next.next = Next::Wait;
        next.retry_after_s = Some(WAIT_RETRY_SECS);
    }
    ClaimResponse { task, next }
}

impl Service {
    /// Claims one ready task for `holder` (docs/api.md "Claims").
    pub async fn claim_task(
        &self,
        caller: &Caller,
        list_id: Uuid,
        request: ClaimRequest,
    ) -> Result<ClaimResponse, ServiceError> {
        let holder = Ident::parse("holder", &request.holder)?;
        let persona = match request.persona.as_deref() {
            Some(p) if p.trim().is_empty() => {
                return Err(ServiceError::invalid_field(
                    "persona",
                    "persona must name an assigned_persona of the list, or be left out",
                ));
            }
            p => p,
        };
        let lease = lease(request.lease_s)?;
        let mode = request.mode.unwrap_or_default();
        self.check_list_visible(caller, list_id).await?;
        // A few indexed statements, never the whole list (docs/architecture.md,
        // "Claims at scale"); lapsed leases are expired in the same transaction.
        let ask = ClaimAsk {
            holder: holder.as_str(),
            persona,
            lease,
            mode,
        };
        let mut asked_again = 0;
        let outcome = loop {
            let claimed = self
                .db
                .claim_task(list_id, ask)
                .await?
                .ok_or_else(|| ServiceError::not_found("task list", &list_id.to_string()))?;
            let stale = matches!(claimed, ClaimOutcome::NoneReady { others_ready: false, remaining, .. }
                if dispatch::ready_by_counts(remaining));
            if !stale || asked_again == STALE_READ_RETRIES {
                break claimed;
            }
            // It read the tasks before the commit that opened the next wave and the
            // counts after it: ask again rather than read the whole list.
            asked_again += 1;
            tokio::task::yield_now().await;
        };
        match outcome {
            ClaimOutcome::Claimed { task, remaining } => {
                self.hub.task_list_changed(&self.db, list_id);
                Ok(ClaimResponse {
                    task: Some(*task),
                    next: NextAnswer {
                        next: Next::Dispatch,
                        in_flight: remaining.running,
                        retry_after_s: None,
                        remaining,
                        blocked: Vec::new(),
                    },
                })
            }
            ClaimOutcome::NoneReady {
                others_ready,
                remaining,
                earliest_lease,
            } => {
                let wait = |retry_after_s: u64| ClaimResponse {
                    task: None,
                    next: NextAnswer {
                        next: Next::Wait,
                        in_flight: remaining.running,
                        retry_after_s: Some(retry_after_s),
                        remaining,
                        blocked: Vec::new(),
                    },
                };
                if others_ready {
                    // Ready tasks exist, none for this persona: others will move the list.
                    return Ok(wait(WAIT_RETRY_SECS));
                }
                if remaining.running > 0 {
                    let at = now();
                    let earliest_s = earliest_lease
                        .map(|e| u64::try_from((e - at).num_seconds().max(0)).unwrap_or(0) + 1);
                    return Ok(wait(
                        earliest_s
                            .unwrap_or(WAIT_RETRY_SECS)
                            .clamp(1, WAIT_RETRY_SECS),
                    ));
                }
                // Nothing ready or running: the list is finished or blocked. The
                // counts say `done` when nothing is pending or abandoned; otherwise
                // saying which (and why) takes the whole list — a read, no write.
                if let Some(next) = NextAnswer::from_counts(remaining) {
                    return Ok(ClaimResponse { task: None, next });
                }
                let list = self.load_list(caller, list_id).await?;
                Ok(claim_answer(&list.tasks, mode, None))
            }
        }
    }

    /// Renews `holder`'s lease on a claimed task.
    pub async fn heartbeat_task(
        &self,
        caller: &Caller,
        task: TaskRef,
        request: HeartbeatRequest,
    ) -> Result<StoredTask, ServiceError> {
        let holder = Ident::parse("holder", &request.holder)?;
        let lease = lease(request.lease_s)?;
        let id = self.resolve_task(caller, &task).await?;
        if caller.allowed_projects().is_some() {
            match self.db.task_project(id).await? {
                Some(project_id) => caller.check_project(&project_id)?,
                None => return Err(ServiceError::not_found("task", &id.to_string())),
            }
        }
        match self.db.heartbeat_task(id, holder.as_str(), lease).await? {
            HeartbeatOutcome::Renewed(task) => Ok(*task),
            HeartbeatOutcome::NotFound => Err(ServiceError::not_found("task", &id.to_string())),
            HeartbeatOutcome::HeldByOther(held) => Err(held_by_other(held)),
            HeartbeatOutcome::NotClaimed(status) => Err(ServiceError::conflict(
                ProblemCode::TaskNotClaimed,
                format!(
                    "the task is {status} and holds no claim (never claimed, finished, or its \
                     lease ran out): claim a task with POST /v1/task-lists/{{id}}/claim"
                ),
            )
            .with_details(ProblemDetails::TaskStatus(status))),
        }
    }

    /// A task's history: claims, renewals, lease expiries and status changes.
    pub async fn task_history(
        &self,
        caller: &Caller,
        task: TaskRef,
    ) -> Result<TaskHistory, ServiceError> {
        let id = self.resolve_task(caller, &task).await?;
        let (project_id, events) = self
            .db
            .task_history(id)
            .await?
            .ok_or_else(|| ServiceError::not_found("task", &id.to_string()))?;
        caller.check_project(&project_id)?;
        Ok(TaskHistory { id, events })
    }
}
