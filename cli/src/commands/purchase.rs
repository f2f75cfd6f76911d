//! A paid request from start to answer: ask, pay the 402, and ask again with the
//! payment until the service answers (one payment signed for one purchase, never two).
//!
//! The payment signed is held under the purchase's Idempotency-Key (`held`) until the
//! purchase is answered: a rerun with the key sends it again instead of signing
//! another, and a purchase whose settlement is pending (the chain has not decided) is
//! waited out with the same payment, never paid again. Only a `402` to that payment —
//! the service shows it can no longer be used — lets a new one be signed.

use reqwest::Method;
use std::time::{Duration, Instant};
use umpire_core::json::Value;
use umpire_x402::{HEADER_PAYMENT_SIGNATURE, PaymentRequired, decode_header};

use super::Local;
use super::client::{Answer, Api};
use super::held::Held;
use super::pay::Payer;

/// Transport retries of one paid request (same key, same payment: safe to repeat).
const RETRIES: u32 = 3;

/// How long a pending purchase is waited for in one run (its payment's window and the
/// service's margin, with room to spare); past it the run ends and a rerun resumes.
const PENDING_WAIT: Duration = Duration::from_secs(600);

/// A paid request: ask, pay the 402 from `payer` with x402 (`exact`, on the payer's
/// rail), and retry the identical request under the same Idempotency-Key until it
/// has an answer (in_flight, a pending settlement and transport failures are waited
/// out; a replay is the original). One payment is signed, never a second, unless the
/// service shows the first can no longer be used.
pub async fn paid(
    api: &Api,
    method: Method,
    path: &str,
    body: Option<&Value>,
    payer: &Payer,
    idempotency_key: &str,
) -> Result<Answer, Local> {
    let key = ("idempotency-key", idempotency_key.to_owned());
    let held = Held::at(api.base(), path, idempotency_key);
    if let Some(payment) = held.load() {
        eprintln!(
            "resuming this purchase with the payment signed for it earlier (nothing new is signed)"
        );
        let answer = until_answered(api, &method, path, body, &key, payment, &held).await?;
        if answer.status != 402 {
            return finish(answer);
        }
        // The service shows the held payment can no longer be used (it was voided:
        // expired unused, or canceled): only now may another be signed.
        eprintln!(
            "the payment held for this purchase can no longer be used ({}); signing a new one",
            answer.error_code().unwrap_or("refused")
        );
        return pay_and_send(api, &method, path, body, payer, &key, &answer, &held).await;
    }
    let mut first = api
        .send(method.clone(), path, std::slice::from_ref(&key), body)
        .await?;
    // A purchase under this key is pending with a payment this machine does not hold
    // (signed elsewhere, or its file lost): waited out, not paid again.
    let started = Instant::now();
    while is_pending(&first) && started.elapsed() < PENDING_WAIT {
        tell_pending(&first, idempotency_key);
        tokio::time::sleep(first.retry_after()).await;
        first = api
            .send(method.clone(), path, std::slice::from_ref(&key), body)
            .await?;
    }
    if first.status != 402 {
        return Ok(first);
    }
    pay_and_send(api, &method, path, body, payer, &key, &first, &held).await
}

