//! Webhooks (docs/api.md, "Webhooks"): the event types, the body each event sends,
//! the Standard Webhooks v1 signature, the retry schedule with its jitter, and which
//! targets a delivery may call. Pure: the caller supplies the time, the randomness
//! and the resolved addresses.

use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use chrono::{DateTime, SecondsFormat, Utc};
use hmac::{Hmac, KeyInit, Mac};
use serde_json::{Map, Value, json};
use sha2::Sha256;
use uuid::Uuid;

use crate::domain::job::JobStatus;

/// Where one event's delivery to one webhook stands: waiting for its next
/// attempt, delivered, or failed (its schedule spent, or the webhook disabled).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize, utoipa::ToSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum DeliveryState {
    Pending,
    Delivered,
    Failed,
}

crate::domain::wire_strings!(DeliveryState, "delivery state", column {
    Pending => "pending",
    Delivered => "delivered",
    Failed => "failed",
});

/// One event's delivery to one webhook.
#[derive(Debug, Clone, serde::Serialize, utoipa::ToSchema, sqlx::FromRow)]
pub struct Delivery {
    /// The `{delivery_id}` of replay.
    pub id: Uuid,
    pub webhook_id: Uuid,
    /// The `webhook-id` header of every attempt.
    pub event_id: Uuid,
    #[serde(rename = "type")]
    #[sqlx(rename = "type")]
    pub event_type: String,
    /// `pending`, `delivered` or `failed` (schedule spent, or the webhook disabled).
    pub state: DeliveryState,
    pub attempts: i32,
    pub last_status_code: Option<i32>,
    pub last_error: Option<String>,
    pub last_attempt_at: Option<DateTime<Utc>>,
    /// `null` once delivered or failed.
    pub next_attempt_at: Option<DateTime<Utc>>,
    pub delivered_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
}

impl Delivery {
    /// As shown: a delivery that is no longer pending has no next attempt, whatever
    /// time its row still holds.
    pub fn shown(self) -> Self {
        Delivery {
            next_attempt_at: self
                .next_attempt_at
                .filter(|_| self.state == DeliveryState::Pending),
            ..self
        }
    }
}

/// What a webhook can subscribe to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventType {
    RefineJobSucceeded,
    RefineJobFailed,
    RefineJobCancelled,
    RefineRunFinished,
    TaskListFinished,
    TaskFailed,
    BudgetExceeded,
}

impl EventType {
    pub const ALL: [EventType; 7] = [
        EventType::RefineJobSucceeded,
        EventType::RefineJobFailed,
        EventType::RefineJobCancelled,
        EventType::RefineRunFinished,
        EventType::TaskListFinished,
        EventType::TaskFailed,
        EventType::BudgetExceeded,
    ];

    /// The subscription that means every type.
    pub const WILDCARD: &str = "*";

    pub fn as_str(self) -> &'static str {
        match self {
            EventType::RefineJobSucceeded => "refine_job.succeeded",
            EventType::RefineJobFailed => "refine_job.failed",
            EventType::RefineJobCancelled => "refine_job.cancelled",
            EventType::RefineRunFinished => "refine_run.finished",
            EventType::TaskListFinished => "task_list.finished",
            EventType::TaskFailed => "task.failed",
            EventType::BudgetExceeded => "budget.exceeded",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.as_str() == text)
    }

    /// The event a refine job's terminal status sends, if any.
    pub fn of_job_status(status: JobStatus) -> Option<Self> {
        match status {
            JobStatus::Succeeded => Some(EventType::RefineJobSucceeded),
            JobStatus::Failed => Some(EventType::RefineJobFailed),
            JobStatus::Cancelled => Some(EventType::RefineJobCancelled),
            JobStatus::Queued | JobStatus::Running | JobStatus::Cancelling => None,
        }
    }
}

/// A webhook's subscription, checked: `["*"]` or known types, at least one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subscription(Vec<String>);

