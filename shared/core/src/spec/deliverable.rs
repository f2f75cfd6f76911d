//! Deliverables: their rules, their hash, and the checks they cannot satisfy.

use super::{Fields, Problem, ProblemCode, Spec, object_at, wrong_type};
use crate::json::Value;
use crate::product::MAX_TEXT_BYTES;

#[derive(Debug, Clone, PartialEq, Default)]
pub struct Deliverable {
    pub text: Option<String>,
    /// `null` is treated as absent: the hash input cannot tell them apart.
    pub json: Option<Value>,
}

impl Deliverable {
    /// `{"json": <json or null>, "text": <text or null>}`, the deliverable_hash input.
    pub fn hash_input(&self) -> Value {
        Value::object()
            .with("json", self.json.clone().unwrap_or(Value::Null))
            .with("text", self.text.clone())
    }

    pub fn hash(&self) -> String {
        crate::hash::sha256_hex(&self.hash_input().to_canonical_vec())
    }
}

pub fn parse_deliverable(v: &Value, at: &str) -> Result<Deliverable, Vec<Problem>> {
    let mut problems = Vec::new();
    let Some(obj) = object_at(v, at, "deliverable", &mut problems) else {
        return Err(problems);
    };
    let f = Fields::new(obj, at, &["text", "json"], "a deliverable", &mut problems);
    let text = match obj.get("text") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => {
            if s.len() > MAX_TEXT_BYTES {
                problems.push(Problem::new(
                    f.path("text"),
                    ProblemCode::TextTooLarge,
                    format!("text is {} bytes of UTF-8; at most {MAX_TEXT_BYTES} (200 KB) are accepted", s.len()),
                    "Send at most 200 KB of text; judge a hash of larger artifacts with content_hash.",
                ));
            }
            Some(s.clone())
        }
        Some(other) => {
            problems.push(wrong_type(&f.path("text"), "a string", other));
            None
        }
    };
    let json = match obj.get("json") {
        None | Some(Value::Null) => None,
        Some(v) => Some(v.clone()),
    };
    // An empty deliverable is one: a spec whose checks read neither (a witness's
    // url_probe) needs none; what the checks do read is required by
    // `deliverable_problems`.
    if problems.is_empty() {
        Ok(Deliverable { text, json })
    } else {
        Err(problems)
    }
}

impl Spec {
    /// Whether any check reads the deliverable (its text or its JSON).
    pub fn reads_deliverable(&self) -> bool {
        self.checks.iter().any(|c| c.needs_text() || c.needs_json())
    }
}

/// Checks that cannot possibly pass because the deliverable lacks what they read.
/// Refused before payment: a paid "fail" for a missing field helps nobody.
pub fn deliverable_problems(spec: &Spec, d: &Deliverable) -> Vec<Problem> {
    let mut problems = Vec::new();
    for (i, c) in spec.checks.iter().enumerate() {
        if c.needs_text() && d.text.is_none() {
            problems.push(Problem::new(
                "deliverable.text",
                ProblemCode::DeliverableMissingText,
                format!(
                    "checks[{i}] ({}) reads deliverable.text, which is missing",
                    c.type_name()
                ),
                "Add the text to the deliverable, or remove the check.",
            ));
        }
        if c.needs_json() && d.json.is_none() {
            problems.push(Problem::new(
                "deliverable.json",
                ProblemCode::DeliverableMissingJson,
                format!(
                    "checks[{i}] ({}) reads deliverable.json, which is missing",
                    c.type_name()
                ),
                "Add the JSON to the deliverable, or remove the check.",
            ));
        }
    }
    problems
}
