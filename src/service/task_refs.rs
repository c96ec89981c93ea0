//! How callers name a task: the server's id, or the planner's `task_id` within a
//! list (docs/api.md, "Task lists": agents know `"t-1"`, not the server's UUID). Both
//! transports build a [`TaskRef`]; every task use case resolves it here, once.

use uuid::Uuid;

use super::{Caller, ErrorKind, ProblemCode, Service, ServiceError};

/// Which id to pass for a task, for refusals that must say so.
pub const TASK_ID_HINT: &str = "task_id is the planner's id (e.g. \"t-1\") together with \
     task_list_id (create_task_list's task_list_id), or the task's server id alone (`id` in \
     create_task_list, ready_tasks and claim_task answers)";

/// Which id to pass for a task list.
pub const TASK_LIST_ID_HINT: &str =
    "task_list_id is the server id of the task list: the task_list_id create_task_list answered";

/// A task as a caller names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TaskRef {
    /// The server's id (`id` in the answers that list tasks).
    Id(Uuid),
    /// The planner's `task_id` in the list with this server id. A server id in
    /// `task_id` is accepted too (when no task of the list is named so).
    InList { task_list_id: Uuid, task_id: String },
}

impl From<Uuid> for TaskRef {
    fn from(id: Uuid) -> Self {
        TaskRef::Id(id)
    }
}

impl TaskRef {
    /// From the `task_id` and optional `task_list_id` arguments of a tool: with a
    /// list, `task_id` is the planner's id (or the server id); without one it must
    /// be the server id. Refusals name the field and say which id to pass.
    pub fn from_args(task_id: &str, task_list_id: Option<&str>) -> Result<Self, ServiceError> {
        match task_list_id {
            Some(list) => Ok(TaskRef::InList {
                task_list_id: parse_uuid("task_list_id", list, TASK_LIST_ID_HINT)?,
                task_id: task_id.to_owned(),
            }),
            None => Uuid::parse_str(task_id).map(TaskRef::Id).map_err(|_| {
                ServiceError::invalid_field(
                    "task_list_id",
                    format!(
                        "task_id {task_id:?} is not a server id, so task_list_id is required: \
                         {TASK_ID_HINT}"
                    ),
                )
            }),
        }
    }
}

/// A UUID argument, refused naming its field and which id to pass.
pub fn parse_uuid(field: &str, value: &str, hint: &str) -> Result<Uuid, ServiceError> {
    Uuid::parse_str(value).map_err(|_| invalid_id(field, &format!("{value:?}"), hint))
}

/// 422 `invalid_field`: `shown` is not an id (`shown` as the caller sent it).
pub fn invalid_id(field: &str, shown: &str, hint: &str) -> ServiceError {
    ServiceError::invalid_field(
        field,
        format!("{field} must be a UUID, not {shown}: {hint}"),
    )
}

impl Service {
    /// The server id of the task `task` names. A planner id is looked up in its
    /// list, whose project the caller must be allowed (403 before anything about
    /// the task is told); a server id is passed on as is, for the use case to look
    /// up as it always did.
    pub(crate) async fn resolve_task(
        &self,
        caller: &Caller,
        task: &TaskRef,
    ) -> Result<Uuid, ServiceError> {
        let (task_list_id, task_id) = match task {
            TaskRef::Id(id) => return Ok(*id),
            TaskRef::InList {
                task_list_id,
                task_id,
            } => (*task_list_id, task_id.as_str()),
        };
        let or_id = Uuid::parse_str(task_id).ok();
        // Postgres cannot hold U+0000, so no task is named so: do not ask it.
        let found = if task_id.contains('\0') {
            self.db
                .task_list_project(task_list_id)
                .await?
                .map(|project| (project, None))
        } else {
            self.db.task_in_list(task_list_id, task_id, or_id).await?
        };
        let Some((project_id, id)) = found else {
            return Err(ServiceError::new(
                ErrorKind::NotFound,
                ProblemCode::NotFound,
                format!("task list {task_list_id} does not exist: {TASK_LIST_ID_HINT}"),
            )
            .field("task_list_id"));
        };
        caller.check_project(&project_id)?;
        id.ok_or_else(|| {
            ServiceError::new(
                ErrorKind::NotFound,
                ProblemCode::NotFound,
                format!(
                    "task list {task_list_id} has no task {task_id:?}: task_id is the planner's \
                     id of one of its tasks (or the task's server id)"
                ),
            )
            .field("task_id")
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_server_id_alone_or_a_planner_id_with_its_list() {
        let id = Uuid::now_v7();
        assert_eq!(
            TaskRef::from_args(&id.to_string(), None).unwrap(),
            TaskRef::Id(id)
        );
        assert_eq!(
            TaskRef::from_args("t-1", Some(&id.to_string())).unwrap(),
            TaskRef::InList {
                task_list_id: id,
                task_id: "t-1".into()
            }
        );
        let planner_alone = TaskRef::from_args("t-1", None).unwrap_err();
        assert_eq!(planner_alone.code, ProblemCode::InvalidField);
        assert_eq!(planner_alone.details.field(), Some("task_list_id"));
        assert!(planner_alone.detail.contains("create_task_list"));
        let bad_list = TaskRef::from_args("t-1", Some("t-1")).unwrap_err();
        assert_eq!(bad_list.details.field(), Some("task_list_id"));
    }
}