impl Subscription {
    /// `Err` names the first entry that is no event type.
    pub fn parse(events: &[String]) -> Result<Self, String> {
        if events.is_empty() {
            return Err("must list at least one event type, or \"*\"".into());
        }
        let mut out: Vec<String> = Vec::new();
        for e in events {
            if e != EventType::WILDCARD && EventType::parse(e).is_none() {
                let known: Vec<&str> = EventType::ALL.iter().map(|t| t.as_str()).collect();
                return Err(format!(
                    "unknown event type {e:?}: expected \"*\" or one of {}",
                    known.join(", ")
                ));
            }
            if !out.contains(e) {
                out.push(e.clone());
            }
        }
        if out.iter().any(|e| e == EventType::WILDCARD) {
            out = vec![EventType::WILDCARD.to_owned()];
        }
        Ok(Subscription(out))
    }

    pub fn types(&self) -> &[String] {
        &self.0
    }

    /// Stored as `,a,b,`: one `LIKE '%,type,%'` matches a type in SQL on both back-ends.
    pub fn to_stored(&self) -> String {
        format!(",{},", self.0.join(","))
    }

    pub fn from_stored(text: &str) -> Vec<String> {
        text.split(',')
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect()
    }
}

/// The upper bound of an event body (docs/api.md, "Webhooks"): the data carries
/// ids, statuses, counts and a path, never a task's text or an L0 answer, so it
/// stays far below this; a body that would not is cut to its ids.
pub const MAX_BODY_BYTES: usize = 20 * 1024;

/// An event about to be stored in the outbox.
#[derive(Debug, Clone, PartialEq)]
pub struct OutboxEvent {
    pub id: Uuid,
    pub event_type: EventType,
    pub project_id: Option<String>,
    /// At most one event per key (`task_list.finished` of a list).
    pub dedupe_key: Option<String>,
    /// The exact bytes every attempt sends (signed as they are).
    pub body: String,
    pub at: DateTime<Utc>,
}

fn body_of(event_type: EventType, at: DateTime<Utc>, data: Value) -> String {
    let body = json!({
        "type": event_type.as_str(),
        "timestamp": at.to_rfc3339_opts(SecondsFormat::Millis, true),
        "data": data,
    });
    let text = body.to_string();
    if text.len() <= MAX_BODY_BYTES {
        return text;
    }
    // Never reached by the shapes below; kept so the bound holds whatever a
    // project id grows to.
    let mut slim = Map::new();
    if let Some(Value::Object(d)) = body.get("data") {
        for key in ["id", "status", "path"] {
            if let Some(v) = d.get(key) {
                slim.insert(key.into(), v.clone());
            }
        }
    }
    json!({"type": event_type.as_str(), "timestamp": body["timestamp"], "data": slim}).to_string()
}

fn event(
    event_type: EventType,
    at: DateTime<Utc>,
    project_id: Option<&str>,
    dedupe_key: Option<String>,
    data: Value,
) -> OutboxEvent {
    OutboxEvent {
        id: Uuid::now_v7(),
        event_type,
        project_id: project_id.map(str::to_owned),
        dedupe_key,
        body: body_of(event_type, at, data),
        at,
    }
}

/// An event's data, in the order every event shows it: `head` (its id, its status
/// and what else names it), the project and cycle it belongs to, `tail` (what
/// this event alone tells), and the path to read it at.
fn event_data(
    head: Value,
    project_id: Option<&str>,
    team_pk: Option<&str>,
    tail: Value,
    path: &str,
) -> Value {
    let fields = |v: Value| match v {
        Value::Object(map) => map,
        _ => Map::new(),
    };
    let mut data = fields(head);
    data.insert("project_id".to_owned(), project_id.into());
    data.insert("team_pk".to_owned(), team_pk.into());
    data.extend(fields(tail));
    data.insert("path".to_owned(), path.into());
    Value::Object(data)
}

/// A refine job that ended, as its events see it.
#[derive(Debug, Clone, PartialEq)]
pub struct JobEnded<'a> {
    pub id: Uuid,
    pub status: JobStatus,
    pub project_id: Option<&'a str>,
    pub team_pk: Option<&'a str>,
    pub error_code: Option<&'a str>,
    /// The job's `progress` counts, as the API shows them.
    pub progress: Value,
}

