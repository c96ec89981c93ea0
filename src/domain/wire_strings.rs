//! One table per fieldless enum for its wire strings, so `as_str`, `parse`, `Display`
//! and `FromStr` cannot drift from one another (or, checked by tests, from serde).

use std::fmt;

/// Implements `ALL`, `as_str` and `Display` for a fieldless enum from one
/// `Variant => "wire"` table; with `parse` also an exact, case-sensitive `parse`
/// (like serde); with a kind (`"task status"`) also `FromStr`, whose error names
/// every accepted value. The strings must equal the serde names.
macro_rules! wire_strings {
    (@unit $variant:ident) => { () };
    (@core $ty:ident, { $($variant:ident => $s:literal),+ }) => {
        impl $ty {
            /// Every variant, in declaration order.
            #[allow(dead_code)]
            pub const ALL: [$ty; <[()]>::len(&[$($crate::domain::wire_strings!(@unit $variant)),+])] =
                [$($ty::$variant),+];

            /// The wire (serde) name.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $($ty::$variant => $s),+
                }
            }
        }

        impl $crate::domain::wire_strings::WireEnum for $ty {
            fn all() -> &'static [Self] {
                &Self::ALL
            }

            fn as_wire(self) -> &'static str {
                self.as_str()
            }
        }

        impl ::std::fmt::Display for $ty {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
    (@parse $ty:ident, { $($variant:ident => $s:literal),+ }) => {
        impl $ty {
            /// Inverse of [`Self::as_str`]: exact, case-sensitive, like serde.
            #[allow(dead_code)]
            pub fn parse(s: &str) -> Option<Self> {
                match s {
                    $($s => Some($ty::$variant),)+
                    _ => None,
                }
            }
        }
    };
    ($ty:ident { $($variant:ident => $s:literal),+ $(,)? }) => {
        $crate::domain::wire_strings!(@core $ty, { $($variant => $s),+ });
    };
    ($ty:ident, parse { $($variant:ident => $s:literal),+ $(,)? }) => {
        $crate::domain::wire_strings!(@core $ty, { $($variant => $s),+ });
        $crate::domain::wire_strings!(@parse $ty, { $($variant => $s),+ });
    };
    ($ty:ident, $kind:literal, column { $($variant:ident => $s:literal),+ $(,)? }) => {
        $crate::domain::wire_strings!($ty, $kind, { $($variant => $s),+ });
        $crate::domain::wire_strings!(@column $ty, $kind);
    };
    // A TEXT column holding the wire string, on either back-end: rows decode
    // straight into the enum (by its `parse`), and an unknown word is a decode
    // error naming it. Also callable alone, for an enum with its own `parse`.
    (@column $ty:ident, $kind:literal) => {
        impl<DB: ::sqlx::Database> ::sqlx::Type<DB> for $ty
        where
            str: ::sqlx::Type<DB>,
        {
            fn type_info() -> DB::TypeInfo {
                <str as ::sqlx::Type<DB>>::type_info()
            }

            fn compatible(ty: &DB::TypeInfo) -> bool {
                <str as ::sqlx::Type<DB>>::compatible(ty)
            }
        }

        impl<'r, DB: ::sqlx::Database> ::sqlx::Decode<'r, DB> for $ty
        where
            &'r str: ::sqlx::Decode<'r, DB>,
        {
            fn decode(
                value: <DB as ::sqlx::Database>::ValueRef<'r>,
            ) -> Result<Self, ::sqlx::error::BoxDynError> {
                let text = <&'r str as ::sqlx::Decode<'r, DB>>::decode(value)?;
                $ty::parse(text).ok_or_else(|| format!("unknown {} {text:?} in a row", $kind).into())
            }
        }

        impl<'q, DB: ::sqlx::Database> ::sqlx::Encode<'q, DB> for $ty
        where
            &'static str: ::sqlx::Encode<'q, DB>,
        {
            fn encode_by_ref(
                &self,
                buf: &mut <DB as ::sqlx::Database>::ArgumentBuffer,
            ) -> Result<::sqlx::encode::IsNull, ::sqlx::error::BoxDynError> {
                <&'static str as ::sqlx::Encode<'q, DB>>::encode_by_ref(&self.as_str(), buf)
            }
        }
    };
    ($ty:ident, $kind:literal, { $($variant:ident => $s:literal),+ $(,)? }) => {
        $crate::domain::wire_strings!(@core $ty, { $($variant => $s),+ });
        $crate::domain::wire_strings!(@parse $ty, { $($variant => $s),+ });

        impl ::std::str::FromStr for $ty {
            type Err = $crate::domain::wire_strings::ParseEnumError;

            fn from_str(s: &str) -> Result<Self, Self::Err> {
                Self::parse(s).ok_or_else(|| $crate::domain::wire_strings::ParseEnumError {
                    kind: $kind,
                    value: s.to_owned(),
                    expected: &[$($s),+],
                })
            }
        }
    };
}
pub(crate) use wire_strings;

/// What [`wire_strings!`] gives every enum, for code generic over them (the
/// dashboard lists counts by state in the enum's order, whichever enum it is).
pub trait WireEnum: Copy + PartialEq + 'static {
    /// Every variant, in declaration order.
    fn all() -> &'static [Self];
    /// The wire (serde) name.
    fn as_wire(self) -> &'static str;
}

/// An unknown string for a wire enum (e.g. `?mode=` or a `status` field), naming the
/// accepted values so a 400/422 message is actionable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {kind} {value:?}; expected one of: {}", ExpectedList(.expected))]
pub struct ParseEnumError {
    /// What was being parsed, e.g. `"task status"`.
    pub kind: &'static str,
    /// The rejected input, verbatim.
    pub value: String,
    /// Every accepted spelling.
    pub expected: &'static [&'static str],
}

/// Formats `["a", "b"]` as `a, b` without allocating.
struct ExpectedList<'a>(&'a [&'a str]);

impl fmt::Display for ExpectedList<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, s) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            f.write_str(s)?;
        }
        Ok(())
    }
}
