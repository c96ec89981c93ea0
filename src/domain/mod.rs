//! Pure rules of the seeds: no I/O, no HTTP, no database. Shared by CLI and server.

pub mod dispatch;
pub mod gating;
pub mod graph;
pub mod ids;
pub mod job;
pub mod json_int;
pub mod loop_plan;
pub mod natural;
pub mod rate_limit;
pub mod refine;
pub mod retry;
pub mod storable;
pub mod text;
pub mod track_state;
pub mod usage;
pub mod webhooks;
pub mod wire_strings;
pub(crate) use wire_strings::wire_strings;
pub mod xorshift;

/// Asserts that `text` contains `part`, showing `text` when it does not (unit tests).
#[cfg(test)]
#[track_caller]
pub(crate) fn assert_contains(text: &str, part: &str) {
    assert!(text.contains(part), "{part:?} not in {text}");
}

/// Asserts that each OpenAPI schema serializes to a JSON object (unit tests).
#[cfg(test)]
pub(crate) fn assert_schemas_build(
    schemas: impl IntoIterator<Item = utoipa::openapi::RefOr<utoipa::openapi::schema::Schema>>,
) {
    for schema in schemas {
        assert!(serde_json::to_value(&schema).unwrap().is_object());
    }
}
