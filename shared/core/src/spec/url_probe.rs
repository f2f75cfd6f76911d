//! The url_probe check: a public URL's status, keyword, CSS selector or JSON path.

use std::collections::BTreeMap;

use super::{Check, Fields, PathAssertion, Problem, ProblemCode, object_at};
use crate::json::Value;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SelectorOp {
    Exists,
    NotExists,
    Eq,
    Ne,
    Contains,
}

impl SelectorOp {
    const NAMES: &'static [&'static str] = &["exists", "not_exists", "eq", "ne", "contains"];

    fn parse(s: &str) -> Option<SelectorOp> {
        Some(match s {
            "exists" => SelectorOp::Exists,
            "not_exists" => SelectorOp::NotExists,
            "eq" => SelectorOp::Eq,
            "ne" => SelectorOp::Ne,
            "contains" => SelectorOp::Contains,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            SelectorOp::Exists => "exists",
            SelectorOp::NotExists => "not_exists",
            SelectorOp::Eq => "eq",
            SelectorOp::Ne => "ne",
            SelectorOp::Contains => "contains",
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct SelectorAssertion {
    pub selector: String,
    pub op: SelectorOp,
    pub value: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ProbeExpect {
    pub status: u16,
    pub keyword: Option<String>,
    pub selector: Option<SelectorAssertion>,
    pub json_path: Option<PathAssertion>,
}

pub(super) fn parse(f: &Fields<'_>, problems: &mut Vec<Problem>) -> Option<Check> {
    let before = problems.len();
    let url = f.string("url", true, problems);
    let empty = BTreeMap::new();
    let expect_obj = match f.get("expect") {
        None => Some(&empty),
        Some(v) => object_at(v, &f.path("expect"), "expect", problems),
    };
    let mut expect = None;
    if let Some(eo) = expect_obj {
        let ef = Fields::new(
            eo,
            &f.path("expect"),
            &["status", "keyword", "selector", "json_path"],
            "expect",
            problems,
        );
        let status = match ef.get("status") {
            None => Some(200u16),
            Some(v) => match v.as_u64().filter(|s| (100..=599).contains(s)) {
                Some(s) => u16::try_from(s).ok(),
                None => {
                    problems.push(Problem::new(
                        ef.path("status"),
                        ProblemCode::InvalidValue,
                        "status must be an HTTP status code (an integer from 100 to 599)",
                        "Use the status the URL should answer with, e.g. 200.",
                    ));
                    None
                }
            },
        };
        let keyword = ef.string("keyword", false, problems).map(str::to_owned);
        if keyword.as_deref() == Some("") {
            problems.push(Problem::new(
                ef.path("keyword"),
                ProblemCode::InvalidValue,
                "an empty keyword matches every response",
                "Give the text the response body must contain.",
            ));
        }
        let selector = match ef.get("selector") {
            None => None,
            Some(v) => parse_selector(v, &ef.path("selector"), problems),
        };
        let json_path = match ef.get("json_path") {
            None => None,
            Some(v) => {
                object_at(v, &ef.path("json_path"), "expect.json_path", problems).and_then(|o| {
                    let pf = Fields::new(
                        o,
                        &ef.path("json_path"),
                        &["path", "op", "value"],
                        "expect.json_path",
                        problems,
                    );
                    super::json_path::parse_assertion(&pf, problems)
                })
            }
        };
        expect = status.map(|status| ProbeExpect {
            status,
            keyword,
            selector,
            json_path,
        });
    }
    if problems.len() > before {
        return None;
    }
    Some(Check::UrlProbe {
        url: url?.to_owned(),
        expect: expect?,
    })
}

fn parse_selector(v: &Value, at: &str, problems: &mut Vec<Problem>) -> Option<SelectorAssertion> {
    let o = object_at(v, at, "expect.selector", problems)?;
    let f = Fields::new(
        o,
        at,
        &["selector", "op", "value"],
        "expect.selector",
        problems,
    );
    let before = problems.len();
    let selector = f.string("selector", true, problems);
    if let Some(s) = selector
        && scraper::Selector::parse(s).is_err()
    {
        problems.push(Problem::new(
            f.path("selector"),
            ProblemCode::InvalidValue,
            format!("{s:?} is not a valid CSS selector"),
            "Use a CSS selector such as h1, #price, div.result > span.",
        ));
    }
    let op = f.choice(
        "op",
        SelectorOp::NAMES,
        SelectorOp::parse,
        Some(SelectorOp::Exists),
        problems,
    );
    let value = f.string("value", false, problems).map(str::to_owned);
    if let Some(op) = op {
        let takes = matches!(op, SelectorOp::Eq | SelectorOp::Ne | SelectorOp::Contains);
        if takes && value.is_none() && f.get("value").is_none() {
            problems.push(Problem::new(
                f.path("value"),
                ProblemCode::MissingField,
                format!("op {} needs a value", op.as_str()),
                "Add \"value\": the text to compare the element's text with.",
            ));
        }
        if !takes && f.get("value").is_some() {
            problems.push(Problem::new(
                f.path("value"),
                ProblemCode::UnknownField,
                format!("op {} takes no value", op.as_str()),
                "Remove \"value\", or use op eq/ne/contains.",
            ));
        }
    }
    if problems.len() > before {
        return None;
    }
    Some(SelectorAssertion {
        selector: selector?.to_owned(),
        op: op?,
        value,
    })
}
