//! axum's extractors, wrapped so that every rejection is problem+json with a code.

use axum::body::Bytes;
use axum::extract::rejection::{
    JsonRejection, MissingJsonContentType, PathRejection, QueryRejection,
};
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::de::DeserializeOwned;

use crate::domain::storable::{find_nul, may_hold_nul};
use crate::domain::track_state::TrackId;
use crate::http::problem::ApiError;
use crate::service::tracks::parse_track_id;
use crate::service::{ProblemCode, ProblemDetails, ServiceError, parse_id};
use uuid::Uuid;

/// `axum::Json` whose rejection is an [`ApiError`], parsed by [`parse_json`].
#[derive(Debug, Clone, Copy, Default)]
pub struct Json<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for Json<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, Self::Rejection> {
        if !json_content_type(request.headers()) {
            return Err(JsonRejection::from(MissingJsonContentType::default()).into());
        }
        let body = Bytes::from_request(request, state)
            .await
            .map_err(JsonRejection::from)?;
        parse_json(&body).map(Json)
    }
}

/// `axum::Json`'s parse, several times faster on success: axum reads every body
/// through `serde_path_to_error`, which wraps each value and copies each member name
/// to track where a failure is (most of the time of a 50-task validate request,
/// `bench/README.md`). Bodies are read by plain serde_json; only one that fails is
/// read again by axum, so rejections name the same path with the same text.
///
/// The body's UTF-8 is checked once, as a whole, and the text read with
/// `from_str`: `from_slice` checks every string on its own, a measurable part of a
/// validate request (`bench/README.md`, "Gating over HTTP"). Both accept exactly
/// the same bodies once the bytes are UTF-8; a body that is not goes the old way,
/// so its rejection is worded as before.
pub fn parse_json<T: DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    let parsed = match std::str::from_utf8(body) {
        Ok(text) => serde_json::from_str(text),
        Err(_) => serde_json::from_slice(body),
    };
    match parsed {
        Ok(value) => Ok(value),
        Err(_) => axum::Json::<T>::from_bytes(body)
            .map(|axum::Json(value)| value)
            .map_err(ApiError::from),
    }
}

/// axum's own test for its `Json` extractor: `application/json` or
/// `application/*+json`, as a well-formed media type.
fn json_content_type(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.parse::<mime::Mime>().ok())
        .is_some_and(|mime| {
            mime.type_() == "application"
                && (mime.subtype() == "json" || mime.suffix().is_some_and(|name| name == "json"))
        })
}

impl<T: serde::Serialize> IntoResponse for Json<T> {
    fn into_response(self) -> Response {
        axum::Json(self.0).into_response()
    }
}

/// [`Json`] for bodies that are stored: also refuses any string holding U+0000
/// (Postgres cannot store it; see `domain::storable`) with 422 `invalid_field`
/// naming it, before the handler runs.
#[derive(Debug, Clone, Copy, Default)]
pub struct StorableJson<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for StorableJson<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, Self::Rejection> {
        let StorableJsonAsSent(value, _) = StorableJsonAsSent::from_request(request, state).await?;
        Ok(StorableJson(value))
    }
}

/// [`StorableJson`] and the body as sent, for a use case that hashes it (an
/// idempotent create compares a retry's body with the first one's).
#[derive(Debug, Clone)]
pub struct StorableJsonAsSent<T>(pub T, pub Bytes);

impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for StorableJsonAsSent<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, Self::Rejection> {
        if !is_json(request.headers()) {
            return Err(ApiError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                ProblemCode::UnsupportedMediaType,
                "Expected request with `Content-Type: application/json`",
            ));
        }
        let body = Bytes::from_request(request, state)
            .await
            .map_err(|rejection| {
                let status = rejection.status();
                let code = if status == StatusCode::PAYLOAD_TOO_LARGE {
                    ProblemCode::BodyTooLarge
                } else {
                    ProblemCode::InvalidBody
                };
                ApiError::new(status, code, rejection.body_text())
            })?;
        refuse_nul(&body)?;
        let value = parse_json(&body)?;
        Ok(StorableJsonAsSent(value, body))
    }
}

