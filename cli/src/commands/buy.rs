//! `umpire buy`: a verdict paid with x402, waited for (sworn) unless --no-wait.

use super::Local;
use super::client::{Answer, Api, print_json, refused};
use super::pay::{PayArgs, Payer};
use super::read_json;
use reqwest::Method;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;
use umpire_core::json::Value;

pub struct BuyArgs {
    pub tier: String,
    pub spec: PathBuf,
    pub deliverable: PathBuf,
    pub job_ref: Option<String>,
    pub webhook: Option<String>,
    pub pay: PayArgs,
    pub idempotency_key: Option<String>,
    pub no_wait: bool,
}

pub async fn buy(api: &Api, args: BuyArgs) -> Result<ExitCode, Local> {
    let payer = Payer::new(api, &args.pay).await?;
    let mut body = Value::object()
        .with("spec", read_json(&args.spec)?)
        .with("deliverable", read_json(&args.deliverable)?);
    if let Some(j) = args.job_ref {
        body = body.with("job_ref", j);
    }
    if let Some(w) = args.webhook {
        body = body.with("webhook_url", w);
    }
    let key = args
        .idempotency_key
        .unwrap_or_else(|| umpire_host::random_id("umpire-cli"));
    eprintln!(
        "Idempotency-Key: {key}  (run again with --idempotency-key {key} to resume this purchase without paying twice)"
    );
    Ok(
        match purchase(api, &args.tier, &body, &payer, &key, !args.no_wait).await? {
            Ok(answer) => {
                print_json(&answer);
                ExitCode::SUCCESS
            }
            Err(_) => ExitCode::from(1),
        },
    )
}

/// A refusal from the service, already explained on stderr.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    pub status: u16,
    pub code: String,
}

impl Refused {
    fn of(a: &Answer) -> Refused {
        refused(a);
        Refused {
            status: a.status,
            code: a.error_code().unwrap_or("").to_owned(),
        }
    }

    /// A refusal that says "not now" rather than "no": the service, its store or the
    /// chain failed, or asked us to slow down. Asking again later may succeed.
    pub fn is_transient(&self) -> bool {
        self.status >= 500
            || self.status == 429
            || matches!(
                self.code.as_str(),
                "chain_unavailable" | "in_flight" | "rate_limited" | "unavailable"
            )
    }
}

/// Buys a verdict of `tier` for `body` under `key`: the answer (a sworn one waited for
/// to its final document when `wait`), or the refusal.
pub async fn purchase(
    api: &Api,
    tier: &str,
    body: &Value,
    payer: &Payer,
    key: &str,
    wait: bool,
) -> Result<Result<Value, Refused>, Local> {
    let a = match buy_once(api, tier, body, payer, key).await? {
        Ok(a) => a,
        Err(r) => return Ok(Err(r)),
    };
    let s = |k: &str| {
        a.body
            .get(k)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned()
    };
    if a.status == 201 || !wait {
        return Ok(Ok(a.body));
    }
    wait_final(api, &s("verdict_id"), &s("secret"), payer, None).await
}

/// One purchase under `key`: the `201` (synchronous tiers) or `202` (sworn, pass 1)
/// answer, or the refusal.
pub async fn buy_once(
    api: &Api,
    tier: &str,
    body: &Value,
    payer: &Payer,
    key: &str,
) -> Result<Result<Answer, Refused>, Local> {
    let path = format!("/v1/verdicts/{tier}");
    let a = super::purchase::paid(api, Method::POST, &path, Some(body), payer, key).await?;
    if a.status != 201 && a.status != 202 {
        return Ok(Err(Refused::of(&a)));
    }
    let s = |k: &str| {
        a.body
            .get(k)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned()
    };
    let (id, secret) = (s("verdict_id"), s("secret"));
    eprintln!(
        "verdict {id}: {}",
        if a.status == 201 {
            s("verdict")
        } else {
            "pass 1 done, pending pass 2".into()
        }
    );
    if secret.is_empty() {
        eprintln!("no secret (a replay): `umpire status {id}` reads the verdict with this wallet");
    } else {
        eprintln!(
            "secret {secret}  (shown once: keep it to read the verdict at {})",
            s("status_url")
        );
    }
    if a.status == 202 {
        eprintln!(
            "pass 2 due {}",
            a.body
                .get("final_due_at")
                .and_then(Value::as_str)
                .unwrap_or("?")
        );
    }
    Ok(Ok(a))
}

/// Waits for a sworn verdict's pass 2 and its signed final document (at most `limit`,
/// when given): `{verdict_id, secret, status: "final", document}`.
pub async fn wait_final(
    api: &Api,
    id: &str,
    secret: &str,
    payer: &Payer,
    limit: Option<Duration>,
) -> Result<Result<Value, Refused>, Local> {
    eprintln!(
        "waiting for pass 2; Ctrl-C is safe: `umpire status {id} --secret ...` reads it later"
    );
    let started = std::time::Instant::now();
    loop {
        tokio::time::sleep(Duration::from_secs(3)).await;
        let read = super::lookup::read_header(api, id, secret, payer.wallet()).await?;
        let st = api
            .send(Method::GET, &format!("/v1/verdicts/{id}"), &[read], None)
            .await?;
        if st.status != 200 {
            return Ok(Err(Refused::of(&st)));
        }
        if st.body.get("status").and_then(Value::as_str) == Some("final") {
            eprintln!();
            let final_doc = st.body.get("document").cloned().unwrap_or(Value::Null);
            eprintln!(
                "final: verdict {}",
                final_doc
                    .get("verdict")
                    .and_then(Value::as_str)
                    .unwrap_or("?")
            );
            return Ok(Ok(Value::object()
                .with("verdict_id", id)
                .with("secret", secret)
                .with("status", "final")
                .with("document", final_doc)));
        }
        if limit.is_some_and(|l| started.elapsed() >= l) {
            eprintln!();
            return Err(Local(format!(
                "verdict {id} is not final after {} s; the purchase is kept: run again to read it",
                started.elapsed().as_secs()
            )));
        }
        eprint!(
            "\r  waiting for pass 2... {} s",
            started.elapsed().as_secs()
        );
    }
}
