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
    // ~1.1 MB each: two fit in 3 MiB, the third does not.
    for i in 0..2 {
        assert_eq!(check_regex("^\\w{1,64}$", "", &mut budget), Ok(()), "{i}");
    }
    // Small patterns fit in what is left.
    assert_eq!(check_regex("^\\d{4}-\\d{2}$", "", &mut budget), Ok(()));
    let refused = check_regex("^\\w{1,64}$", "", &mut budget).expect_err("over");
    assert_eq!(refused.code, "regex_too_large");
    // Weighing it used the rest up: even a small pattern is refused after it.
    assert_eq!(
        check_regex("^a$", "", &mut budget).map_err(|r| r.code.as_str()),
        Err("regex_too_large")
    );
    // Lookaround: weighed by its parts.
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
