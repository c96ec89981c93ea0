//! The `openai` (Chat Completions) and `anthropic` (Messages) executors, and the
//! retry policy they share.
//!
//! One POST per try. Transient errors — connect errors (refused, reset, connect
//! timeout), a connection lost before the response, HTTP 429 and 5xx — are retried
//! up to [`MAX_TRIES`] tries in all, after an exponential backoff with jitter
//! (250 ms base, doubled per retry, capped at 10 s) or the server's `Retry-After`
//! seconds (capped at 10 s). Anything else fails at once: another 4xx (status and a
//! short body excerpt), a 429 without `Retry-After` that speaks of a usage, spend
//! or credit limit (`quota_exhausted`: no wait brings it through), malformed JSON, an answer without content, a body over
//! `max_output_bytes`. `timeout_secs` bounds the whole call, retries and waits
//! included. The API key is read once when the executor is built, sent in a header
//! marked sensitive, and never logged nor put in an error text.

use std::fmt;
use std::hash::{BuildHasher, Hasher};
use std::time::Duration;

use reqwest::header::{HeaderMap, HeaderValue, RETRY_AFTER};
use reqwest::{StatusCode, Url};
use serde_json::{Value, json};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::usage::{anthropic_usage, openai_usage};
use super::{Cancelled, L0Request, L0Run, RateFeedback};
use crate::domain::rate_limit::{ProviderSignal, is_quota_exhausted, learn_from_headers};
use crate::domain::refine::{L0ErrorCode, L0Outcome};
use crate::domain::usage::L0Usage;

/// Tries per L0 call, the first included.
pub const MAX_TRIES: u32 = 4;
/// The first retry's backoff; each further retry doubles it.
pub const BACKOFF_BASE: Duration = Duration::from_millis(250);
/// The longest wait between tries (backoff or `Retry-After`).
pub const MAX_RETRY_DELAY: Duration = Duration::from_secs(10);
/// The Messages API version plangate speaks.
pub const ANTHROPIC_VERSION: &str = "2023-06-01";
/// `max_tokens` sent to the Messages API (it requires one).
pub const ANTHROPIC_MAX_TOKENS: u32 = 4096;
/// Connect timeout of the shared client (never above the call's timeout).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How much of an error body a failure reason quotes.
const EXCERPT_CHARS: usize = 300;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Api {
    Openai,
    Anthropic,
}

/// An API key: never shown by `Debug`.
#[derive(Clone)]
pub(crate) struct ApiKey(String);

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ApiKey(<redacted>)")
    }
}

/// How retries wait. Tests shorten it (`Executor::with_backoff`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Backoff {
    pub base: Duration,
    pub max_delay: Duration,
    pub max_tries: u32,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            base: BACKOFF_BASE,
            max_delay: MAX_RETRY_DELAY,
            max_tries: MAX_TRIES,
        }
    }
}

impl Backoff {
    /// The wait before try `next_try` (2, 3, …): `Retry-After` when the server sent
    /// one, else `base · 2^(retry-1)` with ±25 % jitter; capped at `max_delay`.
    pub(crate) fn delay(&self, next_try: u32, retry_after: Option<Duration>) -> Duration {
        let delay = match retry_after {
            Some(d) => d,
            None => {
                let exp = next_try.saturating_sub(2).min(16);
                let nominal = self.base.saturating_mul(1 << exp);
                // Uniform in [0.75, 1.25) of the nominal delay.
                let unit = (random_u64() >> 11) as f64 / (1u64 << 53) as f64;
                nominal.mul_f64(0.75 + unit * 0.5)
            }
        };
        delay.min(self.max_delay)
    }
}

/// A random number from the std hasher's per-instance random keys (jitter only).
fn random_u64() -> u64 {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0),
    );
    h.finish()
}

/// `Retry-After` in seconds (the HTTP-date form is ignored: the backoff applies).
pub(crate) fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let value = headers.get(RETRY_AFTER)?.to_str().ok()?.trim();
    value.parse::<u64>().ok().map(Duration::from_secs)
}

#[derive(Debug)]
pub(crate) struct HttpConfig {
    pub api: Api,
    /// The full endpoint URL.
    pub url: Url,
    pub model: String,
    pub key: Option<ApiKey>,
    pub timeout: Duration,
    pub max_output_bytes: usize,
    pub backoff: Backoff,
    /// One client per executor: its connection pool is shared by every L0.
    pub client: reqwest::Client,
}

