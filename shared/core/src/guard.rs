//! The backtracking guard: refuses, before anyone pays, regular expressions whose
//! structure lets a backtracking engine explode (Python's `re`, which a reproducer
//! may well use, and fancy-regex's own VM once a pattern has backreferences or
//! lookaround). It works on fancy-regex's syntax tree:
//!
//! 1. *Nested quantifiers*: a repeated group whose body contains a variable
//!    repetition that can end an iteration while the next iteration could have
//!    continued it (`(a+)+`, `(\w+\s?)*`, `(\d+,?)+`). Ambiguous splits of the
//!    same text between iterations are what grow exponentially.
//! 2. *Overlapping alternation under a quantifier*: a repeated alternation whose
//!    branches can start with the same character (`(a|aa)+`, `(\w|\d)*`).
//! 3. *Quantified lookaround over a repetition*: a repeated group containing a
//!    lookaround that itself repeats (`(?:a(?=a*$))*b`): each iteration rescans.
//! 4. Oniguruma-only constructs a reproducer cannot run (subroutine calls,
//!    recursion, absent operators, backtracking verbs, `\K`, `\G`, conditionals).
//!
//! Ordinary patterns pass: `^\d{4}-\d{2}-\d{2}$`, `\bfoo\b`, `(\w+) \1`,
//! `([a-z]+\.)+[a-z]+`. Whatever gets past the guard still runs in the isolated
//! worker under a hard time limit.

use crate::problem::ProblemCode;
use fancy_regex::Expr;
use regex_syntax::hir::{Class, ClassUnicode, ClassUnicodeRange, HirKind};

/// Repetitions allowing at least this many iterations (unbounded ones included)
/// count as loops for rules 1–3 (`{1,5}` stays harmless, `{0,100}` does not).
const LARGE_REPEAT: usize = 10;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuardRefusal {
    pub code: ProblemCode,
    pub message: String,
    pub hint: &'static str,
}

pub fn check_pattern(pattern: &str) -> Result<(), GuardRefusal> {
    let tree = Expr::parse_tree(pattern).map_err(|e| GuardRefusal {
        code: ProblemCode::InvalidRegex,
        message: format!("the pattern does not compile: {e}"),
        hint: "Fix the regular expression syntax (Rust/Oniguruma-style, like Python's re).",
    })?;
    walk(&tree.expr)
}

fn refuse(message: String, hint: &'static str) -> Result<(), GuardRefusal> {
    Err(GuardRefusal {
        code: ProblemCode::CatastrophicBacktracking,
        message,
        hint,
    })
}

const HINT_NESTED: &str = "Remove the nested quantifier: make the repeated part unambiguous, for example (\\w+\\s)* instead of (\\w+\\s?)*, or use a single quantifier.";
const HINT_ALT: &str = "Make the alternatives under the quantifier start with different characters (factor out the common prefix: a(b|c) instead of (ab|ac)).";
const HINT_LOOK: &str =
    "Move the lookaround out of the repetition, or drop the quantifier inside it.";

fn walk(e: &Expr) -> Result<(), GuardRefusal> {
    match e {
        Expr::SubroutineCall(_)
        | Expr::BacktrackingControlVerb(_)
        | Expr::Absent(_)
        | Expr::DefineGroup { .. }
        | Expr::KeepOut
        | Expr::ContinueFromPreviousMatchEnd
        | Expr::BackrefWithRelativeRecursionLevel { .. }
        | Expr::Conditional { .. }
        | Expr::BackrefExistsCondition { .. } => Err(GuardRefusal {
            code: ProblemCode::UnsupportedRegexFeature,
            message: "the pattern uses an engine-specific construct (subroutine, recursion, conditional, absent operator, backtracking verb, \\K or \\G)".into(),
            hint: "Use portable syntax: literals, classes, groups, alternation, quantifiers, anchors, backreferences and lookaround.",
        }),
        Expr::Repeat { child, hi, .. } => {
            let large = *hi >= LARGE_REPEAT;
            if large {
                check_loop_body(child)?;
            }
            walk(child)
        }
        _ => {
            for c in children(e) {
                walk(c)?;
            }
            Ok(())
        }
    }
}

