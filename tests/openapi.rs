//! `GET /openapi.json` stays true: every route is described, real responses of the
//! running server validate against the documented schema for their status, and
//! schemathesis (PyPI) fuzzing `umpire serve` from that description finds no server
//! error, no undocumented status and no response that breaks the schema.

use std::process::Command;

use serde_json::Value as Json;
use umpire_blackbox::chain::{Devnet, Settlement};
use umpire_blackbox::{Server, python, request};

fn description(server: &Server) -> Json {
    let r = server.get("/openapi.json");
    assert_eq!(r.status, 200);
    assert!(
        r.header("content-type")
            .is_some_and(|c| c.starts_with("application/json"))
    );
    serde_json::from_slice(&r.body).expect("the description is JSON")
}

/// The schema documented for `method path` answering `status`, with the components
/// beside it so `$ref`s resolve; None when the description has no body for it.
fn documented(spec: &Json, method: &str, template: &str, status: u16) -> Option<Json> {
    let op = &spec["paths"][template][method.to_lowercase()];
    assert!(op.is_object(), "{method} {template} is not described");
    let response = &op["responses"][status.to_string()];
    assert!(
        response.is_object(),
        "{method} {template} answered {status}, which the description does not list"
    );
    let schema = response["content"]["application/json"]["schema"].clone();
    if schema.is_null() {
        return None;
    }
    let mut full = schema;
    full["components"] = spec["components"].clone();
    Some(full)
}

/// (method, path, described path, headers, body).
type Case<'a> = (
    &'a str,
    &'a str,
    &'a str,
    &'a [(&'a str, &'a str)],
    Option<&'a [u8]>,
);