impl HttpConfig {
    /// Builds the endpoint and the client. `base_url` defaults per API; a trailing
    /// slash is tolerated. Errors are one-line messages for `ConfigError`.
    pub(crate) fn new(
        api: Api,
        base_url: Option<&str>,
        model: String,
        key: Option<String>,
        timeout: Duration,
        max_output_bytes: usize,
    ) -> Result<Self, String> {
        let (default_base, path) = match api {
            Api::Openai => ("https://api.openai.com/v1", "/chat/completions"),
            Api::Anthropic => ("https://api.anthropic.com", "/v1/messages"),
        };
        let base = base_url.unwrap_or(default_base).trim_end_matches('/');
        let url = Url::parse(&format!("{base}{path}"))
            .map_err(|e| format!("base_url {base:?} is not a URL: {e}"))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(format!("base_url {base:?} must be http or https"));
        }
        if url.query().is_some() || url.fragment().is_some() {
            return Err(format!("base_url {base:?} must have no query or fragment"));
        }
        let client = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT.min(timeout))
            .build()
            .map_err(|e| format!("cannot build the HTTP client: {e}"))?;
        Ok(HttpConfig {
            api,
            url,
            model,
            key: key.map(ApiKey),
            timeout,
            max_output_bytes,
            backoff: Backoff::default(),
            client,
        })
    }

    fn request(&self, prompt: &str) -> reqwest::RequestBuilder {
        let messages = json!([{"role": "user", "content": prompt}]);
        let mut builder = self.client.post(self.url.clone());
        match self.api {
            Api::Openai => {
                builder = builder.json(&json!({"model": self.model, "messages": messages}));
                if let Some(key) = &self.key {
                    builder = builder.header(
                        reqwest::header::AUTHORIZATION,
                        sensitive(&format!("Bearer {}", key.0)),
                    );
                }
            }
            Api::Anthropic => {
                builder = builder
                    .json(&json!({
                        "model": self.model,
                        "max_tokens": ANTHROPIC_MAX_TOKENS,
                        "messages": messages,
                    }))
                    .header("anthropic-version", ANTHROPIC_VERSION);
                if let Some(key) = &self.key {
                    builder = builder.header("x-api-key", sensitive(&key.0));
                }
            }
        }
        // The L0 span's context, so a traced provider or proxy joins the job's
        // trace (docs/observability.md, "Context in and out").
        if let Some(traceparent) = crate::telemetry::current_traceparent() {
            builder = builder.header("traceparent", traceparent);
        }
        builder
    }

    /// One try: send, read the capped body, extract the answer. The usage is what
    /// the body reports, whether the try succeeded or not (a failed try still
    /// costs what the provider charged for it).
    async fn attempt(
        &self,
        prompt: &str,
        feedback: Option<&dyn RateFeedback>,
    ) -> (Result<String, TryError>, Option<L0Usage>) {
        let mut response = match self.request(prompt).send().await {
            Ok(r) => r,
            Err(e) => return (Err(send_error(e)), None),
        };
        let status = response.status();
        let wait = retry_after(response.headers());
        if let Some(feedback) = feedback {
            let headers = response.headers();
            let learned = learn_from_headers(
                |name| Some(headers.get(name)?.to_str().ok()?.to_owned()),
                chrono::Utc::now(),
            );
            let too_many = status == StatusCode::TOO_MANY_REQUESTS;
            if too_many || !learned.is_empty() {
                feedback.signal(ProviderSignal {
                    learned,
                    retry_after: if too_many { wait } else { None },
                    too_many,
                    success: status.is_success(),
                });
            }
        }
        let cap = if status.is_success() {
            self.max_output_bytes
        } else {
            self.max_output_bytes.min(64 * 1024)
        };
        let mut body = Vec::new();
        let mut over = false;
        loop {
            match response.chunk().await {
                Ok(Some(chunk)) => {
                    if body.len() + chunk.len() > cap {
                        let room = cap - body.len();
                        body.extend_from_slice(&chunk[..room]);
                        over = true;
                        break;
                    }
                    body.extend_from_slice(&chunk);
                }
                Ok(None) => break,
                Err(e) => {
                    let error = TryError::Transient {
                        message: format!(
                            "HTTP {status}: reading the response failed: {}",
                            describe(&e)
                        ),
                        retry_after: wait,
                    };
                    return (Err(error), None);
                }
            }
        }
        drop(response);
        let parsed: Option<Value> = serde_json::from_slice(&body).ok();
        let usage = parsed.as_ref().and_then(|v| match self.api {
            Api::Openai => openai_usage(v, &self.model),
            Api::Anthropic => anthropic_usage(v, &self.model),
        });
        (self.judge(status, wait, &body, over, parsed), usage)
    }

    /// The answer of a try, or why it has none.
    fn judge(
        &self,
        status: StatusCode,
        wait: Option<Duration>,
        body: &[u8],
        over: bool,
        parsed: Option<Value>,
    ) -> Result<String, TryError> {
        if status == StatusCode::TOO_MANY_REQUESTS
            && wait.is_none()
            && is_quota_exhausted(&String::from_utf8_lossy(body))
        {
            // A spend or credit limit: no retry brings the call through
            // (docs/jobs.md, "Rate limits").
            return Err(TryError::Fatal(
                L0ErrorCode::QuotaExhausted.reason(&format!("HTTP {status}: {}", excerpt(body))),
            ));
        }
        if status == StatusCode::TOO_MANY_REQUESTS || status.is_server_error() {
            return Err(TryError::Transient {
                message: format!("HTTP {status}: {}", excerpt(body)),
                retry_after: wait,
            });
        }
        if !status.is_success() {
            return Err(TryError::Fatal(format!("HTTP {status}: {}", excerpt(body))));
        }
        if over {
            return Err(TryError::Fatal(format!(
                "response body exceeds max_output_bytes ({} bytes)",
                self.max_output_bytes
            )));
        }
        let value = match parsed {
            Some(v) => v,
            None => {
                let e = serde_json::from_slice::<Value>(body)
                    .err()
                    .map_or_else(String::new, |e| e.to_string());
                return Err(TryError::Fatal(format!(
                    "malformed JSON response ({e}): {}",
                    excerpt(body)
                )));
            }
        };
        match self.api {
            Api::Openai => openai_answer(&value),
            Api::Anthropic => anthropic_answer(&value),
        }
        .map_err(TryError::Fatal)
    }

    pub(crate) async fn run(
        &self,
        executor: &str,
        req: &L0Request,
        cancel: &CancellationToken,
    ) -> Result<L0Run, Cancelled> {
        // `Executor::run` has refused an already cancelled call.
        let deadline = Instant::now() + self.timeout;
        let timed_out = || format!("timed out after {} s", self.timeout.as_secs_f64());
        let mut last_transient: Option<String> = None;
        let mut tries = 0;
        let mut usage: Option<L0Usage> = None;
        let outcome = loop {
            tries += 1;
            let (result, try_usage) = tokio::select! {
                _ = cancel.cancelled() => return Err(Cancelled),
                _ = tokio::time::sleep_until(deadline) => break L0Outcome::Failed(timed_out()),
                r = self.attempt(&req.prompt, req.rate_feedback.as_deref()) => r,
            };
            if let Some(u) = try_usage {
                match &mut usage {
                    None => usage = Some(u),
                    Some(total) => total.add_try(&u),
                }
            }
            let (message, wait) = match result {
                Ok(answer) => break L0Outcome::Answer(answer),
                Err(TryError::Fatal(message)) => break L0Outcome::Failed(message),
                Err(TryError::Transient {
                    message,
                    retry_after,
                }) => (message, retry_after),
            };
            tracing::debug!(
                executor,
                assignment_id = %req.assignment_id,
                tries,
                error = %message,
                "L0 API call failed transiently"
            );
            if tries >= self.backoff.max_tries {
                let reason = format!("{message} (gave up after {tries} tries)");
                last_transient = Some(message);
                break L0Outcome::Failed(reason);
            }
            let delay = self.backoff.delay(tries + 1, wait);
            if Instant::now() + delay >= deadline {
                let reason = format!(
                    "{message} (gave up after {tries} tries: the {} s timeout leaves no time to retry)",
                    self.timeout.as_secs_f64()
                );
                last_transient = Some(message);
                break L0Outcome::Failed(reason);
            }
            last_transient = Some(message);
            tokio::select! {
                _ = cancel.cancelled() => return Err(Cancelled),
                _ = tokio::time::sleep(delay) => {}
            }
        };
        Ok(L0Run {
            outcome,
            exit_code: None,
            stderr: last_transient,
            tries,
            // No `usage` in any response: tokens unknown, but the model is.
            usage: usage.unwrap_or_else(|| L0Usage {
                model: Some(self.model.clone()),
                ..L0Usage::default()
            }),
        })
    }
}

