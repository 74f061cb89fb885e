//! DynamoDB's typed attribute values, in the exact JSON shape of the wire protocol.
//!
//! Numbers are kept as the decimal strings DynamoDB sends (`{"N": "12.50"}`), so a value
//! read and written back is bit-for-bit the same: nothing goes through a float.

use std::collections::HashMap;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use bytes::Bytes;
use serde::{Deserialize, Serialize};

/// One item (or key): attribute names mapped to values.
pub type Item = HashMap<String, AttributeValue>;

/// A DynamoDB attribute value.
///
/// Serialises to and from DynamoDB JSON: `AttributeValue::S("a".into())` is `{"S":"a"}`.
///
/// ```
/// use dynacommit::dynamo::AttributeValue;
///
/// let n = AttributeValue::from(18_446_744_073_709_551_615_u64);
/// assert_eq!(serde_json::to_string(&n).unwrap(), r#"{"N":"18446744073709551615"}"#);
/// assert_eq!(n.as_u64(), Some(u64::MAX));
/// ```
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum AttributeValue {
    /// A string.
    S(String),
    /// A number, as its decimal text (up to 38 significant digits in DynamoDB).
    N(String),
    /// Binary data, base64 on the wire.
    B(#[serde(with = "base64_bytes")] Bytes),
    /// A boolean.
    #[serde(rename = "BOOL")]
    Bool(bool),
    /// Null; DynamoDB always sends `true` here.
    #[serde(rename = "NULL")]
    Null(bool),
    /// A map of attribute values.
    M(HashMap<String, AttributeValue>),
    /// A list of attribute values.
    L(Vec<AttributeValue>),
    /// A set of strings.
    SS(Vec<String>),
    /// A set of numbers, each as decimal text.
    NS(Vec<String>),
    /// A set of binary values.
    BS(#[serde(with = "base64_bytes_list")] Vec<Bytes>),
}

impl AttributeValue {
    /// The string, if this is an `S`.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Self::S(s) => Some(s),
            _ => None,
        }
    }

    /// The number's text, if this is an `N`.
    pub fn as_number_text(&self) -> Option<&str> {
        match self {
            Self::N(n) => Some(n),
            _ => None,
        }
    }

    /// The number as a `u64`, if this is an `N` holding an integer in range.
    pub fn as_u64(&self) -> Option<u64> {
        self.as_number_text()?.parse().ok()
    }

    /// The number as an `i64`, if this is an `N` holding an integer in range.
    pub fn as_i64(&self) -> Option<i64> {
        self.as_number_text()?.parse().ok()
    }

    /// The bytes, if this is a `B`.
    pub fn as_bytes(&self) -> Option<&Bytes> {
        match self {
            Self::B(b) => Some(b),
            _ => None,
        }
    }

    /// The boolean, if this is a `BOOL`.
    pub fn as_bool(&self) -> Option<bool> {
        match self {
            Self::Bool(b) => Some(*b),
            _ => None,
        }
    }

    /// The type's name as DynamoDB spells it (`"S"`, `"N"`, `"BOOL"`, ...), for messages.
    pub fn type_name(&self) -> &'static str {
        match self {
            Self::S(_) => "S",
            Self::N(_) => "N",
            Self::B(_) => "B",
            Self::Bool(_) => "BOOL",
            Self::Null(_) => "NULL",
            Self::M(_) => "M",
            Self::L(_) => "L",
            Self::SS(_) => "SS",
            Self::NS(_) => "NS",
            Self::BS(_) => "BS",
        }
    }
}

// Values can be large (binary payloads): show them whole in Debug, since none carry
// credentials, but keep the wire spelling so logs read like DynamoDB JSON.
impl std::fmt::Debug for AttributeValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::S(s) => write!(f, "S({s:?})"),
            Self::N(n) => write!(f, "N({n})"),
            Self::B(b) => write!(f, "B({} bytes)", b.len()),
            Self::Bool(b) => write!(f, "BOOL({b})"),
            Self::Null(_) => write!(f, "NULL"),
            Self::M(m) => f.debug_map().entries(m.iter()).finish(),
            Self::L(l) => f.debug_list().entries(l.iter()).finish(),
            Self::SS(s) => write!(f, "SS({s:?})"),
            Self::NS(n) => write!(f, "NS({n:?})"),
            Self::BS(b) => write!(f, "BS({} values)", b.len()),
        }
    }
}

