//! The json_path check, `{"path","op","value"}`, also read as url_probe's `expect.json_path`.

use super::{Check, Fields, Problem, ProblemCode};
use crate::json::Value;
use crate::jsonpath::{JsonPath, PATH_HINT};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathOp {
    Eq,
    Ne,
    Gt,
    Lt,
    Gte,
    Lte,
    Exists,
    NotExists,
    Contains,
}

impl PathOp {
    const NAMES: &'static [&'static str] = &[
        "eq",
        "ne",
        "gt",
        "lt",
        "gte",
        "lte",
        "exists",
        "not_exists",
        "contains",
    ];

    fn parse(s: &str) -> Option<PathOp> {
        Some(match s {
            "eq" => PathOp::Eq,
            "ne" => PathOp::Ne,
            "gt" => PathOp::Gt,
            "lt" => PathOp::Lt,
            "gte" => PathOp::Gte,
            "lte" => PathOp::Lte,
            "exists" => PathOp::Exists,
            "not_exists" => PathOp::NotExists,
            "contains" => PathOp::Contains,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            PathOp::Eq => "eq",
            PathOp::Ne => "ne",
            PathOp::Gt => "gt",
            PathOp::Lt => "lt",
            PathOp::Gte => "gte",
            PathOp::Lte => "lte",
            PathOp::Exists => "exists",
            PathOp::NotExists => "not_exists",
            PathOp::Contains => "contains",
        }
    }

    fn takes_value(self) -> bool {
        !matches!(self, PathOp::Exists | PathOp::NotExists)
    }

    fn is_ordering(self) -> bool {
        matches!(self, PathOp::Gt | PathOp::Lt | PathOp::Gte | PathOp::Lte)
    }
}

/// `{"path","op","value"}`: the json_path check, and `expect.json_path` of url_probe.
#[derive(Debug, Clone, PartialEq)]
pub struct PathAssertion {
    pub path_text: String,
    pub path: JsonPath,
    pub op: PathOp,
    pub value: Option<Value>,
}

pub(super) fn parse_assertion(
    f: &Fields<'_>,
    problems: &mut Vec<Problem>,
) -> Option<PathAssertion> {
    let before = problems.len();
    let path_text = f.string("path", true, problems);
    let path = path_text.and_then(|p| match JsonPath::parse(p) {
        Ok(jp) => Some(jp),
        Err(e) => {
            problems.push(Problem::new(
                f.path("path"),
                ProblemCode::InvalidJsonPath,
                format!("path {p:?}: {e}"),
                PATH_HINT,
            ));
            None
        }
    });
    let op = f.choice("op", PathOp::NAMES, PathOp::parse, None, problems);
    let value = f.get("value").cloned();
    if let Some(op) = op {
        match (&value, op.takes_value()) {
            (None, true) => problems.push(Problem::new(
                f.path("value"),
                ProblemCode::MissingField,
                format!("op {} needs a value to compare with", op.as_str()),
                "Add \"value\": the JSON value to compare against.",
            )),
            (Some(_), false) => problems.push(Problem::new(
                f.path("value"),
                ProblemCode::UnknownField,
                format!("op {} takes no value", op.as_str()),
                "Remove \"value\", or use op eq/ne/gt/lt/gte/lte/contains.",
            )),
            _ => {}
        }
        if op.is_ordering()
            && let Some(v) = &value
            && !matches!(v, Value::Number(_) | Value::String(_))
        {
            problems.push(Problem::new(
                f.path("value"),
                ProblemCode::InvalidValue,
                format!(
                    "op {} compares numbers or strings, not {}",
                    op.as_str(),
                    v.type_name()
                ),
                "Compare against a number (numerically) or a string (by code point).",
            ));
        }
    }
    if problems.len() > before {
        return None;
    }
    Some(PathAssertion {
        path_text: path_text?.to_owned(),
        path: path?,
        op: op?,
        value,
    })
}

pub(super) fn parse(f: &Fields<'_>, problems: &mut Vec<Problem>) -> Option<Check> {
    parse_assertion(f, problems).map(Check::JsonPath)
}

/// The assertion's normalized fields, added to `base`.
pub(super) fn assertion_value(a: &PathAssertion, base: Value) -> Value {
    let mut v = base
        .with("path", a.path_text.as_str())
        .with("op", a.op.as_str());
    if let Some(val) = &a.value {
        v.insert("value", val.clone());
    }
    v
}
