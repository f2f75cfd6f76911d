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

use std::collections::BTreeMap;
use std::fmt::Write as _;

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
    Int(String),
    /// Always finite.
    Float(f64),
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
        Value::Number(Number::Int(i.to_string()))
    }
}

impl From<u64> for Value {
    fn from(u: u64) -> Self {
        Value::Number(Number::Int(u.to_string()))
    }
}

impl From<usize> for Value {
    fn from(u: usize) -> Self {
        Value::Number(Number::Int(u.to_string()))
    }
}

impl From<u32> for Value {
    fn from(u: u32) -> Self {
        Value::Number(Number::Int(u.to_string()))
    }
}

impl From<u16> for Value {
    fn from(u: u16) -> Self {
        Value::Number(Number::Int(u.to_string()))
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

// ---------------------------------------------------------------------------
// Encoding

fn write_canonical(v: &Value, out: &mut String) {
    match v {
        Value::Null => out.push_str("null"),
        Value::Bool(true) => out.push_str("true"),
        Value::Bool(false) => out.push_str("false"),
        Value::Number(Number::Int(t)) => out.push_str(t),
        Value::Number(Number::Float(f)) => write_python_float(*f, out),
        Value::String(s) => write_string(s, out),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        Value::Object(map) => {
            out.push('{');
            for (i, (k, item)) in map.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_string(k, out);
                out.push(':');
                write_canonical(item, out);
            }
            out.push('}');
        }
    }
}

/// Python's `ensure_ascii=False` escaping: only `"`, `\` and C0 controls.
fn write_string(s: &str, out: &mut String) {
    out.push('"');
    let bytes = s.as_bytes();
    let mut start = 0;
    let mut i = 0;
    while i < bytes.len() {
        // Verdict documents are mostly clean strings (keys, reasons, patterns, URLs):
        // eight bytes are tested at once, and only a word holding something to escape is
        // walked byte by byte.
        if let Some(word) = bytes.get(i..i + 8)
            && let Ok(word) = <[u8; 8]>::try_from(word)
            && !word_needs_escape(u64::from_le_bytes(word))
        {
            i += 8;
            continue;
        }
        if needs_escape(bytes[i]) {
            // An escaped byte is ASCII, so both slice ends sit on char boundaries.
            out.push_str(&s[start..i]);
            push_escape(bytes[i], out);
            start = i + 1;
        }
        i += 1;
    }
    out.push_str(&s[start..]);
    out.push('"');
}

fn needs_escape(b: u8) -> bool {
    b < 0x20 || b == b'"' || b == b'\\'
}

/// Whether any of the eight bytes needs escaping (the classic "has a byte less than n"
/// word trick: exact for whether one exists, for n up to 128).
fn word_needs_escape(word: u64) -> bool {
    const ONES: u64 = u64::from_le_bytes([0x01; 8]);
    const HIGHS: u64 = ONES * 0x80;
    let has_byte_below = |x: u64, n: u8| x.wrapping_sub(ONES * u64::from(n)) & !x & HIGHS != 0;
    has_byte_below(word, 0x20)
        || has_byte_below(word ^ (ONES * u64::from(b'"')), 1)
        || has_byte_below(word ^ (ONES * u64::from(b'\\')), 1)
}

fn push_escape(b: u8, out: &mut String) {
    match b {
        b'"' => out.push_str("\\\""),
        b'\\' => out.push_str("\\\\"),
        b'\n' => out.push_str("\\n"),
        b'\r' => out.push_str("\\r"),
        b'\t' => out.push_str("\\t"),
        0x08 => out.push_str("\\b"),
        0x0c => out.push_str("\\f"),
        _ => {
            let _ = write!(out, "\\u{b:04x}");
        }
    }
}

/// The shortest digits that round-trip, as (negative, digits, decpt) with
/// value = 0.DIGITS × 10^decpt. Ryu breaks exact ties to even, like CPython's dtoa;
/// Rust's own `{:e}` rounds such ties up (1923372493272097.25 prints as …097.3 there,
/// …097.2 in Python), which the differential test caught.
fn shortest_digits(f: f64) -> (bool, String, i32) {
    let mut buf = ryu::Buffer::new();
    let text = buf.format_finite(f);
    let (negative, text) = match text.strip_prefix('-') {
        Some(t) => (true, t),
        None => (false, text),
    };
    let (mantissa, exp) = text.split_once('e').unwrap_or((text, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let int_len = mantissa.find('.').unwrap_or(mantissa.len()) as i32;
    let all: String = mantissa.chars().filter(|c| *c != '.').collect();
    let leading = all.len() - all.trim_start_matches('0').len();
    let digits = all.trim_start_matches('0').trim_end_matches('0');
    if digits.is_empty() {
        return (negative, "0".into(), 1);
    }
    (negative, digits.to_owned(), int_len + exp - leading as i32)
}

/// `repr(float)` of CPython: shortest round-trip digits; exponent form when the decimal
/// point would sit more than 16 places right or 4 or more places left of the first digit.
pub fn python_float_repr(f: f64) -> String {
    let mut s = String::with_capacity(24);
    write_python_float(f, &mut s);
    s
}

fn write_python_float(f: f64, out: &mut String) {
    let (negative, digits, decpt) = shortest_digits(f);
    if negative {
        out.push('-');
    }
    if decpt <= -4 || decpt > 16 {
        out.push_str(&digits[..1]);
        if digits.len() > 1 {
            out.push('.');
            out.push_str(&digits[1..]);
        }
        let e = decpt - 1;
        let _ = write!(out, "e{}{:02}", if e < 0 { '-' } else { '+' }, e.abs());
    } else if decpt <= 0 {
        out.push_str("0.");
        for _ in 0..(-decpt) {
            out.push('0');
        }
        out.push_str(&digits);
    } else {
        let point = decpt as usize;
        if point < digits.len() {
            out.push_str(&digits[..point]);
            out.push('.');
            out.push_str(&digits[point..]);
        } else {
            out.push_str(&digits);
            for _ in digits.len()..point {
                out.push('0');
            }
            out.push_str(".0");
        }
    }
}

// ---------------------------------------------------------------------------
// Parsing

/// Parse one JSON text. Stricter than Python only where Python would accept something
/// that cannot be signed faithfully: duplicate keys (ambiguous), lone surrogates (not
/// encodable as UTF-8), numbers that overflow to infinity, `NaN`/`Infinity` literals,
/// nesting deeper than [`MAX_DEPTH`].
pub fn parse(text: &[u8]) -> Result<Value, ParseError> {
    let text = std::str::from_utf8(text).map_err(|e| ParseError {
        offset: e.valid_up_to(),
        message: "request body is not valid UTF-8".into(),
        hint: "Encode the JSON text as UTF-8.",
    })?;
    let mut p = Parser {
        s: text.as_bytes(),
        src: text,
        pos: 0,
        depth: 0,
    };
    p.skip_ws();
    let v = p.value()?;
    p.skip_ws();
    if p.pos != p.s.len() {
        return Err(p.err("unexpected data after the JSON value", HINT_SYNTAX));
    }
    Ok(v)
}

pub fn parse_str(text: &str) -> Result<Value, ParseError> {
    parse(text.as_bytes())
}

struct Parser<'a> {
    s: &'a [u8],
    src: &'a str,
    pos: usize,
    depth: usize,
}

impl Parser<'_> {
    fn err(&self, message: impl Into<String>, hint: &'static str) -> ParseError {
        ParseError {
            offset: self.pos,
            message: message.into(),
            hint,
        }
    }

    fn skip_ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.s.get(self.pos) {
            self.pos += 1;
        }
    }

