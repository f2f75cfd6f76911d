//! Judging one check against a deliverable (and, for network checks, a fetched
//! response). Pure and deterministic; the caller decides where it runs (the
//! isolated worker) and under what time limit.

use crate::json::{Value, compare_numbers, json_equal, parse};
use crate::patterns::{REGEX_BACKTRACK_LIMIT, REGEX_SIZE_LIMIT};
use crate::spec::{
    Check, Deliverable, HashTarget, LengthUnit, PathAssertion, PathOp, ProbeExpect, SelectorOp,
};

/// Longest rendering of an observed value inside a reason.
const REASON_VALUE_CHARS: usize = 120;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    pub passed: bool,
    pub reason: String,
}

impl Outcome {
    fn pass(reason: impl Into<String>) -> Outcome {
        Outcome {
            passed: true,
            reason: reason.into(),
        }
    }

    fn fail(reason: impl Into<String>) -> Outcome {
        Outcome {
            passed: false,
            reason: reason.into(),
        }
    }

    fn of(passed: bool, reason: impl Into<String>) -> Outcome {
        Outcome {
            passed,
            reason: reason.into(),
        }
    }
}

/// What a network check sees of a fetched URL (the fetcher produces it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchedBody {
    pub status: u16,
    pub body: Vec<u8>,
    /// The body was longer than the read cap; `body` holds the first part.
    pub truncated: bool,
}

/// A regex check's pattern compiled for judging (with a prefilter: searching is what
/// the check does). Before payment `patterns::check_regex` decides whether it compiles.
pub fn compile_regex(pattern: &str, flags: &str) -> Result<fancy_regex::Regex, String> {
    fancy_regex::RegexBuilder::new(&crate::patterns::with_flags(pattern, flags))
        .backtrack_limit(REGEX_BACKTRACK_LIMIT)
        .delegate_size_limit(REGEX_SIZE_LIMIT)
        .build()
        .map_err(|e| e.to_string())
}

pub fn compile_schema(schema: &Value) -> Result<jsonschema::Validator, String> {
    jsonschema::draft202012::options()
        .with_pattern_options(
            jsonschema::PatternOptions::fancy_regex()
                .backtrack_limit(REGEX_BACKTRACK_LIMIT)
                .size_limit(REGEX_SIZE_LIMIT),
        )
        .build(&schema.to_serde())
        .map_err(|e| e.to_string())
}

/// Judge one check. `fetched` is the response for network checks (None otherwise).
pub fn evaluate(check: &Check, d: &Deliverable, fetched: Option<&FetchedBody>) -> Outcome {
    match check {
        Check::JsonSchema { schema } => match &d.json {
            None => Outcome::fail("deliverable.json is missing"),
            Some(json) => eval_schema(schema, json),
        },
        Check::JsonPath(a) => match &d.json {
            None => Outcome::fail("deliverable.json is missing"),
            Some(json) => eval_path(a, json, Observed::Deliverable),
        },
        Check::ContentHash { sha256, target } => match target {
            HashTarget::Text => match &d.text {
                None => Outcome::fail("deliverable.text is missing"),
                Some(t) => hash_outcome(sha256, t.as_bytes(), "deliverable.text"),
            },
            HashTarget::Url(_) => match fetched {
                None => Outcome::fail("the URL was not fetched"),
                Some(f) if f.truncated => Outcome::fail(format!(
                    "the response body is larger than the {} byte read cap, so its hash is unknown",
                    crate::product::FETCH_READ_CAP_BYTES
                )),
                Some(f) => hash_outcome(sha256, &f.body, "the response body"),
            },
        },
        Check::Regex {
            pattern,
            flags,
            expect_match,
        } => match &d.text {
            None => Outcome::fail("deliverable.text is missing"),
            Some(t) => eval_regex(pattern, flags, *expect_match, t),
        },
        Check::Length { unit, min, max } => match &d.text {
            None => Outcome::fail("deliverable.text is missing"),
            Some(t) => eval_length(*unit, *min, *max, t),
        },
        Check::UrlProbe { expect, .. } => match fetched {
            None => Outcome::fail("the URL was not fetched"),
            Some(f) => eval_probe(expect, f),
        },
    }
}

fn hash_outcome(want: &str, bytes: &[u8], what: &str) -> Outcome {
    let got = crate::hash::sha256_hex(bytes);
    if got == want {
        Outcome::pass(format!("sha256 of {what} matches"))
    } else {
        Outcome::fail(format!("sha256 of {what} is {got}, expected {want}"))
    }
}

