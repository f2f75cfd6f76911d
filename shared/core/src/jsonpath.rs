//! Dot/bracket paths into a JSON value: `result.items[0].price`, `a["odd key"]`,
//! `$.list[-1]` (negative indexes count from the end), `$` for the whole value.

use crate::json::Value;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Segment {
    Key(String),
    Index(i64),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JsonPath {
    pub segments: Vec<Segment>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message} at character {offset}")]
pub struct PathError {
    pub offset: usize,
    pub message: String,
}

pub const PATH_HINT: &str = "Write paths like result.items[0].price or a[\"key with spaces\"]; $ alone means the whole value.";

impl JsonPath {
    pub fn parse(text: &str) -> Result<JsonPath, PathError> {
        let chars: Vec<char> = text.chars().collect();
        let mut i = 0;
        let mut segments = Vec::new();
        if chars.first() == Some(&'$') {
            i = 1;
        } else if chars.is_empty() {
            return Err(path_err(0, "empty path"));
        } else if chars[0] != '[' {
            // A leading bare key, as in `result.items`.
            let (key, next) = read_ident(&chars, 0);
            if key.is_empty() {
                return Err(path_err(0, "expected a key"));
            }
            segments.push(Segment::Key(key));
            i = next;
        }
        while i < chars.len() {
            match chars[i] {
                '.' => {
                    let (key, next) = read_ident(&chars, i + 1);
                    if key.is_empty() {
                        return Err(path_err(i + 1, "expected a key after '.'"));
                    }
                    segments.push(Segment::Key(key));
                    i = next;
                }
                '[' => {
                    let (segment, next) = read_bracket(&chars, i)?;
                    segments.push(segment);
                    i = next;
                }
                _ => return Err(path_err(i, "expected '.' or '['")),
            }
        }
        Ok(JsonPath { segments })
    }

    /// The value at this path, or None when any step is missing.
    pub fn resolve<'v>(&self, root: &'v Value) -> Option<&'v Value> {
        let mut cur = root;
        for seg in &self.segments {
            cur = match (seg, cur) {
                (Segment::Key(k), Value::Object(m)) => m.get(k)?,
                (Segment::Index(i), Value::Array(a)) => {
                    let idx = if *i < 0 {
                        a.len().checked_sub(i.unsigned_abs() as usize)?
                    } else {
                        usize::try_from(*i).ok()?
                    };
                    a.get(idx)?
                }
                _ => return None,
            };
        }
        Some(cur)
    }
}

/// A [`PathError`] at `offset` (a character index into the path).
fn path_err(offset: usize, message: &str) -> PathError {
    PathError {
        offset,
        message: message.to_owned(),
    }
}

/// Reads one bracketed segment whose `[` is at `open`: a quoted key (`["k"]`, `['k']`)
/// when a quote follows the bracket, otherwise an integer index. Decides that the
/// segment must end with `]`, and returns the segment with the index just past it.
fn read_bracket(chars: &[char], open: usize) -> Result<(Segment, usize), PathError> {
    let (segment, close) = match chars.get(open + 1) {
        Some(&q @ ('"' | '\'')) => {
            let (key, next) = read_quoted_key(chars, open + 2, q)?;
            (Segment::Key(key), next)
        }
        _ => {
            let (index, next) = read_index(chars, open + 1)?;
            (Segment::Index(index), next)
        }
    };
    if chars.get(close) != Some(&']') {
        return Err(path_err(close, "expected ']'"));
    }
    Ok((segment, close + 1))
}

/// Reads a quoted key's text from `start` (just past the opening quote `q`) up to the
/// matching quote. Only `\"`, `\'` and `\\` are escapes; anything else after a
/// backslash, or a missing closing quote, is an error. Returns the key and the index
/// just past the closing quote.
fn read_quoted_key(chars: &[char], start: usize, q: char) -> Result<(String, usize), PathError> {
    let mut j = start;
    let mut key = String::new();
    loop {
        match chars.get(j) {
            None => return Err(path_err(j, "unterminated quoted key")),
            Some('\\') => {
                match chars.get(j + 1) {
                    Some(&c @ ('"' | '\'' | '\\')) => key.push(c),
                    _ => {
                        return Err(path_err(
                            j,
                            "only \\\" \\' and \\\\ may be escaped in a quoted key",
                        ));
                    }
                }
                j += 2;
            }
            Some(&c) if c == q => {
                j += 1;
                break;
            }
            Some(&c) => {
                key.push(c);
                j += 1;
            }
        }
    }
    Ok((key, j))
}

/// Reads an array index from `start`: an optional `-` then ASCII digits, which must
/// parse as an `i64` (so an empty or overlong number is an error). Returns the index
/// and the position just past its last digit.
fn read_index(chars: &[char], start: usize) -> Result<(i64, usize), PathError> {
    let mut j = start;
    if chars.get(j) == Some(&'-') {
        j += 1;
    }
    while chars.get(j).is_some_and(char::is_ascii_digit) {
        j += 1;
    }
    let num: String = chars[start..j].iter().collect();
    let index: i64 = num
        .parse()
        .map_err(|_| path_err(start, "expected an integer index or a quoted key"))?;
    Ok((index, j))
}

fn read_ident(chars: &[char], start: usize) -> (String, usize) {
    let mut j = start;
    while j < chars.len() && !matches!(chars[j], '.' | '[' | ']') {
        j += 1;
    }
    (chars[start..j].iter().collect(), j)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::json::parse_str;

    #[test]
    fn parses_dot_and_bracket_forms() {
        let p = JsonPath::parse(r#"result.items[0]["odd key"].price"#).expect("parses");
        assert_eq!(
            p.segments,
            vec![
                Segment::Key("result".into()),
                Segment::Key("items".into()),
                Segment::Index(0),
                Segment::Key("odd key".into()),
                Segment::Key("price".into()),
            ]
        );
        assert_eq!(JsonPath::parse("$").expect("root").segments, vec![]);
        assert_eq!(
            JsonPath::parse("$.a['b\\'c'][-1]")
                .expect("parses")
                .segments,
            vec![
                Segment::Key("a".into()),
                Segment::Key("b'c".into()),
                Segment::Index(-1)
            ]
        );
    }

    #[test]
    fn rejects_malformed_paths() {
        for bad in ["", "a..b", "a[", "a[x]", "a[\"x]", "a]", "a[1", ".a"] {
            assert!(JsonPath::parse(bad).is_err(), "accepted {bad:?}");
        }
    }

    #[test]
    fn resolves_and_misses() {
        let v =
            parse_str(r#"{"result":{"items":[{"price":5},{"price":7}]},"a b":1}"#).expect("json");
        let get = |p: &str| JsonPath::parse(p).expect("path").resolve(&v).cloned();
        assert_eq!(get("result.items[1].price"), Some(Value::from(7u64)));
        assert_eq!(get("result.items[-1].price"), Some(Value::from(7u64)));
        assert_eq!(get("[\"a b\"]"), Some(Value::from(1u64)));
        assert_eq!(get("result.items[2]"), None);
        assert_eq!(get("result.items[-3]"), None);
        assert_eq!(get("result.nope"), None);
        assert_eq!(get("result.items.price"), None);
    }
}
