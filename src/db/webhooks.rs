//! Webhooks and their deliveries (docs/api.md, "Webhooks"). The outbox rows are
//! written by the state changes themselves (`db/outbox.rs`); this module stores the
//! subscriptions, lets delivery workers claim due deliveries under a lease and
//! records each attempt.

use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::FromRow;
use uuid::Uuid;

use crate::db::task_lists::now;
use crate::db::{Database, DbResult, push_bound_list};
use crate::domain::webhooks::{Delivery, DeliveryState};

/// A stored webhook (secrets included: the service decides what to show).
#[derive(Debug, Clone, FromRow)]
pub struct WebhookRecord {
    pub id: Uuid,
    pub url: String,
    /// `,type,type,` (see `domain::webhooks::Subscription`).
    pub events: String,
    pub project_id: Option<String>,
    pub description: Option<String>,
    pub secret: String,
    pub old_secret: Option<String>,
    pub old_secret_until: Option<DateTime<Utc>>,
    pub disabled_at: Option<DateTime<Utc>>,
    pub disabled_reason: Option<String>,
    pub created_at: DateTime<Utc>,
}

const WEBHOOK_COLUMNS: &str = "id, url, events, project_id, description, secret, old_secret, \
     old_secret_until, disabled_at, disabled_reason, created_at";

pub struct NewWebhook<'a> {
    pub url: &'a str,
    pub events: String,
    pub project_id: Option<&'a str>,
    pub description: Option<&'a str>,
    pub secret: &'a str,
}

const DELIVERY_COLUMNS: &str = "id, webhook_id, event_id, type, state, attempts, last_status_code, \
     last_error, last_attempt_at, next_attempt_at, delivered_at, created_at";

/// A delivery a worker holds: what it needs to send one attempt.
#[derive(Debug, Clone, FromRow)]
pub struct ClaimedDelivery {
    pub id: Uuid,
    pub event_id: Uuid,
    pub event_type: String,
    /// Failed attempts since the last replay: where the schedule stands.
    pub failures: i32,
    pub body: String,
    pub webhook_id: Uuid,
    pub url: String,
    pub secret: String,
    pub old_secret: Option<String>,
    pub old_secret_until: Option<DateTime<Utc>>,
}

/// What one attempt came to.
#[derive(Debug, Clone)]
pub enum AttemptResult {
    Delivered {
        status: u16,
    },
    /// Failed; `retry_in` is the wait before the next attempt, `None` when the
    /// schedule is spent.
    Failed {
        status: Option<u16>,
        error: String,
        retry_in: Option<Duration>,
    },
    /// 410: the webhook is disabled, its pending deliveries end.
    Gone {
        reason: String,
    },
}

impl AttemptResult {
    /// The `/metrics` outcome label.
    pub fn outcome(&self) -> &'static str {
        match self {
            AttemptResult::Delivered { .. } => "delivered",
            AttemptResult::Failed {
                retry_in: Some(_), ..
            } => "retrying",
            AttemptResult::Failed { retry_in: None, .. } => "failed",
            AttemptResult::Gone { .. } => "gone",
        }
    }
}

fn chrono(d: Duration) -> chrono::Duration {
    chrono::Duration::from_std(d).unwrap_or(chrono::Duration::MAX)
}

impl Database {
    pub async fn create_webhook(&self, new: &NewWebhook<'_>) -> DbResult<WebhookRecord> {
        let at = now();
        let id = Uuid::now_v7();
        let turn = self.writer_turn().await;
        let row = on_pool!(self, pool => {
            sqlx::query_as::<_, WebhookRecord>(sqlx::AssertSqlSafe(format!(
                "INSERT INTO webhooks (id, url, events, project_id, description, secret, created_at) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING {WEBHOOK_COLUMNS}"
            )))
            .bind(id)
            .bind(new.url)
            .bind(&new.events)
            .bind(new.project_id)
            .bind(new.description)
            .bind(new.secret)
            .bind(at)
            .fetch_one(pool)
            .await?
        });
        drop(turn);
        Ok(row)
    }

    pub async fn webhook(&self, id: Uuid) -> DbResult<Option<WebhookRecord>> {
        let sql = format!("SELECT {WEBHOOK_COLUMNS} FROM webhooks WHERE id = $1");
        self.row_by(&sql, id).await
    }

    /// Every webhook (`projects = None`) or those of the given projects, oldest first.
    pub async fn webhooks(&self, projects: Option<&[String]>) -> DbResult<Vec<WebhookRecord>> {
        let rows: Vec<WebhookRecord> = on_pool!(self, pool => {
            sqlx::query_as(sqlx::AssertSqlSafe(format!(
                "SELECT {WEBHOOK_COLUMNS} FROM webhooks ORDER BY created_at, id"
            )))
            .fetch_all(pool)
            .await?
        });
        Ok(match projects {
            None => rows,
            Some(allowed) => rows
                .into_iter()
                .filter(|w| w.project_id.as_ref().is_some_and(|p| allowed.contains(p)))
                .collect(),
        })
    }

