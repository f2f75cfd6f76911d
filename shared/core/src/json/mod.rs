//! JSON values that survive exactly, and the one canonical ("stable JSON") encoder.
//!
//! Every hash and signature Umpire produces is taken over bytes equal to Python's
//! `json.dumps(v, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")`,
//! because that is the recipe the contract gives verifiers. serde_json cannot be trusted
//! for that: its float text changes between releases, it turns big integers into floats,
//! and its `arbitrary_precision` feature would leak into every crate that shares the build.
//! So user JSON is parsed here into [`Value`], whose numbers keep Python's meaning:
//! integers are exact decimal text of any length, everything with a fraction or an
//! exponent is an IEEE double, correctly rounded.

mod compare;
mod encode;
mod parser;

pub use compare::{compare_numbers, json_equal};
pub use encode::python_float_repr;
pub use parser::{parse, parse_str};

use std::collections::BTreeMap;

use encode::write_canonical;

/// Deepest nesting accepted from outside. Python's own limit is near 1000 frames; a
/// shallower limit keeps the recursive encoder and the checks far from any stack limit.
pub const MAX_DEPTH: usize = 128;

/// Python 3.11+ refuses to read integers with more digits than this
/// (`sys.get_int_max_str_digits()`), so accepting them would sign what the recipe cannot re-read.
pub const MAX_INT_DIGITS: usize = 4300;

#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Null,
    Bool(bool),
    Number(Number),
    String(String),
    Array(Vec<Value>),
    /// Keys in code-point order, which for UTF-8 `String`s is byte order: exactly
    /// the order `sort_keys=True` produces.
    Object(BTreeMap<String, Value>),
}

#[derive(Debug, Clone, PartialEq)]
pub enum Number {
    /// Normalized decimal text: optional `-`, no leading zeros, never `-0`.
    Int(IntText),
    /// Always finite.
    Float(f64),
}

/// An integer's decimal text, held inline up to 22 bytes (every 64-bit integer): a body
/// of hundreds of thousands of small integers parses and drops without an allocation
/// per number. Longer integers (up to the parser's digit cap) live on the heap.
#[derive(Clone)]
pub enum IntText {
    Inline { len: u8, bytes: [u8; INLINE_INT] },
    Heap(Box<str>),
}

const INLINE_INT: usize = 22;

impl IntText {
    pub fn as_str(&self) -> &str {
        match self {
            // Only ever built from a &str (see From), so the bytes are UTF-8.
            IntText::Inline { len, bytes } => {
                std::str::from_utf8(&bytes[..usize::from(*len)]).unwrap_or_default()
            }
            IntText::Heap(s) => s,
        }
    }
}

impl From<&str> for IntText {
    fn from(s: &str) -> IntText {
        match u8::try_from(s.len()) {
            Ok(len) if s.len() <= INLINE_INT => {
                let mut bytes = [0; INLINE_INT];
                bytes[..s.len()].copy_from_slice(s.as_bytes());
                IntText::Inline { len, bytes }
            }
            _ => IntText::Heap(s.into()),
        }
    }
}

impl From<String> for IntText {
    fn from(s: String) -> IntText {
        if s.len() <= INLINE_INT {
            IntText::from(s.as_str())
        } else {
            // Already on the heap: kept there, not copied.
            IntText::Heap(s.into_boxed_str())
        }
    }
}

impl std::ops::Deref for IntText {
    type Target = str;
    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl PartialEq for IntText {
    fn eq(&self, other: &IntText) -> bool {
        self.as_str() == other.as_str()
    }
}

impl std::fmt::Debug for IntText {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self.as_str(), f)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message} at byte {offset}")]
pub struct ParseError {
    pub offset: usize,
    pub message: String,
    /// What the sender should change, for the `hint` of the error body.
    pub hint: &'static str,
}

const HINT_SYNTAX: &str = "Send one JSON value encoded as UTF-8 (RFC 8259): double-quoted keys and strings, no trailing commas, no comments.";