#[derive(Debug)]
enum TryError {
    Transient {
        message: String,
        retry_after: Option<Duration>,
    },
    Fatal(String),
}

fn sensitive(value: &str) -> HeaderValue {
    // A key with bytes a header cannot carry is sent empty (the server refuses it)
    // rather than echoed into an error message.
    let mut v = HeaderValue::from_str(value).unwrap_or_else(|_| HeaderValue::from_static(""));
    v.set_sensitive(true);
    v
}

/// A reqwest error and its causes, without the URL.
fn describe(e: &reqwest::Error) -> String {
    use std::error::Error as _;
    let mut text = String::new();
    let mut current: Option<&dyn std::error::Error> = e.source();
    while let Some(cause) = current {
        let s = cause.to_string();
        if !text.contains(&s) {
            if !text.is_empty() {
                text.push_str(": ");
            }
            text.push_str(&s);
        }
        current = cause.source();
    }
    if text.is_empty() {
        "request failed".to_owned()
    } else {
        text
    }
}

/// Whether `e` is an I/O error kind of a lost connection, somewhere in its causes.
fn connection_lost(e: &reqwest::Error) -> bool {
    use std::error::Error as _;
    use std::io::ErrorKind::*;
    let mut current: Option<&dyn std::error::Error> = e.source();
    while let Some(cause) = current {
        if let Some(io) = cause.downcast_ref::<std::io::Error>()
            && matches!(
                io.kind(),
                ConnectionRefused
                    | ConnectionReset
                    | ConnectionAborted
                    | BrokenPipe
                    | UnexpectedEof
            )
        {
            return true;
        }
        // hyper's "connection closed before message completed".
        if cause.to_string().contains("connection closed") {
            return true;
        }
        current = cause.source();
    }
    false
}

