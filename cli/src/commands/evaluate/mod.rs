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

use alloy::primitives::{Address, B256, U256};
use alloy::signers::local::PrivateKeySigner;
use umpire_core::json::Value;
use umpire_core::spec::{Deliverable, parse_deliverable};
use umpire_escrow::{
    ContractRef, Decision, Escrow, EscrowError, Job, JobRef, JobRefError, Outcome, Status,
};

use super::buy::purchase;
use super::client::{Api, Local, print_json};
use super::pay::{PayArgs, Payer, RailArg, wallet};
use super::read_json;

/// One job (`job`, `spec`, `deliverable`), or every job of a contract (`watch`).
pub enum Target {
    Job {
        job: String,
        spec: PathBuf,
        deliverable: PathBuf,
    },
    Watch(WatchArgs),
}

pub struct WatchArgs {
    /// eip155:CHAIN:CONTRACT
    pub contract: String,
    pub from_block: Option<u64>,
    pub poll_seconds: u64,
    /// Handle what is there, then stop.
    pub once: bool,
}

pub struct EvaluateArgs {
    pub target: Target,
    pub rpc: String,
    pub tier: String,
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

/// What an evaluation works with: the service, the escrow, the payer, our evaluator
/// address and where the service's key is read.
struct Evaluator<'a> {
    api: &'a Api,
    escrow: Escrow,
    on: ContractRef,
    payer: Payer,
    me: Address,
    key_source: String,
}

pub async fn evaluate(api: &Api, args: EvaluateArgs) -> Result<ExitCode, Local> {
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
    let payer = Payer::from_args(&args.pay)?;
    let mut escrow = Escrow::connect(&args.rpc, &on, Some(signer))
        .await
        .map_err(chain_error)?;
    if let Some(blocks) = args.lookback_blocks {
        escrow = escrow.with_lookback(blocks);
    }
    let me = escrow
        .evaluator()
        .ok_or_else(|| Local("no evaluator address".into()))?;
    let key_source = args
        .umpire_key
        .clone()
        .unwrap_or_else(|| format!("{}/.well-known/umpire-key.json", api.base()));
    let ev = Evaluator {
        api,
        escrow,
        on,
        payer,
        me,
        key_source,
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
            ev.judge(&job_ref, &args.tier, spec, deliverable_json).await
        }
        Target::Watch(w) => watch(&ev, &args.tier, &w).await,
    }
}

impl Evaluator<'_> {
    /// One job, steps 1 to 5 of the module's list.
    async fn judge(
        &self,
        job_ref: &JobRef,
        tier: &str,
        spec: Value,
        deliverable_json: Value,
    ) -> Result<ExitCode, Local> {
        let (escrow, me, api) = (&self.escrow, self.me, self.api);
        let job_ref = *job_ref;
        let deliverable: Deliverable = parse_deliverable(&deliverable_json, "deliverable")
            .map_err(|p| Local(format!("the deliverable: {}", p[0].message)))?;
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
            return report_decided(escrow, &job_ref, job.status).await;
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
        eprintln!("buying a {tier} verdict (Idempotency-Key {key})");
        let answer = match purchase(api, tier, &body, &self.payer, &key, true).await? {
            Ok(a) => a,
            Err(code) => return Ok(code),
        };
        let doc = answer.get("document").cloned().unwrap_or(Value::Null);

        // 4. The document, verified offline, about this job and these bytes.
        let key_source = &self.key_source;
        let keys = super::verify::load_keys(Some(key_source), None)
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
            return report_decided(escrow, &job_ref, now_status).await;
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
}

/// How a job's description tells a watching evaluator what to judge: a JSON object
/// whose `umpire` member holds the spec (inline, or a URL) and where the provider
/// publishes its deliverable (docs/erc8183.md).
#[derive(Debug, PartialEq)]
struct Brief {
    tier: Option<String>,
    spec: SpecSource,
    /// `{job_id}` and `{commitment}` are replaced by the job's id and the provider's
    /// commitment (0x and 64 hex digits), so a deliverable can live at its own hash.
    deliverable_url: String,
}

#[derive(Debug, PartialEq)]
enum SpecSource {
    Inline(Value),
    Url(String),
}

fn brief(description: &str) -> Result<Brief, String> {
    let v = umpire_core::json::parse(description.as_bytes())
        .map_err(|_| "the description is not JSON".to_owned())?;
    let b = v
        .get("umpire")
        .ok_or("the description has no \"umpire\" object")?;
    let text = |k: &str| b.get(k).and_then(Value::as_str).map(str::to_owned);
    let spec = match (b.get("spec"), text("spec_url")) {
        (Some(spec), None) => SpecSource::Inline(spec.clone()),
        (None, Some(url)) => SpecSource::Url(url),
        _ => return Err("umpire needs exactly one of spec and spec_url".into()),
    };
    let deliverable_url = text("deliverable_url").ok_or("umpire.deliverable_url is missing")?;
    Ok(Brief {
        tier: text("tier"),
        spec,
        deliverable_url,
    })
}

/// A JSON document fetched through the SSRF-safe fetcher (public addresses only,
/// bounded in time and size), as the service fetches.
async fn fetch_json(fetcher: &umpire_fetch::Fetcher, url: &str) -> Result<Value, String> {
    fetcher
        .policy()
        .check_url(url)
        .map_err(|e| format!("{url}: {}", e.message))?;
    let fetched = fetcher.fetch(url).await;
    let Some(body) = fetched.body else {
        let why = fetched.observation.error.unwrap_or_default();
        return Err(format!("{url}: {why}"));
    };
    if body.status != 200 {
        return Err(format!("{url}: HTTP {}", body.status));
    }
    if body.truncated {
        return Err(format!("{url}: the body is larger than the fetcher reads"));
    }
    umpire_core::json::parse(&body.body).map_err(|e| format!("{url}: not JSON: {e}"))
}