/// The error code a budget stop ends a job with.
pub const BUDGET_EXCEEDED: &str = "budget_exceeded";

/// The events of a job's end: `refine_job.<status>`, and `budget.exceeded` too when
/// a budget stopped it.
pub fn job_ended_events(job: &JobEnded<'_>, at: DateTime<Utc>) -> Vec<OutboxEvent> {
    let Some(kind) = EventType::of_job_status(job.status) else {
        return Vec::new();
    };
    let path = format!("/v1/refine-jobs/{}", job.id);
    let head = || json!({"id": job.id, "status": job.status});
    let mut data = event_data(
        head(),
        job.project_id,
        job.team_pk,
        json!({"progress": job.progress}),
        &path,
    );
    if let Some(code) = job.error_code {
        data["error_code"] = code.into();
    }
    let mut out = vec![event(kind, at, job.project_id, None, data)];
    if job.error_code == Some(BUDGET_EXCEEDED) {
        let data = event_data(
            head(),
            job.project_id,
            job.team_pk,
            json!({"error_code": BUDGET_EXCEEDED}),
            &path,
        );
        out.push(event(
            EventType::BudgetExceeded,
            at,
            job.project_id,
            None,
            data,
        ));
    }
    out
}

/// `refine_run.finished`.
pub fn run_finished_event(
    id: Uuid,
    status: JobStatus,
    project_id: Option<&str>,
    team_pk: Option<&str>,
    at: DateTime<Utc>,
) -> OutboxEvent {
    let data = event_data(
        json!({"id": id, "status": status}),
        project_id,
        team_pk,
        json!({}),
        &format!("/v1/refine-runs/{id}"),
    );
    event(EventType::RefineRunFinished, at, project_id, None, data)
}

/// `task.failed`: the server's task id (not the planner's `task_id`).
pub fn task_failed_event(
    id: Uuid,
    task_list_id: Uuid,
    project_id: &str,
    team_pk: Option<&str>,
    at: DateTime<Utc>,
) -> OutboxEvent {
    let data = event_data(
        json!({"id": id, "task_list_id": task_list_id, "status": "failed"}),
        Some(project_id),
        team_pk,
        json!({}),
        &format!("/v1/tasks/{id}"),
    );
    event(EventType::TaskFailed, at, Some(project_id), None, data)
}

/// `task_list.finished`, once per list (its dedupe key).
pub fn task_list_finished_event(
    id: Uuid,
    next: &str,
    project_id: &str,
    team_pk: Option<&str>,
    at: DateTime<Utc>,
) -> OutboxEvent {
    let data = event_data(
        json!({"id": id, "status": "finished", "next": next}),
        Some(project_id),
        team_pk,
        json!({}),
        &format!("/v1/task-lists/{id}"),
    );
    event(
        EventType::TaskListFinished,
        at,
        Some(project_id),
        Some(format!("task_list.finished:{id}")),
        data,
    )
}

/// `Some(next)` once no task is left pending or running: `blocked` when a cascade
/// abandoned some (what `GET /v1/task-lists/{id}/next` then answers), else `done`.
pub fn list_finished(pending: u64, running: u64, any_cascaded: bool) -> Option<&'static str> {
    if pending + running > 0 {
        return None;
    }
    Some(if any_cascaded { "blocked" } else { "done" })
}

// ---------------------------------------------------------------- signatures

pub const SECRET_PREFIX: &str = "whsec_";

/// A new secret from `random` bytes (at least 24: the caller's randomness).
pub fn secret_from(random: &[u8]) -> String {
    format!("{SECRET_PREFIX}{}", B64.encode(random))
}

/// The key bytes of a `whsec_…` secret.
pub fn secret_key(secret: &str) -> Option<Vec<u8>> {
    B64.decode(secret.strip_prefix(SECRET_PREFIX).unwrap_or(secret))
        .ok()
}

