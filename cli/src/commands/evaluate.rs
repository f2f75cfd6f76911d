//! `umpire evaluate`: the evaluator of an ERC-8183 job, closing the loop with an Umpire
//! verdict. In order, and stopping at the first "no":
//!
//! 1. Read the job: our wallet must be its evaluator; a job already decided is reported
//!    and left alone (nothing paid, nothing sent); one not yet submitted, or expired,
//!    is refused.
//! 2. Match the deliverable to the provider's `submit` commitment: the commitment is
//!    the verdict's own `deliverable_hash`, so the chain and the document speak of the
//!    same bytes. A mismatch stops here, before any payment.
//! 3. Buy the verdict with `job_ref` naming the job, under an Idempotency-Key derived
//!    from the job: a second run, or one resumed after a lost answer, gets the first
//!    purchase back and never pays again. Sworn waits for the final document.
//! 4. Verify the document offline (the service's published key, or a pinned file), and
//!    that it names this job and this commitment.
//! 5. `complete` on pass, `reject` on fail, with `reason` = the document's
//!    `payload_sha256`; print the transaction and the document.

use std::path::PathBuf;
use std::process::ExitCode;

use alloy::primitives::B256;
use alloy::signers::local::PrivateKeySigner;
use umpire_core::json::Value;
use umpire_core::spec::{Deliverable, parse_deliverable};
use umpire_escrow::{Decision, Escrow, EscrowError, Job, JobRef, Outcome, Status};

use super::buy::purchase;
use super::client::{Api, Local, print_json};
use super::pay::{PayArgs, Payer, RailArg, wallet};
use super::read_json;

pub struct EvaluateArgs {
    pub job: String,
    pub rpc: String,
    pub tier: String,
    pub spec: PathBuf,
    pub deliverable: PathBuf,
    pub pay: PayArgs,
    pub evaluator_key_file: Option<PathBuf>,
    pub umpire_key: Option<String>,
    pub lookback_blocks: Option<u64>,
}

/// A refusal on our side of the evaluation (exit 1), explained.
fn no(message: impl std::fmt::Display, hint: &str) -> ExitCode {
    eprintln!("umpire evaluate: {message}");
    if !hint.is_empty() {
        eprintln!("  what to do: {hint}");
    }
    ExitCode::from(1)
}

fn chain_error(e: EscrowError) -> Local {
    Local(format!("escrow: {e}"))
}

/// `0x` and the 64 hex digits of a 32-byte value.
pub fn bytes32_hex(b: &B256) -> String {
    format!("0x{}", alloy::hex::encode(b))
}

/// The bytes32 a sha256 hex string (a `deliverable_hash`, a `payload_sha256`) is.
pub fn bytes32_of(hex: &str) -> Option<B256> {
    (hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit()))
        .then(|| hex.parse().ok())
        .flatten()
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

/// What a decided job looks like on stdout.
fn print_decided(job: &JobRef, status: Status, outcome: Option<&Outcome>) {
    let mut v = Value::object()
        .with("job", job.to_string())
        .with("status", status.name())
        .with("already_decided", true);
    if let Some(o) = outcome {
        v = v
            .with("reason", bytes32_hex(&o.reason))
            .with("by", o.by.to_string());
        if let Some(tx) = o.transaction {
            v = v.with("transaction", bytes32_hex(&tx));
        }
    }
    print_json(&v);
}

async fn report_decided(escrow: &Escrow, job: &JobRef, status: Status) -> Result<ExitCode, Local> {
    let outcome = escrow.outcome(job.job_id).await.map_err(chain_error)?;
    eprintln!(
        "job {job} is already {}: nothing to evaluate, nothing paid, nothing sent",
        status.name()
    );
    print_decided(job, status, outcome.as_ref());
    Ok(ExitCode::SUCCESS)
}

