//! The `umpire` client: buy, status, find, validate, feedback and reputation against a
//! running Umpire (`--base`, `$UMPIRE_BASE_URL`, default http://127.0.0.1:8080). Paid
//! commands pay with x402 from a wallet key read from `$UMPIRE_WALLET_KEY` or
//! `--key-file` (never a flag: flags end up in shell history and `ps`).
//!
//! Output: the API's JSON answer on stdout (scripts read it), a readable account on
//! stderr. Exit 0 on success, 1 when the service refused (the error code, what it
//! means and what to do are printed), 2 for local problems (files, keys, network).

use reqwest::Method;
use std::process::ExitCode;
use std::time::Duration;
use umpire_core::json::{Value, parse};
use umpire_pay::{HEADER_PAYMENT_SIGNATURE, PaymentRequired, decode_header};

use super::Local;
use super::pay::Payer;

pub const DEFAULT_BASE: &str = "http://127.0.0.1:8080";
/// Transport retries of one paid request (same key, same payment: safe to repeat).
const RETRIES: u32 = 3;

pub struct Api {
    base: String,
    http: reqwest::Client,
}

/// One HTTP answer.
pub struct Answer {
    pub status: u16,
    pub headers: reqwest::header::HeaderMap,
    pub body: Value,
}

impl Answer {
    pub(crate) fn error_code(&self) -> Option<&str> {
        self.body.get("error")?.get("code")?.as_str()
    }

    pub(crate) fn retry_after(&self) -> Duration {
        let secs = self
            .headers
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(2);
        Duration::from_secs(secs.clamp(1, 30))
    }
}

impl Api {
    pub fn new(base: Option<String>) -> Result<Api, Local> {
        let base = base
            .or_else(|| std::env::var("UMPIRE_BASE_URL").ok())
            .unwrap_or_else(|| DEFAULT_BASE.to_owned());
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(90))
            .user_agent(concat!("umpire-cli/", env!("CARGO_PKG_VERSION")))
            .build()?;
        Ok(Api {
            base: base.trim_end_matches('/').to_owned(),
            http,
        })
    }

    /// The service's base URL, without a trailing slash.
    pub fn base(&self) -> &str {
        &self.base
    }

    pub async fn send(
        &self,
        method: Method,
        path: &str,
        headers: &[(&str, String)],
        body: Option<&Value>,
    ) -> Result<Answer, Local> {
        let mut req = self.http.request(method, format!("{}{path}", self.base));
        for (k, v) in headers {
            req = req.header(*k, v);
        }
        if let Some(b) = body {
            req = req
                .header("content-type", "application/json")
                .body(b.to_canonical_vec());
        }
        let resp = req
            .send()
            .await
            .map_err(|e| Local(format!("cannot reach {}: {e}", self.base)))?;
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        let bytes = resp.bytes().await?;
        let body = if bytes.is_empty() {
            Value::Null
        } else {
            parse(&bytes)
                .unwrap_or_else(|_| Value::from(String::from_utf8_lossy(&bytes).into_owned()))
        };
        Ok(Answer {
            status,
            headers,
            body,
        })
    }

    /// A paid request: ask, pay the 402 from `payer` with x402 (`exact`, on the payer's
    /// rail), and retry the identical request under the same Idempotency-Key until it
    /// has an answer (in_flight and transport failures are retried; a replay is the
    /// original).
    pub async fn paid(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
        payer: &Payer,
        idempotency_key: &str,
    ) -> Result<Answer, Local> {
        let key = ("idempotency-key", idempotency_key.to_owned());
        let first = self
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
        let required: PaymentRequired = decode_header(header)
            .map_err(|e| Local(format!("unreadable PAYMENT-REQUIRED: {e}")))?;
        let payment = payer.pay(&required, path).await?;
        let answer = self
            .until_answered(&method, path, body, &key, payment)
            .await?;
        if !withheld_secret(&answer) {
            return Ok(answer);
        }
        // A replay to the spent payment (public on chain) withholds the one-time secret:
        // a payment signed now proves the wallet and gets it. It buys nothing (the key's
        // purchase is done, so it is answered as a replay and never settled).
        eprintln!("the purchase was made already; proving the wallet to get its secret");
        let fresh = payer.pay(&required, path).await?;
        match self.until_answered(&method, path, body, &key, fresh).await {
            Ok(proven) if (200..300).contains(&proven.status) && !withheld_secret(&proven) => {
                Ok(proven)
            }
            _ => Ok(answer),
        }
    }

    /// Sends the paid request until it has an answer: `in_flight` is waited out,
    /// transport failures and 5xx are retried a few times with the same payment (a
    /// retry is never charged twice).
    async fn until_answered(
        &self,
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
            match self.send(method.clone(), path, &headers, body).await {
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
}

/// A purchase answered with its one-time secret withheld (`"secret": null`).
fn withheld_secret(a: &Answer) -> bool {
    (200..300).contains(&a.status) && matches!(a.body.get("secret"), Some(Value::Null))
}

/// What each refusal means, in plain words (the service's own hint follows). Matched on
/// the contract's error codes, so a renamed code cannot silently lose its words.
fn plain_words(code: &str) -> Option<&'static str> {
    use umpire_core::ErrorCode as E;
    Some(match E::parse(code)? {
        E::BadSignature => {
            "the signature is not the payer wallet's signature over this exact feedback (check the key, the outcome and the options)"
        }
        E::PaymentNotFound => {
            "no successful USDC payment from the payer to the merchant was found in that transaction (or it lacks confirmations yet)"
        }
        E::PayerMismatch => "the transaction pays the merchant, but not from this payer's wallet",
        E::ReceiptTooOld => {
            "the payment is more than 90 days old; feedback must follow a recent purchase"
        }
        E::SelfFeedback => "the payer and the merchant are the same address",
        E::DuplicateFeedback => {
            "feedback for this transaction was already recorded; one per transaction"
        }
        E::AmountTooSmall => "the payment is below the 0.01 USDC floor",
        E::ReceiptsOff => "this deployment does not read the chain, so it cannot accept feedback",
        E::ChainUnavailable => {
            "the chain (or the payment facilitator) could not be reached; nothing was charged or stored"
        }
        E::RateLimited => "too many requests from your address this minute",
        E::InvalidSpec => "the spec has problems; nothing was charged",
        E::PaymentRequired => "the payment was refused; nothing was charged",
        E::IdempotencyKeyReuse => "that Idempotency-Key was used for a different request",
        E::InFlight => "the original request with this key is still being processed",
        E::NotFound => "no such verdict, or the secret does not match",
        _ => return None,
    })
}

