//! The free endpoints over real HTTP against a spawned `umpire serve`.

use umpire_blackbox::{Server, request};
use umpire_core::json::Value;

const GOOD_SPEC: &str = r###"{"checks":[{"type":"regex","pattern":"## Conclusion"},{"type":"length","unit":"words","min":3,"max":5000},{"type":"json_path","path":"result.items[0].price","op":"lte","value":100}]}"###;

fn problems(v: &Value) -> Vec<(String, String)> {
    v.get("problems")
        .and_then(Value::as_array)
        .expect("problems array")
        .iter()
        .map(|p| {
            (
                p.get("where")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_owned(),
                p.get("code")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_owned(),
            )
        })
        .collect()
}

#[test]
fn validate_reports_a_good_spec_with_its_hash() {
    let s = Server::start();
    let r = s.post_json(
        "/v1/validate",
        &format!(r#"{{"tier":"basic","spec":{GOOD_SPEC},"deliverable":{{"text":"one two three\n## Conclusion","json":{{"result":{{"items":[{{"price":99}}]}}}}}}}}"#),
    );
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let v = r.json();
    assert_eq!(v.get("valid"), Some(&Value::Bool(true)));
    assert_eq!(v.get("fetched"), Some(&Value::Bool(false)));
    let normalized = v.get("normalized_spec").expect("normalized spec");
    let hash = umpire_core::hash::sha256_hex(&normalized.to_canonical_vec());
    assert_eq!(
        v.get("spec_hash").and_then(Value::as_str),
        Some(hash.as_str())
    );
    assert_eq!(
        v.get("price")
            .and_then(|p| p.get("usd"))
            .and_then(Value::as_str),
        Some("1.00")
    );
}

#[test]
fn validate_lists_every_problem_at_once() {
    // Fixed DNS answers (no network here): one public, one private.
    let s = Server::start_with(&[(
        "UMPIRE_TEST_FETCH_HOSTS",
        "example.org=93.184.215.14,example.net=10.0.0.9",
    )]);
    let r = s.post_json(
        "/v1/validate",
        r#"{"tier":"probe","spec":{"checks":[
            {"type":"regex","pattern":"^(\\w+\\s?)*$"},
            {"type":"url_probe","url":"http://2130706433/"},
            {"type":"url_probe","url":"https://example.com:22/"},
            {"type":"content_hash","sha256":"abc","target":"url","url":"ftp://example.com/x"},
            {"type":"json_path","path":"a","op":"between","value":1},
            {"type":"length"},
            {"type":"url_probe","url":"https://example.org/"},
            {"type":"url_probe","url":"https://example.net/health","expect":{"status":204}}
        ]},"deliverable":{"text":"x"},"colour":"red"}"#,
    );
    assert_eq!(r.status, 200);
    let v = r.json();
    assert_eq!(v.get("valid"), Some(&Value::Bool(false)));
    let got = problems(&v);
    for want in [
        ("colour", "unknown_field"),
        ("checks[0].pattern", "catastrophic_backtracking"),
        ("checks[1].url", "blocked_host"),
        ("checks[2].url", "blocked_port"),
        ("checks[3].sha256", "invalid_value"),
        ("checks[4].op", "invalid_value"),
        ("checks[5]", "missing_field"),
        ("checks", "too_many_network_checks"),
        ("checks[7].url", "blocked_host"),
    ] {
        assert!(
            got.contains(&(want.0.to_owned(), want.1.to_owned())),
            "missing {want:?} in {got:?}"
        );
    }
    // Every problem carries a message and a hint that says what to change.
    for p in v
        .get("problems")
        .and_then(Value::as_array)
        .expect("problems")
    {
        for f in ["message", "hint"] {
            assert!(
                p.get(f)
                    .and_then(Value::as_str)
                    .is_some_and(|s| !s.is_empty())
            );
        }
    }
    let urls = v.get("urls").and_then(Value::as_array).expect("urls");
    let verdicts: Vec<&str> = urls
        .iter()
        .filter_map(|u| u.get("policy").and_then(Value::as_str))
        .collect();
    assert_eq!(
        verdicts,
        vec!["blocked_host", "blocked_port", "allowed", "blocked_host"],
        "example.net resolves to a private address: refused at validation"
    );
}