    fn peek(&self) -> Option<u8> {
        self.s.get(self.pos).copied()
    }

    fn value(&mut self) -> Result<Value, ParseError> {
        match self.peek() {
            None => Err(self.err("unexpected end of JSON text", HINT_SYNTAX)),
            Some(b'{') => self.object(),
            Some(b'[') => self.array(),
            Some(b'"') => Ok(Value::String(self.string()?)),
            Some(b't') => self.literal("true", Value::Bool(true)),
            Some(b'f') => self.literal("false", Value::Bool(false)),
            Some(b'n') => self.literal("null", Value::Null),
            Some(b'-' | b'0'..=b'9') => self.number(),
            Some(b'N' | b'I') => Err(self.err(
                "NaN and Infinity are not JSON",
                "Send finite numbers only; encode special values as strings or null.",
            )),
            Some(_) => Err(self.err("unexpected character", HINT_SYNTAX)),
        }
    }

    fn literal(&mut self, word: &str, v: Value) -> Result<Value, ParseError> {
        if self.s[self.pos..].starts_with(word.as_bytes()) {
            self.pos += word.len();
            Ok(v)
        } else {
            Err(self.err("unexpected character", HINT_SYNTAX))
        }
    }

    fn enter(&mut self) -> Result<(), ParseError> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(self.err(
                format!("nesting deeper than {MAX_DEPTH} levels"),
                "Flatten the document: at most 128 nested arrays/objects are accepted.",
            ));
        }
        Ok(())
    }

    fn object(&mut self) -> Result<Value, ParseError> {
        self.enter()?;
        self.pos += 1;
        let mut map = BTreeMap::new();
        self.skip_ws();
        if self.peek() == Some(b'}') {
            self.pos += 1;
            self.depth -= 1;
            return Ok(Value::Object(map));
        }
        loop {
            self.skip_ws();
            if self.peek() != Some(b'"') {
                return Err(self.err("expected a double-quoted object key", HINT_SYNTAX));
            }
            let key_at = self.pos;
            let key = self.string()?;
            self.skip_ws();
            if self.peek() != Some(b':') {
                return Err(self.err("expected ':' after an object key", HINT_SYNTAX));
            }
            self.pos += 1;
            self.skip_ws();
            let v = self.value()?;
            if map.contains_key(&key) {
                return Err(ParseError {
                    offset: key_at,
                    message: format!("duplicate object key {key:?}"),
                    hint: "Send each key once per object; duplicate keys are ambiguous.",
                });
            }
            map.insert(key, v);
            self.skip_ws();
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b'}') => {
                    self.pos += 1;
                    self.depth -= 1;
                    return Ok(Value::Object(map));
                }
                _ => return Err(self.err("expected ',' or '}' in object", HINT_SYNTAX)),
            }
        }
    }

    fn array(&mut self) -> Result<Value, ParseError> {
        self.enter()?;
        self.pos += 1;
        let mut items = Vec::new();
        self.skip_ws();
        if self.peek() == Some(b']') {
            self.pos += 1;
            self.depth -= 1;
            return Ok(Value::Array(items));
        }
        loop {
            self.skip_ws();
            items.push(self.value()?);
            self.skip_ws();
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b']') => {
                    self.pos += 1;
                    self.depth -= 1;
                    return Ok(Value::Array(items));
                }
                _ => return Err(self.err("expected ',' or ']' in array", HINT_SYNTAX)),
            }
        }
    }

    fn hex4(&mut self) -> Result<u32, ParseError> {
        let h = self
            .s
            .get(self.pos..self.pos + 4)
            .and_then(|h| std::str::from_utf8(h).ok())
            .filter(|h| h.bytes().all(|b| b.is_ascii_hexdigit()))
            .and_then(|h| u32::from_str_radix(h, 16).ok())
            .ok_or_else(|| self.err("\\u must be followed by 4 hex digits", HINT_SYNTAX))?;
        self.pos += 4;
        Ok(h)
    }

    fn string(&mut self) -> Result<String, ParseError> {
        self.pos += 1; // opening quote
        let mut out = String::new();
        let mut run_start = self.pos;
        loop {
            let Some(b) = self.peek() else {
                return Err(self.err("unterminated string", HINT_SYNTAX));
            };
            match b {
                b'"' => {
                    out.push_str(&self.src[run_start..self.pos]);
                    self.pos += 1;
                    return Ok(out);
                }
                b'\\' => {
                    out.push_str(&self.src[run_start..self.pos]);
                    self.pos += 1;
                    let Some(e) = self.peek() else {
                        return Err(self.err("unterminated string", HINT_SYNTAX));
                    };
                    self.pos += 1;
                    match e {
                        b'"' => out.push('"'),
                        b'\\' => out.push('\\'),
                        b'/' => out.push('/'),
                        b'b' => out.push('\u{8}'),
                        b'f' => out.push('\u{c}'),
                        b'n' => out.push('\n'),
                        b'r' => out.push('\r'),
                        b't' => out.push('\t'),
                        b'u' => {
                            let hi = self.hex4()?;
                            let c = if (0xD800..0xDC00).contains(&hi) {
                                if self.s.get(self.pos..self.pos + 2) != Some(b"\\u") {
                                    return Err(self.lone_surrogate());
                                }
                                self.pos += 2;
                                let lo = self.hex4()?;
                                if !(0xDC00..0xE000).contains(&lo) {
                                    return Err(self.lone_surrogate());
                                }
                                0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00)
                            } else if (0xDC00..0xE000).contains(&hi) {
                                return Err(self.lone_surrogate());
                            } else {
                                hi
                            };
                            out.push(char::from_u32(c).ok_or_else(|| self.lone_surrogate())?);
                        }
                        _ => return Err(self.err("invalid escape in string", HINT_SYNTAX)),
                    }
                    run_start = self.pos;
                }
                0x00..=0x1f => {
                    return Err(self.err(
                        "control character inside a string",
                        "Escape control characters in strings (\\n, \\t, \\u0000).",
                    ));
                }
                _ => self.pos += 1,
            }
        }
    }

    fn lone_surrogate(&self) -> ParseError {
        self.err(
            "unpaired UTF-16 surrogate escape",
            "Escape characters outside the BMP as a surrogate pair, or send them as raw UTF-8.",
        )
    }

    fn number(&mut self) -> Result<Value, ParseError> {
        let start = self.pos;
        let mut is_float = false;
        if self.peek() == Some(b'-') {
            self.pos += 1;
        }
        match self.peek() {
            Some(b'0') => self.pos += 1,
            Some(b'1'..=b'9') => {
                while let Some(b'0'..=b'9') = self.peek() {
                    self.pos += 1;
                }
            }
            _ => return Err(self.err("invalid number", HINT_SYNTAX)),
        }
        if self.peek() == Some(b'.') {
            is_float = true;
            self.pos += 1;
            if !matches!(self.peek(), Some(b'0'..=b'9')) {
                return Err(self.err("a digit must follow the decimal point", HINT_SYNTAX));
            }
            while let Some(b'0'..=b'9') = self.peek() {
                self.pos += 1;
            }
        }
        if let Some(b'e' | b'E') = self.peek() {
            is_float = true;
            self.pos += 1;
            if let Some(b'+' | b'-') = self.peek() {
                self.pos += 1;
            }
            if !matches!(self.peek(), Some(b'0'..=b'9')) {
                return Err(self.err("a digit must follow the exponent", HINT_SYNTAX));
            }
            while let Some(b'0'..=b'9') = self.peek() {
                self.pos += 1;
            }
        }
        let text = &self.src[start..self.pos];
        if is_float {
            // Rust's float parsing is correctly rounded, like CPython's.
            let f: f64 = text
                .parse()
                .map_err(|_| self.err("invalid number", HINT_SYNTAX))?;
            if !f.is_finite() {
                return Err(ParseError {
                    offset: start,
                    message: format!("number {text} is too large for a double"),
                    hint: "Numbers with a fraction or exponent must fit an IEEE double (about 1.8e308); send larger values as integers or strings.",
                });
            }
            Ok(Value::Number(Number::Float(f)))
        } else {
            let digits = text.trim_start_matches('-');
            if digits.len() > MAX_INT_DIGITS {
                return Err(ParseError {
                    offset: start,
                    message: format!("integer has more than {MAX_INT_DIGITS} digits"),
                    hint: "Send integers of at most 4300 digits (Python's limit), or as strings.",
                });
            }
            let normalized = if digits == "0" { "0" } else { text };
            Ok(Value::Number(Number::Int(normalized.to_owned())))
        }
    }
}

