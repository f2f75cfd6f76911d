use super::*;
use crate::json::parse_str;
use crate::product::MAX_TEXT_BYTES;

fn spec(s: &str, tier: Option<Tier>) -> Result<Spec, Vec<Problem>> {
    parse_spec(&parse_str(s).expect("test json"), tier)
}

fn codes(r: Result<Spec, Vec<Problem>>) -> Vec<(String, &'static str)> {
    r.err()
        .unwrap_or_default()
        .into_iter()
        .map(|p| (p.at, p.code.as_str()))
        .collect()
}

#[test]
fn normalizes_with_defaults_written_out() {
    let s = spec(
        r###"{"checks":[
            {"type":"regex","pattern":"## Conclusion"},
            {"type":"length","max":10},
            {"type":"content_hash","sha256":"ABCDEF0123456789ABCDEF0123456789ABCDEF0123456789ABCDEF0123456789"},
            {"type":"json_path","path":"a.b","op":"exists"},
            {"type":"json_schema","schema":{"type":"object"}},
            {"type":"url_probe","url":"https://example.com/"}
        ]}"###,
        None,
    )
    .expect("valid");
    assert_eq!(
        s.normalized.to_canonical_string(),
        concat!(
            r###"{"checks":[{"expect":"match","flags":"","pattern":"## Conclusion","type":"regex"},"###,
            r###"{"max":10,"min":0,"type":"length","unit":"chars"},"###,
            r###"{"sha256":"abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789","target":"text","type":"content_hash"},"###,
            r###"{"op":"exists","path":"a.b","type":"json_path"},"###,
            r###"{"schema":{"type":"object"},"type":"json_schema"},"###,
            r###"{"expect":{"status":200},"type":"url_probe","url":"https://example.com/"}]}"###
        )
    );
    assert_eq!(s.hash.len(), 64);
    // Normalizing the normalized form changes nothing.
    let again = parse_spec(&s.normalized, None).expect("still valid");
    assert_eq!(again.normalized, s.normalized);
    assert_eq!(again.hash, s.hash);
}

#[test]
fn reports_every_problem_with_its_place() {
    let got = codes(spec(
        r#"{"checks":[
            {"type":"regex","pattern":"(a+)+$","flags":"x"},
            {"type":"lenght"},
            {"type":"length","min":5,"max":2,"colour":"red"},
            {"type":"json_path","path":"a[","op":"eq"}
        ],"extra":1}"#,
        None,
    ));
    assert_eq!(
        got,
        vec![
            ("extra".to_owned(), "unknown_field"),
            ("checks[0].flags".to_owned(), "invalid_value"),
            ("checks[0].pattern".to_owned(), "catastrophic_backtracking"),
            ("checks[1].type".to_owned(), "unknown_check_type"),
            ("checks[2].colour".to_owned(), "unknown_field"),
            ("checks[2].min".to_owned(), "invalid_value"),
            ("checks[3].path".to_owned(), "invalid_json_path"),
            ("checks[3].value".to_owned(), "missing_field"),
        ]
    );
}

