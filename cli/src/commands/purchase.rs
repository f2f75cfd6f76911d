//! A paid request from start to answer: ask, pay the 402, and ask again with the
//! payment until the service answers (one payment signed, never two).

use reqwest::Method;
use std::time::Duration;
use umpire_core::json::Value;
use umpire_x402::{HEADER_PAYMENT_SIGNATURE, PaymentRequired, decode_header};

use super::Local;
use super::client::{Answer, Api};
use super::pay::Payer;

/// Transport retries of one paid request (same key, same payment: safe to repeat).
const RETRIES: u32 = 3;

/// A paid request: ask, pay the 402 from `payer` with x402 (`exact`, on the payer's
/// rail), and retry the identical request under the same Idempotency-Key until it
/// has an answer (in_flight and transport failures are retried; a replay is the
/// original). One payment is signed, never a second.
pub async fn paid(
    api: &Api,
    method: Method,
    path: &str,
    body: Option<&Value>,
    payer: &Payer,
    idempotency_key: &str,
) -> Result<Answer, Local> {
    let key = ("idempotency-key", idempotency_key.to_owned());
    let first = api
        .send(method.clone(), path, std::slice::from_ref(&key), body)
        .await?;
    if first.status != 402 {
        return Ok(first);
    }
    let header = first
        .headers
        .get("payment-required")
        .and_then(|v| v.to_str().ok())
        .ok_or_else(|| Local("the 402 has no PAYMENT-REQUIRED header".into()))?;
    let required: PaymentRequired =
        decode_header(header).map_err(|e| Local(format!("unreadable PAYMENT-REQUIRED: {e}")))?;
    let payment = payer.pay(&required, path).await?;
    let answer = until_answered(api, &method, path, body, &key, payment).await?;
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

/// Sends the paid request until it has an answer: `in_flight` is waited out,
/// transport failures and 5xx are retried a few times with the same payment (a
/// retry is never charged twice).
async fn until_answered(
    api: &Api,
    method: &Method,
    path: &str,
    body: Option<&Value>,
    key: &(&'static str, String),
    payment: String,
) -> Result<Answer, Local> {
    let headers = [key.clone(), (HEADER_PAYMENT_SIGNATURE, payment)];
    let mut attempt = 0;
    loop {
        attempt += 1;
        match api.send(method.clone(), path, &headers, body).await {
            Ok(a) if a.status == 409 && a.error_code() == Some("in_flight") => {
                eprintln!("the purchase is still being processed; asking again");
                tokio::time::sleep(a.retry_after()).await;
            }
            Ok(a) if a.status >= 500 && attempt <= RETRIES => {
                eprintln!(
                    "the service answered {}; retrying the same purchase",
                    a.status
                );
                tokio::time::sleep(Duration::from_secs(u64::from(attempt) * 2)).await;
            }
            Err(e) if attempt <= RETRIES => {
                eprintln!("{}; retrying the same purchase", e.0);
                tokio::time::sleep(Duration::from_secs(u64::from(attempt) * 2)).await;
            }
            other => return other,
        }
    }
}

/// A purchase answered with its one-time secret withheld (`"secret": null`).
fn withheld_secret(a: &Answer) -> bool {
    (200..300).contains(&a.status) && matches!(a.body.get("secret"), Some(Value::Null))
}