// ---------------------------------------------------------------------------
// Exact numeric comparison, for json_path (so 1 == 1.0 and huge integers compare exactly).

/// A number as sign, significant digits and a decimal exponent: value = 0.DIGITS × 10^exp.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Decimal {
    negative: bool,
    digits: Vec<u8>,
    exp: i64,
}

impl Decimal {
    fn from_number(n: &Number) -> Decimal {
        let text = match n {
            Number::Int(t) => t.clone(),
            // The shortest round-trip digits: what the number means to a JSON reader.
            Number::Float(f) => python_float_repr(*f),
        };
        Decimal::from_text(&text)
    }

    fn from_text(text: &str) -> Decimal {
        let (negative, rest) = match text.strip_prefix('-') {
            Some(r) => (true, r),
            None => (false, text),
        };
        let (mant, exp) = match rest.split_once(['e', 'E']) {
            Some((m, e)) => (m, e.parse::<i64>().unwrap_or(0)),
            None => (rest, 0),
        };
        let (int_part, frac_part) = mant.split_once('.').unwrap_or((mant, ""));
        let mut digits: Vec<u8> = int_part
            .bytes()
            .chain(frac_part.bytes())
            .map(|b| b - b'0')
            .collect();
        let mut point = int_part.len() as i64 + exp;
        while digits.first() == Some(&0) {
            digits.remove(0);
            point -= 1;
        }
        while digits.last() == Some(&0) {
            digits.pop();
        }
        if digits.is_empty() {
            return Decimal {
                negative: false,
                digits,
                exp: 0,
            };
        }
        Decimal {
            negative,
            digits,
            exp: point,
        }
    }

