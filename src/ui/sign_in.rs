//! Signing in with an API token, and out (the session itself: `session.rs`).

use axum::Form;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use serde::Deserialize;

use super::error::PageResult;
use super::pages::{login_page, respond};
use super::session;
use crate::state::AppState;

#[derive(Deserialize)]
pub struct NextQuery {
    next: Option<String>,
}

pub async fn login_form(
    State(state): State<AppState>,
    Query(query): Query<NextQuery>,
) -> maud::Markup {
    let next = session::safe_next(query.next.as_deref());
    login_page(next, false, !state.settings.api_tokens.is_empty())
}

#[derive(Deserialize)]
pub struct LoginForm {
    token: String,
    next: Option<String>,
}

pub async fn login(
    State(state): State<AppState>,
    headers: HeaderMap,
    Form(form): Form<LoginForm>,
) -> PageResult<Response> {
    let next = session::safe_next(form.next.as_deref());
    let Some(new_session) = state.service.sign_in(&form.token).await? else {
        return Ok(respond(
            StatusCode::UNAUTHORIZED,
            login_page(next, true, !state.settings.api_tokens.is_empty()),
        ));
    };
    let cookie = session::set_cookie(
        &new_session.cookie_value,
        session::is_https(&headers),
        new_session.max_age_secs,
    );
    Ok(([(header::SET_COOKIE, cookie)], Redirect::to(next)).into_response())
}

/// Ends the session on the server (a copied cookie stops working too) and in the
/// browser.
pub async fn logout(State(state): State<AppState>, headers: HeaderMap) -> PageResult<Response> {
    if let Some(value) = session::session_cookie(&headers) {
        state.service.sign_out(value).await?;
    }
    let cookie = session::set_cookie("", session::is_https(&headers), 0);
    Ok(([(header::SET_COOKIE, cookie)], Redirect::to("/ui/login")).into_response())
}