fn eval_regex(pattern: &str, flags: &str, expect_match: bool, text: &str) -> Outcome {
    let re = match compile_regex(pattern, flags) {
        Ok(re) => re,
        Err(e) => return Outcome::fail(format!("the pattern does not compile: {e}")),
    };
    match re.find(text) {
        Ok(Some(m)) => {
            let at = text[..m.start()].chars().count();
            Outcome::of(
                expect_match,
                format!("the pattern matches at character {at}"),
            )
        }
        Ok(None) => Outcome::of(!expect_match, "the pattern does not match"),
        Err(fancy_regex::Error::RuntimeError(e)) => Outcome::fail(format!(
            "the regex engine gave up ({e}); the pattern backtracks too much on this text"
        )),
        Err(e) => Outcome::fail(format!("the regex engine failed: {e}")),
    }
}

fn eval_length(unit: LengthUnit, min: u64, max: Option<u64>, text: &str) -> Outcome {
    let (n, what) = match unit {
        LengthUnit::Chars => (text.chars().count() as u64, "characters"),
        LengthUnit::Words => (text.split_whitespace().count() as u64, "words"),
    };
    let bounds = match max {
        Some(hi) => format!("{min}..={hi}"),
        None => format!("at least {min}"),
    };
    let ok = n >= min && max.is_none_or(|hi| n <= hi);
    Outcome::of(
        ok,
        format!("deliverable.text has {n} {what}; required {bounds}"),
    )
}

fn eval_schema(schema: &Value, json: &Value) -> Outcome {
    let validator = match compile_schema(schema) {
        Ok(v) => v,
        Err(e) => return Outcome::fail(format!("the schema does not compile: {e}")),
    };
    let instance = json.to_serde();
    // The validator's own messages quote the failing value (and an unexpected key's
    // name), which is the deliverable's content: a reason names the schema's keyword and
    // where in the schema it failed (the spec's own text), and the value's JSON type.
    let errors: Vec<String> = validator
        .iter_errors(&instance)
        .take(3)
        .map(|e| {
            let at = e.schema_path().to_string();
            let at = if at.is_empty() { "/".to_owned() } else { at };
            format!(
                "{:?} fails at schema path {at} (the value there is {})",
                e.kind().keyword(),
                serde_type(e.instance())
            )
        })
        .collect();
    if errors.is_empty() {
        Outcome::pass("deliverable.json conforms to the schema")
    } else {
        Outcome::fail(format!(
            "deliverable.json does not conform: {}",
            clip(&errors.join("; "), 600)
        ))
    }
}

fn serde_type(v: &serde_json::Value) -> &'static str {
    match v {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(n) if n.is_f64() => "a number",
        serde_json::Value::Number(_) => "an integer",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "an array",
        serde_json::Value::Object(_) => "an object",
    }
}

fn show(v: &Value) -> String {
    clip(&v.to_canonical_string(), REASON_VALUE_CHARS)
}

/// A value observed in the deliverable, as a reason may state it: booleans, null and
/// short numbers as they are; a long number (an account or card number, say) by its
/// length; a string by its length and a short sha256 prefix; arrays and objects by
/// their size. Nothing of a deliverable's text outlives its verdict, and the document
/// keeps its reasons for 90 days.
fn describe(v: &Value) -> String {
    const SHORT_NUMBER_CHARS: usize = 12;
    match v {
        Value::Number(_) if v.to_canonical_string().len() > SHORT_NUMBER_CHARS => {
            format!("a number of {} characters", v.to_canonical_string().len())
        }
        Value::Null | Value::Bool(_) | Value::Number(_) => v.to_canonical_string(),
        Value::String(s) => format!(
            "a string of {} characters (sha256 {}…)",
            s.chars().count(),
            &crate::hash::sha256_hex(s.as_bytes())[..12]
        ),
        Value::Array(items) => format!("an array of {} items", items.len()),
        Value::Object(m) => format!("an object with {} keys", m.len()),
    }
}

fn clip(s: &str, max_chars: usize) -> String {
    if s.chars().count() <= max_chars {
        s.to_owned()
    } else {
        let mut out: String = s.chars().take(max_chars).collect();
        out.push('…');
        out
    }
}

/// Where a json_path assertion reads: the deliverable (whose content a reason never
/// quotes, see [`describe`]) or a fetched public response (quoted, clipped).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Observed {
    Deliverable,
    Response,
}

