//! API tokens: the entries of `PLANGATE_API_TOKENS` or the file, parsed and checked.

use std::sync::Arc;

use serde::Deserialize;

use super::{ConfigError, invalid};

/// One `api_tokens` entry of the config file.
#[derive(Clone, Deserialize)]
#[serde(
    untagged,
    expecting = "a token string (\"TOKEN\" or \"TOKEN:proj-a|proj-b\") or a table { value = \"TOKEN\", projects = [..] }"
)]
pub enum TokenEntry {
    /// `TOKEN` or `TOKEN:proj-a|proj-b`, as in `PLANGATE_API_TOKENS`.
    Spec(String),
    /// `{ value, projects? }`: the token is taken whole (it may hold `:` or `,`);
    /// no `projects` means every project.
    Table {
        value: String,
        projects: Option<Vec<String>>,
    },
}

/// Never print a token, not even in a debug dump of the config.
impl std::fmt::Debug for TokenEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TokenEntry::Spec(_) => f.write_str("TokenEntry::Spec(<redacted>)"),
            TokenEntry::Table { projects, .. } => f
                .debug_struct("TokenEntry::Table")
                .field("value", &"<redacted>")
                .field("projects", projects)
                .finish(),
        }
    }
}

/// A configured bearer token and the projects it may act on.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiToken {
    value: String,
    /// `None`: every project; otherwise these project ids only (never empty).
    projects: Option<Arc<[String]>>,
}

/// Shortest token accepted, in bytes.
pub const MIN_TOKEN_LEN: usize = 16;

impl ApiToken {
    /// A token valid for every project (unchecked: [`Settings::merge`] checks the
    /// configured ones). Handy in tests.
    pub fn unrestricted(value: impl Into<String>) -> Self {
        ApiToken {
            value: value.into(),
            projects: None,
        }
    }

    /// A token limited to `projects` (unchecked, like [`ApiToken::unrestricted`]).
    pub fn limited(value: impl Into<String>, projects: &[&str]) -> Self {
        ApiToken {
            value: value.into(),
            projects: Some(projects.iter().map(|p| (*p).to_owned()).collect()),
        }
    }

    /// Parse `TOKEN` or `TOKEN:proj-a|proj-b`. Errors never contain the token.
    pub fn parse(spec: &str) -> Result<Self, String> {
        match spec.trim().split_once(':') {
            None => Self::checked(spec.trim().to_owned(), None),
            Some((value, projects)) => Self::checked(
                value.trim().to_owned(),
                Some(projects.split('|').map(|p| p.trim().to_owned()).collect()),
            ),
        }
    }

    pub(super) fn checked(value: String, projects: Option<Vec<String>>) -> Result<Self, String> {
        if value.len() < MIN_TOKEN_LEN {
            // Never echo the token itself: logs and terminals are not secret.
            return Err(format!(
                "every token needs at least {MIN_TOKEN_LEN} characters (one has {})",
                value.len()
            ));
        }
        if value.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err("a token may not contain spaces or control characters".to_owned());
        }
        let projects = match projects {
            None => None,
            Some(list) => {
                if list.is_empty() || list.iter().all(|p| p.is_empty()) {
                    return Err("a token limited to projects must name at least one".to_owned());
                }
                for project in &list {
                    crate::domain::ids::Ident::parse("project_id", project)
                        .map_err(|e| format!("a token's project list: {e}"))?;
                }
                Some(list.into())
            }
        };
        Ok(ApiToken { value, projects })
    }

    /// The secret, for the constant-time comparison in the auth middleware only.
    pub fn secret(&self) -> &[u8] {
        self.value.as_bytes()
    }

    /// `None` when the token may act on every project.
    pub fn projects(&self) -> Option<&Arc<[String]>> {
        self.projects.as_ref()
    }
}

impl From<&str> for ApiToken {
    /// [`ApiToken::unrestricted`].
    fn from(value: &str) -> Self {
        ApiToken::unrestricted(value)
    }
}

impl std::fmt::Debug for ApiToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiToken")
            .field("value", &"<redacted>")
            .field("projects", &self.projects)
            .finish()
    }
}

/// Parse every configured token; duplicates are refused (which of two entries
/// would apply is not obvious). Errors name the entry by position, never the token.
pub(super) fn parse_tokens(
    entries: impl IntoIterator<Item = Result<ApiToken, String>>,
) -> Result<Vec<ApiToken>, ConfigError> {
    let mut tokens: Vec<ApiToken> = Vec::new();
    for (n, entry) in entries.into_iter().enumerate() {
        let token =
            entry.map_err(|m| invalid("PLANGATE_API_TOKENS", format!("entry {}: {m}", n + 1)))?;
        if tokens.iter().any(|t| t.value == token.value) {
            return Err(invalid(
                "PLANGATE_API_TOKENS",
                format!("entry {} repeats an earlier token", n + 1),
            ));
        }
        tokens.push(token);
    }
    Ok(tokens)
}
