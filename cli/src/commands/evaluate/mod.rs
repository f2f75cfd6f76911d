//! `umpire evaluate`: the evaluator of an ERC-8183 job, closing the loop with an Umpire
//! verdict. In order, and stopping at the first "no":
//!
//! 1. Read the job (job.rs): our wallet must be its evaluator; a job already decided is
//!    reported and left alone (nothing paid, nothing sent); one not yet submitted, or
//!    expired, is refused. The spec is checked for the tier, and the service's key is
//!    loaded, before anything is paid.
//! 2. Match the deliverable to the provider's `submit` commitment (judge.rs): the
//!    commitment is the verdict's own `deliverable_hash`, so the chain and the document
//!    speak of the same bytes. A mismatch stops here, before any payment.
//! 3. Buy the verdict (verdict.rs) with `job_ref` naming the job, under an
//!    Idempotency-Key derived from the job, and keep a record of it (record.rs): a
//!    second run, or one resumed after a lost answer or a failed transaction, reads that
//!    verdict back and never pays again. Sworn waits for the final document.
//! 4. Verify the document offline (judge.rs; the service's published key, or a pinned
//!    file), and that it is about this job, this commitment, this spec and this tier.
//! 5. `complete` on pass, `reject` on fail (decide.rs), with `reason` = the document's
//!    `payload_sha256`; print the transaction and the document (output.rs).
//!
//! The command line is read in command.rs; `--watch` follows a contract (watch.rs).

mod brief;
mod command;
mod decide;
mod job;
mod judge;
mod output;
mod record;
mod verdict;
mod watch;

use std::path::PathBuf;
use std::process::ExitCode;

use alloy::primitives::Address;
use alloy::signers::local::PrivateKeySigner;
use umpire_core::product::Tier;
use umpire_core::signer::PublicKey;
use umpire_escrow::{ContractRef, Escrow, EscrowError, JobRef, JobRefError};

use super::client::Api;
use super::pay::{PayArgs, Payer, RailArg, wallet};
use super::read_json;
use crate::commands::Local;
pub use command::{Commitment, Evaluate};
pub use watch::WatchArgs;

/// One job (`job`, `spec`, `deliverable`), or every job of a contract (`watch`).
pub enum Target {
    Job {
        job: String,
        spec: PathBuf,
        deliverable: PathBuf,
    },
    Watch(WatchArgs),
}

struct EvaluateArgs {
    target: Target,
    rpc: String,
    tier: Tier,
    pub pay: PayArgs,
    pub evaluator_key_file: Option<PathBuf>,
    pub umpire_key: Option<String>,
    pub lookback_blocks: Option<u64>,
    pub data_dir: Option<PathBuf>,
}

/// How one job's evaluation ended.
enum Step {
    /// Decided, reported or refused: the exit code says which.
    Done(ExitCode),
    /// Something on the way failed for now (the chain, the service, a fetch): nothing
    /// more was paid than the kept purchase, and a later run may finish it.
    Again(String),
    /// This hour's spending budget has no room for it: nothing was paid; later.
    Wait(String),
    /// The spending budget is spent: nothing was paid, and no more will be.
    Stop(String),
    /// The contract cannot be evaluated at all (its jobs are unreadable): nothing was
    /// paid, and asking again will not change it (exit 1; a watch stops).
    Unusable(String),
}

/// A refusal on our side of the evaluation (exit 1), explained.
fn no(message: impl std::fmt::Display, hint: &str) -> Step {
    eprintln!("umpire evaluate: {message}");
    if !hint.is_empty() {
        eprintln!("  what to do: {hint}");
    }
    Step::Done(ExitCode::from(1))
}

/// A job's verdict skipped for good: nothing was paid, and nothing will be.
fn skip(job_ref: &JobRef, why: String) -> Step {
    eprintln!("job {job_ref}: {why}; skipped, nothing paid");
    Step::Done(ExitCode::SUCCESS)
}

/// An escrow error as a step: a contract whose jobs cannot be read will never be
/// evaluated, a passing failure may be tried again, anything else is a refusal.
fn chain_step(e: EscrowError) -> Step {
    if matches!(e, EscrowError::Unreadable(_)) {
        Step::Unusable(format!("escrow: {e}"))
    } else if e.is_transient() {
        Step::Again(format!("escrow: {e}"))
    } else {
        no(format!("escrow: {e}"), "")
    }
}