/// json_path semantics: missing paths fail every op except not_exists; numbers compare
/// exactly by value; strings order by code point; contains = substring, array
/// element (by value) or object key.
pub fn eval_path(a: &PathAssertion, root: &Value, observed: Observed) -> Outcome {
    let path = &a.path_text;
    let what = match observed {
        Observed::Deliverable => "deliverable.json",
        Observed::Response => "the response",
    };
    let found = a.path.resolve(root);
    let Some(actual) = found else {
        return Outcome::of(
            a.op == PathOp::NotExists,
            format!("{path} is not present in {what}"),
        );
    };
    let want = a.value.as_ref().unwrap_or(&Value::Null);
    let shown = match observed {
        Observed::Deliverable => describe(actual),
        Observed::Response => show(actual),
    };
    match a.op {
        PathOp::Exists => Outcome::pass(format!("{path} is present ({shown})")),
        PathOp::NotExists => Outcome::fail(format!("{path} is present ({shown})")),
        PathOp::Eq => Outcome::of(
            json_equal(actual, want),
            format!("{path} is {shown}; expected {}", show(want)),
        ),
        PathOp::Ne => Outcome::of(
            !json_equal(actual, want),
            format!("{path} is {shown}; expected anything but {}", show(want)),
        ),
        PathOp::Gt | PathOp::Lt | PathOp::Gte | PathOp::Lte => {
            let ord = match (actual, want) {
                (Value::Number(x), Value::Number(y)) => Some(compare_numbers(x, y)),
                (Value::String(x), Value::String(y)) => Some(x.cmp(y)),
                _ => None,
            };
            let Some(ord) = ord else {
                return Outcome::fail(format!(
                    "{path} is {shown} ({}), which cannot be ordered against {} ({})",
                    actual.type_name(),
                    show(want),
                    want.type_name()
                ));
            };
            use std::cmp::Ordering::*;
            let ok = match a.op {
                PathOp::Gt => ord == Greater,
                PathOp::Lt => ord == Less,
                PathOp::Gte => ord != Less,
                _ => ord != Greater,
            };
            Outcome::of(
                ok,
                format!(
                    "{path} is {shown}; expected {} {}",
                    a.op.as_str(),
                    show(want)
                ),
            )
        }
        PathOp::Contains => {
            let ok = match (actual, want) {
                (Value::String(s), Value::String(sub)) => s.contains(sub.as_str()),
                (Value::Array(items), w) => items.iter().any(|i| json_equal(i, w)),
                (Value::Object(m), Value::String(k)) => m.contains_key(k),
                _ => false,
            };
            Outcome::of(
                ok,
                format!("{path} is {shown}; expected it to contain {}", show(want)),
            )
        }
    }
}

fn eval_probe(expect: &ProbeExpect, f: &FetchedBody) -> Outcome {
    let mut failures = Vec::new();
    let mut passes = Vec::new();
    if f.status == expect.status {
        passes.push(format!("status {}", f.status));
    } else {
        failures.push(format!("status {} (expected {})", f.status, expect.status));
    }
    let body = String::from_utf8_lossy(&f.body);
    if let Some(k) = &expect.keyword {
        if body.contains(k.as_str()) {
            passes.push(format!("keyword {:?} found", clip(k, 60)));
        } else {
            failures.push(format!("keyword {:?} not found", clip(k, 60)));
        }
    }
    if let Some(sel) = &expect.selector {
        let o = eval_selector(&sel.selector, sel.op, sel.value.as_deref(), &body);
        if o.passed {
            passes.push(o.reason);
        } else {
            failures.push(o.reason);
        }
    }
    if let Some(a) = &expect.json_path {
        let o = match parse(&f.body) {
            Ok(json) => eval_path(a, &json, Observed::Response),
            Err(e) => Outcome::fail(format!("the response is not JSON ({e})")),
        };
        if o.passed {
            passes.push(o.reason);
        } else {
            failures.push(o.reason);
        }
    }
    if f.truncated {
        passes.push("body truncated at the read cap".into());
    }
    if failures.is_empty() {
        Outcome::pass(passes.join("; "))
    } else {
        Outcome::fail(failures.join("; "))
    }
}

/// Selector semantics: exists/not_exists look for any match; eq/ne/contains read the
/// text of the first matching element in document order, with whitespace runs
/// collapsed to one space and the ends trimmed. A missing element fails eq/ne/contains.
pub fn eval_selector(selector: &str, op: SelectorOp, value: Option<&str>, html: &str) -> Outcome {
    let sel = match scraper::Selector::parse(selector) {
        Ok(s) => s,
        Err(_) => return Outcome::fail(format!("{selector:?} is not a valid CSS selector")),
    };
    let doc = scraper::Html::parse_document(html);
    let first = doc.select(&sel).next();
    let value = value.unwrap_or("");
    match (op, first) {
        (SelectorOp::Exists, Some(_)) => Outcome::pass(format!("{selector} found")),
        (SelectorOp::Exists, None) => Outcome::fail(format!("{selector} not found")),
        (SelectorOp::NotExists, None) => Outcome::pass(format!("{selector} absent")),
        (SelectorOp::NotExists, Some(_)) => Outcome::fail(format!("{selector} is present")),
        (_, None) => Outcome::fail(format!("{selector} not found")),
        (op, Some(el)) => {
            let text = el.text().collect::<Vec<_>>().join(" ");
            let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
            let ok = match op {
                SelectorOp::Eq => text == value,
                SelectorOp::Ne => text != value,
                _ => text.contains(value),
            };
            Outcome::of(
                ok,
                format!(
                    "{selector} text is {:?}; expected {} {:?}",
                    clip(&text, REASON_VALUE_CHARS),
                    op.as_str(),
                    clip(value, REASON_VALUE_CHARS)
                ),
            )
        }
    }
}

#[cfg(test)]
mod tests;
