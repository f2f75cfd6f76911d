//! Idempotency for paid POSTs, after Powertools for AWS Lambda's design: a record per
//! (wallet, Idempotency-Key) holding the request's hash, INPROGRESS with its own expiry
//! (so a crashed function does not lock a key forever) or COMPLETED with the response.
//!
//! The paid path uses it in this order: [`check`] before the paywall (a completed
//! retry is replayed with no payment needed and no settlement), [`claim`] once payment
//! verified (one conditional write: one winner), then [`complete`] with the response,
//! or [`release`] when the purchase is voided so the key can be used again.

use std::fmt;
use std::ops::Deref;

use umpire_core::hash::sha256_hex;
use umpire_core::product::{IDEMPOTENCY_KEY_MAX, IDEMPOTENCY_KEY_MIN};
use umpire_core::signer::Signer;
use umpire_core::{ApiError, ErrorCode};
use umpire_store::{Claim, IdempotencyRecord, IdempotencyState, StoredResponse};
use umpire_x402::types::Account;

use crate::plumbing::state::{AppState, Response};

pub use crate::plumbing::config::IN_PROGRESS_SECS;
/// How long a completed response is replayed.
pub const COMPLETED_SECS: u64 = umpire_core::product::ANSWER_KEPT_SECS;

/// Stored beside a completed answer whose one-time secret was left out: the key id of
/// the signer that derives it. Internal; never sent.
const SECRET_MARK: &str = "umpire-secret-derived-by";

/// The header every replayed answer carries.
pub(crate) const REPLAYED: &str = "idempotent-replayed";

/// Response headers worth replaying; everything else is recomputed per response.
const REPLAYED_HEADERS: &[&str] = &[
    "content-type",
    "location",
    "payment-response",
    "x-payment-response",
];

/// The scope of a key no wallet names (a request with no payment presents it so).
pub(crate) const UNPAID_SCOPE: &str = "anon|";

/// A validated Idempotency-Key: 16 to 128 characters of `A-Z a-z 0-9 - _ . :`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdempotencyKey(String);

