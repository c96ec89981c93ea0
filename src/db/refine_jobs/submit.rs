//! Submitting refine jobs: idempotent by key, and stored in groups — the jobs
//! submitted at the same moment share one transaction (docs/jobs.md, "Group
//! commit").

use chrono::{DateTime, Utc};
use tokio::sync::{mpsc, oneshot};
use uuid::Uuid;

use super::{Created, JobProgress, NewRefineJob, StoredJob, budget_of};
use crate::db::task_lists::now;
use crate::db::{Database, DbError, DbResult};
use crate::domain::job::JobStatus;
use crate::domain::refine::JobKind;
use crate::domain::usage::UsageTotals;

/// Inserts jobs, their L0 rows and their `queued` events inside `$tx`, a few
/// multi-row statements for all of them; evaluates to the ids inserted (a job whose
/// idempotency key is taken, by a stored job or an earlier one of `$jobs`, is not).
/// Rows go in chunks of power-of-two sizes, so the statements prepared stay few
/// whatever the number of jobs ([`pow2_chunks`](crate::db::refine_jobs::pow2_chunks)).
macro_rules! insert_jobs {
    ($tx:expr, $jobs:expr, $at:expr) => {{
        use $crate::db::refine_jobs::{NewRefineJob, pow2_chunks};
        let jobs: &[&NewRefineJob] = $jobs;
        let at: chrono::DateTime<chrono::Utc> = $at;
        let mut inserted: Vec<uuid::Uuid> = Vec::with_capacity(jobs.len());
        for chunk in pow2_chunks(jobs, 32) {
            let mut q = sqlx::QueryBuilder::new(
                "INSERT INTO refine_jobs (id, status, phase_id, run_id, project_id, team_pk, \
                 executor, executor_kind, request, idempotency_key, request_hash, max_attempts, \
                 run_after, l0_total, version, created_at, updated_at, max_cost_usd, \
                 max_output_tokens, budget_action, retry_of, trace_parent) ",
            );
            q.push_values(chunk, |mut b, new| {
                b.push_bind(new.id)
                    .push("'queued'")
                    .push_bind(new.phase_id.as_str())
                    .push_bind(new.run_id)
                    .push_bind(new.project_id.as_deref())
                    .push_bind(new.team_pk.as_deref())
                    .push_bind(new.executor.as_str())
                    .push_bind(new.executor_kind)
                    .push_bind(sqlx::types::Json(&new.request))
                    .push_bind(new.idempotency_key.as_deref())
                    .push_bind(new.request_hash.as_deref())
                    .push_bind(i32::try_from(new.max_attempts).unwrap_or(i32::MAX))
                    .push_bind(at)
                    .push_bind(i32::try_from(new.l0s.len()).unwrap_or(i32::MAX))
                    .push("1")
                    .push_bind(at)
                    .push_bind(at)
                    .push_bind(new.budget.max_cost_usd)
                    .push_bind(new.budget.max_output_tokens)
                    .push_bind(new.budget.budget_action)
                    .push_bind(new.retry_of)
                    .push_bind(new.trace_parent.as_deref());
            });
            q.push(" ON CONFLICT (idempotency_key) DO NOTHING RETURNING id");
            let ids: Vec<uuid::Uuid> = q.build_query_scalar().fetch_all(&mut *$tx).await?;
            inserted.extend(ids);
        }
        let stored: Vec<&NewRefineJob> = jobs
            .iter()
            .copied()
            .filter(|j| inserted.contains(&j.id))
            .collect();
        let rows: Vec<(&NewRefineJob, usize, &(String, i32))> = stored
            .iter()
            .flat_map(|new| new.l0s.iter().enumerate().map(move |(i, l0)| (*new, i, l0)))
            .collect();
        for chunk in pow2_chunks(&rows, 256) {
            let mut q = sqlx::QueryBuilder::new(
                "INSERT INTO refine_l0_runs (job_id, assignment_id, position, batch, status, \
                 project_id, team_pk) ",
            );
            q.push_values(chunk, |mut b, (new, i, (assignment_id, batch))| {
                b.push_bind(new.id)
                    .push_bind(assignment_id.as_str())
                    .push_bind(i32::try_from(*i).unwrap_or(i32::MAX))
                    .push_bind(*batch)
                    .push("'pending'")
                    .push_bind(new.project_id.as_deref())
                    .push_bind(new.team_pk.as_deref());
            });
            q.build().execute(&mut *$tx).await?;
        }
        let (event, data) = $crate::db::refine_jobs::state_event(
            $crate::domain::job::JobStatus::Queued,
            0,
            serde_json::json!({}),
        );
        for chunk in pow2_chunks(&stored, 32) {
            let mut q = sqlx::QueryBuilder::new(
                "INSERT INTO refine_job_events (job_id, seq, event, data, created_at) ",
            );
            q.push_values(chunk, |mut b, new| {
                b.push_bind(new.id)
                    .push("1")
                    .push_bind(event)
                    .push_bind(sqlx::types::Json(&data))
                    .push_bind(at);
            });
            q.build().execute(&mut *$tx).await?;
        }
        inserted
    }};
}

