//! `umpire feedback`: payment-verified feedback, signed by the paying wallet.

use super::Local;
use super::client::{Api, print_json, refused};
use super::pay::wallet;
use alloy::primitives::{Address, B256};
use alloy::signers::SignerSync as _;
use reqwest::Method;
use std::path::PathBuf;
use std::process::ExitCode;
use umpire_core::json::Value;

pub struct FeedbackArgs {
    pub tx: String,
    pub merchant: String,
    pub outcome: String,
    pub would_repeat: Option<bool>,
    pub latency_ms: Option<u64>,
    pub key_file: Option<PathBuf>,
}

pub async fn feedback(api: &Api, args: FeedbackArgs) -> Result<ExitCode, Local> {
    let wallet = wallet(args.key_file.as_deref())?;
    let tx: B256 = args
        .tx
        .parse()
        .map_err(|_| Local(format!("--tx {} is not a 32-byte 0x hash", args.tx)))?;
    let merchant: Address = args.merchant.parse().map_err(|_| {
        Local(format!(
            "--merchant {} is not a 20-byte 0x address",
            args.merchant
        ))
    })?;
    let outcome = umpire_chain::claim::Outcome::parse(&args.outcome).ok_or_else(|| {
        Local(format!(
            "--outcome must be fulfilled, partial or failed, not {:?}",
            args.outcome
        ))
    })?;
    let message =
        umpire_chain::claim::message(&tx, &merchant, outcome, args.would_repeat, args.latency_ms);
    let signature = wallet.sign_message_sync(message.as_bytes())?;
    let lower = |b: &[u8]| umpire_chain::claim::lower_hex(b);
    let mut body = Value::object()
        .with("merchant", lower(merchant.as_slice()))
        .with("payer", lower(wallet.address().as_slice()))
        .with("tx_hash", lower(tx.as_slice()))
        .with("outcome", outcome.as_str())
        .with(
            "signature",
            alloy::primitives::hex::encode_prefixed(signature.as_bytes()),
        );
    if let Some(r) = args.would_repeat {
        body = body.with("would_repeat", r);
    }
    if let Some(l) = args.latency_ms {
        body = body.with("latency_ms", l);
    }
    eprintln!(
        "signed as {} (EIP-191) the message:\n{message}",
        wallet.address()
    );
    let a = api
        .send(Method::POST, "/v1/feedback", &[], Some(&body))
        .await?;
    if a.status != 201 {
        return Ok(refused(&a));
    }
    eprintln!("recorded: one feedback for this transaction, permanently");
    print_json(&a.body);
    Ok(ExitCode::SUCCESS)
}