/// Prints a refusal and returns exit code 1.
pub fn refused(a: &Answer) -> ExitCode {
    let e = a.body.get("error");
    let field = |k: &str| {
        e.and_then(|e| e.get(k))
            .and_then(Value::as_str)
            .unwrap_or("")
    };
    let code = field("code");
    eprintln!(
        "umpire: the service refused ({} {code}): {}",
        a.status,
        field("message")
    );
    if let Some(words) = plain_words(code) {
        eprintln!("  meaning: {words}");
    }
    if let Some(problems) = e.and_then(|e| e.get("problems")).and_then(Value::as_array) {
        for p in problems {
            let s = |k: &str| p.get(k).and_then(Value::as_str).unwrap_or("");
            eprintln!("  {}: {} ({})", s("where"), s("message"), s("code"));
            if !s("hint").is_empty() {
                eprintln!("    hint: {}", s("hint"));
            }
        }
    }
    if !field("hint").is_empty() {
        eprintln!("  what to do: {}", field("hint"));
    }
    if let Some(reason) = a
        .headers
        .get("payment-response")
        .and_then(|v| v.to_str().ok())
        .and_then(|h| decode_header::<serde_json::Value>(h).ok())
        .and_then(|s| {
            s.get("errorReason")
                .and_then(|r| r.as_str())
                .map(str::to_owned)
        })
    {
        eprintln!("  payment: {reason}");
    }
    ExitCode::from(1)
}

/// Stable JSON, one line: exact numbers (a pretty-printer through f64 could change a
/// signed document's bytes), and `umpire verify` reads it back as is.
pub fn print_json(v: &Value) {
    println!("{}", v.to_canonical_string());
}

/// A free GET/POST: the answer on stdout, or the refusal explained.
pub async fn free(
    api: &Api,
    method: Method,
    path: &str,
    headers: &[(&str, String)],
    body: Option<&Value>,
) -> Result<ExitCode, Local> {
    let a = api.send(method, path, headers, body).await?;
    if a.status >= 400 {
        return Ok(refused(&a));
    }
    print_json(&a.body);
    Ok(ExitCode::SUCCESS)
}

/// Nested objects as indented `name: value` lines (the signature last and short).
pub fn print_readable(v: &Value, depth: usize) {
    let Some(map) = v.as_object() else { return };
    let pad = "  ".repeat(depth);
    for (k, val) in map {
        if k == "signature" {
            continue;
        }
        match val {
            Value::Object(_) => {
                println!("{pad}{k}:");
                print_readable(val, depth + 1);
            }
            Value::String(s) => println!("{pad}{k}: {s}"),
            other => println!("{pad}{k}: {}", other.to_canonical_string()),
        }
    }
    if let Some(sig) = map.get("signature") {
        println!(
            "{pad}signed by key {} (verify the JSON with `umpire verify`)",
            sig.get("key_id").and_then(Value::as_str).unwrap_or("?")
        );
    }
}