/// What axum's `Json` accepts: `application/json` or `application/*+json`.
fn is_json(headers: &HeaderMap) -> bool {
    let Some(value) = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
    else {
        return false;
    };
    let essence = value
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    essence.split_once('/').is_some_and(|(kind, sub)| {
        kind == "application" && (sub == "json" || sub.ends_with("+json"))
    })
}

/// 422 `invalid_field` (with `field`, a JSON pointer) when a JSON body holds U+0000 in
/// a string or member name. Cheap unless the text holds a `\u0000` escape; a body
/// that is not JSON passes (its parse error is the caller's to report).
pub fn refuse_nul(body: &[u8]) -> Result<(), ApiError> {
    if !may_hold_nul(body) {
        return Ok(());
    }
    let Ok(value) = serde_json::from_slice::<serde_json::Value>(body) else {
        return Ok(());
    };
    match find_nul(&value) {
        None => Ok(()),
        Some(at) => Err(ServiceError::invalid_field(at.pointer.clone(), at.message()).into()),
    }
}

#[derive(Debug, FromRequestParts)]
#[from_request(via(axum::extract::Path), rejection(ApiError))]
pub struct Path<T>(pub T);

#[derive(Debug, FromRequestParts)]
#[from_request(via(axum::extract::Query), rejection(ApiError))]
pub struct Query<T>(pub T);

