//! The webhooks page (docs/api.md, "Webhooks"): the viewer's webhooks and the
//! deliveries that are failing, newest first. Read-only: webhooks are created,
//! rotated and replayed over the API.

use maud::{Markup, html};

use super::{Chrome, Section, layout, time};
use crate::service::webhooks::WebhooksOverview;

pub fn webhooks_page(view: &WebhooksOverview, chrome: Chrome) -> Markup {
    let body = html! {
        h1 { "Webhooks" }
        @if view.webhooks.is_empty() {
            p { "No webhooks. Create one with " code { "POST /v1/webhooks" } "." }
        } @else {
            table {
                caption { "Webhooks" }
                thead { tr { th scope="col" { "URL" } th scope="col" { "Events" } th scope="col" { "Project" } th scope="col" { "State" } th scope="col" { "Created" } } }
                tbody {
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
                }
            }
        }
        h2 { "Failing deliveries" }
        @if view.failing.is_empty() {
            p { "No delivery is failing." }
        } @else {
            table {
                caption { "Deliveries not delivered after at least one attempt" }
                thead { tr { th scope="col" { "Event" } th scope="col" { "Webhook" } th scope="col" { "Attempts" } th scope="col" { "Last answer" } th scope="col" { "Next attempt" } } }
                tbody {
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
                }
            }
        }
    };
    layout("Webhooks", Section::Webhooks, chrome, body)
}