pub(crate) fn children(e: &Expr) -> Vec<&Expr> {
    match e {
        Expr::Concat(v) | Expr::Alt(v) => v.iter().collect(),
        Expr::Group(c) => vec![c.as_ref()],
        Expr::LookAround(c, _) | Expr::AtomicGroup(c) => vec![c.as_ref()],
        Expr::Repeat { child, .. } => vec![child.as_ref()],
        Expr::Conditional {
            condition,
            true_branch,
            false_branch,
        } => vec![condition, true_branch, false_branch],
        _ => vec![],
    }
}

/// Rules 1–3 for the body of one large repetition.
fn check_loop_body(body: &Expr) -> Result<(), GuardRefusal> {
    // Rule 1: a variable repetition whose own characters can also start what
    // follows it (inside the iteration, or the next iteration) is ambiguous.
    let body_first = first(body);
    if ambiguous_repeat(body, &body_first) {
        return refuse(
            "nested quantifiers: a repetition inside a repeated group can also match what follows it, so the same text can be split in exponentially many ways".into(),
            HINT_NESTED,
        );
    }
    // Rule 2: alternation directly under the loop (through groups).
    if let Some(branches) = alternation(body)
        && branches.len() > 1
        && (branches.iter().any(|b| nullable(b)) || firsts_overlap(&branches))
    {
        return refuse(
            "overlapping alternation under a quantifier: two alternatives can match the same text, so each repetition can be tried several ways".into(),
            HINT_ALT,
        );
    }
    // Rule 3: repeated lookaround containing a repetition.
    if contains_lookaround_with_repeat(body) {
        return refuse(
            "a lookaround with a quantifier inside a repetition rescans the text on every iteration".into(),
            HINT_LOOK,
        );
    }
    Ok(())
}

/// Whether two branches can start with the same character. Every branch's first set is
/// a list of disjoint ranges; sorted together by their start, a range that begins
/// before the furthest end seen so far overlaps a range of another branch (ranges of one
/// branch never overlap). O(R log R) in the ranges, where comparing every pair of
/// branches took minutes on a 30,000-way alternation.
fn firsts_overlap(branches: &[&Expr]) -> bool {
    let mut ranges: Vec<(char, char)> = branches
        .iter()
        .flat_map(|b| {
            first(b)
                .ranges()
                .iter()
                .map(|r| (r.start(), r.end()))
                .collect::<Vec<_>>()
        })
        .collect();
    ranges.sort_unstable();
    let mut furthest: Option<char> = None;
    for (start, end) in ranges {
        if furthest.is_some_and(|f| start <= f) {
            return true;
        }
        furthest = Some(furthest.map_or(end, |f| f.max(end)));
    }
    false
}

/// Whether some variable repetition in `e` can match a character that may also
/// come right after it; `follow` is what may come after `e` as a whole.
fn ambiguous_repeat(e: &Expr, follow: &ClassUnicode) -> bool {
    match e {
        Expr::Concat(v) => {
            let mut after = follow.clone();
            for item in v.iter().rev() {
                if ambiguous_repeat(item, &after) {
                    return true;
                }
                let f = first(item);
                if nullable(item) {
                    after.union(&f);
                } else {
                    after = f;
                }
            }
            false
        }
        Expr::Alt(v) => v.iter().any(|b| ambiguous_repeat(b, follow)),
        Expr::Group(c) => ambiguous_repeat(c, follow),
        Expr::AtomicGroup(c) => ambiguous_repeat(c, follow),
        Expr::Repeat { child, lo, hi, .. } => {
            let child_first = first(child);
            if hi > lo && intersects(&child_first, follow) {
                return true;
            }
            let mut inner_follow = follow.clone();
            if *hi > 1 {
                inner_follow.union(&child_first);
            }
            ambiguous_repeat(child, &inner_follow)
        }
        _ => false,
    }
}