    fn cmp_magnitude(&self, other: &Decimal) -> std::cmp::Ordering {
        match (self.digits.is_empty(), other.digits.is_empty()) {
            (true, true) => return std::cmp::Ordering::Equal,
            (true, false) => return std::cmp::Ordering::Less,
            (false, true) => return std::cmp::Ordering::Greater,
            _ => {}
        }
        self.exp
            .cmp(&other.exp)
            .then_with(|| self.digits.cmp(&other.digits))
    }
}

/// Exact numeric ordering of two JSON numbers.
pub fn compare_numbers(a: &Number, b: &Number) -> std::cmp::Ordering {
    use std::cmp::Ordering::*;
    let (a, b) = (Decimal::from_number(a), Decimal::from_number(b));
    let sign = |d: &Decimal| {
        if d.digits.is_empty() {
            0
        } else if d.negative {
            -1
        } else {
            1
        }
    };
    match sign(&a).cmp(&sign(&b)) {
        Equal => {}
        other => return other,
    }
    let m = a.cmp_magnitude(&b);
    if sign(&a) < 0 {
        match m {
            Less => Greater,
            Greater => Less,
            Equal => Equal,
        }
    } else {
        m
    }
}

/// JSON equality where numbers compare by value (1 == 1.0) at every depth.
pub fn json_equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => compare_numbers(x, y) == std::cmp::Ordering::Equal,
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| json_equal(p, q))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .zip(y)
                    .all(|((k1, v1), (k2, v2))| k1 == k2 && json_equal(v1, v2))
        }
        _ => a == b,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
