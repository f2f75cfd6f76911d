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

/// Leave feedback on a merchant you paid (free): signs the contract's message with
/// your wallet (EIP-191) and submits it; refusals are explained.
#[derive(clap::Args)]
pub struct Feedback {
    /// The transaction that paid the merchant (USDC on Base).
    #[arg(long)]
    tx: String,
    #[arg(long)]
    merchant: String,
    /// fulfilled, partial or failed.
    #[arg(long)]
    outcome: String,
    /// You would buy from this merchant again.
    #[arg(long, conflicts_with = "would_not_repeat")]
    would_repeat: bool,
    /// You would not buy from this merchant again.
    #[arg(long)]
    would_not_repeat: bool,
    /// How long the merchant took, in milliseconds.
    #[arg(long)]
    latency_ms: Option<u64>,
    #[command(flatten)]
    remote: super::Remote,
    #[command(flatten)]
    key: super::KeyArg,
}

impl Feedback {
    pub async fn run(self) -> ExitCode {
        let args = FeedbackArgs {
            tx: self.tx,
            merchant: self.merchant,
            outcome: self.outcome,
            would_repeat: match (self.would_repeat, self.would_not_repeat) {
                (true, _) => Some(true),
                (_, true) => Some(false),
                _ => None,
            },
            latency_ms: self.latency_ms,
            key_file: self.key.key_file,
        };
        super::remote_call(self.remote, |api| async move { feedback(&api, args).await }).await
    }
}

struct FeedbackArgs {
    tx: String,
    merchant: String,
    outcome: String,
    would_repeat: Option<bool>,
    latency_ms: Option<u64>,
    key_file: Option<PathBuf>,
}

async fn feedback(api: &Api, args: FeedbackArgs) -> Result<ExitCode, Local> {
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
