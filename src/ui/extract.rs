//! What every dashboard handler starts from: who is viewing (the [`Viewer`]
//! extractor), and the form and path values it parses, each refusal a
//! [`PageError`] naming the value.

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use uuid::Uuid;

use super::error::{PageError, PageResult};
use super::pages::Chrome;
use crate::service::dashboard::LivePage;
use crate::service::{Caller, ErrorKind, ProblemCode, Service, ServiceError};
use crate::state::AppState;

/// The app state and the signed-in caller (`session::require_session` puts it on
/// every dashboard request).
pub struct Viewer {
    pub state: AppState,
    pub caller: Caller,
}

impl Viewer {
    pub fn service(&self) -> &Service {
        &self.state.service
    }

    /// What every page's header needs to know: a token is configured, so the
    /// viewer signed in and may sign out.
    pub fn chrome(&self) -> Chrome {
        Chrome {
            signed_in: !self.state.settings.api_tokens.is_empty(),
        }
    }

    /// The change marker a live list page is drawn from, read before its data so
    /// that its stream catches any later change (`ui/live.rs`).
    pub async fn live_since(&self, page: LivePage) -> PageResult<String> {
        Ok(self
            .service()
            .dashboard_live_marker(&self.caller, page)
            .await?)
    }
}

impl FromRequestParts<AppState> for Viewer {
    type Rejection = PageError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, PageError> {
        let caller = parts.extensions.get::<Caller>().cloned().ok_or_else(|| {
            let detail = "a dashboard route outside the session layer";
            ServiceError::new(ErrorKind::Internal, ProblemCode::Internal, detail)
        })?;
        Ok(Viewer {
            state: state.clone(),
            caller,
        })
    }
}

/// A form or path value the page cannot use (400, naming it).
pub fn invalid(field: &'static str, message: &str) -> PageError {
    ServiceError::bad_request(ProblemCode::InvalidQuery, message)
        .field(field)
        .into()
}

pub fn parse_id(raw: &str, what: &'static str) -> PageResult<Uuid> {
    Uuid::parse_str(raw).map_err(|_| invalid(what, "not an id (a UUID)"))
}

/// A form field left empty means "no filter".
pub fn present(value: &Option<String>) -> Option<&str> {
    value.as_deref().map(str::trim).filter(|v| !v.is_empty())
}

/// A form field that, when present, must parse.
pub fn parse_present<T>(
    value: &Option<String>,
    parse: impl FnOnce(&str) -> PageResult<T>,
) -> PageResult<Option<T>> {
    present(value).map(parse).transpose()
}