    /// Deletes a webhook and its deliveries; `false` when there was none.
    pub async fn delete_webhook(&self, id: Uuid) -> DbResult<bool> {
        on_pool!(self, pool => {
            let (_turn, mut tx) = begin_write!(self, pool);
            sqlx::query("DELETE FROM webhook_deliveries WHERE webhook_id = $1")
                .bind(id)
                .execute(&mut *tx)
                .await?;
            let gone = sqlx::query("DELETE FROM webhooks WHERE id = $1")
                .bind(id)
                .execute(&mut *tx)
                .await?
                .rows_affected();
            tx.commit().await?;
            Ok(gone > 0)
        })
    }

    /// Replaces the secret; the old one keeps signing for `overlap`.
    pub async fn rotate_webhook_secret(
        &self,
        id: Uuid,
        secret: &str,
        overlap: Duration,
    ) -> DbResult<bool> {
        let at = now();
        let turn = self.writer_turn().await;
        let n = on_pool!(self, pool => {
            sqlx::query(
                "UPDATE webhooks SET old_secret = secret, old_secret_until = $3, secret = $2 \
                 WHERE id = $1",
            )
            .bind(id)
            .bind(secret)
            .bind(at + chrono(overlap))
            .execute(pool)
            .await?
            .rows_affected()
        });
        drop(turn);
        Ok(n > 0)
    }

    /// A webhook's deliveries, newest first, at most `limit`.
    pub async fn webhook_deliveries(
        &self,
        webhook_id: Uuid,
        limit: i64,
    ) -> DbResult<Vec<Delivery>> {
        Ok(on_pool!(self, pool => {
            sqlx::query_as(sqlx::AssertSqlSafe(format!(
                "SELECT {DELIVERY_COLUMNS} FROM webhook_deliveries WHERE webhook_id = $1 \
                 ORDER BY created_at DESC, id DESC LIMIT $2"
            )))
            .bind(webhook_id)
            .bind(limit)
            .fetch_all(pool)
            .await?
        }))
    }

    /// Deliveries not delivered that failed at least once, newest first (the
    /// dashboard's list), with their webhook's URL.
    pub async fn failing_deliveries(
        &self,
        limit: i64,
    ) -> DbResult<Vec<(Delivery, String, Option<String>)>> {
        let rows: Vec<Delivery> = on_pool!(self, pool => {
            sqlx::query_as(sqlx::AssertSqlSafe(format!(
                "SELECT {DELIVERY_COLUMNS} FROM webhook_deliveries \
                 WHERE state <> 'delivered' AND attempts > 0 \
                 ORDER BY last_attempt_at DESC LIMIT $1"
            )))
            .bind(limit)
            .fetch_all(pool)
            .await?
        });
        let mut out = Vec::with_capacity(rows.len());
        for d in rows {
            if let Some(w) = self.webhook(d.webhook_id).await? {
                out.push((d, w.url, w.project_id));
            }
        }
        Ok(out)
    }

    /// Sends a delivery again now (same event, same `webhook-id`), with the whole
    /// schedule ahead of it. `false` when the webhook has no such delivery.
    pub async fn replay_delivery(&self, webhook_id: Uuid, delivery_id: Uuid) -> DbResult<bool> {
        let at = now();
        let turn = self.writer_turn().await;
        let n = on_pool!(self, pool => {
            sqlx::query(
                "UPDATE webhook_deliveries SET state = 'pending', failures = 0, \
                 next_attempt_at = $3, claim_token = NULL, delivered_at = NULL \
                 WHERE id = $1 AND webhook_id = $2",
            )
            .bind(delivery_id)
            .bind(webhook_id)
            .bind(at)
            .execute(pool)
            .await?
            .rows_affected()
        });
        drop(turn);
        Ok(n > 0)
    }

