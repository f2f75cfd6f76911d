//! The length check: the deliverable's text counted in characters or words.

use super::{Check, Fields, Problem, ProblemCode};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LengthUnit {
    /// Unicode scalar values.
    Chars,
    /// Runs of non-whitespace separated by Unicode whitespace.
    Words,
}

pub(super) fn parse(f: &Fields<'_>, problems: &mut Vec<Problem>) -> Option<Check> {
    let before = problems.len();
    let unit = f.choice(
        "unit",
        &["chars", "words"],
        |s| match s {
            "chars" => Some(LengthUnit::Chars),
            "words" => Some(LengthUnit::Words),
            _ => None,
        },
        Some(LengthUnit::Chars),
        problems,
    );
    let min = f.count("min", problems);
    let max = f.count("max", problems);
    if let (Some(min), Some(max)) = (min, max) {
        if min.is_none() && max.is_none() {
            problems.push(Problem::new(
                f.at(),
                ProblemCode::MissingField,
                "a length check needs min, max or both",
                "Add \"min\" and/or \"max\" (non-negative integers).",
            ));
        }
        if let (Some(lo), Some(hi)) = (min, max)
            && lo > hi
        {
            problems.push(Problem::new(
                f.path("min"),
                ProblemCode::InvalidValue,
                format!("min {lo} is greater than max {hi}; nothing could pass"),
                "Make min less than or equal to max.",
            ));
        }
    }
    if problems.len() > before {
        return None;
    }
    Some(Check::Length {
        unit: unit?,
        min: min?.unwrap_or(0),
        max: max?,
    })
}