fn send_error(e: reqwest::Error) -> TryError {
    let e = e.without_url();
    let what = if e.is_connect() {
        "cannot connect"
    } else if e.is_timeout() {
        "timed out"
    } else {
        "request failed"
    };
    let message = format!("{what}: {}", describe(&e));
    if e.is_connect() || e.is_timeout() || connection_lost(&e) {
        TryError::Transient {
            message,
            retry_after: None,
        }
    } else {
        TryError::Fatal(message)
    }
}

/// The start of a body, on one line, for an error message.
pub(crate) fn excerpt(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let one_line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if one_line.is_empty() {
        return "(empty body)".to_owned();
    }
    if one_line.chars().count() > EXCERPT_CHARS {
        let mut s: String = one_line.chars().take(EXCERPT_CHARS).collect();
        s.push('…');
        s
    } else {
        one_line
    }
}

/// `choices[0].message.content`: a string, or (some compatible servers) an array of
/// `{"type": "text", "text": …}` parts.
pub(crate) fn openai_answer(value: &Value) -> Result<String, String> {
    let content = value
        .get("choices")
        .and_then(|c| c.get(0))
        .and_then(|c| c.get("message"))
        .and_then(|m| m.get("content"));
    match content {
        Some(Value::String(s)) => Ok(s.clone()),
        Some(Value::Array(parts)) => text_parts(parts)
            .ok_or_else(|| "response choices[0].message.content has no text part".to_owned()),
        _ => Err("response has no choices[0].message.content string".to_owned()),
    }
}

/// The concatenated `text` of the `content` blocks of type `text`.
pub(crate) fn anthropic_answer(value: &Value) -> Result<String, String> {
    match value.get("content") {
        Some(Value::Array(blocks)) => {
            text_parts(blocks).ok_or_else(|| "response content has no text block".to_owned())
        }
        _ => Err("response has no content array".to_owned()),
    }
}

fn text_parts(parts: &[Value]) -> Option<String> {
    let texts: Vec<&str> = parts
        .iter()
        .filter(|p| p.get("type").and_then(Value::as_str) == Some("text"))
        .filter_map(|p| p.get("text").and_then(Value::as_str))
        .collect();
    (!texts.is_empty()).then(|| texts.concat())
}

#[cfg(test)]
mod tests;