/// The `{id}` of a route with that one path parameter, parsed in the adapter by the
/// service's rule (400 `invalid_path` or `invalid_track_id`, the same text on
/// every transport), so a handler passes the use case a typed id.
macro_rules! path_id {
    ($(#[$doc:meta])* $name:ident($ty:ty) = $parse:expr) => {
        $(#[$doc])*
        #[derive(Debug)]
        pub struct $name(pub $ty);

        impl<S: Send + Sync> FromRequestParts<S> for $name {
            type Rejection = ApiError;

            async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
                let Path(raw) = Path::<String>::from_request_parts(parts, state).await?;
                let parse: fn(&str) -> Result<$ty, crate::service::ServiceError> = $parse;
                Ok($name(parse(&raw)?))
            }
        }
    };
}

path_id!(
    /// A refine job's id.
    JobPath(Uuid) = |raw| parse_id(raw, "job")
);
path_id!(
    /// A refine run's id.
    RunPath(Uuid) = |raw| parse_id(raw, "run")
);
path_id!(
    /// A webhook's id.
    WebhookPath(Uuid) = |raw| parse_id(raw, "webhook")
);
path_id!(
    /// A track's id.
    TrackPath(TrackId) = parse_track_id
);

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

/// 400 `invalid_path`, with `parameter` naming the path parameter when axum knows it
/// (so a client learns which id was malformed, not only that one was).
impl From<PathRejection> for ApiError {
    fn from(rejection: PathRejection) -> Self {
        use axum::extract::path::ErrorKind;
        let parameter = match &rejection {
            PathRejection::FailedToDeserializePathParams(failed) => match failed.kind() {
                ErrorKind::ParseErrorAtKey { key, .. }
                | ErrorKind::InvalidUtf8InPathParam { key }
                | ErrorKind::DeserializeError { key, .. } => Some(key.clone()),
                _ => None,
            },
            _ => None,
        };
        let error = ServiceError::bad_request(ProblemCode::InvalidPath, rejection.body_text());
        match parameter {
            Some(key) => ApiError::from(error).with_details(ProblemDetails::Parameter(key)),
            None => error.into(),
        }
    }
}

impl From<QueryRejection> for ApiError {
    fn from(rejection: QueryRejection) -> Self {
        ServiceError::bad_request(ProblemCode::InvalidQuery, rejection.body_text()).into()
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::parse_json;
    use crate::service::task_lists::ValidateRequest;

    /// What a parse came to, comparable: the value's debug form, or the status and
    /// text of the rejection.
    fn outcome<T: serde::de::DeserializeOwned + std::fmt::Debug>(
        result: Result<T, crate::http::problem::ApiError>,
    ) -> String {
        match result {
            Ok(value) => format!("ok {value:?}"),
            Err(error) => format!("err {} {:?} {}", error.status, error.code, error.detail),
        }
    }

    /// axum's own parse, as it answered before `parse_json` existed.
    fn axum_outcome<T: serde::de::DeserializeOwned + std::fmt::Debug>(body: &[u8]) -> String {
        outcome(
            axum::Json::<T>::from_bytes(body)
                .map(|axum::Json(value)| value)
                .map_err(Into::into),
        )
    }

    fn assert_same(body: &[u8]) {
        assert_eq!(
            outcome(parse_json::<ValidateRequest>(body)),
            axum_outcome::<ValidateRequest>(body),
            "{body:?}"
        );
        assert_eq!(
            outcome(parse_json::<serde_json::Value>(body)),
            axum_outcome::<serde_json::Value>(body),
            "{body:?}"
        );
    }

    const VALID: &str = r#"{"tasks":[{"task_id":"t-1","assigned_persona":"dev","parallel_group":1,"depends_on":[],"reads":["a.rs"],"writes":["b.rs"],"description":"d\u00e9j\u00e0 \ud83d\ude00","x":{"y":[1,2.5e300,null]}}],"existing_files":["a.rs"]}"#;

    #[test]
    fn accepts_and_rejects_what_axum_does_on_edge_cases() {
        let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
        let cases: Vec<Vec<u8>> = vec![
            VALID.into(),
            br#"{"tasks":[{"task_id":"\ud800"}]}"#.to_vec(), // lone surrogate
            br#"{"tasks":[{"task_id":"\udc00x"}]}"#.to_vec(),
            b"{\"tasks\":[{\"task_id\":\"\xff\"}]}".to_vec(), // invalid UTF-8 in a string
            b"{\"tasks\":[{\"task_id\":\"\xc3\"}]}".to_vec(), // cut multi-byte sequence
            b"{\"tasks\":[]}\xff".to_vec(),                   // invalid UTF-8 after the value
            b"{\"tasks\":[]} x".to_vec(),                     // trailing garbage
            br#"{"tasks":[],"tasks":[]}"#.to_vec(),           // duplicate member
            br#"{"tasks":[{"parallel_group":1e999}]}"#.to_vec(), // number out of range
            br#"{"tasks":[{"parallel_group":123456789012345678901234567890}]}"#.to_vec(),
            format!(r#"{{"tasks":{deep}}}"#).into_bytes(), // past the recursion limit
            format!(
                r#"{{"tasks":[{{"x":{}}}]}}"#,
                "[".repeat(100) + &"]".repeat(100)
            )
            .into_bytes(),
            br#"{"planner_output":"```json\n[]\n```"}"#.to_vec(),
            br#"{"nope":1}"#.to_vec(),
            b"".to_vec(),
            b"\xef\xbb\xbf{}".to_vec(), // a byte-order mark
        ];
        for body in cases {
            assert_same(&body);
        }
    }

    proptest! {
        /// Mutated bodies (bytes replaced, inserted, cut) are accepted or rejected
        /// alike, with the same value or the same rejection.
        #[test]
        fn mutated_bodies_parse_as_axum_parses_them(
            edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>(), 0..3u8), 1..4)
        ) {
            let mut body = VALID.as_bytes().to_vec();
            for (at, byte, kind) in edits {
                let at = at.index(body.len() + 1);
                match kind {
                    0 if at < body.len() => body[at] = byte,
                    1 => body.insert(at, byte),
                    _ => body.truncate(at),
                }
            }
            assert_same(&body);
        }
    }
}