/// What happened to one watched job.
enum Watched {
    /// Judged, refused, or not ours: never looked at again.
    Done,
    /// Something on the way failed (the chain, a fetch, the service): try again later.
    Again(String),
}

impl Evaluator<'_> {
    async fn watched(&self, id: U256, tier: &str, fetcher: &umpire_fetch::Fetcher) -> Watched {
        let job_ref = self.on.job(id);
        let job = match self.escrow.job(id).await {
            Ok(j) => j,
            Err(e) => return Watched::Again(e.to_string()),
        };
        if job.evaluator != self.me {
            eprintln!(
                "job {job_ref}: its evaluator is {}, not us; skipped",
                job.evaluator
            );
            return Watched::Done;
        }
        if job.status != Status::Submitted {
            eprintln!("job {job_ref}: {}; nothing to do", job.status.name());
            return Watched::Done;
        }
        let brief = match brief(&job.description) {
            Ok(b) => b,
            Err(e) => {
                eprintln!("job {job_ref}: not evaluated, nothing paid: {e} (see docs/erc8183.md)");
                return Watched::Done;
            }
        };
        let commitment = match self.escrow.submission(id).await {
            Ok(Some(s)) => bytes32_hex(&s.deliverable),
            Ok(None) => return Watched::Again("no JobSubmitted event found yet".into()),
            Err(e) => return Watched::Again(e.to_string()),
        };
        let spec = match brief.spec {
            SpecSource::Inline(v) => v,
            SpecSource::Url(url) => match fetch_json(fetcher, &url).await {
                Ok(v) => v,
                Err(e) => return Watched::Again(format!("the spec: {e}")),
            },
        };
        let url = brief
            .deliverable_url
            .replace("{job_id}", &id.to_string())
            .replace("{commitment}", &commitment);
        let deliverable = match fetch_json(fetcher, &url).await {
            Ok(v) => v,
            Err(e) => return Watched::Again(format!("the deliverable: {e}")),
        };
        let tier = brief.tier.as_deref().unwrap_or(tier);
        match self.judge(&job_ref, tier, spec, deliverable).await {
            Ok(_) => Watched::Done,
            Err(e) => Watched::Again(e.0),
        }
    }
}

/// Follows the contract's `JobSubmitted` events and evaluates each job whose evaluator
/// is our wallet, from what its description names. A job whose evaluation failed on
/// the way (a fetch, the chain, the service) is tried again at the next poll; one that
/// was judged or refused is not. One line of JSON per judged job on stdout.
async fn watch(ev: &Evaluator<'_>, tier: &str, w: &WatchArgs) -> Result<ExitCode, Local> {
    let fetcher = umpire_fetch::Fetcher::from_env().map_err(Local)?;
    let head = ev.escrow.head().await.map_err(chain_error)?;
    let mut from = w
        .from_block
        .unwrap_or_else(|| head.saturating_sub(ev.escrow.lookback()));
    eprintln!(
        "watching {} from block {from} for jobs whose evaluator is {}",
        ev.on, ev.me
    );
    let mut pending: Vec<U256> = Vec::new();
    let mut done: std::collections::HashSet<U256> = std::collections::HashSet::new();
    loop {
        match ev.escrow.head().await {
            Ok(head) if head >= from => match ev.escrow.submitted_between(from, head).await {
                Ok(ids) => {
                    for id in ids {
                        if !done.contains(&id) && !pending.contains(&id) {
                            pending.push(id);
                        }
                    }
                    from = head + 1;
                }
                Err(e) => eprintln!("reading JobSubmitted events failed: {e}; trying again"),
            },
            Ok(_) => {}
            Err(e) => eprintln!("the chain did not answer: {e}; trying again"),
        }
        let mut again = Vec::new();
        for id in pending.drain(..) {
            match ev.watched(id, tier, &fetcher).await {
                Watched::Done => {
                    done.insert(id);
                }
                Watched::Again(why) => {
                    eprintln!(
                        "job {}: {why}; trying again at the next poll",
                        ev.on.job(id)
                    );
                    again.push(id);
                }
            }
        }
        pending = again;
        if w.once {
            return Ok(if pending.is_empty() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(2)
            });
        }
        tokio::time::sleep(std::time::Duration::from_secs(w.poll_seconds.max(1))).await;
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_brief_names_a_spec_or_its_url_and_where_the_deliverable_is() {
        let b = brief(r#"{"umpire":{"tier":"probe","spec":{"checks":[]},"deliverable_url":"https://p.example/{commitment}.json"}}"#)
            .expect("brief");
        assert_eq!(b.tier.as_deref(), Some("probe"));
        assert!(matches!(b.spec, SpecSource::Inline(_)));
        assert_eq!(b.deliverable_url, "https://p.example/{commitment}.json");
        let b = brief(r#"{"umpire":{"spec_url":"https://p.example/spec.json","deliverable_url":"https://p.example/d"}}"#)
            .expect("brief");
        assert_eq!(
            b.spec,
            SpecSource::Url("https://p.example/spec.json".into())
        );
        assert_eq!(b.tier, None);
        for bad in [
            "build me a website",
            r#"{"other":{}}"#,
            r#"{"umpire":{"deliverable_url":"https://p.example/d"}}"#,
            r#"{"umpire":{"spec":{},"spec_url":"https://x","deliverable_url":"https://p.example/d"}}"#,
            r#"{"umpire":{"spec":{}}}"#,
        ] {
            assert!(brief(bad).is_err(), "{bad}");
        }
    }
}
