//! Verdict status, find and rate limits over HTTP against `umpire serve` and its
//! embedded store (seeded through the store itself before the server starts).

use umpire_blackbox::{Server, TempDir, request, urlencode};
use umpire_core::hash::sha256_hex;
use umpire_core::json::Value;
use umpire_store::VerdictStore;
use umpire_store::sqlite::SqliteStore;
use umpire_store::{VerdictRecord, VerdictStatus};

const SECRET: &str = "vs_4f0c2a9d8e7b6a5f4e3d2c1b0a998877";
const ID: &str = "vrd_0123456789abcdef0123456789abcdef";
const HOOK: &str = "https://hooks.example.com/umpire?x=1&y=é";

fn record(
    id: &str,
    status: VerdictStatus,
    created_at: u64,
    ttl: u64,
    webhook: Option<&str>,
) -> VerdictRecord {
    VerdictRecord {
        verdict_id: id.into(),
        tier: umpire_core::product::Tier::Sworn,
        status,
        document: (status == VerdictStatus::Final)
            .then(|| r#"{"verdict":"pass","verdict_id":"x"}"#.into()),
        preview: Some(r#"{"pass":1,"results":[]}"#.into()),
        secret_hash: sha256_hex(SECRET.as_bytes()),
        spec_hash: "ab".repeat(32),
        webhook_url: webhook.map(str::to_owned),
        created_at,
        expires_at: created_at + ttl,
        webhook_outcome: None,
        job_key: None,
        payer: None,
    }
}

async fn seeded(records: Vec<VerdictRecord>) -> TempDir {
    let dir = TempDir::new("seed");
    let store = SqliteStore::open_in(dir.path()).expect("store");
    for r in records {
        store.put_verdict(&r).await.expect("seed");
    }
    dir
}

fn now() -> u64 {
    umpire_host::Clock::system().now()
}

#[tokio::test]
async fn status_answers_only_with_the_secret() {
    let t = now();
    let dir = seeded(vec![
        record(ID, VerdictStatus::Final, t, 90 * 86_400, None),
        record(
            "vrd_ffffffffffffffffffffffffffffffff",
            VerdictStatus::Final,
            t - 100,
            50,
            None,
        ),
    ])
    .await;
    let s = Server::start_in(dir, &[]);
    let bearer = format!("Bearer {SECRET}");
    let r = request(
        s.addr,
        "GET",
        &format!("/v1/verdicts/{ID}"),
        &[("Authorization", &bearer)],
        None,
    );
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.header("cache-control"), Some("no-store"));
    let v = r.json();
    assert_eq!(v.get("status").and_then(Value::as_str), Some("final"));
    assert_eq!(
        v.get("document")
            .and_then(|d| d.get("verdict"))
            .and_then(Value::as_str),
        Some("pass")
    );
    assert!(!String::from_utf8_lossy(&r.body).contains(&sha256_hex(SECRET.as_bytes())));

    let by_query = s.get(&format!("/v1/verdicts/{ID}?secret={}", urlencode(SECRET)));
    assert_eq!(by_query.status, 200);

    // Wrong secret, unknown id, expired verdict: one and the same answer.
    let wrong = request(
        s.addr,
        "GET",
        &format!("/v1/verdicts/{ID}"),
        &[("Authorization", "Bearer vs_wrong")],
        None,
    );
    let unknown = request(
        s.addr,
        "GET",
        "/v1/verdicts/vrd_00000000000000000000000000000000",
        &[("Authorization", &bearer)],
        None,
    );
    let expired = request(
        s.addr,
        "GET",
        "/v1/verdicts/vrd_ffffffffffffffffffffffffffffffff",
        &[("Authorization", &bearer)],
        None,
    );
    for r in [&wrong, &unknown, &expired] {
        assert_eq!((r.status, r.error_code().as_str()), (404, "not_found"));
    }
    assert_eq!(wrong.body, unknown.body);
    assert_eq!(wrong.body, expired.body);

    let missing = s.get(&format!("/v1/verdicts/{ID}"));
    assert_eq!(
        (missing.status, missing.error_code().as_str()),
        (422, "invalid_request")
    );
}

#[tokio::test]
async fn status_shows_pending_with_its_preview() {
    let dir = seeded(vec![record(
        ID,
        VerdictStatus::Pending,
        now(),
        3600,
        Some(HOOK),
    )])
    .await;
    let s = Server::start_in(dir, &[]);
    let v = s.get(&format!("/v1/verdicts/{ID}?secret={SECRET}")).json();
    assert_eq!(v.get("status").and_then(Value::as_str), Some("pending"));
    assert_eq!(v.get("document"), Some(&Value::Null));
    assert_eq!(
        v.get("preview").and_then(|p| p.get("pass")),
        Some(&Value::from(1u64))
    );
}

#[tokio::test]
async fn find_recovers_sworn_ids_by_exact_match() {
    let t = now();
    let dir = seeded(vec![
        record(ID, VerdictStatus::Pending, t, 3600, Some(HOOK)),
        record(
            "vrd_11111111111111111111111111111111",
            VerdictStatus::Final,
            t + 1,
            3600,
            Some(HOOK),
        ),
        record(
            "vrd_22222222222222222222222222222222",
            VerdictStatus::Final,
            t,
            3600,
            Some("https://hooks.example.com/other"),
        ),
    ])
    .await;
    let s = Server::start_in(dir, &[]);
    let spec_hash = "ab".repeat(32);
    let r = s.get(&format!(
        "/v1/find?spec_hash={spec_hash}&webhook={}",
        urlencode(HOOK)
    ));
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let v = r.json();
    let ids: Vec<&str> = v
        .get("verdict_ids")
        .and_then(Value::as_array)
        .expect("ids")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(ids, vec![ID, "vrd_11111111111111111111111111111111"]);
    assert!(!String::from_utf8_lossy(&r.body).contains(&sha256_hex(SECRET.as_bytes())));
    let none = s.get(&format!(
        "/v1/find?spec_hash={spec_hash}&webhook={}",
        urlencode("https://hooks.example.com/")
    ));
    assert_eq!(none.json().get("verdict_ids"), Some(&Value::Array(vec![])));
    let bad = s.get("/v1/find?spec_hash=xyz&webhook=https%3A%2F%2Fa.example");
    assert_eq!(
        (bad.status, bad.error_code().as_str()),
        (422, "invalid_request")
    );
    let missing = s.get(&format!("/v1/find?spec_hash={spec_hash}"));
    assert_eq!(
        (missing.status, missing.error_code().as_str()),
        (422, "invalid_request")
    );
}

/// The window the test counts in; the contract's is a minute (the default).
const WINDOW_MS: u64 = 2000;

/// Waits for the start of a fresh window (at most one window), so a burst stays inside it.
fn start_of_fresh_window() {
    let into = umpire_host::Clock::system().now_ms() % WINDOW_MS;
    std::thread::sleep(std::time::Duration::from_millis(WINDOW_MS - into));
}

#[test]
fn free_routes_are_rate_limited_per_ip() {
    let s = Server::start_in(
        TempDir::new("limits"),
        &[
            ("UMPIRE_RATE_LIMITS", "on"),
            ("UMPIRE_RATE_LIMIT_VALIDATE", "3"),
            ("UMPIRE_RATE_LIMIT_FIND", "2"),
            ("UMPIRE_RATE_LIMIT_WINDOW_MS", "2000"),
        ],
    );
    start_of_fresh_window();
    let body = r#"{"tier":"basic","spec":{"checks":[{"type":"length","min":1}]}}"#;
    for i in 0..3 {
        assert_eq!(s.validate(body).status, 200, "request {i}");
    }
    let limited = s.validate(body);
    assert_eq!(
        (limited.status, limited.error_code().as_str()),
        (429, "rate_limited")
    );
    let retry: u64 = limited
        .header("retry-after")
        .and_then(|v| v.parse().ok())
        .expect("Retry-After");
    assert!(
        (1..=2).contains(&retry),
        "Retry-After {retry}: the rest of a 2 s window, rounded up"
    );
    // Other buckets and unlimited routes are unaffected.
    assert_eq!(s.get("/v1/quote").status, 200);
    for _ in 0..10 {
        assert_eq!(s.get("/healthz").status, 200);
    }
    let q = format!(
        "/v1/find?spec_hash={}&webhook=https%3A%2F%2Fa.example",
        "ab".repeat(32)
    );
    assert_eq!(s.get(&q).status, 200);
    assert_eq!(s.get(&q).status, 200);
    assert_eq!(s.get(&q).status, 429);
    // The next window counts afresh.
    start_of_fresh_window();
    assert_eq!(s.validate(body).status, 200);
    assert_eq!(s.get(&q).status, 200);
}

#[test]
fn rate_limits_can_be_switched_off() {
    let s = Server::start_in(
        TempDir::new("nolimits"),
        &[("UMPIRE_RATE_LIMIT_VALIDATE", "1")],
    );
    let body = r#"{"tier":"basic","spec":{"checks":[{"type":"length","min":1}]}}"#;
    for _ in 0..40 {
        assert_eq!(s.validate(body).status, 200);
    }
}
