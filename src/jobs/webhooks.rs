//! The webhook delivery worker (docs/api.md, "Webhooks"): claims due deliveries
//! from the outbox under a lease, sends each attempt signed (Standard Webhooks v1)
//! on its own task, and records the outcome. A request or job that causes an event
//! only writes rows in its own transaction: nothing here runs on its path.
//!
//! Every replica runs one; Postgres `SKIP LOCKED` hands each delivery to one of
//! them. A process killed mid-attempt leaves the delivery claimed until its lease
//! ends; then any replica sends it again, with the same `webhook-id`.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use crate::config::WebhookSettings;
use crate::db::Database;
use crate::db::webhooks::{AttemptResult, ClaimedDelivery};
use crate::domain::webhooks::{
    AnswerVerdict, ROTATION_OVERLAP, check_target, ip_literal, next_delay, outcome_of,
    parse_retry_after, signature_header, url_host,
};

/// How often the worker looks for due deliveries (a replay or a new event is
/// sent within this, plus the attempt).
const POLL: Duration = Duration::from_millis(500);
/// Attempts in flight per process.
const CONCURRENCY: usize = 32;
/// How long a claim outlives an attempt's timeout (docs/configuration.md, "Webhooks").
const CLAIM_MARGIN: Duration = Duration::from_secs(10);
/// At most this much of a receiver's answer is read.
pub const MAX_ANSWER_BYTES: usize = 64 * 1024;
/// How much of an answer's text the delivery keeps as its `last_error`.
const ERROR_EXCERPT: usize = 300;

/// Resolves a target's host and refuses it when any address is internal (unless
/// allowed): checked at every attempt, since DNS can change after the create, and
/// on the addresses the connection then uses.
struct TargetResolver {
    allow_private: bool,
}

impl reqwest::dns::Resolve for TargetResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let allow_private = self.allow_private;
        let host = name.as_str().to_owned();
        Box::pin(async move {
            let addrs: Vec<SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let ips: Vec<IpAddr> = addrs.iter().map(SocketAddr::ip).collect();
            check_target(&host, &ips, allow_private).map_err(|refusal| {
                let why = match refusal {
                    crate::domain::webhooks::UrlRefusal::Invalid(m)
                    | crate::domain::webhooks::UrlRefusal::NotAllowed(m) => m,
                };
                Box::<dyn std::error::Error + Send + Sync>::from(format!(
                    "webhook_url_not_allowed: {why}"
                ))
            })?;
            let addrs: reqwest::dns::Addrs = Box::new(addrs.into_iter());
            Ok(addrs)
        })
    }
}

/// The delivery client: no redirects (a 3xx is a failed attempt), the attempt's
/// timeout, the target check in its resolver.
pub fn client(settings: &WebhookSettings) -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(settings.timeout)
        .connect_timeout(settings.timeout)
        .dns_resolver(Arc::new(TargetResolver {
            allow_private: settings.allow_private,
        }))
        .user_agent(concat!("plangate-webhooks/", env!("CARGO_PKG_VERSION")))
        .build()
        .unwrap_or_default()
}

/// Runs until `stop`.
pub async fn run(db: Database, settings: WebhookSettings, stop: CancellationToken) {
    let settings = Arc::new(settings);
    let http = client(&settings);
    let slots = Arc::new(Semaphore::new(CONCURRENCY));
    // Past one attempt's longest time (the client's timeout covers connect, send
    // and answer): a live worker records before its claim lapses.
    let lease = settings.timeout + CLAIM_MARGIN;
    loop {
        let free = slots.available_permits();
        if free > 0 {
            match db.claim_deliveries(free as i64, lease).await {
                Ok((token, claimed)) => {
                    for delivery in claimed {
                        let Ok(permit) = slots.clone().acquire_owned().await else {
                            return;
                        };
                        let (db, http, settings) = (db.clone(), http.clone(), settings.clone());
                        tokio::spawn(async move {
                            deliver(&db, &http, &settings, token, delivery).await;
                            drop(permit);
                        });
                    }
                }
                Err(e) => tracing::warn!(error = %e, "could not claim webhook deliveries"),
            }
        }
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(POLL) => {}
        }
    }
}

async fn deliver(
    db: &Database,
    http: &reqwest::Client,
    settings: &WebhookSettings,
    token: uuid::Uuid,
    delivery: ClaimedDelivery,
) {
    let result = attempt(http, settings, &delivery).await;
    metrics::counter!("webhook_deliveries_total", "outcome" => result.outcome()).increment(1);
    match &result {
        AttemptResult::Delivered { status } => tracing::info!(
            delivery = %delivery.id, event_id = %delivery.event_id, status, "webhook delivered"
        ),
        AttemptResult::Failed {
            status,
            error,
            retry_in,
        } => tracing::info!(
            delivery = %delivery.id, event_id = %delivery.event_id, status, error = %error,
            retry_in_ms = retry_in.map(|d| d.as_millis() as u64), "webhook attempt failed"
        ),
        AttemptResult::Gone { .. } => tracing::warn!(
            delivery = %delivery.id, webhook = %delivery.webhook_id,
            "webhook receiver answered 410 Gone: the webhook is disabled"
        ),
    }
    match db
        .record_attempt(delivery.id, delivery.webhook_id, token, &result)
        .await
    {
        Ok(true) => {}
        Ok(false) => {
            tracing::info!(delivery = %delivery.id, "webhook delivery claimed by another worker")
        }
        Err(e) => {
            tracing::warn!(delivery = %delivery.id, error = %e, "could not record a webhook attempt")
        }
    }
}

