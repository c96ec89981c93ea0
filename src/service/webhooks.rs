//! Webhooks (docs/api.md, "Webhooks"): subscribe, list, read, delete, rotate the
//! secret, see deliveries and replay one. A token limited to projects sees and
//! changes only its projects' webhooks; a webhook without a project (every
//! project's events) is for unrestricted tokens only. Forbidden is 403, not 404:
//! the id of another project's webhook is not a secret worth a lie.

use std::net::IpAddr;

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;
use uuid::Uuid;

use super::{Caller, ProblemCode, Service, ServiceError};
use crate::db::webhooks::{NewWebhook, WebhookRecord};
use crate::domain::ids::Ident;
pub use crate::domain::webhooks::Delivery;
use crate::domain::webhooks::{
    ROTATION_OVERLAP, Subscription, UrlRefusal, check_target, ip_literal, secret_from, url_host,
};

/// Deliveries a list shows at most (newest first).
const DELIVERY_PAGE: i64 = 200;
/// Longest description kept.
const MAX_DESCRIPTION_CHARS: usize = 1000;

/// A webhook as the API shows it: never its secret.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Webhook {
    pub id: Uuid,
    pub url: String,
    /// Event types, or `["*"]` for all.
    pub events: Vec<String>,
    /// `null`: every project's events (unrestricted tokens only).
    pub project_id: Option<String>,
    pub description: Option<String>,
    pub created_at: DateTime<Utc>,
    /// Set once a receiver answered 410 Gone: nothing is delivered any more.
    pub disabled: bool,
    pub disabled_reason: Option<String>,
    pub disabled_at: Option<DateTime<Utc>>,
}

impl From<WebhookRecord> for Webhook {
    fn from(w: WebhookRecord) -> Self {
        Webhook {
            id: w.id,
            url: w.url,
            events: Subscription::from_stored(&w.events),
            project_id: w.project_id,
            description: w.description,
            created_at: w.created_at,
            disabled: w.disabled_at.is_some(),
            disabled_reason: w.disabled_reason,
            disabled_at: w.disabled_at,
        }
    }
}

/// The answer to a create: the webhook and its secret, shown only here and on
/// rotation.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct CreatedWebhook {
    #[serde(flatten)]
    pub webhook: Webhook,
    /// `whsec_` + base64 of 32 random bytes: the key of the signatures.
    pub secret: String,
}

/// The answer to a rotation: the new secret. The old one keeps signing for 24 h.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct RotatedSecret {
    pub secret: String,
}

/// A failing delivery on the dashboard, with its webhook.
#[derive(Debug, Clone)]
pub struct FailingDelivery {
    pub delivery: Delivery,
    pub url: String,
    pub project_id: Option<String>,
}

/// What the dashboard's webhooks page shows.
#[derive(Debug, Clone)]
pub struct WebhooksOverview {
    pub webhooks: Vec<Webhook>,
    pub failing: Vec<FailingDelivery>,
}

fn random_secret() -> String {
    // Two v4 uuids: 32 bytes from the OS's random source (244 random bits).
    let mut bytes = [0u8; 32];
    bytes[..16].copy_from_slice(Uuid::new_v4().as_bytes());
    bytes[16..].copy_from_slice(Uuid::new_v4().as_bytes());
    secret_from(&bytes)
}

fn url_not_allowed(why: String) -> ServiceError {
    ServiceError::unprocessable(ProblemCode::WebhookUrlNotAllowed, why).field("url")
}

/// The body of a create, checked field by field.
struct CreateBody {
    url: String,
    events: Subscription,
    project_id: Option<String>,
    description: Option<String>,
}

