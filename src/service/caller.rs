//! Who is calling, as far as authorization goes. Transports build a [`Caller`]
//! (HTTP from the bearer token, MCP likewise) and pass it to every use case, which
//! checks it once, before it reads or changes anything of a project.

use std::sync::Arc;

use sha2::{Digest, Sha256};

use super::error::{ErrorKind, ProblemCode, ServiceError};
use crate::config::ApiToken;

/// The projects the presented token may act on. Unrestricted when auth is off or
/// the token has no limit. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Caller {
    /// `None`: every project. `Some`: only these (never empty).
    projects: Option<Arc<[String]>>,
    /// Which token called (`None`: auth is off): idempotency keys are the token's
    /// own (docs/api.md, "Idempotency").
    token: Option<TokenFingerprint>,
}

/// A token's stable identity, shared by every replica: a truncated SHA-256 of the
/// secret under a fixed label, so what is stored beside a key cannot be presented
/// as a token.
#[derive(Clone, PartialEq, Eq)]
pub struct TokenFingerprint(Arc<str>);

impl TokenFingerprint {
    fn of(token: &ApiToken) -> Self {
        let mut hasher = Sha256::new();
        hasher.update(b"plangate idempotency scope\0");
        hasher.update(token.secret());
        let digest = hasher.finalize();
        let hex: String = digest[..16].iter().map(|b| format!("{b:02x}")).collect();
        TokenFingerprint(hex.into())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Never print even the fingerprint: logs need not carry it.
impl std::fmt::Debug for TokenFingerprint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TokenFingerprint(<redacted>)")
    }
}

impl Caller {
    /// A caller that may act on every project (auth off, or an unlimited token).
    pub fn unrestricted() -> Self {
        Caller {
            projects: None,
            token: None,
        }
    }

    /// A caller limited to `projects`.
    pub fn limited_to(projects: Arc<[String]>) -> Self {
        Caller {
            projects: Some(projects),
            token: None,
        }
    }

    /// The caller that presented `token`: its projects, and its identity for
    /// idempotency keys.
    pub fn for_token(token: &ApiToken) -> Self {
        Caller {
            projects: token.projects().cloned(),
            token: Some(TokenFingerprint::of(token)),
        }
    }

    /// The presented token's identity; `None` when auth is off.
    pub fn token(&self) -> Option<&TokenFingerprint> {
        self.token.as_ref()
    }

    /// The projects the caller is limited to; `None`: every project.
    pub fn projects(&self) -> Option<&[String]> {
        self.projects.as_deref()
    }

    /// Whether the caller may act on `project_id`.
    pub fn may_access(&self, project_id: &str) -> bool {
        match &self.projects {
            None => true,
            Some(allowed) => allowed.iter().any(|p| p == project_id),
        }
    }

    /// Whether the caller may see a resource of the optional `project_id`: one with
    /// none is for unrestricted callers only (as [`Caller::check_optional_project`]).
    pub fn may_see(&self, project_id: Option<&str>) -> bool {
        match project_id {
            Some(p) => self.may_access(p),
            None => self.projects.is_none(),
        }
    }

    /// The `rows` the caller may see ([`Caller::may_see`]) by each one's project.
    pub fn only_visible<T>(&self, rows: Vec<T>, project: impl Fn(&T) -> Option<&str>) -> Vec<T> {
        rows.into_iter()
            .filter(|r| self.may_see(project(r)))
            .collect()
    }

    /// `Ok` when the caller may act on `project_id`, else `forbidden_project`.
    pub fn check_project(&self, project_id: &str) -> Result<(), ServiceError> {
        if self.may_access(project_id) {
            // The request's (or MCP tool call's) span names the project it acted on.
            if crate::telemetry::traces_on() {
                tracing::Span::current().record("plangate.project_id", project_id);
            }
            Ok(())
        } else {
            Err(ServiceError::new(
                ErrorKind::Forbidden,
                ProblemCode::ForbiddenProject,
                format!("this token may not act on project {project_id:?}"),
            ))
        }
    }

    /// The resource `found` under `id`, if there is one (else a 404 naming `what`)
    /// and the caller may see its optional project: one lookup shape for refine
    /// jobs, runs, tracks and webhooks.
    pub fn visible<T>(
        &self,
        found: Option<T>,
        what: &str,
        id: &str,
        project: impl Fn(&T) -> Option<&str>,
    ) -> Result<T, ServiceError> {
        let found = found.ok_or_else(|| ServiceError::not_found(what, id))?;
        self.check_optional_project(project(&found))?;
        Ok(found)
    }

    /// [`Caller::check_project`] for resources whose project is optional (refine
    /// jobs and runs): one with no project is for unrestricted callers only, so a
    /// limited token must name one of its projects.
    pub fn check_optional_project(&self, project_id: Option<&str>) -> Result<(), ServiceError> {
        match (project_id, &self.projects) {
            (Some(p), _) => self.check_project(p),
            (None, None) => Ok(()),
            (None, Some(_)) => Err(ServiceError::new(
                ErrorKind::Forbidden,
                ProblemCode::ForbiddenProject,
                "this token is limited to some projects: the resource must name one of them \
                 in project_id",
            )),
        }
    }

    /// For list use cases: `None` when every project is allowed, else the allowed
    /// project ids. Rows that belong to no project are for unrestricted callers only.
    pub fn allowed_projects(&self) -> Option<&[String]> {
        self.projects.as_deref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn callers_check_projects() {
        let all = Caller::unrestricted();
        assert!(all.check_project("anything").is_ok());
        assert_eq!(all.allowed_projects(), None);
        let some = Caller::limited_to(vec!["a".to_owned(), "b".to_owned()].into());
        assert!(some.check_project("b").is_ok());
        let err = some.check_project("c").unwrap_err();
        assert_eq!(err.kind, ErrorKind::Forbidden);
        assert_eq!(err.code, ProblemCode::ForbiddenProject);
        assert!(some.check_optional_project(None).is_err());
        assert!(all.check_optional_project(None).is_ok());
        assert_eq!(
            some.allowed_projects(),
            Some(&["a".to_owned(), "b".to_owned()][..])
        );
    }

    #[test]
    fn token_fingerprints_are_stable_distinct_and_not_the_token() {
        let one = Caller::for_token(&ApiToken::limited("token-one-aaaaaaaaaa", &["a"]));
        let again = Caller::for_token(&ApiToken::unrestricted("token-one-aaaaaaaaaa"));
        let two = Caller::for_token(&ApiToken::unrestricted("token-two-aaaaaaaaaa"));
        assert_eq!(one.token(), again.token());
        assert_ne!(one.token(), two.token());
        let print = one.token().unwrap().as_str();
        assert_eq!(print.len(), 32);
        assert!(!print.contains("token-one"));
        assert!(Caller::unrestricted().token().is_none());
        assert!(one.check_project("a").is_ok() && one.check_project("b").is_err());
    }
}