/// `v1,` + base64(HMAC-SHA256(key, "{id}.{timestamp}.{body}")), the Standard
/// Webhooks v1 signature.
pub fn sign(secret: &str, msg_id: &str, timestamp: i64, body: &str) -> Option<String> {
    let key = secret_key(secret)?;
    let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(&key).ok()?;
    mac.update(msg_id.as_bytes());
    mac.update(b".");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body.as_bytes());
    Some(format!("v1,{}", B64.encode(mac.finalize().into_bytes())))
}

/// The `webhook-signature` header: one signature per secret, separated by a space.
pub fn signature_header(
    secrets: &[&str],
    msg_id: &str,
    timestamp: i64,
    body: &str,
) -> Option<String> {
    let sigs: Option<Vec<String>> = secrets
        .iter()
        .map(|s| sign(s, msg_id, timestamp, body))
        .collect();
    Some(sigs?.join(" "))
}

/// How long the secret replaced by a rotation keeps signing.
pub const ROTATION_OVERLAP: Duration = Duration::from_secs(24 * 3600);

// ---------------------------------------------------------------- retries

/// The Standard Webhooks schedule: seconds to wait after the 1st, 2nd … failed
/// attempt (so 1 + 7 attempts over about 27 hours).
pub const DEFAULT_SCHEDULE: [u64; 7] = [5, 300, 1800, 7200, 18000, 36000, 36000];

/// Parses `PLANGATE_WEBHOOK_RETRY_SCHEDULE`: comma-separated whole seconds.
pub fn parse_schedule(text: &str) -> Result<Vec<Duration>, String> {
    let text = text.trim();
    if text.is_empty() {
        return Ok(Vec::new());
    }
    text.split(',')
        .map(|part| {
            part.trim()
                .parse::<u64>()
                .map(Duration::from_secs)
                .map_err(|_| format!("{part:?} is not a whole number of seconds"))
        })
        .collect()
}

/// The share of a delay that jitter may add or take away.
pub const JITTER: f64 = 0.4;

/// The wait before the next attempt after `failed` failed attempts, or `None`
/// when the schedule is spent. `unit` is a random number in `[0, 1)`: the delay
/// becomes `d × (1 − JITTER + 2 × JITTER × unit)`, never below 60 % of `d` (so the
/// replicas' retries of one outage spread out). A `Retry-After` is a minimum.
pub fn next_delay(
    schedule: &[Duration],
    failed: u32,
    unit: f64,
    retry_after: Option<Duration>,
) -> Option<Duration> {
    let base = *schedule.get(usize::try_from(failed.checked_sub(1)?).ok()?)?;
    let unit = if unit.is_finite() {
        unit.clamp(0.0, 1.0)
    } else {
        0.5
    };
    let factor = 1.0 - JITTER + 2.0 * JITTER * unit;
    let jittered = base.mul_f64(factor);
    Some(match retry_after {
        Some(min) if min > jittered => min,
        _ => jittered,
    })
}

/// What an answer means for the delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AnswerVerdict {
    Delivered,
    /// 410 Gone: the receiver is gone; disable the webhook.
    Gone,
    /// Any other status (3xx included: redirects are not followed), a timeout, a
    /// refused target.
    Failed,
}

pub fn outcome_of(status: Option<u16>) -> AnswerVerdict {
    match status {
        Some(s) if (200..300).contains(&s) => AnswerVerdict::Delivered,
        Some(410) => AnswerVerdict::Gone,
        _ => AnswerVerdict::Failed,
    }
}

/// A `Retry-After` in seconds (HTTP dates are not honoured: the answer is read as
/// a minimum delay only when it is a number).
pub fn parse_retry_after(value: &str) -> Option<Duration> {
    value.trim().parse::<u64>().ok().map(Duration::from_secs)
}

// ---------------------------------------------------------------- targets

/// Why a URL cannot be a webhook's target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UrlRefusal {
    /// Not an absolute http(s) URL with a host.
    Invalid(String),
    /// Loopback, private, link-local, metadata or otherwise internal.
    NotAllowed(String),
}

