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
use umpire_x402::decode_header;

use super::Local;

pub const DEFAULT_BASE: &str = "http://127.0.0.1:8080";

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