impl IdempotencyKey {
    pub fn parse(raw: &str) -> Result<IdempotencyKey, ApiError> {
        let ok_chars = raw
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | ':'));
        let len = raw.chars().count();
        if !(IDEMPOTENCY_KEY_MIN..=IDEMPOTENCY_KEY_MAX).contains(&len) || !ok_chars {
            return Err(ApiError::new(
                ErrorCode::InvalidIdempotencyKey,
                format!(
                    "Idempotency-Key must be {IDEMPOTENCY_KEY_MIN} to {IDEMPOTENCY_KEY_MAX} characters of letters, digits, - _ . : (got {len} characters)"
                ),
                "Use a random UUID, e.g. 3f1c9a52-6d1e-4c8b-9a77-2b5f0e4d8c11, and reuse it only to retry the identical request.",
            ));
        }
        Ok(IdempotencyKey(raw.to_owned()))
    }

    /// The key from the request headers, if any.
    pub fn from_headers(headers: &http::HeaderMap) -> Result<Option<IdempotencyKey>, ApiError> {
        match headers.get("idempotency-key") {
            None => Ok(None),
            Some(v) => match v.to_str() {
                Ok(s) => IdempotencyKey::parse(s.trim()).map(Some),
                Err(_) => IdempotencyKey::parse("\u{fffd}").map(Some),
            },
        }
    }

    /// The stored key: scoped to the paying wallet when the payment names one, so two
    /// wallets using the same key string never collide.
    pub fn scoped(&self, wallet: Option<&Account>) -> ScopedKey {
        ScopedKey(match wallet {
            Some(w) => format!("{}|{}", w.to_string().to_ascii_lowercase(), self.0),
            None => format!("{UNPAID_SCOPE}{}", self.0),
        })
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// An Idempotency-Key as stored: the wallet it is scoped to, and the key
/// (`<wallet lowercase>|<key>`, or `anon|<key>`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ScopedKey(String);

impl ScopedKey {
    /// A key as written down elsewhere (a pending purchase names the keys bound to it).
    pub fn from_stored(key: String) -> ScopedKey {
        ScopedKey(key)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl Deref for ScopedKey {
    type Target = str;

    fn deref(&self) -> &str {
        &self.0
    }
}

impl PartialEq<&str> for ScopedKey {
    fn eq(&self, other: &&str) -> bool {
        self.0 == *other
    }
}

impl fmt::Display for ScopedKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// What identifies "the same request" (hex sha256 of its method, path and exact body
/// bytes): a key or a payment replays only for the request it was used with.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RequestHash(String);

impl RequestHash {
    /// A hash as written down elsewhere (a ledger entry names its request).
    pub fn from_stored(hash: String) -> RequestHash {
        RequestHash(hash)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl Deref for RequestHash {
    type Target = str;

    fn deref(&self) -> &str {
        &self.0
    }
}

/// What identifies "the same request": method, path and exact body bytes.
pub fn request_hash(method: &http::Method, path: &str, body: &[u8]) -> RequestHash {
    let mut bytes = Vec::with_capacity(body.len() + path.len() + 8);
    bytes.extend_from_slice(method.as_str().as_bytes());
    bytes.push(b' ');
    bytes.extend_from_slice(path.as_bytes());
    bytes.push(b'\n');
    bytes.extend_from_slice(body);
    RequestHash(sha256_hex(&bytes))
}

/// What to do with a request whose key has a record.
#[derive(Debug)]
pub enum Decision {
    /// No record (or it expired): go on.
    Proceed,
    /// The identical request completed: answer with this, charge nothing.
    Replay(Response),
    /// The identical request's purchase is pending (its settlement's outcome is not
    /// known yet): the key answers that purchase, paid with this payment, until the
    /// chain decides.
    /// (the ledger key of that payment).
    Pending(String),
}

fn conflict(
    state: &AppState,
    rec: &IdempotencyRecord,
    request_hash: &RequestHash,
    now: u64,
) -> Result<Decision, ApiError> {
    match &rec.state {
        IdempotencyState::Completed(stored) if rec.request_hash == request_hash.as_str() => Ok(
            Decision::Replay(replay_response(stored, Some(state.signer.as_ref()))),
        ),
        IdempotencyState::Completed(_) => Err(ApiError::new(
            ErrorCode::IdempotencyKeyReuse,
            "this Idempotency-Key was used for a different request",
            "Send a new Idempotency-Key for a new request; reuse a key only to retry the identical request (same path and body).",
        )),
        IdempotencyState::Pending { payment_key } if rec.request_hash == request_hash.as_str() => {
            Ok(Decision::Pending(payment_key.clone()))
        }
        IdempotencyState::Pending { .. } => Err(ApiError::new(
            ErrorCode::IdempotencyKeyReuse,
            "this Idempotency-Key belongs to a different request, whose purchase is still settling",
            "Send a new Idempotency-Key for a new request; reuse a key only to retry the identical request (same path and body).",
        )),
        // A claim whose holder died: free for the next request (the claim takes it over).
        IdempotencyState::InProgress { until } if *until <= now => Ok(Decision::Proceed),
        IdempotencyState::InProgress { until } => {
            if rec.request_hash != request_hash.as_str() {
                return Err(ApiError::new(
                    ErrorCode::IdempotencyKeyReuse,
                    "this Idempotency-Key is in use by a different request",
                    "Send a new Idempotency-Key for a new request.",
                ));
            }
            let wait = until.saturating_sub(now).clamp(1, 5);
            Err(ApiError::new(
                ErrorCode::InFlight,
                "the original request with this Idempotency-Key is still being processed",
                format!("Wait {wait} s and retry the identical request; you will get the original response."),
            )
            .with_retry_after(wait))
        }
    }
}

/// Before the paywall: replay, refuse, or proceed.
pub async fn check(
    state: &AppState,
    scoped_key: &ScopedKey,
    request_hash: &RequestHash,
) -> Result<Decision, ApiError> {
    let now = state.config.clock.now();
    match state
        .store
        .get_idempotency(scoped_key, now)
        .await
        .map_err(crate::plumbing::state::internal)?
    {
        None => Ok(Decision::Proceed),
        Some(rec) => conflict(state, &rec, request_hash, now),
    }
}

/// Takes the key for this request (payment verified, work about to start).
pub async fn claim(
    state: &AppState,
    scoped_key: &ScopedKey,
    request_hash: &RequestHash,
) -> Result<Decision, ApiError> {
    let now = state.config.clock.now();
    match state
        .store
        .claim_idempotency(
            scoped_key,
            request_hash,
            now,
            now + u64::from(state.config.in_progress_secs),
            now + COMPLETED_SECS,
        )
        .await
        .map_err(crate::plumbing::state::internal)?
    {
        Claim::Won => Ok(Decision::Proceed),
        Claim::Held(rec) => conflict(state, &rec, request_hash, now),
    }
}

/// Records the response so retries replay it.
pub async fn complete(
    state: &AppState,
    scoped_key: &ScopedKey,
    request_hash: &RequestHash,
    response: &Response,
) -> Result<(), ApiError> {
    let stored = stored_answer(state, response);
    let now = state.config.clock.now();
    state
        .store
        .complete_idempotency(scoped_key, request_hash, &stored, now + COMPLETED_SECS)
        .await
        .map_err(crate::plumbing::state::internal)
}

/// A response as written down for replays: the headers worth replaying, and the
/// one-time secret left out (the record notes that the answer had one, and under which
/// key it was derived, so the replay derives it again).
pub(crate) fn stored_answer(state: &AppState, response: &Response) -> StoredResponse {
    let mut stored = StoredResponse {
        status: response.status().as_u16(),
        headers: response
            .headers()
            .iter()
            .filter(|(k, _)| REPLAYED_HEADERS.contains(&k.as_str()))
            .filter_map(|(k, v)| Some((k.as_str().to_owned(), v.to_str().ok()?.to_owned())))
            .collect(),
        body: String::from_utf8_lossy(response.body()).into_owned(),
    };
    if let Ok(body) = umpire_core::json::parse(response.body())
        && body
            .get("secret")
            .and_then(umpire_core::Value::as_str)
            .is_some()
    {
        let body = body.with("secret", umpire_core::Value::Null);
        stored.body = String::from_utf8_lossy(&body.to_canonical_vec()).into_owned();
        stored
            .headers
            .push((SECRET_MARK.to_owned(), state.signer.key_id().to_owned()));
    }
    stored
}

/// Binds a claim held for `request_hash` to the pending purchase paid with
/// `payment_key` until `expires_at`; `false` when the claim is no longer ours.
pub async fn pend(
    state: &AppState,
    scoped_key: &ScopedKey,
    request_hash: &RequestHash,
    payment_key: &str,
    expires_at: u64,
) -> Result<bool, ApiError> {
    state
        .store
        .pend_idempotency(scoped_key, request_hash, payment_key, expires_at)
        .await
        .map_err(crate::plumbing::state::internal)
}

/// Completes a key bound to the purchase paid with `payment_key` with its answer;
/// `false` when the key is not so bound.
pub async fn complete_bound(
    state: &AppState,
    scoped_key: &ScopedKey,
    request_hash: &RequestHash,
    payment_key: &str,
    response: &Response,
) -> Result<bool, ApiError> {
    let stored = stored_answer(state, response);
    let now = state.config.clock.now();
    state
        .store
        .complete_bound_idempotency(
            scoped_key,
            request_hash,
            payment_key,
            &stored,
            now + COMPLETED_SECS,
        )
        .await
        .map_err(crate::plumbing::state::internal)
}

/// Releases a key bound to the purchase paid with `payment_key`; `false` when it is not
/// so bound.
pub async fn release_bound(
    state: &AppState,
    scoped_key: &ScopedKey,
    request_hash: &RequestHash,
    payment_key: &str,
) -> Result<bool, ApiError> {
    state
        .store
        .release_bound_idempotency(scoped_key, request_hash, payment_key)
        .await
        .map_err(crate::plumbing::state::internal)
}

/// Gives the key back: the purchase was voided and may be retried with it.
pub async fn release(
    state: &AppState,
    scoped_key: &ScopedKey,
    request_hash: &RequestHash,
) -> Result<(), ApiError> {
    state
        .store
        .release_idempotency(scoped_key, request_hash)
        .await
        .map_err(crate::plumbing::state::internal)
}

/// A stored answer as given again. `signer` derives the one-time secret back into the
/// body when the answer had one and the same key derived it; `None` withholds it.
pub(crate) fn replay_response(stored: &StoredResponse, signer: Option<&dyn Signer>) -> Response {
    let mut body = stored.body.clone();
    let had_secret = stored.headers.iter().find(|(k, _)| k == SECRET_MARK);
    if let (Some((_, key_id)), Some(signer)) = (had_secret, signer)
        && signer.key_id() == key_id
        && let Ok(parsed) = umpire_core::json::parse(body.as_bytes())
    {
        body = String::from_utf8_lossy(
            &crate::checkout::secret::reveal(signer, parsed).to_canonical_vec(),
        )
        .into_owned();
    }
    let mut r = http::Response::new(bytes::Bytes::from(body));
    *r.status_mut() = http::StatusCode::from_u16(stored.status).unwrap_or(http::StatusCode::OK);
    for (k, v) in stored.headers.iter().filter(|(k, _)| k != SECRET_MARK) {
        if let (Ok(name), Ok(value)) = (
            http::HeaderName::from_bytes(k.as_bytes()),
            http::HeaderValue::from_str(v),
        ) {
            r.headers_mut().insert(name, value);
        }
    }
    r.headers_mut()
        .insert(REPLAYED, http::HeaderValue::from_static("true"));
    r
}

/// [`replay_response`] with the one-time `secret` withheld (`null`, as when a verdict
/// could not be stored): for a replay earned by presenting a payment, which is public
/// on chain once settled and so proves nothing about who is asking.
pub(crate) fn replay_without_secret(stored: &StoredResponse) -> Response {
    let mut stored = stored.clone();
    if let Ok(mut body) = umpire_core::json::parse(stored.body.as_bytes())
        && body.get("secret").is_some()
    {
        body.insert("secret", umpire_core::Value::Null);
        stored.body = String::from_utf8_lossy(&body.to_canonical_vec()).into_owned();
    }
    replay_response(&stored, None)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::plumbing::config::Config;
    use crate::plumbing::state::AppState;
    use umpire_core::signer::LocalSigner;
    use umpire_store::sqlite::SqliteStore;

    fn state() -> AppState {
        AppState::new(
            Config::default(),
            Arc::new(LocalSigner::from_seed([1u8; 32])),
            Arc::new(SqliteStore::in_memory().expect("store")),
        )
    }

    #[test]
    fn keys_are_validated_and_scoped() {
        assert!(IdempotencyKey::parse("3f1c9a52-6d1e-4c8b-9a77-2b5f0e4d8c11").is_ok());
        for bad in [
            "short",
            "has space in it!!",
            &"x".repeat(129),
            "ключ-ключ-ключ-ключ",
        ] {
            let e = IdempotencyKey::parse(bad).expect_err(bad);
            assert_eq!(e.code, ErrorCode::InvalidIdempotencyKey);
        }
        let k = IdempotencyKey::parse("0123456789abcdef").expect("key");
        let wallet = |a: &str| a.parse::<Account>().expect("valid fixture");
        let abc = wallet("0xAbC0000000000000000000000000000000000001");
        let def = wallet("0xdef0000000000000000000000000000000000001");
        assert_ne!(k.scoped(Some(&abc)), k.scoped(Some(&def)));
        assert_eq!(
            k.scoped(Some(&abc)),
            k.scoped(Some(&wallet("0xabc0000000000000000000000000000000000001")))
        );
        assert_eq!(k.scoped(None), "anon|0123456789abcdef");
    }

    #[tokio::test]
    async fn replay_reuse_and_in_flight() {
        let s = state();
        let wallet: Account = "0xabc0000000000000000000000000000000000001"
            .parse()
            .expect("valid fixture");
        let key = &IdempotencyKey::parse("0123456789abcdef")
            .expect("key")
            .scoped(Some(&wallet));
        let h1 = request_hash(&http::Method::POST, "/v1/verdicts/basic", b"{\"a\":1}");
        let h2 = request_hash(&http::Method::POST, "/v1/verdicts/basic", b"{\"a\":2}");
        assert!(matches!(check(&s, key, &h1).await, Ok(Decision::Proceed)));
        assert!(matches!(claim(&s, key, &h1).await, Ok(Decision::Proceed)));
        let e = claim(&s, key, &h1).await.expect_err("second claim");
        assert_eq!(e.code, ErrorCode::InFlight);
        assert_eq!(
            check(&s, key, &h2).await.expect_err("other body").code,
            ErrorCode::IdempotencyKeyReuse
        );

        let mut original =
            crate::plumbing::respond::json(201, &umpire_core::Value::object().with("ok", true));
        original.headers_mut().insert(
            "payment-response",
            http::HeaderValue::from_static("eyJzdWNjZXNzIjp0cnVlfQ=="),
        );
        original
            .headers_mut()
            .insert("x-internal", http::HeaderValue::from_static("no"));
        complete(&s, key, &h1, &original).await.expect("complete");
        match check(&s, key, &h1).await.expect("replay") {
            Decision::Replay(r) => {
                assert_eq!(r.status(), 201);
                assert_eq!(r.body(), original.body());
                assert_eq!(
                    r.headers().get("payment-response"),
                    original.headers().get("payment-response")
                );
                assert!(r.headers().get("x-internal").is_none());
                assert_eq!(
                    r.headers().get("idempotent-replayed").map(|v| v.as_bytes()),
                    Some(&b"true"[..])
                );
            }
            Decision::Proceed | Decision::Pending(_) => panic!("not replayed"),
        }
        assert_eq!(
            check(&s, key, &h2).await.expect_err("reuse").code,
            ErrorCode::IdempotencyKeyReuse
        );

        // A claim whose holder died is free once it expires.
        let stale = &IdempotencyKey::parse("0123456789-stale")
            .expect("key")
            .scoped(None);
        let now = s.config.clock.now();
        s.store
            .claim_idempotency(stale, &h1, now - 10, now - 1, now + COMPLETED_SECS)
            .await
            .expect("stale claim");
        assert!(matches!(check(&s, stale, &h2).await, Ok(Decision::Proceed)));
        assert!(matches!(claim(&s, stale, &h1).await, Ok(Decision::Proceed)));

        // A voided purchase frees its key.
        let other = &IdempotencyKey::parse("fedcba9876543210")
            .expect("key")
            .scoped(None);
        assert!(matches!(claim(&s, other, &h1).await, Ok(Decision::Proceed)));
        release(&s, other, &h1).await.expect("release");
        assert!(matches!(claim(&s, other, &h2).await, Ok(Decision::Proceed)));
    }
}
