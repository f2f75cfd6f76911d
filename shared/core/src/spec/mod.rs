//! Acceptance specs: parsing into typed checks, normalization (every default written
//! out, so the embedded spec says exactly what was judged), tier rules, and the
//! problems a caller is shown, all of them at once, each with where/code/message/hint.
//!
//! One file per check type holds its model and its parser; `fields` reads JSON objects
//! into problems; `limits` holds the spec-wide size limits and the tier rules;
//! `deliverable` the deliverable's own rules.

mod check;
mod content_hash;
mod deliverable;
mod fields;
mod json_path;
mod json_schema;
mod length;
mod limits;
mod regex;
mod url_probe;

pub use crate::check_type::{CHECK_TYPES, CheckType};
pub use check::Check;
pub use content_hash::HashTarget;
pub use deliverable::{Deliverable, deliverable_problems, parse_deliverable};
pub use json_path::{PathAssertion, PathOp};
pub use length::LengthUnit;
pub use limits::{MAX_SCHEMA_PATH_BYTES, MAX_SCHEMA_VALUES};
pub use url_probe::{ProbeExpect, SelectorAssertion, SelectorOp};

pub use crate::patterns::{MAX_PATTERN_CHARS, MAX_SPEC_PATTERN_CHARS, MAX_SPEC_PATTERNS};
pub use crate::problem::{Problem, ProblemCode, problems_value};

use crate::json::Value;
use crate::patterns::RegexBudget;
use crate::product::{MAX_CHECKS, MIN_CHECKS, Tier};
use fields::{Fields, object_at, wrong_type};

/// A spec that passed every rule: typed checks, the normalized JSON and its hash.
#[derive(Debug, Clone, PartialEq)]
pub struct Spec {
    pub checks: Vec<Check>,
    pub normalized: Value,
    /// sha256 hex of the stable JSON of `normalized`.
    pub hash: String,
}

impl Spec {
    pub fn network_check_count(&self) -> usize {
        self.checks
            .iter()
            .filter(|c| c.network_url().is_some())
            .count()
    }

    /// Every URL the spec would fetch, with where it is written.
    pub fn network_urls(&self) -> Vec<(String, String)> {
        network_urls_of(self.checks.iter().enumerate())
    }
}

/// `(checks[i].url, url)` for every network check among `checks`.
pub fn network_urls_of<'a>(
    checks: impl Iterator<Item = (usize, &'a Check)>,
) -> Vec<(String, String)> {
    checks
        .filter_map(|(i, c)| {
            c.network_url()
                .map(|u| (format!("checks[{i}].url"), u.to_owned()))
        })
        .collect()
}

// ---------------------------------------------------------------------------
// Spec parsing

/// Parse and normalize a spec. With a tier, its rules apply too.
pub fn parse_spec(v: &Value, tier: Option<Tier>) -> Result<Spec, Vec<Problem>> {
    let (checks, problems) = parse_spec_partial(v, tier);
    if !problems.is_empty() {
        return Err(problems);
    }
    let spec = Spec::from_checks(checks.into_iter().map(|(_, c)| c).collect());
    match spec.size_problem() {
        Some(p) => Err(vec![p]),
        None => Ok(spec),
    }
}

/// The normalized spec's stable JSON, in bytes, at most: a verdict document embeds the
/// spec, and its purchase's prepared answer holds the document twice (the answer and the
/// verdict to store) in one DynamoDB item of at most 400 KB
/// (`umpire_core::platform::DYNAMODB_ITEM_BYTES`; a test holds the largest answer under it).
pub const MAX_SPEC_BYTES: usize = 128 * 1024;

impl Spec {
    /// A spec too large to be stored with its verdict, refused before payment.
    pub fn size_problem(&self) -> Option<Problem> {
        let bytes = self.normalized.to_canonical_vec().len();
        (bytes > MAX_SPEC_BYTES).then(|| {
            Problem::new(
                "spec",
                ProblemCode::SpecTooLarge,
                format!(
                    "the normalized spec is {bytes} bytes of JSON; a verdict embeds it and at most {MAX_SPEC_BYTES} can be stored with one"
                ),
                "Shrink the spec: shorter paths, keywords and schemas; judge large expected values by content_hash.",
            )
        })
    }