fn parse_create(body: &Value) -> Result<CreateBody, ServiceError> {
    let Some(obj) = body.as_object() else {
        return Err(ServiceError::invalid_field(
            "body",
            "must be a JSON object {url, events, project_id?, description?}",
        ));
    };
    if let Some(unknown) = obj
        .keys()
        .find(|k| !["url", "events", "project_id", "description"].contains(&k.as_str()))
    {
        return Err(ServiceError::invalid_field(
            unknown.clone(),
            format!("unknown field {unknown:?}: expected url, events, project_id, description"),
        ));
    }
    let url = match obj.get("url") {
        Some(Value::String(url)) => url.trim().to_owned(),
        Some(_) => return Err(ServiceError::invalid_field("url", "must be a string")),
        None => {
            return Err(ServiceError::invalid_field(
                "url",
                "is required: the http(s) URL deliveries are POSTed to",
            ));
        }
    };
    if let Err(UrlRefusal::Invalid(why) | UrlRefusal::NotAllowed(why)) = url_host(&url) {
        return Err(ServiceError::invalid_field("url", why));
    }
    let events: Vec<String> = match obj.get("events") {
        Some(Value::Array(items)) => items
            .iter()
            .map(|v| v.as_str().map(str::to_owned))
            .collect::<Option<_>>()
            .ok_or_else(|| ServiceError::invalid_field("events", "must be an array of strings"))?,
        Some(_) => {
            return Err(ServiceError::invalid_field(
                "events",
                "must be an array of event types, or [\"*\"]",
            ));
        }
        None => {
            return Err(ServiceError::invalid_field(
                "events",
                "is required: the event types to send, or [\"*\"]",
            ));
        }
    };
    let events =
        Subscription::parse(&events).map_err(|why| ServiceError::invalid_field("events", why))?;
    let project_id = match obj.get("project_id") {
        None | Some(Value::Null) => None,
        Some(Value::String(p)) => Some(Ident::parse("project_id", p)?.as_str().to_owned()),
        Some(_) => {
            return Err(ServiceError::invalid_field(
                "project_id",
                "must be a string",
            ));
        }
    };
    let description = match obj.get("description") {
        None | Some(Value::Null) => None,
        Some(Value::String(d)) if d.chars().count() <= MAX_DESCRIPTION_CHARS => {
            if d.contains('\0') {
                return Err(ServiceError::invalid_field(
                    "description",
                    "must not contain U+0000",
                ));
            }
            Some(d.clone())
        }
        Some(Value::String(_)) => {
            return Err(ServiceError::invalid_field(
                "description",
                format!("must be at most {MAX_DESCRIPTION_CHARS} characters"),
            ));
        }
        Some(_) => {
            return Err(ServiceError::invalid_field(
                "description",
                "must be a string",
            ));
        }
    };
    Ok(CreateBody {
        url,
        events,
        project_id,
        description,
    })
}

impl Service {
    /// Refuses a target that is (or resolves to) an internal address, unless
    /// allowed. A name that does not resolve is accepted: the delivery checks again
    /// at every attempt.
    async fn check_url(&self, url: &str) -> Result<(), ServiceError> {
        let allow = self.settings.webhooks.allow_private;
        let (host, port) = url_host(url).map_err(|r| match r {
            UrlRefusal::Invalid(m) | UrlRefusal::NotAllowed(m) => {
                ServiceError::invalid_field("url", m)
            }
        })?;
        let addresses: Vec<IpAddr> = match ip_literal(&host) {
            Some(ip) => vec![ip],
            None if allow => Vec::new(),
            None => match tokio::time::timeout(
                std::time::Duration::from_secs(5),
                tokio::net::lookup_host((host.as_str(), port)),
            )
            .await
            {
                Ok(Ok(addrs)) => addrs.map(|a| a.ip()).collect(),
                _ => Vec::new(),
            },
        };
        check_target(&host, &addresses, allow).map_err(|r| match r {
            UrlRefusal::Invalid(m) | UrlRefusal::NotAllowed(m) => url_not_allowed(m),
        })
    }

    async fn load_webhook(&self, caller: &Caller, id: Uuid) -> Result<WebhookRecord, ServiceError> {
        let hook = self.db.webhook(id).await?;
        caller.visible(hook, "webhook", &id.to_string(), |h| {
            h.project_id.as_deref()
        })
    }

    pub async fn create_webhook(
        &self,
        caller: &Caller,
        body: &Value,
    ) -> Result<CreatedWebhook, ServiceError> {
        let body = parse_create(body)?;
        caller.check_optional_project(body.project_id.as_deref())?;
        self.check_url(&body.url).await?;
        let secret = random_secret();
        let stored = self
            .db
            .create_webhook(&NewWebhook {
                url: &body.url,
                events: body.events.to_stored(),
                project_id: body.project_id.as_deref(),
                description: body.description.as_deref(),
                secret: &secret,
            })
            .await?;
        Ok(CreatedWebhook {
            webhook: stored.into(),
            secret,
        })
    }

