use super::*;
use crate::json::parse_str;
use crate::spec::parse_spec;

fn judge(check: &str, d: &Deliverable) -> Outcome {
    let spec = parse_spec(
        &parse_str(&format!(r#"{{"checks":[{check}]}}"#)).expect("json"),
        None,
    )
    .expect("valid spec");
    evaluate(&spec.checks[0], d, None)
}

fn text(t: &str) -> Deliverable {
    Deliverable {
        text: Some(t.into()),
        json: None,
    }
}

fn json(j: &str) -> Deliverable {
    Deliverable {
        text: None,
        json: Some(parse_str(j).expect("json")),
    }
}

/// Every 16-byte window of `secret` (the contract's retention test unit).
fn windows(secret: &str) -> Vec<&str> {
    (0..=secret.len() - 16)
        .filter(|i| secret.is_char_boundary(*i) && secret.is_char_boundary(i + 16))
        .map(|i| &secret[i..i + 16])
        .collect()
}

#[test]
fn reasons_never_quote_the_deliverable() {
    let secret = "CONFIDENTIAL-launch-plan-7f3a9c-do-not-share";
    let key = "private_key_name_nobody_declared";
    let d = json(&format!(
        r#"{{"title":"{secret}","items":["{secret}"],"{key}":1,"count":"{secret}"}}"#
    ));
    let checks = [
        r#"{"type":"json_path","path":"title","op":"eq","value":"public"}"#,
        r#"{"type":"json_path","path":"title","op":"exists"}"#,
        r#"{"type":"json_path","path":"title","op":"not_exists"}"#,
        r#"{"type":"json_path","path":"title","op":"contains","value":"zzz"}"#,
        r#"{"type":"json_path","path":"title","op":"gt","value":5}"#,
        r#"{"type":"json_path","path":"items","op":"eq","value":[]}"#,
        r#"{"type":"json_schema","schema":{"type":"object","properties":{"count":{"type":"integer"},"title":{"enum":["a"],"maxLength":3,"pattern":"^x"}},"additionalProperties":false}}"#,
        r#"{"type":"json_schema","schema":{"type":"object","properties":{"items":{"type":"array","items":{"type":"integer"}}}}}"#,
    ];
    for check in checks {
        let o = judge(check, &d);
        for w in windows(secret).into_iter().chain(windows(key)) {
            assert!(
                !o.reason.contains(w),
                "{check}: {:?} quotes {w:?}",
                o.reason
            );
        }
    }
    // What a reason does say: lengths, a hash prefix, types, sizes, the schema's
    // keyword and path (the spec's own words).
    let o = judge(checks[0], &d);
    assert!(
        !o.passed && o.reason.contains("a string of 44 characters (sha256 "),
        "{}",
        o.reason
    );
    assert!(
        o.reason.contains("\"public\""),
        "the spec's value is quoted: {}",
        o.reason
    );
    let o = judge(checks[5], &d);
    assert!(o.reason.contains("an array of 1 items"), "{}", o.reason);
    let o = judge(checks[6], &d);
    assert!(!o.passed, "{}", o.reason);
    assert!(
        o.reason.contains(
            "\"type\" fails at schema path /properties/count/type (the value there is a string)"
        ),
        "{}",
        o.reason
    );
    // A number observed in the deliverable may be stated.
    let o = judge(
        r#"{"type":"json_path","path":"n","op":"gt","value":5}"#,
        &json(r#"{"n":3}"#),
    );
    assert!(!o.passed && o.reason.contains("n is 3"), "{}", o.reason);
    // A long one (an account or card number) only by its length.
    let o = judge(
        r#"{"type":"json_path","path":"n","op":"eq","value":5}"#,
        &json(r#"{"n":4111111111111111}"#),
    );
    assert!(
        !o.passed && !o.reason.contains("4111111111"),
        "{}",
        o.reason
    );
    assert!(
        o.reason.contains("a number of 16 characters"),
        "{}",
        o.reason
    );
}

#[test]
fn regex_checks() {
    let d = text("Intro\n## Conclusion\nDone");
    assert!(judge(r###"{"type":"regex","pattern":"## Conclusion"}"###, &d).passed);
    assert!(!judge(r###"{"type":"regex","pattern":"## conclusion"}"###, &d).passed);
    assert!(
        judge(
            r###"{"type":"regex","pattern":"## conclusion","flags":"i"}"###,
            &d
        )
        .passed
    );
    assert!(judge(r###"{"type":"regex","pattern":"^Done$","flags":"m"}"###, &d).passed);
    assert!(!judge(r###"{"type":"regex","pattern":"^Done$"}"###, &d).passed);
    assert!(
        judge(
            r###"{"type":"regex","pattern":"Intro.## C","flags":"s"}"###,
            &d
        )
        .passed
    );
    assert!(
        judge(
            r###"{"type":"regex","pattern":"TODO","expect":"no_match"}"###,
            &d
        )
        .passed
    );
    assert!(
        !judge(
            r###"{"type":"regex","pattern":"Done","expect":"no_match"}"###,
            &d
        )
        .passed
    );
    assert!(
        judge(
            r###"{"type":"regex","pattern":"(\\w+) \\1"}"###,
            &text("it is is")
        )
        .passed
    );
}

#[test]
fn length_checks() {
    let d = text("héllo  wörld\nthree");
    assert!(judge(r#"{"type":"length","unit":"words","min":3,"max":3}"#, &d).passed);
    assert!(!judge(r#"{"type":"length","unit":"words","min":4}"#, &d).passed);
    assert!(judge(r#"{"type":"length","unit":"chars","max":18,"min":18}"#, &d).passed);
    assert!(!judge(r#"{"type":"length","max":17}"#, &d).passed);
}

/// content_hash on a URL whose body was cut at the read cap fails, naming the cap, even
/// when the bytes read hash to the expected value: the hash of a body nobody read whole
/// is unknown. Would catch: a truncated body hashed as if it were the whole (a page
/// padded past 2 MB after the part that matches would pass).
#[test]
fn content_hash_on_a_body_cut_at_the_cap_fails() {
    let read = vec![b'a'; 1024];
    let sha = crate::hash::sha256_hex(&read);
    let spec = parse_spec(
        &parse_str(&format!(
            r#"{{"checks":[{{"type":"content_hash","sha256":"{sha}","target":"url","url":"https://x.test/big"}}]}}"#
        ))
        .expect("json"),
        None,
    )
    .expect("valid");
    let whole = FetchedBody {
        status: 200,
        body: read.clone(),
        truncated: false,
    };
    assert!(evaluate(&spec.checks[0], &Deliverable::default(), Some(&whole)).passed);
    let cut = FetchedBody {
        truncated: true,
        ..whole
    };
    let o = evaluate(&spec.checks[0], &Deliverable::default(), Some(&cut));
    assert!(!o.passed, "a cut body's hash is unknown");
    assert!(
        o.reason
            .contains(&crate::product::FETCH_READ_CAP_BYTES.to_string()),
        "{}",
        o.reason
    );
}

#[test]
fn content_hash_on_text() {
    let d = text("hello");
    let good = crate::hash::sha256_hex(b"hello");
    assert!(
        judge(
            &format!(r#"{{"type":"content_hash","sha256":"{good}"}}"#),
            &d
        )
        .passed
    );
    let bad = "0".repeat(64);
    let o = judge(
        &format!(r#"{{"type":"content_hash","sha256":"{bad}"}}"#),
        &d,
    );
    assert!(!o.passed && o.reason.contains(&good));
}

#[test]
fn json_path_ops() {
    let d = json(
        r#"{"result":{"items":[{"price":99.5},{"price":100}],"name":"Widget","tags":["a","b"],"none":null}}"#,
    );
    let ok = |c: &str| judge(c, &d).passed;
    assert!(ok(
        r#"{"type":"json_path","path":"result.items[1].price","op":"eq","value":100.0}"#
    ));
    assert!(ok(
        r#"{"type":"json_path","path":"result.items[0].price","op":"lte","value":100}"#
    ));
    assert!(!ok(
        r#"{"type":"json_path","path":"result.items[0].price","op":"gt","value":100}"#
    ));
    assert!(ok(
        r#"{"type":"json_path","path":"result.items[0].price","op":"gte","value":99.5}"#
    ));
    assert!(ok(
        r#"{"type":"json_path","path":"result.items[1].price","op":"lt","value":1e3}"#
    ));
    assert!(ok(
        r#"{"type":"json_path","path":"result.name","op":"ne","value":"Gadget"}"#
    ));
    assert!(ok(
        r#"{"type":"json_path","path":"result.name","op":"contains","value":"idg"}"#
    ));
    assert!(ok(
        r#"{"type":"json_path","path":"result.tags","op":"contains","value":"b"}"#
    ));
    assert!(ok(
        r#"{"type":"json_path","path":"result","op":"contains","value":"tags"}"#
    ));
    assert!(ok(
        r#"{"type":"json_path","path":"result.none","op":"exists"}"#
    ));
    assert!(ok(
        r#"{"type":"json_path","path":"result.missing","op":"not_exists"}"#
    ));
    assert!(!ok(
        r#"{"type":"json_path","path":"result.missing","op":"ne","value":1}"#
    ));
    assert!(!ok(
        r#"{"type":"json_path","path":"result.missing","op":"exists"}"#
    ));
    assert!(!ok(
        r#"{"type":"json_path","path":"result.name","op":"gt","value":5}"#
    ));
    assert!(ok(
        r#"{"type":"json_path","path":"result.name","op":"gt","value":"Apple"}"#
    ));
    assert!(ok(
        r#"{"type":"json_path","path":"result.tags","op":"eq","value":["a","b"]}"#
    ));
}

#[test]
fn json_schema_checks() {
    let d = json(r#"{"title":"x","count":3}"#);
    assert!(judge(r#"{"type":"json_schema","schema":{"type":"object","required":["title"],"properties":{"title":{"type":"string"}}}}"#, &d).passed);
    let o = judge(
        r#"{"type":"json_schema","schema":{"type":"object","properties":{"count":{"type":"string"}}}}"#,
        &d,
    );
    assert!(!o.passed && o.reason.contains("/count"), "{}", o.reason);
    assert!(
        judge(
            r#"{"type":"json_schema","schema":{"properties":{"title":{"pattern":"^x$"}}}}"#,
            &d
        )
        .passed
    );
    // draft 2020-12 semantics: prefixItems exists, format is only an annotation.
    let arr = json(r#"[1,"a"]"#);
    assert!(judge(r#"{"type":"json_schema","schema":{"prefixItems":[{"type":"integer"},{"type":"string"}],"items":false}}"#, &arr).passed);
}

#[test]
fn url_probe_expectations() {
    let spec = parse_spec(
        &parse_str(r#"{"checks":[{"type":"url_probe","url":"https://x.test/","expect":{"status":200,"keyword":"Hello","selector":{"selector":"h1","op":"eq","value":"Hello World"}}}]}"#)
            .expect("json"),
        None,
    )
    .expect("valid");
    let page = FetchedBody {
        status: 200,
        body: b"<html><body><h1>Hello\n  World</h1></body></html>".to_vec(),
        truncated: false,
    };
    assert!(evaluate(&spec.checks[0], &Deliverable::default(), Some(&page)).passed);
    let wrong = FetchedBody {
        status: 503,
        ..page.clone()
    };
    let o = evaluate(&spec.checks[0], &Deliverable::default(), Some(&wrong));
    assert!(!o.passed && o.reason.contains("503"));
    let api = parse_spec(
        &parse_str(r#"{"checks":[{"type":"url_probe","url":"https://x.test/","expect":{"json_path":{"path":"ok","op":"eq","value":true}}}]}"#)
            .expect("json"),
        None,
    )
    .expect("valid");
    let body = FetchedBody {
        status: 200,
        body: br#"{"ok":true}"#.to_vec(),
        truncated: false,
    };
    assert!(evaluate(&api.checks[0], &Deliverable::default(), Some(&body)).passed);
    let not_json = FetchedBody {
        body: b"<html>".to_vec(),
        ..body
    };
    assert!(!evaluate(&api.checks[0], &Deliverable::default(), Some(&not_json)).passed);
}