#[test]
fn validate_reports_names_that_do_not_resolve() {
    let s = Server::start();
    let r = s.post_json(
        "/v1/validate",
        r#"{"tier":"witness","spec":{"checks":[{"type":"url_probe","url":"https://no-such-host.invalid/"}]}}"#,
    );
    let v = r.json();
    assert_eq!(v.get("valid"), Some(&Value::Bool(false)));
    assert!(problems(&v).contains(&("checks[0].url".to_owned(), "dns_failure".to_owned())));
    // A purchase of the same is refused before payment with the URL-policy code.
    let r = s.post_json(
        "/v1/verdicts/witness",
        r#"{"spec":{"checks":[{"type":"url_probe","url":"https://no-such-host.invalid/"}]},"deliverable":{"text":"x"}}"#,
    );
    assert_eq!(r.status, 422);
    assert_eq!(r.error_code(), "dns_failure");
}

#[test]
fn validate_checks_the_deliverable_against_the_spec() {
    let s = Server::start();
    let r = s.post_json(
        "/v1/validate",
        r#"{"tier":"basic","spec":{"checks":[{"type":"json_schema","schema":{"type":"object"}}]},"deliverable":{"text":"no json here"}}"#,
    );
    assert_eq!(
        problems(&r.json()),
        vec![(
            "deliverable.json".to_owned(),
            "deliverable_missing_json".to_owned()
        )]
    );
}