fn strip_groups(e: &Expr) -> &Expr {
    match e {
        Expr::Group(c) => strip_groups(c),
        other => other,
    }
}

fn alternation(e: &Expr) -> Option<Vec<&Expr>> {
    match strip_groups(e) {
        Expr::Alt(v) => Some(v.iter().collect()),
        _ => None,
    }
}

fn contains_lookaround_with_repeat(e: &Expr) -> bool {
    match e {
        Expr::LookAround(c, _) => contains_repeat(c),
        other => children(other)
            .into_iter()
            .any(contains_lookaround_with_repeat),
    }
}

fn contains_repeat(e: &Expr) -> bool {
    match e {
        Expr::Repeat { lo, hi, .. } if hi > lo => true,
        other => children(other).into_iter().any(contains_repeat),
    }
}

fn nullable(e: &Expr) -> bool {
    match e {
        Expr::Empty | Expr::Assertion(_) | Expr::LookAround(..) => true,
        Expr::Literal { val, .. } => val.is_empty(),
        Expr::LiteralBytes { bytes } => bytes.is_empty(),
        Expr::Concat(v) => v.iter().all(nullable),
        Expr::Alt(v) => v.iter().any(nullable),
        Expr::Group(c) => nullable(c),
        Expr::AtomicGroup(c) => nullable(c),
        Expr::Repeat { child, lo, .. } => *lo == 0 || nullable(child),
        Expr::Backref { .. } | Expr::BackrefWithRelativeRecursionLevel { .. } => true,
        _ => false,
    }
}

fn any_char() -> ClassUnicode {
    ClassUnicode::new([ClassUnicodeRange::new('\0', char::MAX)])
}

fn empty_class() -> ClassUnicode {
    ClassUnicode::empty()
}

fn intersects(a: &ClassUnicode, b: &ClassUnicode) -> bool {
    let mut x = a.clone();
    x.intersect(b);
    !x.ranges().is_empty()
}

/// The characters a match of `e` can start with (over-approximated).
fn first(e: &Expr) -> ClassUnicode {
    match e {
        Expr::Empty | Expr::Assertion(_) | Expr::LookAround(..) => empty_class(),
        Expr::Any { .. } | Expr::GeneralNewline { .. } | Expr::LiteralBytes { .. } => any_char(),
        Expr::Literal { val, casei } => match val.chars().next() {
            None => empty_class(),
            Some(c) => {
                let mut cls = ClassUnicode::new([ClassUnicodeRange::new(c, c)]);
                if *casei {
                    cls.case_fold_simple();
                }
                cls
            }
        },
        Expr::Delegate { inner, casei } => delegate_class(inner, *casei),
        // The ranges of every part gathered, then made canonical once: a union per part
        // sorts the whole class again each time (quadratic on a wide alternation).
        Expr::Concat(v) => {
            let mut end = v.iter().take_while(|item| nullable(item)).count();
            end = (end + 1).min(v.len());
            union_of(&v[..end])
        }
        Expr::Alt(v) => union_of(v),
        Expr::Group(c) => first(c),
        Expr::AtomicGroup(c) => first(c),
        Expr::Repeat { child, .. } => first(child),
        _ => any_char(),
    }
}

fn union_of(parts: &[Expr]) -> ClassUnicode {
    ClassUnicode::new(
        parts
            .iter()
            .flat_map(|p| first(p).ranges().to_vec())
            .collect::<Vec<_>>(),
    )
}

