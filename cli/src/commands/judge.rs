//! `umpire judge`: a verdict signed with the local key, without payment.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use umpire_api::products::verdict::purchase::{Envelope, assess};
use umpire_core::json::Value;
use umpire_core::product::Tier;

use super::{fail, read_json, state_for};

/// Judge a deliverable locally and print the signed verdict document, exactly as
/// the service builds it (checks that fetch URLs are not run here).
#[derive(clap::Args)]
pub struct Judge {
    /// witness, basic, probe or sworn.
    #[arg(long, default_value = "basic", value_parser = super::parse_tier)]
    tier: Tier,
    /// File holding the spec: {"checks":[...]}.
    #[arg(long)]
    spec: PathBuf,
    /// File holding the deliverable object: {"text"?, "json"?}.
    #[arg(long)]
    deliverable: PathBuf,
    /// Echoed in the document (e.g. an ERC-8183 job id).
    #[arg(long)]
    job_ref: Option<String>,
    /// Data directory whose key signs. Default as for `serve`.
    #[arg(long)]
    data_dir: Option<PathBuf>,
}

impl Judge {
    pub async fn run(self) -> ExitCode {
        run(
            self.tier,
            &self.spec,
            &self.deliverable,
            self.job_ref,
            self.data_dir,
        )
        .await
    }
}

async fn run(
    tier: Tier,
    spec: &Path,
    deliverable: &Path,
    job_ref: Option<String>,
    data_dir: Option<PathBuf>,
) -> ExitCode {
    let (spec_v, deliverable_v) = match (read_json(spec), read_json(deliverable)) {
        (Ok(s), Ok(d)) => (s, d),
        (Err(e), _) | (_, Err(e)) => return fail(2, &e),
    };
    let body = Value::object()
        .with("spec", spec_v)
        .with("deliverable", deliverable_v)
        .with("job_ref", job_ref);
    let Some(obj) = body.as_object() else {
        return fail(2, "internal: body is not an object");
    };
    let purchase = match assess(
        tier,
        obj,
        Envelope::Purchase,
        &umpire_fetch::Policy::default(),
    )
    .into_purchase(tier)
    {
        Ok(p) => p,
        Err(e) => {
            eprintln!("umpire: {}: {}", e.code, e.message);
            for (k, v) in &e.details {
                if k == "problems" {
                    for p in v.as_array().into_iter().flatten() {
                        eprintln!(
                            "  {}: {} ({})\n    hint: {}",
                            p.get("where").and_then(Value::as_str).unwrap_or(""),
                            p.get("message").and_then(Value::as_str).unwrap_or(""),
                            p.get("code").and_then(Value::as_str).unwrap_or(""),
                            p.get("hint").and_then(Value::as_str).unwrap_or("")
                        );
                    }
                }
            }
            return ExitCode::from(2);
        }
    };
    if purchase.spec.network_check_count() > 0 {
        return fail(
            2,
            "this spec fetches URLs; `umpire judge` runs only checks on the deliverable itself",
        );
    }
    let state = match state_for(data_dir, true, false, None).await {
        Ok((s, _)) => s,
        Err(e) => return fail(2, &e),
    };
    let results =
        match umpire_api::products::verdict::judge::run_checks(&state, &purchase, Vec::new()).await
        {
            Ok(r) => r,
            Err(e) => return fail(1, &e.to_string()),
        };
    let id = umpire_host::random_id("vrd");
    let doc =
        umpire_api::products::verdict::judge::signed_verdict(&state, &purchase, &id, &results);
    println!("{}", doc.to_canonical_string());
    ExitCode::SUCCESS
}