    /// The spec of checks that passed every rule: normalized JSON and its hash.
    pub fn from_checks(checks: Vec<Check>) -> Spec {
        let normalized = Value::object().with(
            "checks",
            Value::Array(checks.iter().map(Check::to_value).collect()),
        );
        let hash = crate::hash::sha256_hex(&normalized.to_canonical_vec());
        Spec {
            checks,
            normalized,
            hash,
        }
    }
}

/// Every check that parsed (with its index) and every problem, so a caller can
/// report on the good checks (their URLs, say) even when others are wrong.
pub fn parse_spec_partial(v: &Value, tier: Option<Tier>) -> (Vec<(usize, Check)>, Vec<Problem>) {
    let mut problems = Vec::new();
    let mut checks = Vec::new();
    let Some(obj) = object_at(v, "spec", "spec", &mut problems) else {
        return (checks, problems);
    };
    Fields::new(obj, "", &["checks"], "a spec", &mut problems);
    let checks_v = match obj.get("checks") {
        Some(Value::Array(a)) => a,
        Some(other) => {
            problems.push(wrong_type("checks", "an array of checks", other));
            return (checks, problems);
        }
        None => {
            problems.push(Problem::new(
                "checks",
                ProblemCode::MissingField,
                "a spec needs a checks array",
                "Send {\"checks\":[{\"type\":\"regex\",\"pattern\":\"...\"}]} with 1 to 10 checks.",
            ));
            return (checks, problems);
        }
    };
    if checks_v.len() < MIN_CHECKS {
        problems.push(Problem::new(
            "checks",
            ProblemCode::TooFewChecks,
            "the spec has no checks",
            "Add at least one check; a spec with nothing to judge cannot pass or fail.",
        ));
    }
    if checks_v.len() > MAX_CHECKS {
        // Nothing more is read: ten thousand checks are refused for the price of one.
        problems.push(Problem::new(
            "checks",
            ProblemCode::TooManyChecks,
            format!("the spec has {} checks; at most {MAX_CHECKS} are allowed", checks_v.len()),
            "Split the spec into several verdicts or merge checks (one json_schema can assert many fields).",
        ));
        return (checks, problems);
    }
    // The cheap structural limits come before any check is parsed, guarded or compiled.
    let before = problems.len();
    limits::size_problems(checks_v, &mut problems);
    if problems.len() > before {
        return (checks, problems);
    }
    // One compiled-size allowance for every pattern of the spec, spent in order.
    let mut budget = RegexBudget::default();
    for (i, cv) in checks_v.iter().enumerate() {
        if let Some(c) = parse_check(cv, &format!("checks[{i}]"), &mut budget, &mut problems) {
            checks.push((i, c));
        }
    }
    if let Some(tier) = tier {
        limits::tier_problems(tier, checks_v.len(), &checks, &mut problems);
    }
    (checks, problems)
}

fn parse_check(
    v: &Value,
    at: &str,
    budget: &mut RegexBudget,
    problems: &mut Vec<Problem>,
) -> Option<Check> {
    let obj = object_at(v, at, "a check", problems)?;
    let ty = match obj.get("type") {
        Some(Value::String(t)) => t.as_str(),
        Some(other) => {
            problems.push(wrong_type(&format!("{at}.type"), "a string", other));
            return None;
        }
        None => {
            problems.push(Problem::new(
                format!("{at}.type"),
                ProblemCode::MissingField,
                "every check needs a type",
                format!("Add \"type\": one of {}.", CHECK_TYPES.join(", ")),
            ));
            return None;
        }
    };
    let Some(ty) = CheckType::parse(ty) else {
        problems.push(Problem::new(
            format!("{at}.type"),
            ProblemCode::UnknownCheckType,
            format!("there is no check type {ty:?}"),
            format!("Use one of: {}.", CHECK_TYPES.join(", ")),
        ));
        return None;
    };
    let before = problems.len();
    let what = format!("a {} check", ty.as_str());
    let f = Fields::new(obj, at, ty.fields(), &what, problems);
    let check = match ty {
        CheckType::JsonSchema => json_schema::parse(&f, budget, problems),
        CheckType::JsonPath => json_path::parse(&f, problems),
        CheckType::ContentHash => content_hash::parse(&f, problems),
        CheckType::Regex => regex::parse(&f, budget, problems),
        CheckType::Length => length::parse(&f, problems),
        CheckType::UrlProbe => url_probe::parse(&f, problems),
    };
    // A check with any problem is not returned even if parsing produced something.
    if problems.len() > before { None } else { check }
}

#[cfg(test)]
mod tests;