impl From<&str> for AttributeValue {
    fn from(s: &str) -> Self {
        Self::S(s.to_owned())
    }
}

impl From<String> for AttributeValue {
    fn from(s: String) -> Self {
        Self::S(s)
    }
}

impl From<bool> for AttributeValue {
    fn from(b: bool) -> Self {
        Self::Bool(b)
    }
}

impl From<Bytes> for AttributeValue {
    fn from(b: Bytes) -> Self {
        Self::B(b)
    }
}

macro_rules! number_from {
    ($($t:ty),*) => {$(
        impl From<$t> for AttributeValue {
            fn from(n: $t) -> Self {
                Self::N(n.to_string())
            }
        }
    )*};
}
number_from!(u8, u16, u32, u64, u128, i8, i16, i32, i64, i128);

mod base64_bytes {
    use super::*;

    pub(super) fn serialize<S: serde::Serializer>(b: &Bytes, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&BASE64.encode(b))
    }

    pub(super) fn deserialize<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Bytes, D::Error> {
        let text = String::deserialize(d)?;
        decode(&text).map_err(serde::de::Error::custom)
    }

    pub(super) fn decode(text: &str) -> Result<Bytes, String> {
        BASE64
            .decode(text)
            .map(Bytes::from)
            .map_err(|e| format!("binary attribute is not valid base64: {e}"))
    }
}

mod base64_bytes_list {
    use super::*;
    use serde::ser::SerializeSeq;

    pub(super) fn serialize<S: serde::Serializer>(v: &[Bytes], s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(v.len()))?;
        for b in v {
            seq.serialize_element(&BASE64.encode(b))?;
        }
        seq.end()
    }

    pub(super) fn deserialize<'de, D: serde::Deserializer<'de>>(
        d: D,
    ) -> Result<Vec<Bytes>, D::Error> {
        Vec::<String>::deserialize(d)?
            .iter()
            .map(|t| super::base64_bytes::decode(t).map_err(serde::de::Error::custom))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(json: &str) {
        let v: AttributeValue = serde_json::from_str(json).unwrap();
        assert_eq!(serde_json::to_string(&v).unwrap(), json);
    }

    #[test]
    fn every_type_round_trips_in_wire_form() {
        round_trip(r#"{"S":"héllo"}"#);
        round_trip(r#"{"N":"-0.000000000000000000000000000000000000123"}"#);
        round_trip(r#"{"N":"99999999999999999999999999999999999999"}"#);
        round_trip(r#"{"B":"AAEC/w=="}"#);
        round_trip(r#"{"BOOL":false}"#);
        round_trip(r#"{"NULL":true}"#);
        round_trip(r#"{"L":[{"S":"a"},{"N":"1"}]}"#);
        round_trip(r#"{"M":{"k":{"SS":["a","b"]}}}"#);
        round_trip(r#"{"NS":["1","2.5"]}"#);
        round_trip(r#"{"BS":["AA==","AQ=="]}"#);
    }

    #[test]
    fn binary_decodes_to_the_original_bytes() {
        let v: AttributeValue = serde_json::from_str(r#"{"B":"AAEC/w=="}"#).unwrap();
        assert_eq!(v.as_bytes().unwrap().as_ref(), &[0, 1, 2, 255]);
    }

    #[test]
    fn bad_input_is_an_error_not_a_panic() {
        for bad in [
            r#"{"B":"not base64!"}"#,
            r#"{"X":"unknown type"}"#,
            r#"{"N":12}"#,
            r#"{"S":"a","N":"1"}"#,
            r#"{}"#,
        ] {
            assert!(
                serde_json::from_str::<AttributeValue>(bad).is_err(),
                "{bad} should not parse"
            );
        }
    }

    #[test]
    fn numbers_convert_exactly_or_not_at_all() {
        assert_eq!(AttributeValue::from(i64::MIN).as_i64(), Some(i64::MIN));
        assert_eq!(AttributeValue::N("1.5".into()).as_u64(), None);
        assert_eq!(AttributeValue::N("-1".into()).as_u64(), None);
        assert_eq!(AttributeValue::S("1".into()).as_u64(), None);
    }
}