/// The evaluator's key: --evaluator-key-file, else $UMPIRE_EVALUATOR_KEY, else the EVM
/// wallet that pays (--key-file or $UMPIRE_WALLET_KEY) when paying on Base.
fn evaluator_key(args: &EvaluateArgs) -> Result<PrivateKeySigner, Local> {
    let parse = |text: &str, source: &str| {
        text.trim().parse::<PrivateKeySigner>().map_err(|_| {
            Local(format!(
                "{source} does not hold a private key (0x + 64 hex characters)"
            ))
        })
    };
    if let Some(p) = &args.evaluator_key_file {
        let text =
            std::fs::read_to_string(p).map_err(|e| Local(format!("{}: {e}", p.display())))?;
        return parse(&text, &p.display().to_string());
    }
    if let Ok(text) = std::env::var("UMPIRE_EVALUATOR_KEY") {
        return parse(&text, "UMPIRE_EVALUATOR_KEY");
    }
    if args.pay.rail == RailArg::Base {
        return wallet(args.pay.key_file.as_deref());
    }
    Err(Local(
        "no evaluator key: pass --evaluator-key-file FILE or set UMPIRE_EVALUATOR_KEY (the job's evaluator wallet signs complete/reject)".into(),
    ))
}

/// What an evaluation works with: the service and its keys, the escrow, the payer, our
/// evaluator address and where purchases are recorded.
struct Evaluator<'a> {
    api: &'a Api,
    escrow: Escrow,
    on: ContractRef,
    payer: Payer,
    me: Address,
    key_source: String,
    keys: Vec<PublicKey>,
    data_dir: PathBuf,
    /// How long a sworn verdict's final document is waited for (verdict.rs).
    final_wait: std::time::Duration,
}

async fn evaluate(api: &Api, args: EvaluateArgs) -> Result<ExitCode, Local> {
    // Read first: a test switch set where no build honours it stops the evaluation
    // before anything is paid or sent.
    let final_wait = verdict::final_wait(
        std::env::var_os(verdict::FINAL_WAIT_SWITCH).map(|v| v.to_string_lossy().into_owned()),
    )?;
    let tier = args.tier;
    let on: ContractRef = match &args.target {
        Target::Job { job, .. } => job
            .parse::<JobRef>()
            .map_err(|e| Local(e.to_string()))?
            .contract_ref(),
        Target::Watch(w) => w
            .contract
            .parse()
            .map_err(|e: JobRefError| Local(e.to_string()))?,
    };
    let signer = evaluator_key(&args)?;
    let payer = Payer::new(api, &args.pay).await?;
    let mut escrow = Escrow::connect(&args.rpc, &on, Some(signer))
        .await
        .map_err(|e| Local(format!("escrow: {e}")))?;
    if let Some(blocks) = args.lookback_blocks {
        escrow = escrow.with_lookback(blocks);
    }
    let me = escrow
        .evaluator()
        .ok_or_else(|| Local("no evaluator address".into()))?;
    // The key is read before anything is paid: a wrong one must not cost a verdict.
    let key_source = args
        .umpire_key
        .clone()
        .unwrap_or_else(|| format!("{}/.well-known/umpire-key.json", api.base()));
    let keys = super::verify::load_keys(Some(&key_source), None)
        .await
        .map_err(|e| Local(format!("the service's key ({key_source}): {e}")))?;
    let ev = Evaluator {
        api,
        escrow,
        on,
        payer,
        me,
        key_source,
        keys,
        data_dir: args
            .data_dir
            .clone()
            .unwrap_or_else(umpire_server::datadir::default_data_dir),
        final_wait,
    };
    match args.target {
        Target::Job {
            job,
            spec,
            deliverable,
        } => {
            let job_ref: JobRef = job.parse().map_err(|e: JobRefError| Local(e.to_string()))?;
            let spec = read_json(&spec)?;
            let deliverable_json = read_json(&deliverable)?;
            Ok(exit_code(
                ev.judge(&job_ref, tier, spec, deliverable_json).await,
            ))
        }
        Target::Watch(w) => watch::watch(&ev, tier, &w).await,
    }
}

/// How a run for one job ends: unlike a watch, it has no later poll to try again at, so
/// whatever is left for later is the caller's to run again (exit 2).
fn exit_code(step: Step) -> ExitCode {
    match step {
        Step::Done(code) => code,
        Step::Unusable(why) => {
            eprintln!("umpire evaluate: {why}");
            eprintln!(
                "  what to do: nothing was paid; check the contract address, or evaluate this escrow's jobs another way"
            );
            ExitCode::from(1)
        }
        Step::Again(why) | Step::Wait(why) | Step::Stop(why) => {
            eprintln!("umpire evaluate: {why}");
            eprintln!(
                "  what to do: run again later; a verdict already bought for the job is read back, not bought again"
            );
            ExitCode::from(2)
        }
    }
}