impl Value {
    pub fn object() -> Self {
        Value::Object(BTreeMap::new())
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_object(&self) -> Option<&BTreeMap<String, Value>> {
        match self {
            Value::Object(m) => Some(m),
            _ => None,
        }
    }

    pub fn as_array(&self) -> Option<&Vec<Value>> {
        match self {
            Value::Array(a) => Some(a),
            _ => None,
        }
    }

    pub fn as_bool(&self) -> Option<bool> {
        match self {
            Value::Bool(b) => Some(*b),
            _ => None,
        }
    }

    /// The value as a non-negative integer that fits in u64, if it is one (floats such
    /// as `5.0` are not: the spec says integer, and Python would echo `5.0`).
    pub fn as_u64(&self) -> Option<u64> {
        match self {
            Value::Number(Number::Int(t)) => t.parse().ok(),
            _ => None,
        }
    }

    /// The value as a float: floats as they are, integers converted (maybe rounded).
    pub fn as_f64(&self) -> Option<f64> {
        match self {
            Value::Number(Number::Float(f)) => Some(*f),
            Value::Number(Number::Int(t)) => t.parse().ok(),
            _ => None,
        }
    }

    pub fn get(&self, key: &str) -> Option<&Value> {
        self.as_object().and_then(|m| m.get(key))
    }

    /// Insert into an object; a no-op on anything else (callers build objects they own).
    pub fn insert(&mut self, key: impl Into<String>, value: impl Into<Value>) {
        if let Value::Object(m) = self {
            m.insert(key.into(), value.into());
        }
    }

    pub fn with(mut self, key: impl Into<String>, value: impl Into<Value>) -> Self {
        self.insert(key, value);
        self
    }

    /// The JSON type name as a user would say it, for problem messages.
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::Null => "null",
            Value::Bool(_) => "boolean",
            Value::Number(Number::Int(_)) => "integer",
            Value::Number(Number::Float(_)) => "number",
            Value::String(_) => "string",
            Value::Array(_) => "array",
            Value::Object(_) => "object",
        }
    }

    /// Stable JSON bytes (see the module docs).
    pub fn to_canonical_vec(&self) -> Vec<u8> {
        let mut out = String::with_capacity(256);
        write_canonical(self, &mut out);
        out.into_bytes()
    }

    pub fn to_canonical_string(&self) -> String {
        let mut out = String::with_capacity(256);
        write_canonical(self, &mut out);
        out
    }

    /// A lossy view for libraries that speak serde_json (the schema validator): integers
    /// beyond 64 bits become the nearest double there. The exact value stays in `self`.
    pub fn to_serde(&self) -> serde_json::Value {
        match self {
            Value::Null => serde_json::Value::Null,
            Value::Bool(b) => serde_json::Value::Bool(*b),
            Value::Number(Number::Int(t)) => {
                if let Ok(i) = t.parse::<i64>() {
                    i.into()
                } else if let Ok(u) = t.parse::<u64>() {
                    u.into()
                } else {
                    let f: f64 = t.parse().unwrap_or(f64::MAX);
                    serde_json::Number::from_f64(f)
                        .map(serde_json::Value::Number)
                        .unwrap_or(serde_json::Value::Null)
                }
            }
            Value::Number(Number::Float(f)) => serde_json::Number::from_f64(*f)
                .map(serde_json::Value::Number)
                .unwrap_or(serde_json::Value::Null),
            Value::String(s) => serde_json::Value::String(s.clone()),
            Value::Array(a) => serde_json::Value::Array(a.iter().map(Value::to_serde).collect()),
            Value::Object(m) => serde_json::Value::Object(
                m.iter().map(|(k, v)| (k.clone(), v.to_serde())).collect(),
            ),
        }
    }
}

impl From<&serde_json::Value> for Value {
    fn from(v: &serde_json::Value) -> Self {
        match v {
            serde_json::Value::Null => Value::Null,
            serde_json::Value::Bool(b) => Value::Bool(*b),
            serde_json::Value::Number(n) => {
                if let Some(i) = n.as_i64() {
                    Value::from(i)
                } else if let Some(u) = n.as_u64() {
                    Value::from(u)
                } else {
                    Value::from(n.as_f64().unwrap_or(0.0))
                }
            }
            serde_json::Value::String(s) => Value::String(s.clone()),
            serde_json::Value::Array(a) => Value::Array(a.iter().map(Value::from).collect()),
            serde_json::Value::Object(m) => {
                Value::Object(m.iter().map(|(k, v)| (k.clone(), Value::from(v))).collect())
            }
        }
    }
}

impl From<serde_json::Value> for Value {
    fn from(v: serde_json::Value) -> Self {
        Value::from(&v)
    }
}

impl From<bool> for Value {
    fn from(b: bool) -> Self {
        Value::Bool(b)
    }
}

impl From<&str> for Value {
    fn from(s: &str) -> Self {
        Value::String(s.to_owned())
    }
}

impl From<String> for Value {
    fn from(s: String) -> Self {
        Value::String(s)
    }
}

impl From<i64> for Value {
    fn from(i: i64) -> Self {
        Value::Number(Number::Int(i.to_string().into()))
    }
}

impl From<u64> for Value {
    fn from(u: u64) -> Self {
        Value::Number(Number::Int(u.to_string().into()))
    }
}

impl From<usize> for Value {
    fn from(u: usize) -> Self {
        Value::Number(Number::Int(u.to_string().into()))
    }
}

impl From<u32> for Value {
    fn from(u: u32) -> Self {
        Value::Number(Number::Int(u.to_string().into()))
    }
}

impl From<u16> for Value {
    fn from(u: u16) -> Self {
        Value::Number(Number::Int(u.to_string().into()))
    }
}

impl From<f64> for Value {
    /// Non-finite floats have no JSON form; they become null (Umpire never produces them).
    fn from(f: f64) -> Self {
        if f.is_finite() {
            Value::Number(Number::Float(f))
        } else {
            Value::Null
        }
    }
}

impl<T: Into<Value>> From<Option<T>> for Value {
    fn from(o: Option<T>) -> Self {
        o.map_or(Value::Null, Into::into)
    }
}