/// Most jobs one group transaction stores.
const MAX_GROUP: usize = 64;

/// Groups stored at once: one writer capped creates (each group waits for its round
/// trips and a WAL flush); why three, measured: docs/jobs.md, "Group commit".
const WRITERS: usize = 3;

impl Database {
    /// Inserts jobs in one transaction; returns the ids inserted (a job whose
    /// idempotency key is taken is not).
    async fn insert_refine_jobs(
        &self,
        jobs: &[&NewRefineJob],
        at: DateTime<Utc>,
    ) -> DbResult<Vec<Uuid>> {
        on_pool!(self, pool => {
            let (_turn, mut tx) = begin_write!(self, pool);
            let inserted = insert_jobs!(tx, jobs, at);
            tx.commit().await?;
            Ok(inserted)
        })
    }

    /// The answer to a create: the job as inserted at `at`, or what its key found.
    async fn created(
        &self,
        new: &NewRefineJob,
        at: DateTime<Utc>,
        inserted: bool,
    ) -> DbResult<Created<StoredJob>> {
        if inserted {
            return Ok(Created::New(as_inserted(new, at)));
        }
        // A create with the same key committed first (in another group or replica).
        let key = new.idempotency_key.as_deref().unwrap_or_default();
        let Some(first) = self.refine_job_by_key(key).await? else {
            // Deleted by retention between two statements: a conflict, retryable.
            return Err(DbError::Conflict(
                "the idempotency key's job was just deleted; retry".into(),
            ));
        };
        self.replay(first, new.request_hash.as_deref()).await
    }

    /// The job holding this idempotency key, if any.
    pub async fn refine_job_by_key(&self, key: &str) -> DbResult<Option<KeyedJob>> {
        let sql = "SELECT id, request_hash FROM refine_jobs WHERE idempotency_key = $1";
        let found: Option<(Uuid, Option<String>)> = self.row_by(sql, key).await?;
        Ok(found.map(|(id, request_hash)| KeyedJob { id, request_hash }))
    }

    /// What a create whose key `first` holds answers: the first job when the bodies
    /// hash alike, else `KeyReused`.
    pub async fn replay(
        &self,
        first: KeyedJob,
        request_hash: Option<&str>,
    ) -> DbResult<Created<StoredJob>> {
        if first.request_hash.as_deref() != request_hash {
            return Ok(Created::KeyReused);
        }
        Ok(self
            .refine_job(first.id)
            .await?
            .map_or(Created::KeyReused, Created::Existing))
    }
}

/// The job an idempotency key names, and the hash of the body that created it.
#[derive(Debug, Clone)]
pub struct KeyedJob {
    pub id: Uuid,
    pub request_hash: Option<String>,
}

/// A submission and where its outcome goes.
type Waiting = (NewRefineJob, oneshot::Sender<(NewRefineJob, GroupOutcome)>);

/// Group commit for submitted jobs: each is stored by one of [`WRITERS`] writer
/// tasks; a free writer takes every submission waiting and stores them in one
/// transaction — one commit, one WAL flush and a few multi-row statements for the
/// lot instead of five round trips each (bench/README.md, "queue.sh"). Nothing
/// waits for a group to fill: a submission that finds a writer idle is stored at
/// once, alone. A create still answers only after its own job is committed.
#[derive(Clone)]
pub struct SubmitQueue {
    db: Database,
    writer: std::sync::Arc<std::sync::OnceLock<mpsc::UnboundedSender<Waiting>>>,
}

impl SubmitQueue {
    pub fn new(db: Database) -> Self {
        SubmitQueue {
            db,
            writer: Default::default(),
        }
    }

    /// Stores `job` (with the jobs submitted at the same moment). With an
    /// idempotency key the unique constraint decides: a second create with the same
    /// key finds the first instead of inserting.
    pub async fn create(&self, job: NewRefineJob) -> DbResult<Created<StoredJob>> {
        let writer = self.writer.get_or_init(|| {
            // Started on first use, inside the runtime that serves the creates; they
            // end when the last queue handle is dropped.
            let (sender, receiver) = mpsc::unbounded_channel();
            let receiver = std::sync::Arc::new(tokio::sync::Mutex::new(receiver));
            for _ in 0..WRITERS {
                tokio::spawn(write_groups(self.db.clone(), receiver.clone()));
            }
            sender
        });
        let (reply, answer) = oneshot::channel();
        if writer.send((job, reply)).is_err() {
            return Err(DbError::Conflict("the job writer stopped; retry".into()));
        }
        let Ok((job, outcome)) = answer.await else {
            return Err(DbError::Conflict("the job writer stopped; retry".into()));
        };
        let (inserted, at) = outcome?;
        self.db.created(&job, at, inserted).await
    }
}

