//! `umpire validate`: the free check of a would-be purchase.

use std::path::PathBuf;
use std::process::ExitCode;

use reqwest::Method;
use umpire_core::json::Value;

use super::Local;
use super::client::{Api, print_json, refused};
use super::read_json;

pub struct ValidateArgs {
    pub tier: String,
    pub spec: PathBuf,
    pub deliverable: Option<PathBuf>,
    pub webhook: Option<String>,
}

/// Validation: the answer on stdout; exit 1 when the purchase would be refused.
pub async fn validate(api: &Api, args: ValidateArgs) -> Result<ExitCode, Local> {
    let mut body = Value::object()
        .with("tier", args.tier)
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
