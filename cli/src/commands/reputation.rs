//! `umpire reputation`: a merchant's report, paid with x402.

use super::Local;
use super::client::{Api, print_json, print_readable, refused};
use super::pay::{PayArgs, Payer};
use reqwest::Method;
use std::process::ExitCode;
use umpire_core::json::Value;

/// Buy a merchant's signed reputation report ($0.01) and print it readably.
#[derive(clap::Args)]
pub struct Reputation {
    merchant: String,
    /// Print the whole answer (report and receipt) as JSON.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    remote: super::Remote,
    #[command(flatten)]
    pay: PayArgs,
}

impl Reputation {
    pub async fn run(self) -> ExitCode {
        let Reputation {
            merchant,
            json,
            remote,
            pay,
        } = self;
        super::remote_call(remote, |api| async move {
            reputation(&api, &merchant, json, &pay).await
        })
        .await
    }
}

pub async fn reputation(
    api: &Api,
    merchant: &str,
    json: bool,
    pay: &PayArgs,
) -> Result<ExitCode, Local> {
    let payer = Payer::new(api, pay).await?;
    let key = umpire_host::random_id("umpire-cli");
    let a = super::purchase::paid(
        api,
        Method::GET,
        &format!(
            "/v1/reputation?merchant={}",
            umpire_core::urlenc::component(merchant)
        ),
        None,
        &payer,
        &key,
    )
    .await?;
    if a.status != 200 {
        return Ok(refused(&a));
    }
    if json {
        print_json(&a.body);
        return Ok(ExitCode::SUCCESS);
    }
    let report = a.body.get("report").cloned().unwrap_or(Value::Null);
    println!("Reputation of {merchant}");
    print_readable(&report, 1);
    Ok(ExitCode::SUCCESS)
}
