//! The stable JSON encoder: Python's json.dumps(sort_keys=True, separators=(",", ":"),
//! ensure_ascii=False), byte for byte, floats in Python's repr.

use std::fmt::Write as _;

use super::{Number, Value};

pub(super) fn write_canonical(v: &Value, out: &mut String) {
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
pub(super) fn write_string(s: &str, out: &mut String) {
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

pub(super) fn needs_escape(b: u8) -> bool {
    b < 0x20 || b == b'"' || b == b'\\'
}

/// Whether any of the eight bytes needs escaping (the classic "has a byte less than n"
/// word trick: exact for whether one exists, for n up to 128).
pub(super) fn word_needs_escape(word: u64) -> bool {
    const ONES: u64 = u64::from_le_bytes([0x01; 8]);
    const HIGHS: u64 = ONES * 0x80;
    let has_byte_below = |x: u64, n: u8| x.wrapping_sub(ONES * u64::from(n)) & !x & HIGHS != 0;
    has_byte_below(word, 0x20)
        || has_byte_below(word ^ (ONES * u64::from(b'"')), 1)
        || has_byte_below(word ^ (ONES * u64::from(b'\\')), 1)
}

pub(super) fn push_escape(b: u8, out: &mut String) {
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
pub(super) fn shortest_digits(f: f64) -> (bool, String, i32) {
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

pub(super) fn write_python_float(f: f64, out: &mut String) {
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
