//! Bearer-token auth for `/v1` routes when `PLANGATE_API_TOKENS` is set, and the
//! per-project limits of a token. Ops routes and docs stay open so probes and
//! people browsing the API need no token.
//!
//! The middleware puts a [`Caller`] on every request. A handler that touches a
//! project takes `caller: Caller` as an extractor and calls
//! [`Caller::check_project`] with the project of the resource *before* it changes
//! anything (403 `forbidden_project` otherwise); a handler that lists resources
//! across projects filters with [`Caller::allowed_projects`] (or
//! [`Caller::may_access`]). Routes that name no project need nothing.

use std::sync::Arc;

use axum::extract::{FromRequestParts, Request, State};
use axum::http::request::Parts;
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::AppState;
use crate::error::ApiError;

/// Who is calling, as far as authorisation goes: the projects the presented token
/// may act on. Every request carries one (unrestricted when auth is off or the
/// token has no limit). Cheap to clone.
///
/// ```ignore
/// async fn handler(caller: Caller, Path(project_id): Path<String>) -> Result<_, ApiError> {
///     caller.check_project(&project_id)?;   // 403 forbidden_project
///     // ...
/// }
/// ```
#[derive(Debug, Clone)]
pub struct Caller {
    /// `None`: every project. `Some`: only these (never empty).
    projects: Option<Arc<[String]>>,
}

impl Caller {
    /// A caller that may act on every project (auth off, or an unlimited token).
    pub fn unrestricted() -> Self {
        Caller { projects: None }
    }

    /// A caller limited to `projects`.
    pub fn limited_to(projects: Arc<[String]>) -> Self {
        Caller {
            projects: Some(projects),
        }
    }

    /// Whether the caller may act on `project_id`.
    pub fn may_access(&self, project_id: &str) -> bool {
        match &self.projects {
            None => true,
            Some(allowed) => allowed.iter().any(|p| p == project_id),
        }
    }

    /// `Ok` when the caller may act on `project_id`, else 403 problem+json with code
    /// `forbidden_project`. Call it before reading or changing anything of the project
    /// beyond what is needed to learn which project a resource belongs to.
    pub fn check_project(&self, project_id: &str) -> Result<(), ApiError> {
        if self.may_access(project_id) {
            Ok(())
        } else {
            Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "forbidden_project",
                format!("this token may not act on project {project_id:?}"),
            ))
        }
    }

    /// [`Caller::check_project`] for resources whose project is optional (refine
    /// jobs and runs): one with no project is for unrestricted callers only, so a
    /// limited token must name one of its projects.
    pub fn check_optional_project(&self, project_id: Option<&str>) -> Result<(), ApiError> {
        match (project_id, &self.projects) {
            (Some(p), _) => self.check_project(p),
            (None, None) => Ok(()),
            (None, Some(_)) => Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "forbidden_project",
                "this token is limited to some projects: the resource must name one of them \
                 in project_id",
            )),
        }
    }

    /// For list endpoints: `None` when every project is allowed, else the allowed
    /// project ids (filter with them, e.g. `project_id = ANY($1)`). Rows that belong
    /// to no project are for unrestricted callers only.
    pub fn allowed_projects(&self) -> Option<&[String]> {
        self.projects.as_deref()
    }
}

/// Handlers take `caller: Caller`. The auth middleware always inserts one, so a
/// missing one is a wiring bug: refuse (500) rather than let the request through.
impl<S: Send + Sync> FromRequestParts<S> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        parts.extensions.get::<Caller>().cloned().ok_or_else(|| {
            tracing::error!("no Caller on the request: the auth middleware is not installed");
            ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal",
                "internal error; see the server log",
            )
        })
    }
}

/// Compare without an early exit, so timing does not reveal how much of a token
/// matched. Every configured token is compared, for the same reason.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

pub async fn require_token(
    State(state): State<AppState>,
    mut request: Request,
    next: Next,
) -> Response {
    let tokens = &state.settings.api_tokens;
    if tokens.is_empty() || !request.uri().path().starts_with("/v1/") {
        request.extensions_mut().insert(Caller::unrestricted());
        return next.run(request).await;
    }
    let presented = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim);
    let mut matched = None;
    match presented {
        Some(presented) => {
            for token in tokens {
                if constant_time_eq(token.secret(), presented.as_bytes()) {
                    matched = Some(token);
                }
            }
        }
        // The dashboard's session cookie reads (GET) only, e.g. a job's event
        // stream, which a browser's EventSource cannot send a header to. Writes
        // always need the bearer token, so the cookie is no CSRF lever.
        None if request.method() == axum::http::Method::GET => {
            matched = crate::ui::session::token_from_cookie(request.headers(), tokens);
            if matched.is_none() {
                return unauthorized("send `Authorization: Bearer <token>`");
            }
        }
        None => return unauthorized("send `Authorization: Bearer <token>`"),
    }
    let Some(token) = matched else {
        return unauthorized("the bearer token is not valid");
    };
    let caller = match token.projects() {
        None => Caller::unrestricted(),
        Some(projects) => Caller::limited_to(projects.clone()),
    };
    request.extensions_mut().insert(caller);
    next.run(request).await
}

fn unauthorized(detail: &str) -> Response {
    let mut response =
        ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", detail).into_response();
    response.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        header::HeaderValue::from_static("Bearer"),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compares_whole_tokens() {
        assert!(constant_time_eq(b"abcdefgh", b"abcdefgh"));
        assert!(!constant_time_eq(b"abcdefgh", b"abcdefgX"));
        assert!(!constant_time_eq(b"abcdefgh", b"abcdefg"));
    }

    #[test]
    fn callers_check_projects() {
        let all = Caller::unrestricted();
        assert!(all.check_project("anything").is_ok());
        assert_eq!(all.allowed_projects(), None);
        let some = Caller::limited_to(vec!["a".to_owned(), "b".to_owned()].into());
        assert!(some.check_project("b").is_ok());
        let err = some.check_project("c").unwrap_err();
        assert_eq!(err.status, StatusCode::FORBIDDEN);
        assert_eq!(err.code, "forbidden_project");
        assert_eq!(
            some.allowed_projects(),
            Some(&["a".to_owned(), "b".to_owned()][..])
        );
    }
}
