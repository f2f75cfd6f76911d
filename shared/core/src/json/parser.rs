//! The strict parser: RFC 8259, UTF-8, a depth limit, exact integers, no duplicate keys.

use std::collections::BTreeMap;

use super::{HINT_SYNTAX, MAX_DEPTH, MAX_INT_DIGITS, Number, ParseError, Value};

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

pub(super) struct Parser<'a> {
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
            Ok(Value::Number(Number::Int(normalized.into())))
        }
    }
}
