//! Integers as JSON Schema counts them: `3` and `3.0` are the same integer, so a
//! field documented as `integer` takes both (serde alone refuses `3.0` for a `u32`).
//! A fraction, a negative number or one past `u32::MAX` is still refused.
//!
//! `#[serde(deserialize_with = "crate::domain::json_int::u32")]`, or `option_u32`
//! (with `#[serde(default)]`) for an optional field.
//!
//! [`values`] reads free-form JSON values from any format the way serde_json reads
//! JSON text: an integer beyond 64 bits (which YAML hands over as an `i128`/`u128`)
//! becomes a float instead of failing the whole request.

use std::fmt;

use serde::de::{self, Deserializer, Visitor};

struct U32Visitor;

impl Visitor<'_> for U32Visitor {
    type Value = u32;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a non-negative integer of at most 4294967295")
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<u32, E> {
        u32::try_from(v).map_err(|_| E::invalid_value(de::Unexpected::Unsigned(v), &self))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<u32, E> {
        u32::try_from(v).map_err(|_| E::invalid_value(de::Unexpected::Signed(v), &self))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<u32, E> {
        if v.fract() == 0.0 && (0.0..=f64::from(u32::MAX)).contains(&v) {
            // Checked above: integral and in range, so the cast is exact.
            Ok(v as u32)
        } else {
            Err(E::invalid_value(de::Unexpected::Float(v), &self))
        }
    }
}

/// A `u32` that may be written `7` or `7.0`.
pub fn u32<'de, D: Deserializer<'de>>(deserializer: D) -> Result<u32, D::Error> {
    deserializer.deserialize_any(U32Visitor)
}

struct OptionU32Visitor;

impl<'de> Visitor<'de> for OptionU32Visitor {
    type Value = Option<u32>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("null or a non-negative integer of at most 4294967295")
    }

    fn visit_none<E: de::Error>(self) -> Result<Option<u32>, E> {
        Ok(None)
    }

    fn visit_unit<E: de::Error>(self) -> Result<Option<u32>, E> {
        Ok(None)
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Option<u32>, D::Error> {
        u32(deserializer).map(Some)
    }
}

/// An `Option<u32>` whose number may be written `7` or `7.0`; `null` is `None`.
pub fn option_u32<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<u32>, D::Error> {
    deserializer.deserialize_option(OptionU32Visitor)
}

struct ValueSeed;

impl<'de> de::DeserializeSeed<'de> for ValueSeed {
    type Value = serde_json::Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_any(ValueVisitor)
    }
}

struct ValueVisitor;

impl<'de> Visitor<'de> for ValueVisitor {
    type Value = serde_json::Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Self::Value, E> {
        Ok(v.into())
    }

    fn visit_i64<E>(self, v: i64) -> Result<Self::Value, E> {
        Ok(v.into())
    }

    fn visit_u64<E>(self, v: u64) -> Result<Self::Value, E> {
        Ok(v.into())
    }

    fn visit_i128<E>(self, v: i128) -> Result<Self::Value, E> {
        Ok(i64::try_from(v).map_or_else(|_| float(v as f64), Into::into))
    }

    fn visit_u128<E>(self, v: u128) -> Result<Self::Value, E> {
        Ok(u64::try_from(v).map_or_else(|_| float(v as f64), Into::into))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Self::Value, E> {
        Ok(float(v))
    }

    fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
        Ok(v.into())
    }

    fn visit_string<E>(self, v: String) -> Result<Self::Value, E> {
        Ok(v.into())
    }

    fn visit_none<E>(self) -> Result<Self::Value, E> {
        Ok(serde_json::Value::Null)
    }

    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(serde_json::Value::Null)
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_any(self)
    }

    fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element_seed(ValueSeed)? {
            items.push(item);
        }
        Ok(serde_json::Value::Array(items))
    }

    fn visit_map<A: de::MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut object = serde_json::Map::new();
        while let Some(key) = map.next_key::<String>()? {
            let value = map.next_value_seed(ValueSeed)?;
            object.insert(key, value);
        }
        Ok(serde_json::Value::Object(object))
    }
}

/// As serde_json does: a non-finite float is `null`.
fn float(v: f64) -> serde_json::Value {
    serde_json::Number::from_f64(v).map_or(serde_json::Value::Null, serde_json::Value::Number)
}

/// A list of free-form values, read the same from JSON and from YAML.
pub fn values<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Vec<serde_json::Value>, D::Error> {
    struct ListVisitor;
    impl<'de> Visitor<'de> for ListVisitor {
        type Value = Vec<serde_json::Value>;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a sequence")
        }
        fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
            let mut items = Vec::new();
            while let Some(item) = seq.next_element_seed(ValueSeed)? {
                items.push(item);
            }
            Ok(items)
        }
    }
    deserializer.deserialize_seq(ListVisitor)
}

#[cfg(test)]
mod tests {
    #[derive(serde::Deserialize, Debug, PartialEq)]
    struct Sample {
        #[serde(deserialize_with = "super::u32")]
        n: u32,
        #[serde(default, deserialize_with = "super::option_u32")]
        o: Option<u32>,
    }

    fn read(text: &str) -> Result<Sample, String> {
        serde_json::from_str(text).map_err(|e| e.to_string())
    }

    #[test]
    fn integral_floats_are_integers() {
        assert_eq!(read(r#"{"n": 7}"#), Ok(Sample { n: 7, o: None }));
        assert_eq!(
            read(r#"{"n": 15001.0, "o": 2.0}"#),
            Ok(Sample {
                n: 15001,
                o: Some(2)
            })
        );
        assert_eq!(read(r#"{"n": 1, "o": null}"#), Ok(Sample { n: 1, o: None }));
        assert_eq!(read(r#"{"n": 4294967295.0}"#).map(|s| s.n), Ok(u32::MAX));
        for bad in [
            r#"{"n": 1.5}"#,
            r#"{"n": -1}"#,
            r#"{"n": -1.0}"#,
            r#"{"n": 4294967296}"#,
            r#"{"n": 4294967296.0}"#,
            r#"{"n": "3"}"#,
            r#"{"n": 1, "o": 0.5}"#,
        ] {
            assert!(read(bad).is_err(), "{bad}");
        }
        let yaml: Sample = serde_norway::from_str("n: 3.0\no: 4\n").unwrap();
        assert_eq!(yaml, Sample { n: 3, o: Some(4) });
    }

    #[derive(serde::Deserialize)]
    struct Free {
        #[serde(deserialize_with = "super::values")]
        items: Vec<serde_json::Value>,
    }

    #[test]
    fn huge_yaml_integers_become_floats_as_in_json() {
        let yaml = "items:\n- {a: 484178254205648010850861056, b: [1, -2, x, null, true, 1.5]}\n";
        let free: Free = serde_norway::from_str(yaml).unwrap();
        let from_json: Free = serde_json::from_str(
            r#"{"items": [{"a": 484178254205648010850861056, "b": [1, -2, "x", null, true, 1.5]}]}"#,
        )
        .unwrap();
        // The same shape; the big number as a float (serde_json's own decimal
        // parsing may round the last digit differently).
        assert_eq!(free.items[0]["b"], from_json.items[0]["b"]);
        let (yaml_a, json_a) = (
            free.items[0]["a"].as_f64(),
            from_json.items[0]["a"].as_f64(),
        );
        let (yaml_a, json_a) = (yaml_a.unwrap(), json_a.unwrap());
        assert!(
            (yaml_a - json_a).abs() <= json_a * 1e-12,
            "{yaml_a} vs {json_a}"
        );
    }
}