#[test]
fn tier_rules() {
    let probe = r#"{"type":"url_probe","url":"https://example.com/"}"#;
    let text = r#"{"type":"length","min":1}"#;
    let one = format!(r#"{{"checks":[{probe}]}}"#);
    assert!(spec(&one, Some(Tier::Witness)).is_ok());
    assert!(spec(&one, Some(Tier::Probe)).is_ok());
    assert_eq!(
        codes(spec(&one, Some(Tier::Basic))),
        vec![("checks[0]".to_owned(), "check_not_allowed")]
    );
    let two = format!(r#"{{"checks":[{probe},{text}]}}"#);
    assert_eq!(
        codes(spec(&two, Some(Tier::Witness))),
        vec![("checks".to_owned(), "check_not_allowed")]
    );
    let four = format!(r#"{{"checks":[{probe},{probe},{probe},{probe}]}}"#);
    assert_eq!(
        codes(spec(&four, Some(Tier::Sworn))),
        vec![("checks".to_owned(), "too_many_network_checks")]
    );
    let eleven = format!(r#"{{"checks":[{}]}}"#, [text; 11].join(","));
    assert_eq!(
        codes(spec(&eleven, Some(Tier::Basic))),
        vec![("checks".to_owned(), "too_many_checks")]
    );
    assert_eq!(
        codes(spec(r#"{"checks":[]}"#, Some(Tier::Basic))),
        vec![("checks".to_owned(), "too_few_checks")]
    );
}

#[test]
fn spec_wide_size_limits_come_before_parsing() {
    // Ten thousand checks, every one broken: one problem, the count, nothing parsed.
    let broken = r#"{"type":"regex","pattern":"("}"#;
    let many = format!(r#"{{"checks":[{}]}}"#, vec![broken; 10_000].join(","));
    assert_eq!(
        codes(spec(&many, None)),
        vec![("checks".to_owned(), "too_many_checks")]
    );
    // Patterns at the per-pattern cap, more of them than the spec-wide cap allows,
    // some inside schemas: refused as a whole, before any is guarded (these would
    // each be catastrophic_backtracking).
    let at_cap = format!("({}a+a+)+", "b".repeat(MAX_PATTERN_CHARS - 7));
    assert_eq!(at_cap.chars().count(), MAX_PATTERN_CHARS);
    let regex = format!(r#"{{"type":"regex","pattern":"{at_cap}"}}"#);
    let schema = format!(
        r#"{{"type":"json_schema","schema":{{"properties":{{"default":{{"pattern":"{at_cap}"}}}},"patternProperties":{{"{at_cap}":{{}}}}}}}}"#
    );
    let total = format!(
        r#"{{"checks":[{regex},{regex},{regex},{regex},{schema},{schema},{schema},{schema}]}}"#
    );
    let (checks, problems) =
        parse_spec_partial(&crate::json::parse_str(&total).expect("json"), None);
    assert!(checks.is_empty());
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert_eq!(problems[0].code, "spec_too_large");
    assert!(
        problems[0].message.contains("12000 characters"),
        "{}",
        problems[0].message
    );
    // Exactly at the cap (ten patterns of 1000 characters) the patterns are guarded.
    let ten = format!(r#"{{"checks":[{}]}}"#, [regex.as_str(); 10].join(","));
    let got = codes(spec(&ten, None));
    assert_eq!(got.len(), 10);
    assert!(
        got.iter().all(|(_, c)| *c == "catastrophic_backtracking"),
        "{got:?}"
    );
    // More patterns than allowed, however short.
    let props: Vec<String> = (0..=MAX_SPEC_PATTERNS)
        .map(|i| format!(r#""p{i}":{{"pattern":"^a"}}"#))
        .collect();
    let count = format!(
        r#"{{"checks":[{{"type":"json_schema","schema":{{"properties":{{{}}}}}}}]}}"#,
        props.join(",")
    );
    assert_eq!(
        codes(spec(&count, None)),
        vec![("checks".to_owned(), "spec_too_large")]
    );
    // Schema values are counted across the spec, enum data included.
    let half: Vec<String> = (0..MAX_SCHEMA_VALUES / 2).map(|i| i.to_string()).collect();
    let enum_check = format!(
        r#"{{"type":"json_schema","schema":{{"enum":[{}]}}}}"#,
        half.join(",")
    );
    let one = format!(r#"{{"checks":[{enum_check}]}}"#);
    assert_eq!(codes(spec(&one, None)), vec![]);
    let two = format!(r#"{{"checks":[{enum_check},{enum_check}]}}"#);
    assert_eq!(
        codes(spec(&two, None)),
        vec![("checks".to_owned(), "spec_too_large")]
    );
}

#[test]
fn schemas_that_would_cost_more_than_they_say_are_refused() {
    // A $ref into data would make the data a schema nobody checked.
    let into_data = r##"{"checks":[{"type":"json_schema","schema":{"$ref":"#/default","default":{"pattern":"(a+)+$"}}}]}"##;
    assert_eq!(
        codes(spec(into_data, None)),
        vec![("checks[0].schema.$ref".to_owned(), "invalid_schema")]
    );
    let into_a_property = r##"{"checks":[{"type":"json_schema","schema":{"$ref":"#/properties/default","properties":{"default":{"type":"string"}}}}]}"##;
    assert_eq!(codes(spec(into_a_property, None)), vec![]);
    // A long property name over many values: its length in every path below it.
    let children: Vec<String> = (0..100).map(|i| format!(r#""c{i}":{{}}"#)).collect();
    let long_name = format!(
        r#"{{"checks":[{{"type":"json_schema","schema":{{"properties":{{"{}":{{"properties":{{{}}}}}}}}}}}]}}"#,
        "n".repeat(50_000),
        children.join(",")
    );
    assert_eq!(
        codes(spec(&long_name, None)),
        vec![("checks".to_owned(), "spec_too_large")]
    );
}

#[test]
fn schemas_are_guarded_and_never_fetch() {
    let got = codes(spec(
        r#"{"checks":[{"type":"json_schema","schema":{"properties":{"a":{"type":"string","pattern":"(x+)+y"}},"patternProperties":{"(a|aa)+":{}}}}]}"#,
        None,
    ));
    assert_eq!(
        got,
        vec![
            (
                "checks[0].schema.patternProperties[\"(a|aa)+\"]".to_owned(),
                "catastrophic_backtracking"
            ),
            (
                "checks[0].schema.properties.a.pattern".to_owned(),
                "catastrophic_backtracking"
            ),
        ]
    );
    // Schema patterns have the regex checks' length cap, checked before the guard.
    let long = "a".repeat(MAX_PATTERN_CHARS + 1);
    assert_eq!(
        codes(spec(
            &format!(
                r#"{{"checks":[{{"type":"json_schema","schema":{{"properties":{{"a":{{"pattern":"{long}"}}}},"patternProperties":{{"{long}":{{}}}}}}}}]}}"#
            ),
            None,
        )),
        vec![
            (
                // A long key is shortened where it names the place.
                format!("checks[0].schema.patternProperties[\"{}…\"]", &long[..64]),
                "invalid_value"
            ),
            (
                "checks[0].schema.properties.a.pattern".to_owned(),
                "invalid_value"
            ),
        ]
    );
    let at_cap = "a".repeat(MAX_PATTERN_CHARS);
    assert!(
        spec(
            &format!(
                r#"{{"checks":[{{"type":"json_schema","schema":{{"pattern":"{at_cap}"}}}}]}}"#
            ),
            None
        )
        .is_ok()
    );
    // Properties named like data keywords are schemas all the same.
    for name in ["default", "const", "enum", "examples"] {
        let named = codes(spec(
            &format!(
                r#"{{"checks":[{{"type":"json_schema","schema":{{"properties":{{"{name}":{{"type":"string","pattern":"^(\\w+\\s?)*$"}}}},"$defs":{{"{name}":{{"pattern":"(x+)+y"}}}}}}}}]}}"#
            ),
            None,
        ));
        assert_eq!(
            named,
            vec![
                (
                    format!("checks[0].schema.$defs.{name}.pattern"),
                    "catastrophic_backtracking"
                ),
                (
                    format!("checks[0].schema.properties.{name}.pattern"),
                    "catastrophic_backtracking"
                ),
            ],
            "{name}"
        );
    }
    let remote = codes(spec(
        r#"{"checks":[{"type":"json_schema","schema":{"$ref":"http://127.0.0.1:9/x.json"}}]}"#,
        None,
    ));
    assert_eq!(
        remote,
        vec![("checks[0].schema".to_owned(), "invalid_schema")]
    );
    let file = codes(spec(
        r#"{"checks":[{"type":"json_schema","schema":{"$ref":"file:///etc/passwd"}}]}"#,
        None,
    ));
    assert_eq!(
        file,
        vec![("checks[0].schema".to_owned(), "invalid_schema")]
    );
}

#[test]
fn what_a_check_reads_is_the_same_on_its_normalized_json() {
    let all = spec(
        r#"{"checks":[{"type":"json_schema","schema":{}},{"type":"json_path","path":"a","op":"exists"},{"type":"content_hash","sha256":"00000000000000000000000000000000000000000000000000000000000000aa"},{"type":"content_hash","target":"url","url":"https://example.com/","sha256":"00000000000000000000000000000000000000000000000000000000000000aa"},{"type":"regex","pattern":"a"},{"type":"length","min":1},{"type":"url_probe","url":"https://example.com/"}]}"#,
        None,
    )
    .expect("spec");
    assert_eq!(all.checks.len(), CHECK_TYPES.len() + 1);
    for c in &all.checks {
        assert_eq!(
            Check::reads_of_normalized(&c.to_value()),
            (c.needs_text(), c.needs_json()),
            "{}",
            c.type_name()
        );
    }
}

#[test]
fn deliverable_rules() {
    let d = |s: &str| parse_deliverable(&parse_str(s).expect("json"), "deliverable");
    assert!(d(r#"{"text":"hi"}"#).is_ok());
    assert!(d(r#"{"json":{"a":1}}"#).is_ok());
    // Empty: a deliverable of nothing, for specs that read none (witness, probe).
    assert_eq!(
        d(r#"{}"#).map(|d| d.hash_input().to_canonical_string()),
        Ok(r#"{"json":null,"text":null}"#.to_owned())
    );
    assert!(d(r#"{"text":"x","note":"y"}"#).is_err());
    let big = format!(r#"{{"text":"{}"}}"#, "a".repeat(MAX_TEXT_BYTES + 1));
    assert_eq!(
        d(&big).err().map(|p| p[0].code.as_str()),
        Some("text_too_large")
    );
    let ok = Deliverable {
        text: Some("hi".into()),
        json: None,
    };
    assert_eq!(
        ok.hash_input().to_canonical_string(),
        r#"{"json":null,"text":"hi"}"#
    );
}
