//! Every Lambda handler invoked with API Gateway HTTP API (payload v2) events, the
//! way the Lambda runtime hands them over.

use umpire_api::{AppState, ClientIp, Config, Route};
use umpire_core::json::{Value, parse};
use umpire_core::signer::{LocalSigner, Signer};

fn state() -> AppState {
    AppState::new(
        Config::default(),
        std::sync::Arc::new(LocalSigner::from_seed([3u8; 32])),
        std::sync::Arc::new(umpire_store::sqlite::SqliteStore::in_memory().expect("store")),
    )
}

/// An API Gateway HTTP API (payload v2) event from `tests/fixtures/`.
fn event(fixture: &str) -> lambda_http::Request {
    let path = umpire_blackbox::crate_dir()
        .join("tests/fixtures")
        .join(fixture);
    let text = std::fs::read_to_string(&path).expect("fixture exists");
    lambda_http::request::from_str(&text).expect("a valid API Gateway v2 event")
}

async fn invoke(route: Route, fixture: &str) -> (u16, Value, http::HeaderMap) {
    invoke_with(&state(), route, fixture).await
}

async fn invoke_with(
    state: &AppState,
    route: Route,
    fixture: &str,
) -> (u16, Value, http::HeaderMap) {
    let req = event(fixture);
    let resp = umpire_functions::invoke(state, route, req).await;
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let body = match resp.body() {
        lambda_http::Body::Text(t) => t.as_bytes().to_vec(),
        lambda_http::Body::Binary(b) => b.clone(),
        _ => Vec::new(),
    };
    (status, parse(&body).expect("JSON response"), headers)
}

fn s<'a>(v: &'a Value, path: &[&str]) -> Option<&'a str> {
    let mut cur = v;
    for p in path {
        cur = cur.get(p)?;
    }
    cur.as_str()
}

#[tokio::test]
async fn validate_accepts_a_good_spec() {
    let (status, body, headers) = invoke(Route::Validate, "validate_ok.json").await;
    assert_eq!(status, 200);
    assert_eq!(body.get("valid"), Some(&Value::Bool(true)));
    assert_eq!(s(&body, &["spec_hash"]).map(str::len), Some(64));
    assert!(s(&body, &["deliverable_hash"]).is_some());
    assert_eq!(
        headers.get("content-type").and_then(|v| v.to_str().ok()),
        Some("application/json; charset=utf-8")
    );
}

#[tokio::test]
async fn validate_reads_base64_bodies() {
    let (status, body, _) = invoke(Route::Validate, "validate_base64.json").await;
    assert_eq!(status, 200);
    assert_eq!(body.get("valid"), Some(&Value::Bool(true)));
}

#[tokio::test]
async fn validate_lists_problems_and_url_verdicts() {
    let (status, body, _) = invoke(Route::Validate, "validate_problems.json").await;
    assert_eq!(status, 200);
    assert_eq!(body.get("valid"), Some(&Value::Bool(false)));
    let codes: Vec<&str> = body
        .get("problems")
        .and_then(Value::as_array)
        .expect("problems")
        .iter()
        .filter_map(|p| p.get("code").and_then(Value::as_str))
        .collect();
    assert_eq!(
        codes,
        vec![
            "catastrophic_backtracking",
            "check_not_allowed",
            "blocked_host"
        ]
    );
}

#[tokio::test]
async fn validate_errors_have_the_contract_shape() {
    let (status, body, headers) = invoke(Route::Validate, "validate_bad_json.json").await;
    assert_eq!(status, 400);
    assert_eq!(s(&body, &["error", "code"]), Some("invalid_json"));
    for field in ["message", "hint", "docs"] {
        assert!(
            s(&body, &["error", field]).is_some_and(|v| !v.is_empty()),
            "{field}"
        );
    }
    assert_eq!(
        headers.get("cache-control").and_then(|v| v.to_str().ok()),
        Some("no-store")
    );
    let (status, body, _) = invoke(Route::Validate, "validate_unknown_tier.json").await;
    assert_eq!(status, 404);
    assert_eq!(s(&body, &["error", "code"]), Some("unknown_tier"));
}

