//! The webhooks page (docs/api.md, "Webhooks"): the viewer's webhooks and the
//! deliveries that are failing, newest first. Read-only: webhooks are created,
//! rotated and replayed over the API.

use maud::{Markup, html};

use super::{Chrome, Section, heads, layout, time};
use crate::service::webhooks::WebhooksOverview;

pub fn webhooks_page(view: &WebhooksOverview, chrome: Chrome) -> Markup {
    let body = html! {
        h1 { "Webhooks" }
        @if view.webhooks.is_empty() {
            p { "No webhooks. Create one with " code { "POST /v1/webhooks" } "." }
        } @else {
            (table("Webhooks", &["URL", "Events", "Project", "State", "Created"], html! {
                @for w in &view.webhooks {
                    tr {
                        td { code { (w.url) } @if let Some(d) = &w.description { br; small { (d) } } }
                        td { (w.events.join(", ")) }
                        td { (w.project_id.as_deref().unwrap_or("every project")) }
                        td {
                            @if w.disabled {
                                strong { "disabled" } @if let Some(r) = &w.disabled_reason { ": " (r) }
                            } @else { "active" }
                        }
                        td { (time(&w.created_at)) }
                    }
                }
            }))
        }
        h2 { "Failing deliveries" }
        @if view.failing.is_empty() {
            p { "No delivery is failing." }
        } @else {
            (table(
                "Deliveries not delivered after at least one attempt",
                &["Event", "Webhook", "Attempts", "Last answer", "Next attempt"],
                html! {
                    @for f in &view.failing {
                        tr {
                            td { (f.delivery.event_type) br; small { code { (f.delivery.event_id) } } }
                            td { code { (f.url) } }
                            td { (f.delivery.attempts) }
                            td {
                                @if let Some(code) = f.delivery.last_status_code { (code) " " }
                                @if let Some(e) = &f.delivery.last_error { small { (e) } }
                            }
                            td {
                                @match &f.delivery.next_attempt_at {
                                    Some(at) => { (time(at)) }
                                    None => { "none (" (f.delivery.state) ")" }
                                }
                            }
                        }
                    }
                },
            ))
        }
    };
    layout("Webhooks", Section::Webhooks, chrome, body)
}

/// A captioned table of `names` columns over `rows`.
fn table(caption: &str, names: &[&str], rows: Markup) -> Markup {
    html! {
        table {
            caption { (caption) }
            thead { tr { (heads(names)) } }
            tbody { (rows) }
        }
    }
}
