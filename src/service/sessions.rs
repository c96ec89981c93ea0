//! Dashboard sign-in (docs/configuration.md, "Dashboard sessions"): a person signs
//! in with an API token and gets a session, a dashboard credential only.
//!
//! - Each sign-in is a new random id (244 random bits), so two logins never share
//!   a cookie and one can end without the other.
//! - The database stores the id's SHA-256, never the id: a leaked table holds no
//!   usable cookie. Every replica on the database knows every session.
//! - A session ends at its expiry (`PLANGATE_SESSION_TTL_SECS`) or at sign-out,
//!   whichever comes first, and with its token: it stores the token's digest and
//!   is honoured only while a configured token has that digest.

use sha2::{Digest, Sha256};

use super::{Caller, Service, ServiceError};
use crate::config::ApiToken;

/// What a successful sign-in hands the browser: the cookie value and its lifetime.
pub struct NewSession {
    pub cookie_value: String,
    pub max_age_secs: u64,
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn sha256_hex(parts: &[&[u8]]) -> String {
    let mut hasher = Sha256::new();
    for part in parts {
        hasher.update(part);
    }
    hex(&hasher.finalize())
}

/// What a session stores to name its token: a digest, never the token.
fn token_digest(token: &ApiToken) -> String {
    sha256_hex(&[b"plangate-ui-token\0", token.secret()])
}

/// What the database keys a session by: the id's digest.
fn id_hash(cookie_value: &str) -> String {
    sha256_hex(&[b"plangate-ui-session\0", cookie_value.as_bytes()])
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The configured token equal to `presented`, comparing with every token and
/// without an early exit so timing says nothing.
fn token_matching<'a>(presented: &str, tokens: &'a [ApiToken]) -> Option<&'a ApiToken> {
    let mut matched = None;
    for token in tokens {
        if constant_time_eq(token.secret(), presented.trim().as_bytes()) {
            matched = Some(token);
        }
    }
    matched
}

/// A cookie value: 64 hex digits from two v4 UUIDs (122 random bits each, from
/// the operating system's generator).
fn random_id() -> String {
    format!(
        "{}{}",
        uuid::Uuid::new_v4().simple(),
        uuid::Uuid::new_v4().simple()
    )
}

fn unix_now() -> i64 {
    chrono::Utc::now().timestamp()
}

/// A session's expiry in whole seconds, rounded up: stored as `now + ttl` with `now`
/// rounded down, a 1 s session signed in at x.9 s would end 0.1 s later.
fn expiry_after(ttl: std::time::Duration) -> i64 {
    let now = chrono::Utc::now().timestamp_millis();
    let ttl_ms = i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX);
    now.saturating_add(ttl_ms)
        .saturating_add(999)
        .div_euclid(1000)
}

impl Service {
    /// Sign in with `presented`: `None` when it is no configured token.
    pub async fn sign_in(&self, presented: &str) -> Result<Option<NewSession>, ServiceError> {
        let Some(token) = token_matching(presented, &self.settings.api_tokens) else {
            return Ok(None);
        };
        let ttl = self.settings.perimeter.session_ttl.as_secs();
        let cookie_value = random_id();
        self.db
            .insert_ui_session(
                &id_hash(&cookie_value),
                &token_digest(token),
                unix_now(),
                expiry_after(self.settings.perimeter.session_ttl),
            )
            .await?;
        Ok(Some(NewSession {
            cookie_value,
            max_age_secs: ttl,
        }))
    }

    /// The caller a session cookie stands for: `None` when the session is unknown,
    /// expired, signed out, or its token is no longer configured.
    pub async fn session_caller(&self, cookie_value: &str) -> Result<Option<Caller>, ServiceError> {
        let Some(digest) = self
            .db
            .ui_session_token(&id_hash(cookie_value), unix_now())
            .await?
        else {
            return Ok(None);
        };
        Ok(self
            .settings
            .api_tokens
            .iter()
            .find(|token| token_digest(token) == digest)
            .map(Caller::for_token))
    }

    /// End the session (idempotent: an unknown one is already ended).
    pub async fn sign_out(&self, cookie_value: &str) -> Result<(), ServiceError> {
        self.db.delete_ui_session(&id_hash(cookie_value)).await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_random_and_stored_hashed() {
        let (a, b) = (random_id(), random_id());
        assert_ne!(a, b);
        assert_eq!(a.len(), 64);
        assert_ne!(id_hash(&a), a);
        let token = ApiToken::unrestricted("0123456789abcdef-secret");
        assert!(!token_digest(&token).contains("secret"));
        assert!(
            token_matching(" 0123456789abcdef-secret ", std::slice::from_ref(&token)).is_some()
        );
        assert!(token_matching("0123456789abcdef-secreT", &[token]).is_none());
    }

    #[test]
    fn a_session_lives_at_least_its_ttl() {
        let before_ms = chrono::Utc::now().timestamp_millis();
        let expiry = expiry_after(std::time::Duration::from_secs(1));
        assert!(expiry * 1000 >= before_ms + 1000, "{expiry} vs {before_ms}");
        assert!(expiry * 1000 < chrono::Utc::now().timestamp_millis() + 2000);
    }
}
