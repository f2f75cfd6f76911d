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
use umpire_core::product::Tier;

/// Buy a verdict: pays with x402 from your wallet ($UMPIRE_WALLET_KEY or --key-file),
/// prints the answer (document, verdict id, one-time secret) as JSON. Sworn purchases
/// wait for the final document unless --no-wait.
#[derive(clap::Args)]
pub struct Buy {
    /// witness, basic, probe or sworn.
    #[arg(value_parser = super::parse_tier)]
    tier: Tier,
    /// File holding the spec: {"checks":[...]}.
    #[arg(long)]
    spec: PathBuf,
    /// File holding the deliverable: {"text"?, "json"?}.
    #[arg(long)]
    deliverable: PathBuf,
    /// Echoed in the signed document (e.g. an ERC-8183 job id).
    #[arg(long)]
    job_ref: Option<String>,
    /// Sworn only: where the final document is POSTed (HMAC-signed).
    #[arg(long)]
    webhook: Option<String>,
    /// Resume an earlier purchase: the same key never pays twice.
    #[arg(long)]
    idempotency_key: Option<String>,
    /// Sworn: print the pass-1 answer and return instead of waiting for pass 2.
    #[arg(long)]
    no_wait: bool,
    #[command(flatten)]
    remote: super::Remote,
    #[command(flatten)]
    pay: PayArgs,
}

impl Buy {
    pub async fn run(mut self) -> ExitCode {
        let remote = std::mem::replace(&mut self.remote, super::Remote { base: None });
        super::remote_call(remote, |api| async move { buy(&api, self).await }).await
    }
}

async fn buy(api: &Api, args: Buy) -> Result<ExitCode, Local> {
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
        "Idempotency-Key: {key}  (run again with --idempotency-key {key} to resume this purchase: the payment signed for it is sent again, nothing new is signed)"
    );
    Ok(
        match purchase(api, args.tier.as_str(), &body, &payer, &key, !args.no_wait).await? {
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
