use super::*;
use crate::json::parse_str;

#[test]
fn a_schema_is_walked_once_for_patterns_refs_and_its_neutral_copy() {
    let schema = parse_str(
        r##"{"properties":{"default":{"pattern":"^a"},"p":{"patternProperties":{"^x+$":{"pattern":"b"}}}},"default":{"pattern":"data"},"allOf":[{"$ref":"#/default"},{"$ref":"#/properties/default"},{"$ref":"#/%64efault"},{"$ref":"#/$defs/enum"}]}"##,
    )
    .expect("json");
    let scan = scan_schema(&schema, "checks[0].schema");
    let patterns: Vec<(&str, &str)> = scan
        .patterns
        .iter()
        .map(|(w, p)| (w.as_str(), p.as_str()))
        .collect();
    assert_eq!(
        patterns,
        vec![
            ("checks[0].schema.properties.default.pattern", "^a"),
            (
                "checks[0].schema.properties.p.patternProperties[\"^x+$\"]",
                "^x+$"
            ),
            (
                "checks[0].schema.properties.p.patternProperties[\"^x+$\"].pattern",
                "b"
            ),
        ]
    );
    let refs: Vec<&str> = scan
        .refs_into_data
        .iter()
        .map(|(_, r)| r.as_str())
        .collect();
    assert_eq!(refs, vec!["#/default", "#/%64efault"]);
    assert_eq!(
        scan.neutralized
            .get("properties")
            .and_then(|p| p.get("p"))
            .and_then(|p| p.get("patternProperties"))
            .and_then(|pp| pp.get("^0$"))
            .and_then(|s| s.get("pattern")),
        Some(&Value::from(""))
    );
    // Data stays as it was.
    assert_eq!(
        scan.neutralized
            .get("default")
            .and_then(|d| d.get("pattern")),
        Some(&Value::from("data"))
    );
}

#[test]
fn the_allowance_is_spent_across_the_spec() {
    let mut budget = RegexBudget::default();
    // ~2.2 MB each, forward and reverse: one fits in 3 MiB, the second does not.
    assert_eq!(check_regex("^\\w{1,40}$", "", &mut budget), Ok(()));
    // Small patterns fit in what is left.
    assert_eq!(check_regex("^\\d{4}-\\d{2}$", "", &mut budget), Ok(()));
    let refused = check_regex("^\\w{1,40}$", "", &mut budget).expect_err("over");
    assert_eq!(refused.code, "regex_too_large");
    // Weighing it used the rest up: even a small pattern is refused after it.
    assert_eq!(
        check_regex("^a$", "", &mut budget).map_err(|r| r.code.as_str()),
        Err("regex_too_large")
    );
    // `^\\w{1,64}$` builds 3.6 MB: more than the whole allowance.
    assert_eq!(
        check_regex("^\\w{1,64}$", "", &mut RegexBudget::default()).map_err(|r| r.code.as_str()),
        Err("regex_too_large")
    );
    // Lookaround: weighed by its parts, twice (compiled after weighing): what fits
    // whole fits once, not as a part.
    let mut fresh = RegexBudget::default();
    assert_eq!(
        check_regex("\\w{1,30}x", "", &mut RegexBudget::default()),
        Ok(())
    );
    assert_eq!(
        check_regex("(?=a)\\w{1,30}x", "", &mut fresh).map_err(|r| r.code.as_str()),
        Err("regex_too_large")
    );
    let mut fresh = RegexBudget::default();
    assert_eq!(
        check_regex("(?=\\w{300})x", "", &mut fresh).map_err(|r| r.code.as_str()),
        Err("regex_too_large")
    );
    // Case folding: three full ranges fit, the fourth is refused before it is built.
    let mut folds = RegexBudget::default();
    let full = "[\\x00-\\x{10FFFF}]";
    for i in 0..3 {
        assert_eq!(check_regex(full, "i", &mut folds), Ok(()), "{i}");
    }
    assert_eq!(
        check_regex(full, "i", &mut folds).map_err(|r| r.code.as_str()),
        Err("regex_too_large")
    );
    assert_eq!(
        check_regex(full, "", &mut folds),
        Ok(()),
        "no i, no folding"
    );
    assert_eq!(
        check_regex("(?i)[a-z]\\p{Greek}[^a]", "", &mut folds),
        Ok(())
    );
    for (text, least) in [
        ("(?i)[=[^\\x00=$]]", 1_000_000),
        ("(?i:x)[\\s\\S]", 0),
        ("(?i:[\\s\\S])", 1_000_000),
        ("(?i)a(?-i)[\\s\\S]", 0),
        ("(?i)\\P{Any}", 1_000_000),
        ("(?i)[[^a]--[^b]]", 2_000_000),
    ] {
        let w = fold_weight(text);
        assert!(if least == 0 { w < 100 } else { w >= least }, "{text}: {w}");
    }
    // Schema patterns are ECMA-262: \w is ASCII there, and small.
    let mut fresh = RegexBudget::default();
    assert_eq!(check_schema_pattern("^\\w{1,300}$", &mut fresh), Ok(()));
    assert_eq!(
        check_schema_pattern("(a", &mut fresh).map_err(|r| r.code.as_str()),
        Err("invalid_regex")
    );
}