    /// The caller's webhooks: all for an unrestricted token, else its projects'.
    pub async fn webhooks(&self, caller: &Caller) -> Result<Vec<Webhook>, ServiceError> {
        let rows = self.db.webhooks(caller.projects()).await?;
        Ok(rows.into_iter().map(Webhook::from).collect())
    }

    pub async fn webhook(&self, caller: &Caller, id: Uuid) -> Result<Webhook, ServiceError> {
        Ok(self.load_webhook(caller, id).await?.into())
    }

    pub async fn delete_webhook(&self, caller: &Caller, id: Uuid) -> Result<(), ServiceError> {
        let hook = self.load_webhook(caller, id).await?;
        if !self.db.delete_webhook(hook.id).await? {
            return Err(ServiceError::not_found("webhook", &id.to_string()));
        }
        Ok(())
    }

    pub async fn rotate_webhook_secret(
        &self,
        caller: &Caller,
        id: Uuid,
    ) -> Result<RotatedSecret, ServiceError> {
        let hook = self.load_webhook(caller, id).await?;
        let secret = random_secret();
        if !self
            .db
            .rotate_webhook_secret(hook.id, &secret, ROTATION_OVERLAP)
            .await?
        {
            return Err(ServiceError::not_found("webhook", &id.to_string()));
        }
        Ok(RotatedSecret { secret })
    }

    pub async fn webhook_deliveries(
        &self,
        caller: &Caller,
        id: Uuid,
    ) -> Result<Vec<Delivery>, ServiceError> {
        let hook = self.load_webhook(caller, id).await?;
        let rows = self.db.webhook_deliveries(hook.id, DELIVERY_PAGE).await?;
        Ok(rows.into_iter().map(Delivery::shown).collect())
    }

    /// Queues a delivery again now, with the same event id.
    pub async fn replay_delivery(
        &self,
        caller: &Caller,
        id: Uuid,
        delivery: Uuid,
    ) -> Result<(), ServiceError> {
        let hook = self.load_webhook(caller, id).await?;
        if hook.disabled_at.is_some() {
            return Err(ServiceError::conflict(
                ProblemCode::Conflict,
                "the webhook is disabled (its receiver answered 410 Gone): create a new one",
            ));
        }
        if !self.db.replay_delivery(hook.id, delivery).await? {
            return Err(ServiceError::not_found("delivery", &delivery.to_string()));
        }
        Ok(())
    }

    /// The dashboard's page: the caller's webhooks and the deliveries failing.
    pub async fn webhooks_overview(
        &self,
        caller: &Caller,
    ) -> Result<WebhooksOverview, ServiceError> {
        let webhooks = self.webhooks(caller).await?;
        let failing = self.db.failing_deliveries(DELIVERY_PAGE).await?;
        let failing = caller
            .only_visible(failing, |(_, _, project)| project.as_deref())
            .into_iter()
            .map(|(d, url, project_id)| FailingDelivery {
                delivery: d.shown(),
                url,
                project_id,
            })
            .collect();
        Ok(WebhooksOverview { webhooks, failing })
    }
}

/// The OpenAPI shape of a create's body (the service reads it field by field).
#[derive(Debug, Clone, serde::Deserialize, ToSchema)]
#[allow(dead_code)]
pub struct CreateWebhookRequest {
    /// The http(s) URL deliveries are POSTed to. Loopback, private, link-local and
    /// metadata addresses are refused (`webhook_url_not_allowed`) unless
    /// `PLANGATE_WEBHOOK_ALLOW_PRIVATE=true`.
    pub url: String,
    /// Event types (`refine_job.succeeded`, `refine_job.failed`,
    /// `refine_job.cancelled`, `refine_run.finished`, `task_list.finished`,
    /// `task.failed`, `budget.exceeded`), or `["*"]` for all.
    pub events: Vec<String>,
    /// Only this project's events; absent: every project's (unrestricted tokens only).
    pub project_id: Option<String>,
    pub description: Option<String>,
}