pub async fn evaluate(api: &Api, args: EvaluateArgs) -> Result<ExitCode, Local> {
    let job_ref: JobRef = args
        .job
        .parse()
        .map_err(|e: umpire_escrow::JobRefError| Local(e.to_string()))?;
    let spec = read_json(&args.spec)?;
    let deliverable_json = read_json(&args.deliverable)?;
    let deliverable: Deliverable = parse_deliverable(&deliverable_json, "deliverable")
        .map_err(|p| Local(format!("{}: {}", args.deliverable.display(), p[0].message)))?;
    let signer = evaluator_key(&args)?;
    let payer = Payer::from_args(&args.pay)?;
    let mut escrow = Escrow::connect(&args.rpc, &job_ref, Some(signer))
        .await
        .map_err(chain_error)?;
    if let Some(blocks) = args.lookback_blocks {
        escrow = escrow.with_lookback(blocks);
    }
    let me = escrow
        .evaluator()
        .ok_or_else(|| Local("no evaluator address".into()))?;

    // 1. The job.
    let job: Job = match escrow.job(job_ref.job_id).await {
        Ok(j) => j,
        Err(EscrowError::UnknownJob(id)) => {
            return Ok(no(
                format!("job {id} does not exist on {}", job_ref.contract),
                "check the job id and the contract address",
            ));
        }
        Err(e) => return Err(chain_error(e)),
    };
    if job.evaluator != me {
        return Ok(no(
            format!(
                "this wallet ({me}) is not the job's evaluator ({})",
                job.evaluator
            ),
            "run with the evaluator's key (--evaluator-key-file or UMPIRE_EVALUATOR_KEY)",
        ));
    }
    if job.status.is_terminal() {
        return report_decided(&escrow, &job_ref, job.status).await;
    }
    if job.status != Status::Submitted {
        return Ok(no(
            format!(
                "job {job_ref} is {}: the provider has not submitted its work yet",
                job.status.name()
            ),
            "run again after the provider's submit (JobSubmitted); nothing was paid",
        ));
    }
    let now = escrow.chain_time().await.map_err(chain_error)?;
    if alloy::primitives::U256::from(now) >= job.expired_at {
        return Ok(no(
            format!(
                "job {job_ref} expired at {} (chain time {now}): anyone may claim its refund, so no verdict is bought for it",
                job.expired_at
            ),
            "nothing was paid; the client can call claimRefund",
        ));
    }

    // 2. The provider's commitment against the deliverable in hand.
    let Some(submission) = escrow
        .submission(job_ref.job_id)
        .await
        .map_err(chain_error)?
    else {
        return Ok(no(
            format!("job {job_ref} is Submitted but no JobSubmitted event was found"),
            "look further back with --lookback-blocks N; nothing was paid",
        ));
    };
    let ours = deliverable.hash();
    let committed = alloy::hex::encode(submission.deliverable);
    if ours != committed {
        return Ok(no(
            format!(
                "the deliverable does not match the provider's commitment: it hashes to 0x{ours}, the provider submitted 0x{committed}"
            ),
            "evaluate the deliverable the provider committed to (`umpire commitment FILE` prints a file's hash); nothing was paid",
        ));
    }
    eprintln!("job {job_ref}: Submitted, commitment 0x{committed} matches the deliverable");

    // 3. The verdict, bought once per job.
    let body = Value::object()
        .with("spec", spec)
        .with("deliverable", deliverable_json)
        .with("job_ref", job_ref.job_ref());
    let key = job_ref.idempotency_key();
    eprintln!("buying a {} verdict (Idempotency-Key {key})", args.tier);
    let answer = match purchase(api, &args.tier, &body, &payer, &key, true).await? {
        Ok(a) => a,
        Err(code) => return Ok(code),
    };
    let doc = answer.get("document").cloned().unwrap_or(Value::Null);

    // 4. The document, verified offline, about this job and these bytes.
    let key_source = args
        .umpire_key
        .clone()
        .unwrap_or_else(|| format!("{}/.well-known/umpire-key.json", api.base()));
    let keys = super::verify::load_keys(Some(&key_source), None)
        .await
        .map_err(Local)?;
    let steps = umpire_core::document::verify(&doc, &keys, Some(&deliverable));
    if let Some(bad) = steps.iter().find(|s| !s.ok) {
        return Ok(no(
            format!(
                "the verdict document does not verify ({}: {})",
                bad.name, bad.detail
            ),
            "nothing was sent to the escrow; check --umpire-key",
        ));
    }
    let names_job = doc
        .get("job_ref")
        .and_then(Value::as_str)
        .and_then(|s| s.parse::<JobRef>().ok())
        == Some(job_ref);
    if !names_job {
        return Ok(no(
            "the verdict document does not name this job in job_ref",
            "nothing was sent to the escrow",
        ));
    }
    let verdict = doc.get("verdict").and_then(Value::as_str).unwrap_or("");
    let decision = match verdict {
        "pass" => Decision::Complete,
        "fail" => Decision::Reject,
        other => {
            return Ok(no(
                format!("the document's verdict is {other:?}, neither pass nor fail"),
                "nothing was sent to the escrow",
            ));
        }
    };
    let reason = doc
        .get("signature")
        .and_then(|s| s.get("payload_sha256"))
        .and_then(Value::as_str)
        .and_then(bytes32_of)
        .ok_or_else(|| Local("the document has no payload_sha256".into()))?;
    eprintln!(
        "verdict {verdict}, verified offline with {key_source}: {} with reason {}",
        decision.name(),
        bytes32_hex(&reason)
    );

    // 5. Complete or reject, unless someone decided the job meanwhile.
    let now_status = escrow
        .job(job_ref.job_id)
        .await
        .map_err(chain_error)?
        .status;
    if now_status != Status::Submitted {
        return report_decided(&escrow, &job_ref, now_status).await;
    }
    let tx = match escrow.decide(job_ref.job_id, decision, reason).await {
        Ok(tx) => tx,
        Err(EscrowError::Refused { what, message }) => {
            return Ok(no(
                format!("the escrow refused {what}: {message}"),
                "run again: a job decided meanwhile is reported as such",
            ));
        }
        Err(e) => return Err(chain_error(e)),
    };
    eprintln!("{} sent: {}", decision.name(), bytes32_hex(&tx));
    print_json(
        &Value::object()
            .with("job", job_ref.to_string())
            .with(
                "status",
                match decision {
                    Decision::Complete => Status::Completed.name(),
                    Decision::Reject => Status::Rejected.name(),
                },
            )
            .with("decision", decision.name())
            .with("transaction", bytes32_hex(&tx))
            .with("reason", bytes32_hex(&reason))
            .with("verdict", verdict)
            .with("document", doc),
    );
    Ok(ExitCode::SUCCESS)
}

/// `umpire commitment FILE`: the bytes32 a provider submits for a deliverable (its
/// `deliverable_hash`), which `umpire evaluate` matches before paying.
pub fn commitment(path: &std::path::Path) -> ExitCode {
    let v = match read_json(path) {
        Ok(v) => v,
        Err(e) => return super::fail(2, &e),
    };
    match parse_deliverable(&v, "deliverable") {
        Ok(d) => {
            println!("0x{}", d.hash());
            ExitCode::SUCCESS
        }
        Err(p) => super::fail(2, &format!("{}: {}", path.display(), p[0].message)),
    }
}
