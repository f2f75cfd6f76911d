//! Spec-wide size limits, measured before any check is parsed, and the tier rules.

use super::{Check, Problem, ProblemCode};
use crate::json::Value;
use crate::patterns::{self, MAX_SPEC_PATTERN_CHARS, MAX_SPEC_PATTERNS};
use crate::product::Tier;

/// JSON values (objects, arrays, strings, numbers...) in all of a spec's schemas together:
/// compiling a schema costs about 3 µs per value, so this keeps it to tens of milliseconds.
pub const MAX_SCHEMA_VALUES: usize = 10_000;
/// The JSON pointers of every value in a spec's schemas, in bytes, together: a schema
/// validator names each place it compiles by its path, so a long property name over
/// thousands of values costs its length thousands of times (a 700 KB name over 9,000
/// properties took seconds). Real schemas use a fraction of this.
pub const MAX_SCHEMA_PATH_BYTES: usize = 4 << 20;

/// The spec-wide limits on patterns and schemas, measured without parsing anything.
pub(super) fn size_problems(checks_v: &[Value], problems: &mut Vec<Problem>) {
    let schemas = || {
        checks_v
            .iter()
            .filter_map(|c| match (c.get("type"), c.get("schema")) {
                (Some(Value::String(t)), Some(s)) if t == "json_schema" => Some(s),
                _ => None,
            })
    };
    let (mut values, mut path_bytes) = (0, 0);
    for s in schemas() {
        let (v, p) = weigh_values(s, 0);
        values += v;
        path_bytes += p;
    }
    if values > MAX_SCHEMA_VALUES {
        problems.push(Problem::new(
            "checks",
            ProblemCode::SpecTooLarge,
            format!(
                "the spec's schemas hold {values} JSON values; at most {MAX_SCHEMA_VALUES} are allowed across a spec"
            ),
            "Shrink the schemas: assert the fields the verdict depends on, and move long enum or const data out of the spec.",
        ));
        return;
    }
    if path_bytes > MAX_SCHEMA_PATH_BYTES {
        problems.push(Problem::new(
            "checks",
            ProblemCode::SpecTooLarge,
            format!(
                "the paths to the values of the spec's schemas hold {path_bytes} bytes together; at most {MAX_SCHEMA_PATH_BYTES} are allowed across a spec"
            ),
            "Shorten the property names (a long name is repeated in the path of everything beneath it) or flatten the schema.",
        ));
        return;
    }
    let mut patterns: Vec<String> = Vec::new();
    for c in checks_v {
        if let (Some(Value::String(t)), Some(Value::String(p))) = (c.get("type"), c.get("pattern"))
            && t == "regex"
        {
            patterns.push(p.clone());
        }
    }
    for s in schemas() {
        let scan = patterns::scan_schema(s, "");
        patterns.extend(scan.patterns.into_iter().map(|(_, p)| p));
    }
    let chars: usize = patterns.iter().map(|p| p.chars().count()).sum();
    if patterns.len() > MAX_SPEC_PATTERNS {
        problems.push(Problem::new(
            "checks",
            ProblemCode::SpecTooLarge,
            format!(
                "the spec has {} patterns; at most {MAX_SPEC_PATTERNS} are allowed across a spec",
                patterns.len()
            ),
            "Merge patterns (one pattern can list alternatives), or assert fewer fields by pattern.",
        ));
    } else if chars > MAX_SPEC_PATTERN_CHARS {
        problems.push(Problem::new(
            "checks",
            ProblemCode::SpecTooLarge,
            format!(
                "the spec's patterns hold {chars} characters; at most {MAX_SPEC_PATTERN_CHARS} are allowed across a spec"
            ),
            "Shorten the patterns; the same cap holds for regex checks and every pattern and patternProperties key in a schema.",
        ));
    }
}

/// Every JSON value in `v`, `v` included, and the bytes of their paths below `v` together
/// (`path` is the length of the path to `v`). The parser's depth limit bounds the recursion.
fn weigh_values(v: &Value, path: usize) -> (usize, usize) {
    let mut total = (1, path);
    let mut add = |(n, p): (usize, usize)| {
        total.0 += n;
        total.1 = total.1.saturating_add(p);
    };
    match v {
        Value::Array(a) => {
            for (i, item) in a.iter().enumerate() {
                add(weigh_values(item, path + 1 + decimal_len(i)));
            }
        }
        Value::Object(m) => {
            for (k, item) in m {
                add(weigh_values(item, path + 1 + k.len()));
            }
        }
        _ => {}
    }
    total
}

fn decimal_len(i: usize) -> usize {
    i.checked_ilog10().map_or(1, |d| d as usize + 1)
}

/// The rules of `tier.limits()` that a parsed spec breaks.
pub(super) fn tier_problems(
    tier: Tier,
    total: usize,
    checks: &[(usize, Check)],
    problems: &mut Vec<Problem>,
) {
    let limits = tier.limits();
    let network: Vec<usize> = checks
        .iter()
        .filter(|(_, c)| c.network_url().is_some())
        .map(|(i, _)| *i)
        .collect();
    if let Some(only) = limits.only_check {
        // Checks that did not parse have their own problems already.
        let ok = total == 1 && checks.first().is_none_or(|(_, c)| c.check_type() == only);
        if !ok {
            problems.push(Problem::new(
                "checks",
                ProblemCode::CheckNotAllowed,
                format!(
                    "a {} verdict is exactly one {} check",
                    tier.as_str(),
                    only.as_str()
                ),
                format!(
                    "Send one {{\"type\":\"{}\",...}} check, or buy the probe tier for more checks.",
                    only.as_str()
                ),
            ));
        }
    } else if limits.max_network_checks == 0 {
        for i in network {
            problems.push(Problem::new(
                format!("checks[{i}]"),
                ProblemCode::CheckNotAllowed,
                format!(
                    "the {} tier fetches nothing: url_probe and content_hash with target url are not included",
                    tier.as_str()
                ),
                "Use the probe tier ($2.00) or sworn tier for checks that fetch URLs, or hash deliverable.text instead.",
            ));
        }
    } else if network.len() > limits.max_network_checks {
        let max = limits.max_network_checks;
        problems.push(Problem::new(
            "checks",
            ProblemCode::TooManyNetworkChecks,
            format!(
                "the spec fetches {} URLs; at most {max} network checks are allowed per verdict",
                network.len()
            ),
            format!("Keep at most {max} url_probe / content_hash-on-url checks; buy another verdict for the rest."),
        ));
    }
}
