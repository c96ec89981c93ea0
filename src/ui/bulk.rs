//! Bulk actions on the job and run lists: a confirmation page saying what will
//! happen to each selected one, then the action, each through its REST use case.

use super::error::PageResult;
use super::extract::{Viewer, invalid};
use super::pages::jobs::bulk_page;
use crate::service::dashboard::{BulkAction, BulkKind, JOB_PAGE};

/// The bulk form's action and ids (at most a page of them; repeated names kept:
/// the form sends one `id` per selected row).
fn form(kind: BulkKind, raw: &str) -> PageResult<(BulkAction, Vec<String>)> {
    let mut action = None;
    let mut ids: Vec<String> = Vec::new();
    for (name, value) in form_urlencoded::parse(raw.as_bytes()) {
        match &*name {
            "action" if action.is_none() => action = Some(value.into_owned()),
            "id" if !ids.iter().any(|id| *id == value) => ids.push(value.into_owned()),
            _ => {}
        }
    }
    let offered = kind.actions();
    let words: Vec<&str> = offered.iter().map(|a| a.as_str()).collect();
    let action =
        action.ok_or_else(|| invalid("action", &format!("missing: {}", words.join(" or "))))?;
    let action = BulkAction::parse(&action)
        .filter(|a| offered.contains(a))
        .ok_or_else(|| invalid("action", &format!("must be {}", words.join(" or "))))?;
    let noun = kind.noun();
    if ids.is_empty() {
        return Err(invalid("id", &format!("select at least one {noun}")));
    }
    if ids.len() > JOB_PAGE as usize {
        return Err(invalid(
            "id",
            &format!("at most one page of {noun}s at a time"),
        ));
    }
    Ok((action, ids))
}

/// The confirmation (`GET`, the list's form as a query): nothing changes.
pub async fn confirm(viewer: &Viewer, kind: BulkKind, query: &str) -> PageResult {
    bulk(viewer, kind, query, false).await
}

/// The action (`POST`, the confirmation's form): what was done, what was
/// refused, and why.
pub async fn act(viewer: &Viewer, kind: BulkKind, body: &str) -> PageResult {
    bulk(viewer, kind, body, true).await
}

async fn bulk(viewer: &Viewer, kind: BulkKind, form_text: &str, act: bool) -> PageResult {
    let (action, ids) = form(kind, form_text)?;
    let items = viewer
        .service()
        .dashboard_bulk(&viewer.caller, kind, action, &ids, act)
        .await;
    Ok(bulk_page(kind, action, &items, act, viewer.chrome()))
}
