//! The dashboard handlers' one error type: a use case's refusal, or a form or path
//! value the page cannot use, rendered as an error page with the status REST
//! answers for the same kind ([`ErrorKind::status`]).

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use super::pages::error_page;
use crate::service::{ErrorKind, ServiceError};

/// What a dashboard handler answers: a page, or an error page.
pub type PageResult<T = maud::Markup> = Result<T, PageError>;

pub struct PageError {
    error: ServiceError,
    /// What was refused, for an action's refusal (its detail then shown as is).
    action: Option<&'static str>,
}

impl From<ServiceError> for PageError {
    fn from(error: ServiceError) -> Self {
        PageError {
            error,
            action: None,
        }
    }
}

impl PageError {
    /// An action's refusal, titled by what was refused (`map_err(PageError::refused("Cancel refused"))`).
    pub fn refused(title: &'static str) -> impl Fn(ServiceError) -> PageError {
        move |error| PageError {
            error,
            action: Some(title),
        }
    }
}

impl IntoResponse for PageError {
    /// The detail is for the person; a storage fault's or a bug's stays in the log.
    fn into_response(self) -> Response {
        let PageError { error: err, action } = self;
        let kind = err.kind;
        // The same map as REST's (every kind's code is valid, so no fallback is taken).
        let status =
            StatusCode::from_u16(kind.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        if let Some(title) = action.filter(|_| kind != ErrorKind::Internal) {
            return error_page(status, title, &err.detail);
        }
        let title = match kind {
            ErrorKind::NotFound => "Not found",
            ErrorKind::Forbidden => "Not yours",
            ErrorKind::BadRequest | ErrorKind::Unprocessable => "Bad request",
            ErrorKind::Unavailable | ErrorKind::TooManyRequests => "Unavailable",
            ErrorKind::Conflict | ErrorKind::PreconditionFailed => "Conflict",
            ErrorKind::Internal => "Something broke",
        };
        let detail = match kind {
            ErrorKind::Forbidden => "Your token may not see this project.".to_owned(),
            ErrorKind::Unavailable => "The database did not answer; try again shortly.".to_owned(),
            ErrorKind::Internal => "The server log has the details.".to_owned(),
            _ => match err.details.field() {
                Some(field) if !err.detail.starts_with(field) => format!("{field}: {}", err.detail),
                _ => err.detail,
            },
        };
        error_page(status, title, &detail)
    }
}