/// The host and port of an http(s) URL, checked for shape only.
pub fn url_host(url: &str) -> Result<(String, u16), UrlRefusal> {
    let invalid = |why: &str| UrlRefusal::Invalid(why.to_owned());
    let (scheme, rest) = url
        .split_once("://")
        .ok_or_else(|| invalid("must be an absolute http:// or https:// URL"))?;
    let default_port = match scheme.to_ascii_lowercase().as_str() {
        "http" => 80,
        "https" => 443,
        _ => return Err(invalid("must be an http:// or https:// URL")),
    };
    if url.len() > 2048 || url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(invalid("must be at most 2048 characters, without spaces"));
    }
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    if authority.contains('@') {
        return Err(invalid("must not carry credentials"));
    }
    let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
        let (host, after) = v6
            .split_once(']')
            .ok_or_else(|| invalid("has an unclosed IPv6 address"))?;
        (host.to_owned(), after.strip_prefix(':'))
    } else {
        match authority.rsplit_once(':') {
            Some((h, p)) => (h.to_owned(), Some(p)),
            None => (authority.to_owned(), None),
        }
    };
    if host.is_empty() {
        return Err(invalid("has no host"));
    }
    let port = match port {
        None => default_port,
        Some(p) => p.parse().map_err(|_| invalid("has a bad port"))?,
    };
    Ok((host.to_ascii_lowercase(), port))
}

/// Whether a delivery may call `ip` when private targets are not allowed.
pub fn ip_allowed(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4_allowed(v4),
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return v4_allowed(v4);
            }
            let seg = v6.segments();
            !(v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                || (seg[0] & 0xfe00) == 0xfc00 // unique local (private)
                || (seg[0] & 0xffc0) == 0xfe80 // link-local
                || (seg[0] & 0xffc0) == 0xfec0 // site-local (deprecated, private)
                // IPv4-compatible ::a.b.c.d and NAT64 of internal addresses
                || (seg[..6] == [0, 0, 0, 0, 0, 0] && !v4_allowed(embedded_v4(&seg)))
                || (seg[..6] == [0x64, 0xff9b, 0, 0, 0, 0] && !v4_allowed(embedded_v4(&seg))))
        }
    }
}

fn embedded_v4(seg: &[u16; 8]) -> Ipv4Addr {
    let [a, b] = seg[6].to_be_bytes();
    let [c, d] = seg[7].to_be_bytes();
    Ipv4Addr::new(a, b, c, d)
}

fn v4_allowed(ip: Ipv4Addr) -> bool {
    let o = ip.octets();
    !(ip.is_loopback()               // 127/8
        || ip.is_private()           // 10/8, 172.16/12, 192.168/16
        || ip.is_link_local()        // 169.254/16, metadata 169.254.169.254 included
        || ip.is_unspecified()       // 0.0.0.0
        || ip.is_broadcast()
        || ip.is_multicast()
        || o[0] == 0                 // 0/8 "this network"
        || (o[0] == 100 && (o[1] & 0xc0) == 64) // 100.64/10 shared (carrier NAT)
        || (o[0] == 192 && o[1] == 0 && o[2] == 0) // 192.0.0/24 protocol assignments
        || o[0] >= 240) // reserved
}

/// Whether a host name is internal by its name alone.
pub fn host_name_internal(host: &str) -> bool {
    let host = host.trim_end_matches('.');
    host == "localhost" || host.ends_with(".localhost") || host == "metadata.google.internal"
}

/// The target check (docs/api.md, "Webhooks"): `addresses` are what the host
/// resolved to (an IP literal is its own). Every one must be allowed unless
/// private targets are.
pub fn check_target(
    host: &str,
    addresses: &[IpAddr],
    allow_private: bool,
) -> Result<(), UrlRefusal> {
    if allow_private {
        return Ok(());
    }
    if host_name_internal(host) {
        return Err(UrlRefusal::NotAllowed(format!(
            "{host} is a loopback name; set PLANGATE_WEBHOOK_ALLOW_PRIVATE=true to allow it"
        )));
    }
    if let Some(bad) = addresses.iter().find(|ip| !ip_allowed(**ip)) {
        return Err(UrlRefusal::NotAllowed(format!(
            "{host} resolves to {bad}, a loopback, private, link-local or metadata address; \
             set PLANGATE_WEBHOOK_ALLOW_PRIVATE=true to allow it"
        )));
    }
    Ok(())
}