#[test]
fn validate_refusals_use_the_contract_codes() {
    let s = Server::start();
    let r = s.validate(r#"{"tier":"basic","spec":"#);
    assert_eq!((r.status, r.error_code().as_str()), (400, "invalid_json"));
    let r = s.post_json(
        "/v1/validate",
        r#"{"tier":"basic","spec":{"checks":[{"type":"length","min":1E400}]}}"#,
    );
    assert_eq!((r.status, r.error_code().as_str()), (400, "invalid_json"));
    let r = s.validate(r#"{"tier":"gold","spec":{}}"#);
    assert_eq!((r.status, r.error_code().as_str()), (404, "unknown_tier"));
    let r = s.validate(r#"["basic"]"#);
    assert_eq!(
        (r.status, r.error_code().as_str()),
        (422, "invalid_request")
    );
    let r = s.validate(r#"{"spec":{}}"#);
    assert_eq!(
        (r.status, r.error_code().as_str()),
        (422, "invalid_request")
    );
    let r = s.validate("");
    assert_eq!((r.status, r.error_code().as_str()), (400, "invalid_json"));
    let huge = format!(
        r#"{{"tier":"basic","spec":{{}},"deliverable":{{"text":"{}"}}}}"#,
        "a".repeat(2 << 20)
    );
    let r = s.validate(&huge);
    assert_eq!(
        (r.status, r.error_code().as_str()),
        (413, "payload_too_large")
    );
    let big_text = format!(
        r#"{{"tier":"basic","spec":{GOOD_SPEC},"deliverable":{{"text":"{}"}}}}"#,
        "a".repeat(205_000)
    );
    let r = s.validate(&big_text);
    assert!(
        problems(&r.json()).contains(&("deliverable.text".to_owned(), "text_too_large".to_owned()))
    );
    // Every error body has the contract's shape.
    let body = s.validate("{").json();
    let e = body.get("error").expect("error object");
    for f in ["code", "message", "hint", "docs"] {
        assert!(
            e.get(f)
                .and_then(Value::as_str)
                .is_some_and(|s| !s.is_empty()),
            "{f}"
        );
    }
}

#[test]
fn routing_answers_unknown_paths_and_methods() {
    let s = Server::start();
    let r = s.get("/v1/nothing");
    assert_eq!((r.status, r.error_code().as_str()), (404, "not_found"));
    let r = s.get("/v1/validate");
    assert_eq!(
        (r.status, r.error_code().as_str()),
        (405, "method_not_allowed")
    );
    assert_eq!(r.header("allow"), Some("POST"));
}

#[test]
fn quote_health_and_key_document() {
    let s = Server::start();
    let q = s.get("/v1/quote");
    assert_eq!(q.status, 200);
    let q = q.json();
    let tiers: Vec<(String, String)> = q
        .get("tiers")
        .and_then(Value::as_array)
        .expect("tiers")
        .iter()
        .map(|t| {
            (
                t.get("tier")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_owned(),
                t.get("usdc_units")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_owned(),
            )
        })
        .collect();
    assert_eq!(
        tiers,
        [
            ("witness", "250000"),
            ("basic", "1000000"),
            ("probe", "2000000"),
            ("sworn", "5000000")
        ]
        .map(|(a, b)| (a.to_owned(), b.to_owned()))
    );
    let h = s.get("/healthz");
    assert_eq!(h.status, 200);
    assert_eq!(h.json().get("status").and_then(Value::as_str), Some("ok"));
    let k = s.get("/.well-known/umpire-key.json");
    assert_eq!(k.status, 200);
    let keys = umpire_core::signer::keys_from_document(&k.json());
    assert_eq!(keys.len(), 1);
    assert_eq!(
        Some(keys[0].key_id.as_str()),
        h.json().get("key_id").and_then(Value::as_str)
    );
    // HEAD works on GET routes.
    let head = request(s.addr, "HEAD", "/healthz", &[], None);
    assert_eq!(head.status, 200);
    assert!(head.body.is_empty());
}

#[test]
fn the_key_survives_a_restart_of_the_same_data_dir() {
    let s = Server::start();
    let first = s.get("/healthz").json();
    let dir = s.data.path().to_owned();
    let again = std::process::Command::new(umpire_blackbox::umpire_bin())
        .args([
            "judge",
            "--spec",
            "/dev/null",
            "--deliverable",
            "/dev/null",
            "--data-dir",
        ])
        .arg(&dir)
        .output()
        .expect("run");
    // The judge refuses empty files, but must not have replaced the key.
    assert_eq!(again.status.code(), Some(2));
    let key_file = std::fs::read(dir.join("signing-key.json")).expect("key file");
    let key = umpire_core::json::parse(&key_file).expect("json");
    assert_eq!(key.get("key_id"), first.get("key_id"));
}

#[test]
fn quote_lists_the_configured_rails_in_preference_order() {
    let s = Server::start_with(&[
        (
            "UMPIRE_EVM_PAY_TO",
            "0x1111111111111111111111111111111111111111",
        ),
        (
            "UMPIRE_SOLANA_PAY_TO",
            "9WzDXwBbmkg8ZTbNMqUxvQRAyrZzDsGYdLVL9zYtAWWM",
        ),
        (
            "UMPIRE_SOLANA_FEE_PAYER",
            "2wKupLR9q6wXYppw8Gr2NvWxKBUqm4PPJKkQfoxHDBg4",
        ),
        // Rails need someone to settle them; the facilitator is not called by a quote.
        ("UMPIRE_FACILITATOR_URL", "http://127.0.0.1:9"),
    ]);
    let q = s.get("/v1/quote").json();
    let rails = q
        .get("payment")
        .and_then(|p| p.get("rails"))
        .and_then(Value::as_array)
        .expect("rails");
    let networks: Vec<&str> = rails
        .iter()
        .filter_map(|r| r.get("network").and_then(Value::as_str))
        .collect();
    assert_eq!(
        networks,
        vec!["eip155:8453", "solana:5eykt4UsFv8P8NJdTREpY1vzqKqZKvdp"]
    );
    assert_eq!(
        rails[0].get("asset").and_then(Value::as_str),
        Some("0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913")
    );
}

#[test]
fn bad_payment_configuration_stops_the_server_with_its_name() {
    let (code, _, stderr) = umpire_blackbox::run_umpire(
        &[
            "serve",
            "--addr",
            "127.0.0.1:0",
            "--data-dir",
            umpire_blackbox::TempDir::new("badcfg")
                .path()
                .to_str()
                .expect("p"),
        ],
        &[("UMPIRE_EVM_PAY_TO", "0x123")],
    );
    assert_eq!(code, 2);
    assert!(stderr.contains("UMPIRE_EVM_PAY_TO"), "{stderr}");
}

#[test]
fn a_rail_nobody_can_settle_stops_the_server_at_start() {
    let data = umpire_blackbox::TempDir::new("no-settlement");
    let (code, _, stderr) = umpire_blackbox::run_umpire(
        &[
            "serve",
            "--addr",
            "127.0.0.1:0",
            "--data-dir",
            data.path().to_str().expect("path"),
        ],
        &[(
            "UMPIRE_EVM_PAY_TO",
            "0x1111111111111111111111111111111111111111",
        )],
    );
    assert_ne!(
        code, 0,
        "a server that asks for money it cannot take must not start"
    );
    assert!(stderr.contains("UMPIRE_EVM_RPC_URL"), "{stderr}");
}
