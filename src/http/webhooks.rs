//! `/v1/webhooks`: signed Standard Webhooks deliveries of what ended (docs/api.md,
//! "Webhooks"). The use cases are in `service/webhooks.rs`.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::Value;
use utoipa_axum::{router::OpenApiRouter, routes};

use super::AppState;
use super::auth::ApiCall;
use super::extract::{Json, Path, WebhookPath};
use super::responses::{DatabaseUnavailable, WebhookById};
use crate::http::problem::{ApiError, Problem};
use crate::http::responses::{ForbiddenProject, JsonBodyRejections};
use crate::service::parse_id;
use crate::service::webhooks::{
    CreateWebhookRequest, CreatedWebhook, Delivery, RotatedSecret, Webhook,
};

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(create_webhook, list_webhooks))
        .routes(routes!(get_webhook, delete_webhook))
        .routes(routes!(rotate_secret))
        .routes(routes!(list_deliveries))
        .routes(routes!(replay_delivery))
}

/// Subscribe a URL to events. The answer carries the signing `secret`
/// (`whsec_…`), shown only here and on rotation.
#[utoipa::path(post, path = "/v1/webhooks", tag = "webhooks",
    request_body(content = CreateWebhookRequest, content_type = "application/json"),
    responses(
        (status = 201, description = "Created, with its secret", body = CreatedWebhook,
            headers(("Location" = String, description = "The webhook's URL"))),
        ForbiddenProject,
        (status = 422, description = "`invalid_field` (a missing or non-http(s) `url`, missing `events`, an unknown \
            event type; `field` names it) or `webhook_url_not_allowed` (the `url` is or resolves to a loopback, \
            private, link-local or metadata address)", body = Problem, content_type = "application/problem+json"),
        JsonBodyRejections,
        DatabaseUnavailable,
    ))]
async fn create_webhook(
    ApiCall { service, caller }: ApiCall,
    Json(body): Json<Value>,
) -> Result<Response, ApiError> {
    let created = service.create_webhook(&caller, &body).await?;
    let location = format!("/v1/webhooks/{}", created.webhook.id);
    Ok((
        StatusCode::CREATED,
        [(axum::http::header::LOCATION, location)],
        Json(created),
    )
        .into_response())
}

/// The webhooks the token may see: all for an unrestricted token, its projects'
/// for a limited one. No secrets.
#[utoipa::path(get, path = "/v1/webhooks", tag = "webhooks",
    responses(
        (status = 200, description = "The webhooks, oldest first", body = Vec<Webhook>),
        DatabaseUnavailable,
    ))]
async fn list_webhooks(
    ApiCall { service, caller }: ApiCall,
) -> Result<Json<Vec<Webhook>>, ApiError> {
    Ok(Json(service.webhooks(&caller).await?))
}

/// One webhook (no secret); `disabled` with its reason once a receiver answered
/// 410 Gone.
#[utoipa::path(get, path = "/v1/webhooks/{id}", tag = "webhooks",
    params(("id" = Uuid, Path, description = "Webhook id")),
    responses(
        (status = 200, description = "The webhook", body = Webhook),
        WebhookById,
    ))]
async fn get_webhook(
    ApiCall { service, caller }: ApiCall,
    WebhookPath(id): WebhookPath,
) -> Result<Json<Webhook>, ApiError> {
    Ok(Json(service.webhook(&caller, id).await?))
}

/// Delete a webhook and its deliveries.
#[utoipa::path(delete, path = "/v1/webhooks/{id}", tag = "webhooks",
    params(("id" = Uuid, Path, description = "Webhook id")),
    responses(
        (status = 204, description = "Deleted"),
        WebhookById,
    ))]
async fn delete_webhook(
    ApiCall { service, caller }: ApiCall,
    WebhookPath(id): WebhookPath,
) -> Result<StatusCode, ApiError> {
    service.delete_webhook(&caller, id).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// A new secret. For 24 hours every delivery carries two signatures, by the old
/// secret and by the new one.
#[utoipa::path(post, path = "/v1/webhooks/{id}/rotate-secret", tag = "webhooks",
    params(("id" = Uuid, Path, description = "Webhook id")),
    responses(
        (status = 200, description = "The new secret", body = RotatedSecret),
        WebhookById,
    ))]
async fn rotate_secret(
    ApiCall { service, caller }: ApiCall,
    WebhookPath(id): WebhookPath,
) -> Result<Json<RotatedSecret>, ApiError> {
    Ok(Json(service.rotate_webhook_secret(&caller, id).await?))
}

/// The webhook's deliveries, newest first (at most 200): each event's attempts,
/// last status or error, next attempt, delivered at.
#[utoipa::path(get, path = "/v1/webhooks/{id}/deliveries", tag = "webhooks",
    params(("id" = Uuid, Path, description = "Webhook id")),
    responses(
        (status = 200, description = "The deliveries", body = Vec<Delivery>),
        WebhookById,
    ))]
async fn list_deliveries(
    ApiCall { service, caller }: ApiCall,
    WebhookPath(id): WebhookPath,
) -> Result<Json<Vec<Delivery>>, ApiError> {
    Ok(Json(service.webhook_deliveries(&caller, id).await?))
}

/// Send a delivery again, with the same `webhook-id`, and the whole retry
/// schedule ahead of it.
#[utoipa::path(post, path = "/v1/webhooks/{id}/deliveries/{delivery_id}/replay", tag = "webhooks",
    params(
        ("id" = Uuid, Path, description = "Webhook id"),
        ("delivery_id" = Uuid, Path, description = "Delivery id"),
    ),
    responses(
        (status = 202, description = "Queued: sent within a second or two"),
        (status = 409, description = "`conflict`: the webhook is disabled", body = Problem, content_type = "application/problem+json"),
        WebhookById,
    ))]
async fn replay_delivery(
    ApiCall { service, caller }: ApiCall,
    Path((raw_id, raw_delivery)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    service
        .replay_delivery(
            &caller,
            parse_id(&raw_id, "webhook")?,
            parse_id(&raw_delivery, "delivery")?,
        )
        .await?;
    Ok(StatusCode::ACCEPTED)
}
