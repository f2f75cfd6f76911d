//! Reading a JSON object's fields, every mistake reported as a problem with its place.

use std::collections::BTreeMap;

use super::{Problem, ProblemCode};
use crate::json::Value;

pub(super) struct Fields<'a> {
    obj: &'a BTreeMap<String, Value>,
    at: String,
    known: &'static [&'static str],
}

impl<'a> Fields<'a> {
    /// Where the object is: `checks[2]`, or empty for the top level.
    pub(super) fn at(&self) -> &str {
        &self.at
    }

    pub(super) fn path(&self, key: &str) -> String {
        if self.at.is_empty() {
            key.to_owned()
        } else {
            format!("{}.{key}", self.at)
        }
    }

    /// Reads `obj` (described as `what` in messages), reporting at once every field
    /// it does not define.
    pub(super) fn new(
        obj: &'a BTreeMap<String, Value>,
        at: &str,
        known: &'static [&'static str],
        what: &str,
        problems: &mut Vec<Problem>,
    ) -> Fields<'a> {
        let f = Fields {
            obj,
            at: at.to_owned(),
            known,
        };
        f.unknown(problems, what);
        f
    }

    /// Reports fields this object does not define.
    fn unknown(&self, problems: &mut Vec<Problem>, what: &str) {
        for k in self.obj.keys() {
            if !self.known.contains(&k.as_str()) {
                problems.push(Problem::new(
                    self.path(k),
                    ProblemCode::UnknownField,
                    format!("{what} has no field {k:?}"),
                    format!("Remove {k:?}; {what} takes: {}.", self.known.join(", ")),
                ));
            }
        }
    }

    pub(super) fn get(&self, key: &str) -> Option<&'a Value> {
        self.obj.get(key)
    }

    pub(super) fn string(
        &self,
        key: &str,
        required: bool,
        problems: &mut Vec<Problem>,
    ) -> Option<&'a str> {
        match self.get(key) {
            None if required => {
                problems.push(Problem::new(
                    self.path(key),
                    ProblemCode::MissingField,
                    format!("{key} is required"),
                    format!("Add \"{key}\": \"...\"."),
                ));
                None
            }
            None => None,
            Some(Value::String(s)) => Some(s.as_str()),
            Some(other) => {
                problems.push(wrong_type(&self.path(key), "a string", other));
                None
            }
        }
    }

    pub(super) fn choice<T>(
        &self,
        key: &str,
        names: &[&str],
        parse: impl Fn(&str) -> Option<T>,
        default: Option<T>,
        problems: &mut Vec<Problem>,
    ) -> Option<T> {
        let s = self.string(key, default.is_none(), problems);
        match s {
            None => default,
            Some(s) => match parse(s) {
                Some(t) => Some(t),
                None => {
                    problems.push(Problem::new(
                        self.path(key),
                        ProblemCode::InvalidValue,
                        format!("{key} {s:?} is not one of {}", names.join(", ")),
                        format!("Use one of: {}.", names.join(", ")),
                    ));
                    None
                }
            },
        }
    }

    pub(super) fn count(&self, key: &str, problems: &mut Vec<Problem>) -> Option<Option<u64>> {
        match self.get(key) {
            None | Some(Value::Null) => Some(None),
            Some(v) => match v.as_u64() {
                Some(n) => Some(Some(n)),
                None => {
                    problems.push(wrong_type(&self.path(key), "a non-negative integer", v));
                    None
                }
            },
        }
    }
}

pub(super) fn wrong_type(at: &str, expected: &str, got: &Value) -> Problem {
    let field = at.rsplit('.').next().unwrap_or(at);
    Problem::new(
        at,
        ProblemCode::WrongType,
        format!("{field} must be {expected}, not {}", got.type_name()),
        format!("Make {field} {expected}."),
    )
}

pub(super) fn object_at<'a>(
    v: &'a Value,
    at: &str,
    what: &str,
    problems: &mut Vec<Problem>,
) -> Option<&'a BTreeMap<String, Value>> {
    match v {
        Value::Object(m) => Some(m),
        other => {
            problems.push(Problem::new(
                at,
                ProblemCode::WrongType,
                format!("{what} must be an object, not {}", other.type_name()),
                format!("Send {what} as a JSON object."),
            ));
            None
        }
    }
}