/// Signs a payment for the 402 `required`, holds it, and sends it until answered.
#[allow(clippy::too_many_arguments)]
async fn pay_and_send(
    api: &Api,
    method: &Method,
    path: &str,
    body: Option<&Value>,
    payer: &Payer,
    key: &(&'static str, String),
    required: &Answer,
    held: &Held,
) -> Result<Answer, Local> {
    let header = required
        .headers
        .get("payment-required")
        .and_then(|v| v.to_str().ok())
        .ok_or_else(|| Local("the 402 has no PAYMENT-REQUIRED header".into()))?;
    let required: PaymentRequired =
        decode_header(header).map_err(|e| Local(format!("unreadable PAYMENT-REQUIRED: {e}")))?;
    let payment = payer.pay(&required, path).await?;
    // Held before it leaves: a run that dies from here on resumes with this payment.
    if let Err(e) = held.save(&payment) {
        eprintln!(
            "could not hold the payment for a rerun ({}); a rerun with this key would be asked to pay again",
            e.0
        );
    }
    let answer = until_answered(api, method, path, body, key, payment, held).await?;
    finish(answer)
}

fn finish(answer: Answer) -> Result<Answer, Local> {
    if withheld_secret(&answer) {
        // A replay to a spent payment (public on chain) withholds the one-time secret.
        // Nothing more is signed to get it back: a second payment would be a second
        // authorization handed to whoever answers. The wallet reads the verdict.
        eprintln!(
            "this purchase was made already and its payment is public on chain, so the one-time secret is not repeated; `umpire status <verdict_id>` reads the verdict by signing in with this wallet (no payment)"
        );
    }
    Ok(answer)
}

/// Whether the answer is a purchase still settling (x402's `settlement_pending`): the
/// payment may still land, so it is waited for, never paid again.
fn is_pending(a: &Answer) -> bool {
    let reason = a
        .body
        .get("error")
        .and_then(|e| e.get("reason"))
        .and_then(Value::as_str);
    (a.status == 409 || a.status == 502) && reason == Some("settlement_pending")
}

fn tell_pending(a: &Answer, key: &str) {
    let e = a.body.get("error");
    let s = |k: &str| e.and_then(|e| e.get(k)).and_then(Value::as_str);
    eprintln!(
        "the payment's settlement is pending{}: waiting for the chain{} (Ctrl-C is safe: rerun with --idempotency-key {key} to resume with the same payment; nothing new is signed)",
        s("transaction").map_or(String::new(), |t| format!(" (transaction {t})")),
        s("pending_until").map_or(String::new(), |t| format!(", which decides by {t}")),
    );
}

/// Sends the paid request until it has an answer: `in_flight` and a pending settlement
/// are waited out (up to [`PENDING_WAIT`]), transport failures and other 5xx retried a
/// few times, all with the same payment (a retry is never charged twice). The held
/// payment is let go once the purchase is answered (2xx) or the payment refused (402).
async fn until_answered(
    api: &Api,
    method: &Method,
    path: &str,
    body: Option<&Value>,
    key: &(&'static str, String),
    payment: String,
    held: &Held,
) -> Result<Answer, Local> {
    let headers = [key.clone(), (HEADER_PAYMENT_SIGNATURE, payment)];
    let started = Instant::now();
    let mut attempt = 0;
    let mut told = false;
    loop {
        let sent = api.send(method.clone(), path, &headers, body).await;
        let waited = started.elapsed();
        match sent {
            Ok(a) if is_pending(&a) => {
                if waited >= PENDING_WAIT {
                    return Err(Local(format!(
                        "the purchase is still pending after {} s (the chain has not decided its payment); run again with --idempotency-key {}: the same payment is sent, nothing new is signed",
                        waited.as_secs(),
                        key.1
                    )));
                }
                if !told {
                    tell_pending(&a, &key.1);
                    told = true;
                }
                tokio::time::sleep(a.retry_after()).await;
            }
            Ok(a) if a.status == 409 && a.error_code() == Some("in_flight") => {
                if waited >= PENDING_WAIT {
                    return Err(Local(format!(
                        "the purchase is still being processed after {} s; run again with --idempotency-key {}: the same payment is sent, nothing new is signed",
                        waited.as_secs(),
                        key.1
                    )));
                }
                eprintln!("the purchase is still being processed; asking again");
                tokio::time::sleep(a.retry_after()).await;
            }
            Ok(a) if a.status >= 500 && attempt < RETRIES => {
                attempt += 1;
                eprintln!(
                    "the service answered {}; retrying the same purchase",
                    a.status
                );
                tokio::time::sleep(Duration::from_secs(u64::from(attempt) * 2)).await;
            }
            Err(e) if attempt < RETRIES => {
                attempt += 1;
                eprintln!("{}; retrying the same purchase", e.0);
                tokio::time::sleep(Duration::from_secs(u64::from(attempt) * 2)).await;
            }
            Ok(a) => {
                if (200..300).contains(&a.status) || a.status == 402 {
                    held.remove();
                }
                return Ok(a);
            }
            Err(e) => return Err(e),
        }
    }
}

/// A purchase answered with its one-time secret withheld (`"secret": null`).
fn withheld_secret(a: &Answer) -> bool {
    (200..300).contains(&a.status) && matches!(a.body.get("secret"), Some(Value::Null))
}
