//! Identifiers clients send (project ids, team_pks, creators): parsed once where
//! they enter (the adapters) so that storage and logs never see an empty, huge or
//! control-laden string.

use std::fmt;

/// Longest task id accepted, in bytes. Real ids are short; the bound keeps a
/// hostile 10 MB "id" out of indexes and log lines.
pub const MAX_ID_BYTES: usize = 256;

/// Longest [`Ident`], in characters (Unicode scalar values, what JSON Schema's
/// `maxLength` counts, so the OpenAPI document states the rule exactly).
pub const MAX_IDENT_CHARS: usize = 256;

/// [`Ident`]'s rule as an ECMA-262 / Python regex: at least one character that is
/// neither whitespace (Rust's `char::is_whitespace`) nor a control character
/// (`char::is_control`, U+0000–U+001F and U+007F–U+009F), and no control character.
pub const IDENT_PATTERN: &str = concat!(
    r"^[^\u0000-\u001f\u007f-\u009f]*",
    r"[^\u0000-\u0020\u007f-\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]",
    r"[^\u0000-\u001f\u007f-\u009f]*$",
);

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdError {
    pub field: &'static str,
    pub reason: String,
}

impl fmt::Display for IdError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.field, self.reason)
    }
}

/// A non-blank identifier of at most [`MAX_IDENT_CHARS`] characters without control
/// characters: project ids, team_pks, creators, lead roles.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Ident(String);

/// The OpenAPI schema of every field or parameter parsed as an [`Ident`]
/// (`#[schema(value_type = Ident)]`): the rule above, exactly.
impl utoipa::PartialSchema for Ident {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        id_schema(
            "An identifier: 1 to 256 characters, not only whitespace, no control characters.",
            MAX_IDENT_CHARS,
            IDENT_PATTERN,
        )
    }
}

/// The OpenAPI schema of a string id: what it is, its longest length and its pattern.
pub(crate) fn id_schema(
    description: &str,
    max_length: usize,
    pattern: &str,
) -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
    use utoipa::openapi::schema::{ObjectBuilder, Type};
    ObjectBuilder::new()
        .schema_type(Type::String)
        .description(Some(description))
        .min_length(Some(1))
        .max_length(Some(max_length))
        .pattern(Some(pattern))
        .into()
}

impl utoipa::ToSchema for Ident {}

impl Ident {
    pub fn parse(field: &'static str, value: &str) -> Result<Self, IdError> {
        let fail = |reason: String| Err(IdError { field, reason });
        if value.trim().is_empty() {
            return fail("must not be empty".into());
        }
        // A char is at most 4 bytes: only long strings need counting.
        if value.len() > MAX_IDENT_CHARS && value.chars().count() > MAX_IDENT_CHARS {
            return fail(format!(
                "is {} characters long; at most {MAX_IDENT_CHARS} are allowed",
                value.chars().count()
            ));
        }
        if let Some(c) = value.chars().find(|c| c.is_control()) {
            return fail(format!("contains the control character {c:?}"));
        }
        Ok(Ident(value.to_owned()))
    }

    /// [`Ident::parse`] for an optional field: absent stays absent.
    pub fn parse_optional(
        field: &'static str,
        value: Option<&str>,
    ) -> Result<Option<Self>, IdError> {
        value.map(|v| Self::parse(field, v)).transpose()
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Ident {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_ordinary_ids() {
        assert_eq!(
            Ident::parse("project_id", "proj-1").unwrap().as_str(),
            "proj-1"
        );
        assert!(Ident::parse("project_id", &"x".repeat(MAX_IDENT_CHARS)).is_ok());
        // Characters, not bytes: 256 two-byte characters are fine, 257 are not.
        assert!(Ident::parse("project_id", &"é".repeat(MAX_IDENT_CHARS)).is_ok());
        assert!(Ident::parse("project_id", &"é".repeat(MAX_IDENT_CHARS + 1)).is_err());
    }

    #[test]
    fn refuses_empty_long_and_control_ids() {
        for (value, needle) in [
            ("", "empty"),
            ("   ", "empty"),
            ("a\0b", "control"),
            ("a\nb", "control"),
        ] {
            let err = Ident::parse("team_pk", value).unwrap_err();
            assert_eq!(err.field, "team_pk");
            assert!(err.to_string().contains(needle), "{err}");
        }
        let err = Ident::parse("team_pk", &"x".repeat(10_000)).unwrap_err();
        assert!(err.to_string().contains("10000 characters"), "{err}");
    }
}