    /// Claims up to `limit` due deliveries for `lease`: their next attempt moves to
    /// the lease's end, so if this process dies mid-attempt the delivery is due
    /// again then, for any replica (Postgres `SKIP LOCKED`: replicas claim
    /// different rows without waiting on each other).
    pub async fn claim_deliveries(
        &self,
        limit: i64,
        lease: Duration,
    ) -> DbResult<(Uuid, Vec<ClaimedDelivery>)> {
        let at = now();
        let token = Uuid::new_v4();
        let skip_locked = match self {
            Database::Postgres(_) => " FOR UPDATE SKIP LOCKED",
            Database::Sqlite(_) => "",
        };
        let claimed = on_pool!(self, pool => {
            let (_turn, mut tx) = begin_write!(self, pool);
            let ids: Vec<Uuid> = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
                "SELECT id FROM webhook_deliveries WHERE state = 'pending' AND next_attempt_at <= $1 \
                 ORDER BY next_attempt_at LIMIT $2{skip_locked}"
            )))
            .bind(at)
            .bind(limit)
            .fetch_all(&mut *tx)
            .await?;
            if ids.is_empty() {
                tx.rollback().await?;
                return Ok((token, Vec::new()));
            }
            let mut update = sqlx::QueryBuilder::new("UPDATE webhook_deliveries SET claim_token = ");
            update
                .push_bind(token)
                .push(", next_attempt_at = ")
                .push_bind(at + chrono(lease))
                .push(" WHERE id IN ");
            push_bound_list(&mut update, ids.iter().copied());
            update.build().execute(&mut *tx).await?;
            let rows: Vec<ClaimedDelivery> = sqlx::query_as(
                "SELECT d.id, d.event_id, d.type AS event_type, d.failures, e.body, \
                   w.id AS webhook_id, w.url, w.secret, w.old_secret, w.old_secret_until \
                 FROM webhook_deliveries d \
                 JOIN webhook_events e ON e.id = d.event_id \
                 JOIN webhooks w ON w.id = d.webhook_id \
                 WHERE d.claim_token = $1 AND w.disabled_at IS NULL",
            )
            .bind(token)
            .fetch_all(&mut *tx)
            .await?;
            tx.commit().await?;
            rows
        });
        Ok((token, claimed))
    }

    /// Records one attempt of a claimed delivery (fenced by its claim: a worker
    /// whose lease ran out and whose delivery another took records nothing).
    pub async fn record_attempt(
        &self,
        delivery_id: Uuid,
        webhook_id: Uuid,
        token: Uuid,
        result: &AttemptResult,
    ) -> DbResult<bool> {
        let at = now();
        let (state, status, error, next, failed): (
            DeliveryState,
            Option<u16>,
            Option<&str>,
            _,
            i32,
        ) = match result {
            AttemptResult::Delivered { status } => {
                (DeliveryState::Delivered, Some(*status), None, None, 0)
            }
            AttemptResult::Failed {
                status,
                error,
                retry_in,
            } => match retry_in {
                Some(wait) => (
                    DeliveryState::Pending,
                    *status,
                    Some(error.as_str()),
                    Some(at + chrono(*wait)),
                    1,
                ),
                None => (
                    DeliveryState::Failed,
                    *status,
                    Some(error.as_str()),
                    None,
                    1,
                ),
            },
            AttemptResult::Gone { reason } => (
                DeliveryState::Failed,
                Some(410),
                Some(reason.as_str()),
                None,
                1,
            ),
        };
        on_pool!(self, pool => {
            let (_turn, mut tx) = begin_write!(self, pool);
            let n = sqlx::query(
                "UPDATE webhook_deliveries SET state = $3, attempts = attempts + 1, \
                 failures = failures + $4, last_status_code = $5, last_error = $6, \
                 last_attempt_at = $7, next_attempt_at = $8, claim_token = NULL, \
                 delivered_at = CASE WHEN $3 = 'delivered' THEN $7 ELSE delivered_at END \
                 WHERE id = $1 AND claim_token = $2",
            )
            .bind(delivery_id)
            .bind(token)
            .bind(state)
            .bind(failed)
            .bind(status.map(i32::from))
            .bind(error)
            .bind(at)
            .bind(next)
            .execute(&mut *tx)
            .await?
            .rows_affected();
            if n > 0
                && let AttemptResult::Gone { reason } = result
            {
                sqlx::query(
                    "UPDATE webhooks SET disabled_at = $2, disabled_reason = $3 \
                     WHERE id = $1 AND disabled_at IS NULL",
                )
                .bind(webhook_id)
                .bind(at)
                .bind(reason.as_str())
                .execute(&mut *tx)
                .await?;
                sqlx::query(
                    "UPDATE webhook_deliveries SET state = 'failed', next_attempt_at = NULL, \
                     last_error = COALESCE(last_error, 'the webhook was disabled') \
                     WHERE webhook_id = $1 AND state = 'pending'",
                )
                .bind(webhook_id)
                .execute(&mut *tx)
                .await?;
            }
            tx.commit().await?;
            Ok(n > 0)
        })
    }

    /// Retention: deletes ended deliveries (delivered or failed) created before
    /// `cutoff`, then the events no delivery refers to. A pending delivery is kept
    /// whatever its age: it may still be sent. Returns the deliveries deleted.
    pub async fn delete_webhook_deliveries_before(&self, cutoff: DateTime<Utc>) -> DbResult<u64> {
        on_pool!(self, pool => {
            let (_turn, mut tx) = begin_write!(self, pool);
            let n = sqlx::query(
                "DELETE FROM webhook_deliveries WHERE state <> 'pending' AND created_at < $1",
            )
            .bind(cutoff)
            .execute(&mut *tx)
            .await?
            .rows_affected();
            sqlx::query(
                "DELETE FROM webhook_events WHERE created_at < $1 AND NOT EXISTS \
                 (SELECT 1 FROM webhook_deliveries d WHERE d.event_id = webhook_events.id)",
            )
            .bind(cutoff)
            .execute(&mut *tx)
            .await?;
            tx.commit().await?;
            Ok(n)
        })
    }
}