#[tokio::test]
async fn quote_health_and_key() {
    let (status, body, _) = invoke(Route::Quote, "quote.json").await;
    assert_eq!(status, 200);
    let tiers = body.get("tiers").and_then(Value::as_array).expect("tiers");
    let prices: Vec<(&str, &str)> = tiers
        .iter()
        .filter_map(|t| Some((t.get("tier")?.as_str()?, t.get("price_usd")?.as_str()?)))
        .collect();
    assert_eq!(
        prices,
        vec![
            ("witness", "0.25"),
            ("basic", "1.00"),
            ("probe", "2.00"),
            ("sworn", "5.00")
        ]
    );
    assert_eq!(s(&body, &["reputation", "price_usd"]), Some("0.01"));

    let (status, body, _) = invoke(Route::Health, "health.json").await;
    assert_eq!(status, 200);
    assert_eq!(s(&body, &["status"]), Some("ok"));

    let (status, body, _) = invoke(Route::Key, "key.json").await;
    assert_eq!(status, 200);
    let signer = LocalSigner::from_seed([3u8; 32]);
    let keys = body.get("keys").and_then(Value::as_array).expect("keys");
    assert_eq!(
        keys[0].get("key_id").and_then(Value::as_str),
        Some(signer.key_id())
    );
    assert_eq!(
        keys[0].get("public_key_hex").and_then(Value::as_str),
        Some(hex_of(&signer.public_key()).as_str())
    );
}

fn hex_of(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[tokio::test]
async fn the_client_ip_comes_from_the_request_context_not_headers() {
    let req = event("health.json");
    assert_eq!(
        umpire_functions::client_ip(&req),
        Some(ClientIp("203.0.113.7".parse().expect("ip")))
    );
}

#[tokio::test]
async fn status_and_find_read_path_query_and_bearer_from_the_event() {
    use umpire_store::{VerdictRecord, VerdictStatus};
    let state = state();
    let now = umpire_host::Clock::system().now();
    state
        .store
        .put_verdict(&VerdictRecord {
            verdict_id: "vrd_0123456789abcdef0123456789abcdef".into(),
            tier: umpire_core::product::Tier::Sworn,
            status: VerdictStatus::Pending,
            document: None,
            preview: Some("{\"pass\":1}".into()),
            secret_hash: umpire_core::hash::sha256_hex(b"vs_fixture-secret-0001"),
            spec_hash: "ab".repeat(32),
            webhook_url: Some("https://hooks.example.com/u?a=1".into()),
            created_at: now,
            expires_at: now + 3600,
            webhook_outcome: None,
            job_key: None,
            payer: None,
        })
        .await
        .expect("seed");
    let (status, body, _) = invoke_with(&state, Route::Status, "status.json").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(s(&body, &["status"]), Some("pending"));
    let (status, body, _) = invoke_with(&state, Route::Find, "find.json").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body.get("verdict_ids"),
        Some(&Value::from(vec!["vrd_0123456789abcdef0123456789abcdef"]))
    );
}

#[tokio::test]
async fn the_paid_and_feedback_routes_read_their_events() {
    // A purchase with a broken spec: refused with problems before any payment.
    let (status, body, _) = invoke(Route::Buy, "buy_invalid.json").await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(s(&body, &["error", "code"]), Some("invalid_spec"), "{body}");
    // Feedback with chain reading off: 503 receipts_off, nothing stored.
    let (status, body, _) = invoke(Route::Feedback, "feedback.json").await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(s(&body, &["error", "code"]), Some("receipts_off"));
    // A reputation report from a function with no payment rail: 503, nothing charged.
    let (status, body, _) = invoke(Route::Reputation, "reputation.json").await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(s(&body, &["error", "code"]), Some("unavailable"));
}

/// The functions built without a store (Role::stores) hold only the configuration and
/// the published keys, and serve their routes from those alone.
#[tokio::test]
async fn the_static_routes_answer_without_a_store() {
    use umpire_functions::{Function, Role, fns, invoke_function};
    let published = umpire_api::Published {
        config: Config::default(),
        signer: std::sync::Arc::new(LocalSigner::from_seed([3u8; 32])),
        retired_keys: Vec::new(),
        next_key: None,
    };
    async fn status<F: Function<State = umpire_api::Published>>(
        state: &umpire_api::Published,
    ) -> u16 {
        invoke_function::<F>(state, event("health.json"))
            .await
            .status()
            .as_u16()
    }
    for route in [Route::Health, Route::Key, Route::OpenApi, Route::VerifyPage] {
        assert!(!Role::Api(route).stores(), "{route:?}");
    }
    assert_eq!(status::<fns::Health>(&published).await, 200);
    assert_eq!(status::<fns::Key>(&published).await, 200);
    assert_eq!(status::<fns::OpenApi>(&published).await, 200);
    assert_eq!(status::<fns::VerifyPage>(&published).await, 200);
    assert!(Role::Api(Route::Status).stores());
}