/// One attempt: sign, send, read at most [`MAX_ANSWER_BYTES`], decide.
pub async fn attempt(
    http: &reqwest::Client,
    settings: &WebhookSettings,
    d: &ClaimedDelivery,
) -> AttemptResult {
    let failures = u32::try_from(d.failures).unwrap_or(0) + 1;
    let failed = |status: Option<u16>, error: String, retry_after: Option<Duration>| {
        let unit = unit_random();
        AttemptResult::Failed {
            status,
            error,
            retry_in: next_delay(&settings.retry_schedule, failures, unit, retry_after),
        }
    };
    // An IP literal never reaches the resolver: check it here.
    match url_host(&d.url) {
        Ok((host, _)) => {
            if let Some(ip) = ip_literal(&host)
                && let Err(refusal) = check_target(&host, &[ip], settings.allow_private)
            {
                let why = match refusal {
                    crate::domain::webhooks::UrlRefusal::Invalid(m)
                    | crate::domain::webhooks::UrlRefusal::NotAllowed(m) => m,
                };
                return failed(None, format!("webhook_url_not_allowed: {why}"), None);
            }
        }
        Err(_) => return failed(None, "the webhook's URL is not valid".into(), None),
    }
    let now = Utc::now();
    let timestamp = now.timestamp();
    let mut secrets: Vec<&str> = Vec::with_capacity(2);
    if let (Some(old), Some(until)) = (&d.old_secret, d.old_secret_until)
        && until > now
        && until - now <= chrono::Duration::from_std(ROTATION_OVERLAP).unwrap_or_default()
    {
        secrets.push(old);
    }
    secrets.push(&d.secret);
    let msg_id = d.event_id.to_string();
    let Some(signature) = signature_header(&secrets, &msg_id, timestamp, &d.body) else {
        return failed(
            None,
            "the webhook's secret is not valid base64".into(),
            None,
        );
    };
    let sent = http
        .post(&d.url)
        .header("content-type", "application/json")
        .header("webhook-id", &msg_id)
        .header("webhook-timestamp", timestamp.to_string())
        .header("webhook-signature", signature)
        .body(d.body.clone())
        .send()
        .await;
    let mut response = match sent {
        Ok(r) => r,
        Err(e) => return failed(None, error_chain(&e), None),
    };
    let status = response.status().as_u16();
    let retry_after = response
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .and_then(parse_retry_after);
    // Read at most MAX_ANSWER_BYTES, then drop the connection.
    let mut answer: Vec<u8> = Vec::new();
    loop {
        match response.chunk().await {
            Ok(Some(chunk)) => {
                let room = MAX_ANSWER_BYTES - answer.len();
                answer.extend_from_slice(&chunk[..chunk.len().min(room)]);
                if answer.len() >= MAX_ANSWER_BYTES {
                    break;
                }
            }
            Ok(None) => break,
            Err(e) if outcome_of(Some(status)) == AnswerVerdict::Delivered => {
                // The status was already a success: a body that fails to arrive
                // does not undo it.
                tracing::debug!(error = %e, "webhook answer cut short");
                break;
            }
            Err(e) => return failed(Some(status), error_chain(&e), retry_after),
        }
    }
    match outcome_of(Some(status)) {
        AnswerVerdict::Delivered => AttemptResult::Delivered { status },
        AnswerVerdict::Gone => AttemptResult::Gone {
            reason: "the receiver answered 410 Gone".into(),
        },
        AnswerVerdict::Failed => {
            let text = String::from_utf8_lossy(&answer);
            let excerpt: String = text.chars().take(ERROR_EXCERPT).collect();
            let error = if excerpt.trim().is_empty() {
                format!("the receiver answered {status}")
            } else {
                format!("the receiver answered {status}: {}", excerpt.trim())
            };
            failed(Some(status), error, retry_after)
        }
    }
}

fn error_chain(e: &reqwest::Error) -> String {
    let mut text = if e.is_timeout() {
        "timed out".to_owned()
    } else {
        e.to_string()
    };
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text.chars().take(ERROR_EXCERPT).collect()
}

/// A number in `[0, 1)` for the jitter: from a v4 uuid's random bits.
fn unit_random() -> f64 {
    let bits = uuid::Uuid::new_v4().as_u128() as u64 >> 11;
    bits as f64 / (1u64 << 53) as f64
}
