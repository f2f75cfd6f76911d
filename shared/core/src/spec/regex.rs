//! The regex check: a pattern the deliverable's text must (or must not) match.

use std::collections::BTreeSet;

use super::{Check, Fields, Problem, ProblemCode};
use crate::patterns::{self, RegexBudget};

pub(super) fn parse(
    f: &Fields<'_>,
    budget: &mut RegexBudget,
    problems: &mut Vec<Problem>,
) -> Option<Check> {
    let before = problems.len();
    let pattern = f.string("pattern", true, problems);
    let flags = f.string("flags", false, problems).unwrap_or("");
    let mut set = BTreeSet::new();
    for c in flags.chars() {
        if !matches!(c, 'i' | 'm' | 's') || !set.insert(c) {
            problems.push(Problem::new(
                f.path("flags"),
                ProblemCode::InvalidValue,
                format!("flags {flags:?}: only i, m and s are allowed, each once"),
                "Use any of i (case-insensitive), m (^/$ at lines), s (. matches newline), e.g. \"im\".",
            ));
            break;
        }
    }
    let flags: String = set.into_iter().collect();
    let expect_match = f.choice(
        "expect",
        &["match", "no_match"],
        |s| match s {
            "match" => Some(true),
            "no_match" => Some(false),
            _ => None,
        },
        Some(true),
        problems,
    );
    if let Some(p) = pattern {
        if p.is_empty() {
            problems.push(Problem::new(
                f.path("pattern"),
                ProblemCode::InvalidValue,
                "the pattern is empty and would match anything",
                "Write the text or pattern the deliverable must (or must not) contain.",
            ));
        } else if let Err(r) = patterns::check_regex(p, &flags, budget) {
            problems.push(Problem::new(f.path("pattern"), r.code, r.message, r.hint));
        }
    }
    if problems.len() > before {
        return None;
    }
    Some(Check::Regex {
        pattern: pattern?.to_owned(),
        flags,
        expect_match: expect_match?,
    })
}