fn delegate_class(inner: &str, casei: bool) -> ClassUnicode {
    let parsed = regex_syntax::ParserBuilder::new()
        .case_insensitive(casei)
        .build()
        .parse(inner);
    match parsed.as_ref().map(|h| h.kind()) {
        Ok(HirKind::Class(Class::Unicode(c))) => c.clone(),
        Ok(HirKind::Literal(lit)) => match std::str::from_utf8(&lit.0)
            .ok()
            .and_then(|s| s.chars().next())
        {
            Some(c) => ClassUnicode::new([ClassUnicodeRange::new(c, c)]),
            None => any_char(),
        },
        _ => any_char(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_catastrophic_shapes() {
        for p in [
            "(a+)+$",
            "(a|aa)+$",
            "^(\\w+\\s?)*$",
            "(a*)*b",
            "(\\d+,?)+x",
            "(?:a(?=a*$))*b",
            "(\\w|\\d)+$",
            "(a?)+b",
            "((ab)*c?)*$",
            "(x+x+)+y",
            "(.*a){12}",
            "(?i)(A|a)+$",
            "(\\s?\\w+)*$",
        ] {
            let r = check_pattern(p);
            assert!(
                matches!(
                    &r,
                    Err(GuardRefusal {
                        code: crate::problem::ProblemCode::CatastrophicBacktracking,
                        ..
                    })
                ),
                "not refused: {p} -> {r:?}"
            );
        }
    }

    #[test]
    fn accepts_ordinary_patterns() {
        for p in [
            "^\\d{4}-\\d{2}-\\d{2}$",
            "\\bfoo\\b",
            "(\\w+) \\1",
            "## Conclusion",
            "([a-z]+\\.)+[a-z]+",
            "(foo|bar)+",
            "^[A-Z][a-z]+(?: [A-Z][a-z]+)*$",
            "(ab+c)*",
            "https?://[^\\s]+",
            "(?=.*x)",
            "(?<=\\$)\\d+(\\.\\d{2})?",
            "\\d{1,3}(,\\d{3})*",
            "(a{1,3}b)*",
        ] {
            assert_eq!(check_pattern(p), Ok(()), "refused: {p}");
        }
    }

    #[test]
    fn wide_alternations_are_decided_in_one_pass() {
        // 30,000 CJK characters, every other code point so that no two merge into one
        // range, under a star: all disjoint, so it passes; with a repeated branch, or a
        // range reaching into another branch, it overlaps and is refused. Comparing every
        // pair (450 million) took minutes; one sorted pass takes milliseconds.
        let branches: Vec<String> = (0..30_000u32)
            .filter_map(|i| char::from_u32(0x4e00 + 2 * i))
            .map(String::from)
            .collect();
        let list = |extra: &str| format!("(?:{}{extra})*", branches.join("|"));
        assert_eq!(check_pattern(&list("")), Ok(()));
        assert_eq!(
            check_pattern(&list(&format!("|{}", branches[17_000]))).map_err(|e| e.code.as_str()),
            Err("catastrophic_backtracking")
        );
        assert_eq!(
            check_pattern(&list("|[\\x{4e00}-\\x{4e01}]")).map_err(|e| e.code.as_str()),
            Err("catastrophic_backtracking")
        );
        assert_eq!(check_pattern(&list("|[\\x{4e01}]")), Ok(()));
        assert_eq!(
            check_pattern("(?:a|b|c|)*x").map_err(|e| e.code.as_str()),
            Err("catastrophic_backtracking")
        );
        assert_eq!(
            check_pattern("(?:[a-c]|[x-z]|[d-f]|c)*").map_err(|e| e.code.as_str()),
            Err("catastrophic_backtracking"),
            "c overlaps [a-c], listed apart"
        );
        assert_eq!(check_pattern("(?:[a-c]|[x-z]|[d-f]|g)*"), Ok(()));
    }

    #[test]
    fn refuses_engine_specific_constructs_and_bad_syntax() {
        assert_eq!(
            check_pattern("(?<n>a|b\\g<n>)").map_err(|e| e.code.as_str()),
            Err("unsupported_regex_feature")
        );
        assert_eq!(
            check_pattern("(").map_err(|e| e.code.as_str()),
            Err("invalid_regex")
        );
    }
}
