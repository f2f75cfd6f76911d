//! `umpire validate`: the free check of a would-be purchase.

use std::path::PathBuf;
use std::process::ExitCode;

use reqwest::Method;
use umpire_core::json::Value;
use umpire_core::product::Tier;

use super::Local;
use super::client::{Api, print_json, refused};
use super::read_json;

/// Validate a would-be purchase for a tier (free): every problem, with hints.
#[derive(clap::Args)]
pub struct Validate {
    #[arg(value_parser = super::parse_tier)]
    tier: Tier,
    #[arg(long)]
    spec: PathBuf,
    #[arg(long)]
    deliverable: Option<PathBuf>,
    #[arg(long)]
    webhook: Option<String>,
    #[command(flatten)]
    remote: super::Remote,
}

impl Validate {
    pub async fn run(self) -> ExitCode {
        let Validate {
            tier,
            spec,
            deliverable,
            webhook,
            remote,
        } = self;
        let args = ValidateArgs {
            tier,
            spec,
            deliverable,
            webhook,
        };
        super::remote_call(remote, |api| async move { validate(&api, args).await }).await
    }
}

struct ValidateArgs {
    tier: Tier,
    spec: PathBuf,
    deliverable: Option<PathBuf>,
    webhook: Option<String>,
}

/// Validation: the answer on stdout; exit 1 when the purchase would be refused.
async fn validate(api: &Api, args: ValidateArgs) -> Result<ExitCode, Local> {
    let mut body = Value::object()
        .with("tier", args.tier.as_str())
        .with("spec", read_json(&args.spec)?);
    if let Some(d) = args.deliverable {
        body = body.with("deliverable", read_json(&d)?);
    }
    if let Some(w) = args.webhook {
        body = body.with("webhook_url", w);
    }
    let a = api
        .send(Method::POST, "/v1/validate", &[], Some(&body))
        .await?;
    if a.status >= 400 {
        return Ok(refused(&a));
    }
    print_json(&a.body);
    if a.body.get("valid").and_then(Value::as_bool) == Some(true) {
        eprintln!("valid: this purchase would be judged");
        return Ok(ExitCode::SUCCESS);
    }
    eprintln!("not valid: a purchase would be refused (nothing charged) for:");
    for p in a
        .body
        .get("problems")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let s = |k: &str| p.get(k).and_then(Value::as_str).unwrap_or("");
        eprintln!("  {}: {} ({})", s("where"), s("message"), s("code"));
        if !s("hint").is_empty() {
            eprintln!("    hint: {}", s("hint"));
        }
    }
    Ok(ExitCode::from(1))
}
