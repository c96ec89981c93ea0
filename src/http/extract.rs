//! axum's extractors, wrapped so that every rejection is problem+json with a code.

use axum::extract::FromRequest;
use axum::extract::FromRequestParts;
use axum::extract::rejection::{JsonRejection, PathRejection, QueryRejection};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use crate::http::problem::ApiError;
use crate::service::ProblemCode;

/// `axum::Json` whose rejection is an [`ApiError`].
#[derive(Debug, Clone, Copy, Default, FromRequest)]
#[from_request(via(axum::Json), rejection(ApiError))]
pub struct Json<T>(pub T);

impl<T: serde::Serialize> IntoResponse for Json<T> {
    fn into_response(self) -> Response {
        axum::Json(self.0).into_response()
    }
}

#[derive(Debug, FromRequestParts)]
#[from_request(via(axum::extract::Path), rejection(ApiError))]
pub struct Path<T>(pub T);

#[derive(Debug, FromRequestParts)]
#[from_request(via(axum::extract::Query), rejection(ApiError))]
pub struct Query<T>(pub T);

impl From<JsonRejection> for ApiError {
    fn from(rejection: JsonRejection) -> Self {
        let status = rejection.status();
        let code = match &rejection {
            JsonRejection::MissingJsonContentType(_) => ProblemCode::UnsupportedMediaType,
            JsonRejection::JsonSyntaxError(_) => ProblemCode::MalformedJson,
            JsonRejection::JsonDataError(_) => ProblemCode::InvalidBody,
            _ if status == StatusCode::PAYLOAD_TOO_LARGE => ProblemCode::BodyTooLarge,
            _ => ProblemCode::InvalidBody,
        };
        // `body_text` names the JSON path and the line/column of the problem.
        ApiError::new(status, code, rejection.body_text())
    }
}

impl From<PathRejection> for ApiError {
    fn from(rejection: PathRejection) -> Self {
        ApiError::bad_request(ProblemCode::InvalidPath, rejection.body_text())
    }
}

impl From<QueryRejection> for ApiError {
    fn from(rejection: QueryRejection) -> Self {
        ApiError::bad_request(ProblemCode::InvalidQuery, rejection.body_text())
    }
}
