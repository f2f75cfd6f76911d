//! `umpire buy`: a verdict paid with x402, waited for (sworn) unless --no-wait.

use super::client::{Api, Local, print_json, refused};
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
    let payer = Payer::from_args(&args.pay)?;
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
            Err(code) => code,
        },
    )
}

/// Buys a verdict of `tier` for `body` under `key`: the answer (a sworn one waited for
/// to its final document when `wait`), or the refusal, already explained on stderr.
pub async fn purchase(
    api: &Api,
    tier: &str,
    body: &Value,
    payer: &Payer,
    key: &str,
    wait: bool,
) -> Result<Result<Value, ExitCode>, Local> {
    let path = format!("/v1/verdicts/{tier}");
    let a = api
        .paid(Method::POST, &path, Some(body), payer, key)
        .await?;
    if a.status != 201 && a.status != 202 {
        return Ok(Err(refused(&a)));
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
    eprintln!(
        "secret {secret}  (shown once: keep it to read the verdict at {})",
        s("status_url")
    );
    if a.status == 201 || !wait {
        return Ok(Ok(a.body));
    }
    // Sworn: wait for pass 2 and its signed final document.
    let due = a
        .body
        .get("final_due_at")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned();
    eprintln!(
        "waiting for pass 2 (due {due}); Ctrl-C is safe: `umpire status {id} --secret ...` reads it later"
    );
    let started = std::time::Instant::now();
    loop {
        tokio::time::sleep(Duration::from_secs(3)).await;
        let st = api
            .send(
                Method::GET,
                &format!("/v1/verdicts/{id}"),
                &[("authorization", format!("Bearer {secret}"))],
                None,
            )
            .await?;
        if st.status != 200 {
            return Ok(Err(refused(&st)));
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
                .with("verdict_id", id.as_str())
                .with("secret", secret.as_str())
                .with("status", "final")
                .with("document", final_doc)));
        }
        eprint!(
            "\r  waiting for pass 2... {} s",
            started.elapsed().as_secs()
        );
    }
}
