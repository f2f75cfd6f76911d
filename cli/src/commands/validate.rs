//! `umpire validate`: the free check of a would-be purchase.

use super::client::*;
use reqwest::Method;
use std::process::ExitCode;
use umpire_core::json::Value;

/// Validation: the answer on stdout; exit 1 when the purchase would be refused.
pub async fn validate(api: &Api, body: &Value) -> Result<ExitCode, Local> {
    let a = api
        .send(Method::POST, "/v1/validate", &[], Some(body))
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