#[test]
fn every_route_is_described_and_real_answers_match_their_schemas() {
    let server = Server::start_with(&[
        (
            "UMPIRE_EVM_PAY_TO",
            "0x1111111111111111111111111111111111111111",
        ),
        ("UMPIRE_FACILITATOR_URL", "http://127.0.0.1:9/"),
    ]);
    let spec = description(&server);
    assert_eq!(spec["openapi"], "3.1.0");
    // The contract's enums are spelled out in the description: they must be ours.
    let tiers: Vec<&str> = umpire_core::product::Tier::ALL
        .iter()
        .map(|t| t.as_str())
        .collect();
    assert_eq!(
        spec["paths"]["/v1/verdicts/{tier}"]["post"]["parameters"][0]["schema"]["enum"],
        serde_json::json!(tiers)
    );
    assert_eq!(
        spec["components"]["schemas"]["Spec"]["properties"]["checks"]["items"]["properties"]["type"]
            ["enum"],
        serde_json::json!(umpire_core::spec::CHECK_TYPES)
    );
    for (method, path, _) in umpire_api::plumbing::routes::TABLE {
        assert!(
            spec["paths"][*path][method.to_lowercase()].is_object(),
            "{method} {path} is served but not described"
        );
    }

    let json = [("Content-Type", "application/json")];
    let idem = [
        ("Content-Type", "application/json"),
        ("Idempotency-Key", "openapi-test-key-0001"),
    ];
    let purchase = br#"{"spec":{"checks":[{"type":"length","min":1}]},"deliverable":{"text":"x"}}"#;
    let cases: Vec<Case> = vec![
        ("GET", "/healthz", "/healthz", &[], None),
        (
            "GET",
            "/.well-known/umpire-key.json",
            "/.well-known/umpire-key.json",
            &[],
            None,
        ),
        ("GET", "/v1/quote", "/v1/quote", &[], None),
        (
            "POST",
            "/v1/validate",
            "/v1/validate",
            &json,
            Some(br#"{"tier":"basic","spec":{"checks":[{"type":"length","min":1}]}}"#),
        ),
        (
            "POST",
            "/v1/validate",
            "/v1/validate",
            &json,
            Some(br#"{"tier":"basic","spec":{"checks":[{"type":"regex","pattern":"(a"}]}}"#),
        ),
        (
            "POST",
            "/v1/validate",
            "/v1/validate",
            &json,
            Some(b"{not json"),
        ),
        (
            "POST",
            "/v1/validate",
            "/v1/validate",
            &json,
            Some(br#"{"tier":"gold","spec":{}}"#),
        ),
        (
            "POST",
            "/v1/verdicts/basic",
            "/v1/verdicts/{tier}",
            &idem,
            Some(purchase),
        ),
        (
            "POST",
            "/v1/verdicts/basic",
            "/v1/verdicts/{tier}",
            &idem,
            Some(br#"{"spec":{"checks":[]},"deliverable":{"text":"x"}}"#),
        ),
        (
            "GET",
            "/v1/verdicts/vrd_0123456789abcdef0123456789abcdef?secret=vs_x",
            "/v1/verdicts/{id}",
            &[],
            None,
        ),
        (
            "GET",
            "/v1/verdicts/vrd_0123456789abcdef0123456789abcdef",
            "/v1/verdicts/{id}",
            &[],
            None,
        ),
        (
            "GET",
            "/v1/find?spec_hash=abababababababababababababababababababababababababababababababab&webhook=https%3A%2F%2Fh.example.com%2F",
            "/v1/find",
            &[],
            None,
        ),
        ("GET", "/v1/find", "/v1/find", &[], None),
        ("POST", "/v1/feedback", "/v1/feedback", &json, Some(b"{}")),
        (
            "GET",
            "/v1/reputation?merchant=0x1111111111111111111111111111111111111111",
            "/v1/reputation",
            &[],
            None,
        ),
        (
            "GET",
            "/v1/reputation?merchant=nope",
            "/v1/reputation",
            &[],
            None,
        ),
        (
            "POST",
            "/mcp",
            "/mcp",
            &json,
            Some(br#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#),
        ),
        (
            "POST",
            "/mcp",
            "/mcp",
            &json,
            Some(br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#),
        ),
    ];
    let mut statuses = std::collections::BTreeSet::new();
    for (method, path, template, headers, body) in cases {
        let r = request(server.addr, method, path, headers, body);
        statuses.insert(r.status);
        let Some(schema) = documented(&spec, method, template, r.status) else {
            continue;
        };
        let validator = jsonschema::validator_for(&schema).unwrap_or_else(|e| {
            panic!(
                "the schema for {method} {template} {} is not valid: {e}",
                r.status
            )
        });
        let instance: Json = serde_json::from_slice(&r.body).expect("a JSON answer");
        let errors: Vec<String> = validator
            .iter_errors(&instance)
            .map(|e| e.to_string())
            .collect();
        assert!(
            errors.is_empty(),
            "{method} {path} -> {}: {errors:?}\n{instance}",
            r.status
        );
    }
    // The cases reach successes, payment, refusals and protocol answers alike.
    for s in [200, 202, 400, 402, 404, 422] {
        assert!(statuses.contains(&s), "no case answered {s}: {statuses:?}");
    }
}

/// docs/api.md's status answer, whole: a final verdict (a real signed document, as
/// `umpire judge` signs it) and a pending sworn one (its preview as pass 1 writes it),
/// seeded into the embedded store and read with their secret, each validate against
/// the description's `200` schema and carry `tier`, `created_at` and `expires_at`.
/// Would catch: a status field renamed, dropped or retyped, which no other test reads
/// against the contract (they compare documents).
#[tokio::test]
async fn a_status_answer_matches_its_schema_final_and_pending() {
    use umpire_store::VerdictStore as _;
    const SECRET: &str = "vs_00112233445566778899aabbccddeeff";
    let dir = umpire_blackbox::TempDir::new("status-schema");
    let spec_file = dir.write(
        "spec.json",
        br##"{"checks":[{"type":"regex","pattern":"^# Report"}]}"##,
    );
    let deliverable = dir.write("deliverable.json", br##"{"text":"# Report\nall green"}"##);
    let judged = Command::new(umpire_blackbox::umpire_bin())
        .arg("judge")
        .arg("--spec")
        .arg(&spec_file)
        .arg("--deliverable")
        .arg(&deliverable)
        .arg("--data-dir")
        .arg(dir.path())
        .output()
        .expect("umpire judge");
    assert!(
        judged.status.success(),
        "{}",
        String::from_utf8_lossy(&judged.stderr)
    );
    let document = String::from_utf8(judged.stdout).expect("utf-8");
    let now = umpire_host::Clock::system().now();
    let record = |id: &str, tier, status, document: Option<String>, preview: Option<String>| {
        umpire_store::VerdictRecord {
            verdict_id: id.into(),
            tier,
            status,
            document,
            preview,
            secret_hash: umpire_api::checkout::secret::check_of(SECRET),
            spec_hash: "ab".repeat(32),
            webhook_url: None,
            created_at: now,
            expires_at: now + 90 * 86_400,
            webhook_outcome: None,
            job_key: None,
            payer: None,
        }
    };
    let final_id = "vrd_0123456789abcdef0123456789abcdef";
    let pending_id = "vrd_fedcba9876543210fedcba9876543210";
    let preview = umpire_api::products::verdict::sworn::preview(&[], now + 60);
    {
        let store = umpire_store::sqlite::SqliteStore::open_in(dir.path()).expect("store");
        store
            .put_verdict(&record(
                final_id,
                umpire_core::product::Tier::Basic,
                umpire_store::VerdictStatus::Final,
                Some(document.trim().to_owned()),
                None,
            ))
            .await
            .expect("seed");
        store
            .put_verdict(&record(
                pending_id,
                umpire_core::product::Tier::Sworn,
                umpire_store::VerdictStatus::Pending,
                None,
                Some(String::from_utf8_lossy(&preview.to_canonical_vec()).into_owned()),
            ))
            .await
            .expect("seed");
    }
    let server = Server::start_in(dir, &[]);
    let spec = description(&server);
    let schema = documented(&spec, "GET", "/v1/verdicts/{id}", 200).expect("a 200 schema");
    let validator = jsonschema::validator_for(&schema).expect("a valid schema");
    let bearer = format!("Bearer {SECRET}");
    for (id, tier, status) in [
        (final_id, "basic", "final"),
        (pending_id, "sworn", "pending"),
    ] {
        let r = request(
            server.addr,
            "GET",
            &format!("/v1/verdicts/{id}"),
            &[("Authorization", bearer.as_str())],
            None,
        );
        assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
        let answer: Json = serde_json::from_slice(&r.body).expect("JSON");
        let errors: Vec<String> = validator
            .iter_errors(&answer)
            .map(|e| e.to_string())
            .collect();
        assert!(errors.is_empty(), "{id}: {errors:?}\n{answer}");
        assert_eq!(answer["tier"], tier, "{answer}");
        assert_eq!(answer["status"], status, "{answer}");
        for field in ["created_at", "expires_at"] {
            assert!(
                answer[field]
                    .as_str()
                    .and_then(umpire_core::time::parse_rfc3339)
                    .is_some(),
                "{field}: {answer}"
            );
        }
    }
}

#[test]
fn schemathesis_finds_nothing_wrong() {
    // A devnet behind the rails and the feedback chain, so that every answer a fuzzer
    // can provoke is the API's own (nothing is 503 for lack of configuration).
    let devnet = Devnet::start();
    let mut env = devnet.server_env(Settlement::SelfSettle);
    env.extend(devnet.feedback_env());
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let server = Server::start_with(&env);
    let schemathesis = std::path::Path::new(&python()).with_file_name("schemathesis");
    let out = Command::new(&schemathesis)
        .args(["run", &format!("http://{}/openapi.json", server.addr)])
        .args([
            "--checks",
            "not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance",
            "--max-examples",
            "25",
            "--seed",
            "20261203",
            "--request-timeout",
            "20",
        ])
        .env("SCHEMATHESIS_TELEMETRY", "false")
        .output()
        .unwrap_or_else(|e| panic!("run {} (make test installs it): {e}", schemathesis.display()));
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "schemathesis found problems:\n{report}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(report.contains("passed"), "{report}");
}