/// The writer: stores what is waiting as one group, then the next.
async fn write_groups(
    db: Database,
    waiting: std::sync::Arc<tokio::sync::Mutex<mpsc::UnboundedReceiver<Waiting>>>,
) {
    let mut group: Vec<Waiting> = Vec::with_capacity(MAX_GROUP);
    loop {
        // The lock is held only while taking a group: the next writer takes the
        // creates that arrive while this one stores its group.
        let taken = waiting.lock().await.recv_many(&mut group, MAX_GROUP).await;
        if taken == 0 {
            return;
        }
        let (jobs, replies): (Vec<NewRefineJob>, Vec<_>) = group.drain(..).unzip();
        for (stored, reply) in store_group(&db, jobs).await.into_iter().zip(replies) {
            // A create that gave up waiting (its client left) needs no answer.
            let _ = reply.send(stored);
        }
    }
}

/// What storing one job of a group came to: inserted or not (its key was taken),
/// and when.
pub type GroupOutcome = DbResult<(bool, DateTime<Utc>)>;

/// Stores `group` in one transaction; when that fails, stores each job alone, so
/// one job's error is its own and the others go in. Returns each job with its
/// outcome, in the order given.
pub async fn store_group(
    db: &Database,
    group: Vec<NewRefineJob>,
) -> Vec<(NewRefineJob, GroupOutcome)> {
    let at = now();
    let mut jobs: Vec<&NewRefineJob> = group.iter().collect();
    // Keys in one order in every group: two groups inserting the same keys
    // concurrently wait for each other instead of deadlocking.
    jobs.sort_by(|a, b| a.idempotency_key.cmp(&b.idempotency_key));
    let stored = db.insert_refine_jobs(&jobs, at).await;
    drop(jobs);
    match stored {
        Ok(ids) => group
            .into_iter()
            .map(|job| {
                let inserted = ids.contains(&job.id);
                (job, Ok((inserted, at)))
            })
            .collect(),
        Err(e) if group.len() == 1 => group.into_iter().zip([Err(e)]).collect(),
        Err(_) => {
            let mut outcomes = Vec::with_capacity(group.len());
            for job in group {
                let at = now();
                let outcome = db
                    .insert_refine_jobs(&[&job], at)
                    .await
                    .map(|ids| (ids.contains(&job.id), at));
                outcomes.push((job, outcome));
            }
            outcomes
        }
    }
}

/// The job as `insert_jobs!` just wrote it (what reading it back would return: the
/// insert is its whole state, so the create answers without a second round trip).
fn as_inserted(new: &NewRefineJob, at: DateTime<Utc>) -> StoredJob {
    StoredJob {
        id: new.id,
        kind: JobKind::Refine,
        status: JobStatus::Queued,
        phase_id: new.phase_id.clone(),
        run_id: new.run_id,
        project_id: new.project_id.clone(),
        team_pk: new.team_pk.clone(),
        executor: new.executor.clone(),
        executor_kind: new.executor_kind,
        created_at: at,
        started_at: None,
        cancel_requested_at: None,
        finished_at: None,
        updated_at: at,
        attempt: 0,
        max_attempts: i32::try_from(new.max_attempts).unwrap_or(i32::MAX),
        progress: JobProgress {
            l0_total: i64::try_from(new.l0s.len()).unwrap_or(i64::MAX),
            ..JobProgress::default()
        },
        log: Vec::new(),
        result: None,
        phase_refined_path: None,
        error: None,
        version: 1,
        usage: UsageTotals::default(),
        budget: budget_of(
            new.budget.max_cost_usd,
            new.budget.max_output_tokens,
            new.budget.budget_action,
        ),
        retry_of: new.retry_of,
        retried_by: None,
    }
}

/// What storing a retry came to.
#[derive(Debug)]
pub enum RetryInsert {
    Inserted(Box<StoredJob>),
    /// The job was retried before: the retry's id.
    AlreadyRetried(Uuid),
    /// The job to retry is gone (deleted by retention meanwhile).
    Gone,
}

impl Database {
    /// Stores `new`, the retry of job `original`, unless `original` was retried
    /// already: one transaction holding the original's row, so two retries of one
    /// job cannot both go in (the unique index on `retry_of` backs this).
    pub async fn insert_retry(&self, original: Uuid, new: NewRefineJob) -> DbResult<RetryInsert> {
        let at = now();
        on_pool!(self, pool => {
            let (_turn, mut tx) = begin_write!(self, pool);
            let held: Option<(Uuid,)> = locked_row!(self, tx, "refine_jobs", "id", original);
            if held.is_none() {
                return Ok(RetryInsert::Gone);
            }
            let existing: Option<Uuid> =
                sqlx::query_scalar("SELECT id FROM refine_jobs WHERE retry_of = $1")
                    .bind(original)
                    .fetch_optional(&mut *tx)
                    .await?;
            if let Some(retry) = existing {
                return Ok(RetryInsert::AlreadyRetried(retry));
            }
            let jobs = [&new];
            insert_jobs!(tx, &jobs, at);
            tx.commit().await?;
        });
        Ok(RetryInsert::Inserted(Box::new(as_inserted(&new, at))))
    }
}