impl<T: Into<Value>> From<Vec<T>> for Value {
    fn from(v: Vec<T>) -> Self {
        Value::Array(v.into_iter().map(Into::into).collect())
    }
}

impl std::fmt::Display for Value {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.to_canonical_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use encode::{needs_escape, word_needs_escape, write_string};

    #[test]
    fn word_test_agrees_with_the_byte_test_everywhere() {
        for b in 0..=255u8 {
            for position in 0..8 {
                let mut word = [b'a'; 8];
                word[position] = b;
                assert_eq!(
                    word_needs_escape(u64::from_le_bytes(word)),
                    needs_escape(b),
                    "byte {b:#04x} at {position}"
                );
            }
        }
        // Escapes at every offset of long strings, around the word boundaries.
        for len in 0..40 {
            for at in 0..len {
                let mut text = "é".repeat(len / 2) + &"x".repeat(len - len / 2);
                let index = text.char_indices().nth(at).map(|(i, _)| i);
                if let Some(i) = index {
                    text.replace_range(
                        i..i + text[i..].chars().next().map_or(1, char::len_utf8),
                        "\"\n\u{1}",
                    );
                }
                let mut out = String::new();
                write_string(&text, &mut out);
                // serde_json escapes exactly Python's ensure_ascii=False set, lowercase hex.
                assert_eq!(out, serde_json::to_string(&text).expect("serde"));
            }
        }
    }

    fn canon(s: &str) -> String {
        parse_str(s)
            .map(|v| v.to_canonical_string())
            .unwrap_or_else(|e| format!("ERR {e}"))
    }

    #[test]
    fn floats_follow_python_repr() {
        for (input, want) in [
            ("1.0", "1.0"),
            ("-0.0", "-0.0"),
            ("1e-05", "1e-05"),
            ("0.0001", "0.0001"),
            ("1e16", "1e+16"),
            ("1e15", "1000000000000000.0"),
            ("123456789012345678.0", "1.2345678901234568e+17"),
            ("1.5e300", "1.5e+300"),
            ("5e-324", "5e-324"),
            ("0.1", "0.1"),
            ("1e-400", "0.0"),
            ("12345600.0", "12345600.0"),
            ("1.7976931348623157e308", "1.7976931348623157e+308"),
            // An exact tie between two shortest candidates: Python rounds to even.
            ("1.9233724932720973E15", "1923372493272097.2"),
        ] {
            assert_eq!(canon(input), want, "input {input}");
        }
    }

    #[test]
    fn integers_are_exact_and_minus_zero_is_zero() {
        assert_eq!(canon("-0"), "0");
        assert_eq!(
            canon("123456789012345678901234567890"),
            "123456789012345678901234567890"
        );
        assert_eq!(canon("-42"), "-42");
    }

    #[test]
    fn refuses_what_python_would_mangle() {
        for bad in [
            "1E400",
            "-1e999",
            "NaN",
            "Infinity",
            "{\"a\":1,\"a\":2}",
            "\"\\ud800\"",
            "\"\\udc00x\"",
            "01",
            "1.",
            "[1,]",
            "\"a\u{1}\"",
        ] {
            assert!(parse_str(bad).is_err(), "accepted {bad}");
        }
        let deep = "[".repeat(MAX_DEPTH + 1) + &"]".repeat(MAX_DEPTH + 1);
        assert!(parse_str(&deep).is_err());
        let ok = "[".repeat(MAX_DEPTH) + &"]".repeat(MAX_DEPTH);
        assert!(parse_str(&ok).is_ok());
    }

    #[test]
    fn strings_escape_like_python() {
        assert_eq!(
            canon(r#""\u0000\u001f\b\f\n\r\t\"\\\/\u007f\u2028\ud83d\ude80""#),
            "\"\\u0000\\u001f\\b\\f\\n\\r\\t\\\"\\\\/\u{7f}\u{2028}\u{1F680}\""
        );
    }

    #[test]
    fn numbers_compare_exactly() {
        let n = |s: &str| match parse_str(s) {
            Ok(Value::Number(n)) => n,
            other => panic!("not a number: {other:?}"),
        };
        use std::cmp::Ordering::*;
        assert_eq!(compare_numbers(&n("1"), &n("1.0")), Equal);
        assert_eq!(compare_numbers(&n("100"), &n("1e2")), Equal);
        assert_eq!(compare_numbers(&n("-0"), &n("0.0")), Equal);
        assert_eq!(compare_numbers(&n("-1"), &n("0.5")), Less);
        assert_eq!(compare_numbers(&n("-2"), &n("-1.5")), Less);
        assert_eq!(
            compare_numbers(&n("12345678901234567891"), &n("12345678901234567890")),
            Greater
        );
        assert_eq!(compare_numbers(&n("0.001"), &n("0.01")), Less);
        assert!(json_equal(
            &parse_str(r#"{"a":[1,2.0]}"#).unwrap_or(Value::Null),
            &parse_str(r#"{"a":[1.0,2]}"#).unwrap_or(Value::Null)
        ));
    }
}