/// A host's IP literal, if it is one (`[::1]` without its brackets).
pub fn ip_literal(host: &str) -> Option<IpAddr> {
    host.parse().ok()
}

#[cfg(test)]
mod tests {
    use std::net::Ipv6Addr;

    use super::*;
    use proptest::prelude::*;

    #[test]
    fn signature_matches_the_standard_webhooks_example() {
        // The example of the Standard Webhooks specification and its libraries.
        let secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
        let id = "msg_p5jXN8AQM9LWM0D4loKWxJek";
        let body = r#"{"test": 2432232314}"#;
        assert_eq!(
            sign(secret, id, 1614265330, body).unwrap(),
            "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
        );
    }

    #[test]
    fn two_secrets_give_two_signatures_separated_by_one_space() {
        let a = secret_from(&[1; 24]);
        let b = secret_from(&[2; 32]);
        let header = signature_header(&[&a, &b], "id", 5, "{}").unwrap();
        let parts: Vec<&str> = header.split(' ').collect();
        assert_eq!(parts.len(), 2);
        assert_eq!(parts[0], sign(&a, "id", 5, "{}").unwrap());
        assert_eq!(parts[1], sign(&b, "id", 5, "{}").unwrap());
        assert_ne!(parts[0], parts[1]);
    }

    #[test]
    fn subscriptions_refuse_unknown_types_and_collapse_the_wildcard() {
        assert!(Subscription::parse(&[]).is_err());
        assert!(Subscription::parse(&["task.done".into()]).is_err());
        let s = Subscription::parse(&["task.failed".into(), "*".into()]).unwrap();
        assert_eq!(s.types(), ["*"]);
        let s = Subscription::parse(&["task.failed".into(), "budget.exceeded".into()]).unwrap();
        assert_eq!(s.to_stored(), ",task.failed,budget.exceeded,");
        assert_eq!(Subscription::from_stored(&s.to_stored()), s.types());
    }

    #[test]
    fn internal_targets_are_refused_and_public_ones_accepted() {
        for ip in [
            "127.0.0.1",
            "127.9.9.9",
            "10.1.2.3",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "169.254.169.254",
            "169.254.1.1",
            "0.0.0.0",
            "100.64.0.1",
            "::1",
            "::",
            "fe80::1",
            "fd00::1",
            "fc00::1",
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
            "64:ff9b::a00:1",
        ] {
            assert!(!ip_allowed(ip.parse().unwrap()), "{ip} must be refused");
        }
        for ip in [
            "8.8.8.8",
            "1.1.1.1",
            "172.32.0.1",
            "2606:4700::1111",
            "93.184.216.34",
        ] {
            assert!(ip_allowed(ip.parse().unwrap()), "{ip} must be allowed");
        }
        assert!(check_target("localhost", &[], false).is_err());
        assert!(check_target("a.localhost", &[], false).is_err());
        assert!(check_target("localhost", &[], true).is_ok());
        let private: IpAddr = "10.0.0.1".parse().unwrap();
        let public: IpAddr = "8.8.8.8".parse().unwrap();
        assert!(check_target("x.example", &[public, private], false).is_err());
        assert!(check_target("x.example", &[public], false).is_ok());
    }