/// A class whose reverse automaton is five times its forward one (4-byte ranges that
/// share their last byte): counted forward only, ten of these built ~15 MB before
/// payment. Both directions count now, so the allowance holds one.
fn reverse_heavy(count: usize) -> String {
    let ranges: String = (0..88)
        .step_by(2)
        .map(|i| {
            let lo = 0x10000 + i * 0x40;
            format!("\\u{{{lo:X}}}-\\u{{{:X}}}", lo + 0xF)
        })
        .collect();
    format!("[{ranges}]{{{count}}}")
}

#[test]
fn reverse_automata_count_against_the_allowance() {
    let mut budget = RegexBudget::default();
    let pattern = reverse_heavy(600);
    assert!(pattern.chars().count() <= MAX_PATTERN_CHARS);
    let fits: Vec<bool> = (0..10)
        .map(|_| check_regex(&pattern, "", &mut budget).is_ok())
        .collect();
    assert_eq!(
        fits,
        [
            true, false, false, false, false, false, false, false, false, false
        ]
    );
}

/// What the check accepts without compiling, the judge compiles: for each pattern (whole
/// or with lookaround, small and at the allowance's edge), an accepted pattern compiles
/// under the judge's own options, and a pattern that does not compile is refused.
#[test]
fn an_accepted_pattern_compiles_as_the_judge_compiles_it() {
    let heavy = reverse_heavy(1200);
    let patterns = [
        "^\\w{1,40}$",
        "\\b\\w+\\b",
        "(?m)^## \\w+$",
        "(?i)[a-zа-я]{3,9}",
        "(?=a)\\w{1,20}",
        "(a)\\1",
        "(?<=\\w{1,3})x",
        "\\p{Greek}{40}",
        "[\\s\\S]{200}",
        "(?x) a b # comment",
        "\\h",
        "\\Z",
        "a{5,3}",
        "[z-a]",
        "(?<n>a)\\k<n>",
        heavy.as_str(),
        "\\d{300}",
        "(?:\\p{Ll}\\p{Lu}){25}",
    ];
    // Accepted and not compiling is the bug; refused for its size or its backtracking
    // while compiling is the check being stricter than the engine, which it may be.
    let agree = |what: &str, accepted: Result<(), Refusal>, compiled: Result<(), String>| match (
        accepted, compiled,
    ) {
        (Ok(()), Err(e)) => panic!("{what} accepted but does not compile: {e}"),
        (Err(r), Ok(()))
            if r.code != "regex_too_large" && r.code != "catastrophic_backtracking" =>
        {
            panic!("{what} compiles but was refused: {r:?}")
        }
        _ => {}
    };
    for p in patterns {
        for flags in ["", "i", "s"] {
            agree(
                &format!("{p} ({flags})"),
                check_regex(p, flags, &mut RegexBudget::default()),
                crate::eval::compile_regex(p, flags).map(drop),
            );
        }
        // The same pattern in a schema: ECMA-262, compiled by the schema validator.
        let schema = crate::json::Value::from(serde_json::json!({"pattern": p}));
        agree(
            &format!("schema {p}"),
            check_schema_pattern(p, &mut RegexBudget::default()),
            crate::eval::compile_schema(&schema).map(drop),
        );
    }
}
