//! Verdict status, find and rate limits over HTTP against `umpire serve` and its
//! embedded store (seeded through the store itself before the server starts).

use umpire_api::plumbing::rate_limits::RateLimits;
use umpire_blackbox::{Reply, Server, TempDir, request, urlencode};
use umpire_core::hash::sha256_hex;
use umpire_core::json::Value;
use umpire_host::Clock;
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

/// A server whose clock is stopped at the start of a minute: its rate-limit windows
/// (the contract's minute) follow that clock, so no test depends on where the wall
/// clock sits in a window; `advance` moves to the next.
fn limited(limits: RateLimits) -> (Server, Clock) {
    // 2027-01-15T08:00:00Z (a multiple of 60,000 ms): the first millisecond of a minute.
    const MINUTE_START_MS: u64 = 1_800_000_000_000;
    const { assert!(MINUTE_START_MS.is_multiple_of(60_000)) };
    let clock = Clock::stopped_at(MINUTE_START_MS);
    let server = Server::in_process_with(
        TempDir::new("limits"),
        umpire_api::Config {
            rate_limits: Some(limits),
            clock: clock.clone(),
            ..umpire_api::Config::default()
        },
    );
    (server, clock)
}

#[test]
fn free_routes_are_rate_limited_per_ip() {
    let (s, clock) = limited(RateLimits::default().with("validate", 3).with("find", 2));
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
    assert_eq!(retry, 60, "Retry-After: the rest of the minute");
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
    // 59 s on, the same minute still refuses, and says 1 s is left.
    clock.advance(59);
    let still = s.validate(body);
    assert_eq!(still.status, 429);
    assert_eq!(still.header("retry-after"), Some("1"));
    // The next minute counts afresh.
    clock.advance(1);
    assert_eq!(s.validate(body).status, 200);
    assert_eq!(s.get(&q).status, 200);
}

/// The contract's default limits, over HTTP, bucket by bucket from one address:
/// quote 120, status 120 (a lookup of an unknown verdict counts like any other),
/// validate 30, find 20, feedback 30 (counted before the body is read), mcp 120 and
/// unpaid 60 (a paid route's request without a payment, counted before its 402), then
/// 429 `rate_limited`; each bucket is counted apart from the others. `replay` (120) is
/// read from the defaults here; payments.rs holds replays to their bucket over HTTP
/// (a replay needs a purchase). Would catch: a default changed in the code and not in
/// the contract, or a route counted in another route's bucket.
#[test]
fn the_contracts_default_limits_hold_for_every_bucket() {
    assert_eq!(RateLimits::default().limit("replay"), Some(120));
    let (s, clock) = limited(RateLimits::default());
    let status = format!("/v1/verdicts/vrd_{}", "0".repeat(32));
    let find = format!(
        "/v1/find?spec_hash={}&webhook=https%3A%2F%2Fa.example",
        "ab".repeat(32)
    );
    let spec = r#"{"tier":"basic","spec":{"checks":[{"type":"length","min":1}]}}"#;
    let purchase = r#"{"spec":{"checks":[{"type":"length","min":1}]},"deliverable":{"text":"x"}}"#;
    let ping = r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#;
    let buckets: [(&str, usize, &dyn Fn() -> Reply); 7] = [
        ("quote", 120, &|| s.get("/v1/quote")),
        ("status", 120, &|| s.get(&status)),
        ("validate", 30, &|| s.validate(spec)),
        ("find", 20, &|| s.get(&find)),
        ("feedback", 30, &|| s.feedback("{}")),
        ("mcp", 120, &|| s.post_json("/mcp", ping)),
        ("unpaid", 60, &|| {
            s.post_json("/v1/verdicts/basic", purchase)
        }),
    ];
    for (bucket, limit, call) in buckets {
        for i in 0..limit {
            let r = call();
            assert_ne!(r.status, 429, "{bucket}: request {} of {limit}", i + 1);
        }
        let over = call();
        assert_eq!(
            (over.status, over.error_code().as_str()),
            (429, "rate_limited"),
            "{bucket}: request {} of {limit}",
            limit + 1
        );
    }
    clock.advance(60);
    assert_eq!(s.get("/v1/quote").status, 200);
}

/// Only the word `off` turns the limits off: any other value of `UMPIRE_RATE_LIMITS`
/// (`yes`, `0`, `false`) keeps them on. Would catch: a switch read as "set means off",
/// where an operator writing `UMPIRE_RATE_LIMITS=on` removes every limit.
#[test]
fn any_value_but_off_keeps_the_limits_on() {
    let body = r#"{"tier":"basic","spec":{"checks":[{"type":"length","min":1}]}}"#;
    for value in ["yes", "0", "false", "OFF"] {
        let s = Server::start_in(
            TempDir::new("limits-on"),
            &[
                ("UMPIRE_RATE_LIMITS", value),
                ("UMPIRE_RATE_LIMIT_VALIDATE", "1"),
            ],
        );
        assert_eq!(s.validate(body).status, 200, "{value}");
        let over = s.validate(body);
        assert_eq!(
            (over.status, over.error_code().as_str()),
            (429, "rate_limited"),
            "UMPIRE_RATE_LIMITS={value}"
        );
    }
}

/// The test switch, in a test build (a release build refuses it: tests/repo.rs): a
/// bucket of one does not limit anything once limits are off.
#[test]
fn rate_limits_can_be_switched_off() {
    let s = Server::start_in(
        TempDir::new("nolimits"),
        &[
            ("UMPIRE_RATE_LIMITS", "off"),
            ("UMPIRE_RATE_LIMIT_VALIDATE", "1"),
        ],
    );
    let body = r#"{"tier":"basic","spec":{"checks":[{"type":"length","min":1}]}}"#;
    for _ in 0..40 {
        assert_eq!(s.validate(body).status, 200);
    }
}
