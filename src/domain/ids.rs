//! Identifiers clients send (project ids, team_pks, creators): parsed once at the
//! edge so that storage and logs never see an empty, huge or control-laden string.

use std::fmt;

/// Longest identifier accepted, in bytes. Real ids are short; the bound keeps a
/// hostile 10 MB "id" out of indexes and log lines.
pub const MAX_ID_BYTES: usize = 256;

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

/// A non-empty identifier of at most [`MAX_ID_BYTES`] bytes without control characters.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Ident(String);

impl Ident {
    pub fn parse(field: &'static str, value: &str) -> Result<Self, IdError> {
        let fail = |reason: String| Err(IdError { field, reason });
        if value.trim().is_empty() {
            return fail("must not be empty".into());
        }
        if value.len() > MAX_ID_BYTES {
            return fail(format!(
                "is {} bytes long; at most {MAX_ID_BYTES} are allowed",
                value.len()
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
        assert!(Ident::parse("project_id", &"x".repeat(MAX_ID_BYTES)).is_ok());
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
        assert!(err.to_string().contains("10000 bytes"), "{err}");
    }
}