    #[test]
    fn urls_are_split_into_host_and_port() {
        assert_eq!(
            url_host("https://Example.com/hook").unwrap(),
            ("example.com".into(), 443)
        );
        assert_eq!(
            url_host("http://[::1]:8080/x").unwrap(),
            ("::1".into(), 8080)
        );
        assert_eq!(
            url_host("http://10.0.0.1").unwrap(),
            ("10.0.0.1".into(), 80)
        );
        for bad in [
            "ftp://x.example/",
            "x.example/hook",
            "http:///path",
            "http://u:p@x.example/",
            "http://x.example:99999/",
            "http://x .example/",
        ] {
            assert!(
                matches!(url_host(bad), Err(UrlRefusal::Invalid(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn the_schedule_is_spent_after_its_last_delay() {
        let s = parse_schedule("1, 1,2").unwrap();
        assert_eq!(s.len(), 3);
        assert!(next_delay(&s, 0, 0.5, None).is_none());
        assert!(next_delay(&s, 3, 0.5, None).is_some());
        assert!(next_delay(&s, 4, 0.5, None).is_none());
        assert!(parse_schedule("1,x").is_err());
        assert_eq!(parse_schedule("").unwrap(), vec![]);
    }

    #[test]
    fn list_finishes_once_every_task_is_terminal() {
        assert_eq!(list_finished(1, 0, false), None);
        assert_eq!(list_finished(0, 1, true), None);
        assert_eq!(list_finished(0, 0, false), Some("done"));
        assert_eq!(list_finished(0, 0, true), Some("blocked"));
    }

    #[test]
    fn a_budget_stop_sends_both_events_and_bodies_hold_no_text() {
        let job = JobEnded {
            id: Uuid::nil(),
            status: JobStatus::Failed,
            project_id: Some("p"),
            team_pk: None,
            error_code: Some(BUDGET_EXCEEDED),
            progress: json!({"l0_total": 2}),
        };
        let events = job_ended_events(&job, Utc::now());
        let types: Vec<_> = events.iter().map(|e| e.event_type).collect();
        assert_eq!(
            types,
            [EventType::RefineJobFailed, EventType::BudgetExceeded]
        );
        let body: Value = serde_json::from_str(&events[0].body).unwrap();
        assert_eq!(
            body["data"]["path"],
            format!("/v1/refine-jobs/{}", Uuid::nil())
        );
        assert_eq!(body["data"]["progress"]["l0_total"], 2);
        assert_eq!(body["type"], "refine_job.failed");
        let running = JobEnded {
            status: JobStatus::Running,
            ..job
        };
        assert!(job_ended_events(&running, Utc::now()).is_empty());
    }

    proptest! {
        /// Jitter never shortens a delay below 40 % of its value (it stays within
        /// ±40 %), and a Retry-After is a minimum.
        #[test]
        fn jitter_stays_within_its_bounds(
            secs in 1u64..100_000,
            unit in 0.0f64..1.0,
            after in proptest::option::of(0u64..200_000),
        ) {
            let schedule = [Duration::from_secs(secs)];
            let d = next_delay(&schedule, 1, unit, after.map(Duration::from_secs)).unwrap();
            let base = secs as f64;
            prop_assert!(d.as_secs_f64() >= base * 0.6 - 1e-6);
            if let Some(a) = after {
                prop_assert!(d.as_secs_f64() >= a as f64 - 1e-6);
                prop_assert!(d.as_secs_f64() <= (base * 1.4).max(a as f64) + 1e-6);
            } else {
                prop_assert!(d.as_secs_f64() <= base * 1.4 + 1e-6);
            }
        }

        /// Any key, id, time and body: the signature is `v1,` and 32 bytes of base64,
        /// and changes with the body.
        #[test]
        fn signatures_are_well_formed(
            key in proptest::collection::vec(any::<u8>(), 24..64),
            id in "[a-z0-9_]{1,30}",
            ts in 0i64..4_000_000_000,
            body in ".{0,200}",
        ) {
            let secret = secret_from(&key);
            let sig = sign(&secret, &id, ts, &body).unwrap();
            let raw = B64.decode(sig.strip_prefix("v1,").unwrap()).unwrap();
            prop_assert_eq!(raw.len(), 32);
            let other = sign(&secret, &id, ts, &format!("{body}x")).unwrap();
            prop_assert_ne!(sig, other);
        }

        /// The target check never panics and never allows an address
        /// `ip_allowed` refuses.
        #[test]
        fn target_check_agrees_with_ip_allowed(a in any::<u32>(), b in any::<u128>()) {
            let v4 = IpAddr::V4(Ipv4Addr::from(a));
            let v6 = IpAddr::V6(Ipv6Addr::from(b));
            for ip in [v4, v6] {
                prop_assert_eq!(check_target("h.example", &[ip], false).is_ok(), ip_allowed(ip));
                prop_assert!(check_target("h.example", &[ip], true).is_ok());
            }
        }
    }
}
