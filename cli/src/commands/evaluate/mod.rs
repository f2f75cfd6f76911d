//! `umpire evaluate`: the evaluator of an ERC-8183 job, closing the loop with an Umpire
//! verdict. In order, and stopping at the first "no":
//!
//! 1. Read the job: our wallet must be its evaluator; a job already decided is reported
//!    and left alone (nothing paid, nothing sent); one not yet submitted, or expired,
//!    is refused. The spec is checked for the tier, and the service's key is loaded,
//!    before anything is paid.
//! 2. Match the deliverable to the provider's `submit` commitment: the commitment is
//!    the verdict's own `deliverable_hash`, so the chain and the document speak of the
//!    same bytes. A mismatch stops here, before any payment.
//! 3. Buy the verdict with `job_ref` naming the job, under an Idempotency-Key derived
//!    from the job, and keep a record of it (record.rs): a second run, or one resumed
//!    after a lost answer or a failed transaction, reads that verdict back and never
//!    pays again. Sworn waits for the final document.
//! 4. Verify the document offline (the service's published key, or a pinned file), and
//!    that it is about this job, this commitment, this spec and this tier.
//! 5. `complete` on pass, `reject` on fail, with `reason` = the document's
//!    `payload_sha256`; print the transaction and the document.

mod record;
mod watch;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use alloy::primitives::{Address, B256, U256};
use alloy::signers::local::PrivateKeySigner;
use reqwest::Method;
use umpire_core::json::Value;
use umpire_core::product::Tier;
use umpire_core::signer::PublicKey;
use umpire_core::spec::{Deliverable, parse_deliverable, parse_spec};
use umpire_escrow::{
    ContractRef, Decision, Escrow, EscrowError, Job, JobRef, JobRefError, Outcome, Status,
    bytes32_hex, bytes32_of,
};

use super::buy::{Refused, buy_once, wait_final};
use super::client::{Api, print_json};
use super::lookup::read_header;
use super::pay::{PayArgs, Payer, RailArg, wallet};
use super::read_json;
use crate::commands::Local;
use record::Record;
pub use watch::WatchArgs;

/// The longest an evaluation waits for a sworn verdict's final document before it
/// leaves the purchase for the next run.
const FINAL_WAIT: Duration = Duration::from_secs(15 * 60);

/// One job (`job`, `spec`, `deliverable`), or every job of a contract (`watch`).
pub enum Target {
    Job {
        job: String,
        spec: PathBuf,
        deliverable: PathBuf,
    },
    Watch(WatchArgs),
}

/// Evaluate an ERC-8183 job with an Umpire verdict: check the deliverable against
/// the provider's on-chain commitment, buy the verdict (job_ref names the job),
/// verify it offline, then `complete` on pass or `reject` on fail with
/// reason = the document's payload_sha256. Run again, it pays nothing and sends
/// nothing twice.
#[derive(clap::Args)]
pub struct Evaluate {
    /// The job: eip155:CHAIN_ID:CONTRACT:JOB_ID.
    #[arg(long, required_unless_present = "watch", conflicts_with = "watch")]
    job: Option<String>,
    /// The RPC of the job's chain.
    #[arg(long)]
    rpc: String,
    /// witness, basic, probe or sworn (sworn waits for the final document). With
    /// --watch, for jobs whose description names no tier.
    #[arg(long, default_value = "basic", value_parser = super::parse_tier)]
    tier: Tier,
    /// File holding the spec: {"checks":[...]}.
    #[arg(long, required_unless_present = "watch", conflicts_with = "watch")]
    spec: Option<PathBuf>,
    /// File holding the deliverable the provider committed to: {"text"?, "json"?}.
    #[arg(long, required_unless_present = "watch", conflicts_with = "watch")]
    deliverable: Option<PathBuf>,
    /// Follow the contract's JobSubmitted events and evaluate every job whose
    /// evaluator is our wallet; each job's description names its spec and where
    /// its deliverable is (docs/erc8183.md). Needs --contract.
    #[arg(long, requires = "contract")]
    watch: bool,
    /// With --watch: the escrow, eip155:CHAIN_ID:CONTRACT.
    #[arg(long, requires = "watch")]
    contract: Option<String>,
    /// With --watch: the first block to read events from. Default: --lookback-blocks
    /// before the latest.
    #[arg(long, requires = "watch")]
    from_block: Option<u64>,
    /// With --watch: seconds between polls.
    #[arg(long, default_value_t = 5, requires = "watch")]
    poll_seconds: u64,
    /// With --watch: evaluate the jobs submitted so far, then stop (exit 2 if one
    /// could not be finished, to be tried again).
    #[arg(long, requires = "watch")]
    once: bool,
    /// With --watch: a client (0x address) whose jobs we evaluate; repeatable.
    /// Anyone can name us as a job's evaluator, and every evaluation is paid.
    #[arg(long = "client", requires = "watch")]
    clients: Vec<String>,
    /// With --watch: evaluate the jobs of any client (every one costs a verdict).
    #[arg(long, requires = "watch", conflicts_with = "clients")]
    any_client: bool,
    /// Where purchases are recorded, so a rerun reads a bought verdict back instead
    /// of buying again. Default: $UMPIRE_DATA_DIR, else ~/.local/share/umpire.
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// File holding the evaluator wallet's key (it signs complete/reject). Default:
    /// $UMPIRE_EVALUATOR_KEY, else the paying wallet (--key-file, $UMPIRE_WALLET_KEY).
    #[arg(long)]
    evaluator_key_file: Option<PathBuf>,
    /// Umpire's key document, a file or URL, to verify the verdict with. Default:
    /// BASE/.well-known/umpire-key.json.
    #[arg(long)]
    umpire_key: Option<String>,
    /// How many blocks back the job's events are looked for. Default: 500000.
    #[arg(long)]
    lookback_blocks: Option<u64>,
    #[command(flatten)]
    remote: super::Remote,
    #[command(flatten)]
    pay: PayArgs,
    #[command(flatten)]
    budget: BudgetArg,
}

/// What an unattended evaluator may spend.
#[derive(clap::Args)]
struct BudgetArg {
    /// The most spent on verdicts in any hour, in dollars (at the pinned prices).
    #[arg(long, env = "UMPIRE_BUDGET_PER_HOUR", default_value = "5.00")]
    budget_per_hour: super::guard::MaxAmount,
    /// The most spent on verdicts by this run, in dollars; the run stops when it is
    /// spent.
    #[arg(long, env = "UMPIRE_BUDGET_TOTAL", default_value = "25.00")]
    budget_total: super::guard::MaxAmount,
}

impl BudgetArg {
    fn budget(&self) -> Result<super::guard::Budget, String> {
        use super::guard::MaxAmount::Usd;
        match (self.budget_per_hour, self.budget_total) {
            (Usd(per_hour), Usd(total)) => Ok(super::guard::Budget { per_hour, total }),
            _ => Err("--budget-per-hour and --budget-total are dollars (like 5.00)".into()),
        }
    }
}

impl Evaluate {
    pub async fn run(self) -> ExitCode {
        let fail = super::fail;
        let budget = match self.budget.budget() {
            Ok(b) => b,
            Err(e) => return fail(2, &e),
        };
        let mut client_addresses = Vec::new();
        for c in &self.clients {
            match c.parse::<alloy::primitives::Address>() {
                Ok(a) => client_addresses.push(a),
                Err(_) => return fail(2, &format!("--client {c}: not a 0x address")),
            }
        }
        let target = match (
            self.watch,
            self.contract,
            self.job,
            self.spec,
            self.deliverable,
        ) {
            (true, Some(contract), ..) => Target::Watch(WatchArgs {
                contract,
                from_block: self.from_block,
                poll_seconds: self.poll_seconds,
                once: self.once,
                clients: client_addresses,
                any_client: self.any_client,
            }),
            (false, _, Some(job), Some(spec), Some(deliverable)) => Target::Job {
                job,
                spec,
                deliverable,
            },
            _ => {
                return fail(
                    2,
                    "evaluate needs --job, --spec and --deliverable, or --watch --contract",
                );
            }
        };
        let mut pay = self.pay;
        pay.guard.budget = Some(budget);
        let args = EvaluateArgs {
            target,
            rpc: self.rpc,
            tier: self.tier,
            pay,
            evaluator_key_file: self.evaluator_key_file,
            umpire_key: self.umpire_key,
            lookback_blocks: self.lookback_blocks,
            data_dir: self.data_dir,
        };
        super::remote_call(self.remote, |api| async move { evaluate(&api, args).await }).await
    }
}

/// Print the bytes32 a provider submits to an ERC-8183 job for a deliverable (its
/// deliverable_hash: sha256 of the stable JSON of {"json","text"}).
#[derive(clap::Args)]
pub struct Commitment {
    /// File holding the deliverable: {"text"?, "json"?}.
    deliverable: PathBuf,
}

impl Commitment {
    pub fn run(self) -> ExitCode {
        commitment(&self.deliverable)
    }
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
}

async fn evaluate(api: &Api, args: EvaluateArgs) -> Result<ExitCode, Local> {
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
            Ok(
                match ev.judge(&job_ref, tier, spec, deliverable_json).await {
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
                },
            )
        }
        Target::Watch(w) => watch::watch(&ev, tier, &w).await,
    }
}

impl Evaluator<'_> {
    /// Reports a job that needs no evaluation (any more), with how it was decided.
    async fn report_decided(&self, job: &JobRef, status: Status, paid: bool) -> Step {
        let outcome = match self.escrow.outcome(job.job_id).await {
            Ok(o) => o,
            Err(e) => return chain_step(e),
        };
        eprintln!(
            "job {job} is already {}: {}",
            status.name(),
            if paid {
                "decided meanwhile; the verdict bought is kept, nothing sent"
            } else {
                "nothing to evaluate, nothing paid, nothing sent"
            }
        );
        print_decided(job, status, outcome.as_ref());
        // An expired job was refunded without an evaluation: not a success of ours.
        Step::Done(if status == Status::Expired {
            ExitCode::from(1)
        } else {
            ExitCode::SUCCESS
        })
    }

    /// The verdict for the job: the one bought for it before (record.rs), read back,
    /// else a new purchase, recorded before anything else can fail. `{document, ...}`.
    async fn verdict(&self, job_ref: &JobRef, tier: Tier, body: &Value) -> Result<Value, Step> {
        let key = job_ref.idempotency_key();
        let base = self.api.base();
        if let Some(r) =
            record::load(&self.data_dir, &key).filter(|r| r.base == base && r.tier == tier.as_str())
        {
            eprintln!(
                "reading back verdict {} bought for this job earlier",
                r.verdict_id
            );
            match self.read_back(&r).await? {
                Some(answer) => return Ok(answer),
                None => eprintln!("the service no longer has it; buying anew"),
            }
        }
        eprintln!("buying a {} verdict (Idempotency-Key {key})", tier.as_str());
        let a = match buy_once(self.api, tier.as_str(), body, &self.payer, &key).await {
            Ok(Ok(a)) => a,
            Ok(Err(r)) => return Err(refused_step(&r)),
            Err(e) => return Err(Step::Again(e.0)),
        };
        let s = |k: &str| {
            a.body
                .get(k)
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned()
        };
        let r = Record {
            job: job_ref.to_string(),
            base: base.to_owned(),
            tier: tier.as_str().to_owned(),
            verdict_id: s("verdict_id"),
            secret: s("secret"),
        };
        if let Err(e) = record::save(&self.data_dir, &key, &r) {
            // The purchase stands; a rerun within a day replays it by its key.
            eprintln!("could not keep a record of the purchase: {}", e.0);
        }
        if a.status == 201 {
            return Ok(a.body);
        }
        self.wait(&r).await
    }

    /// A recorded verdict read from the service: `None` when it is gone.
    async fn read_back(&self, r: &Record) -> Result<Option<Value>, Step> {
        let again = |e: Local| Step::Again(e.0);
        let read = read_header(self.api, &r.verdict_id, &r.secret, self.payer.wallet())
            .await
            .map_err(again)?;
        let st = self
            .api
            .send(
                Method::GET,
                &format!("/v1/verdicts/{}", r.verdict_id),
                &[read],
                None,
            )
            .await
            .map_err(again)?;
        match st.status {
            404 => Ok(None),
            200 if st.body.get("status").and_then(Value::as_str) == Some("final") => {
                Ok(Some(st.body))
            }
            200 => self.wait(r).await.map(Some),
            _ => Err(refused_step(&Refused {
                status: st.status,
                code: st.error_code().unwrap_or("").to_owned(),
            })),
        }
    }

    async fn wait(&self, r: &Record) -> Result<Value, Step> {
        match wait_final(
            self.api,
            &r.verdict_id,
            &r.secret,
            &self.payer,
            Some(FINAL_WAIT),
        )
        .await
        {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(refusal)) => Err(refused_step(&refusal)),
            Err(e) => Err(Step::Again(e.0)),
        }
    }

    /// One job, steps 1 to 5 of the module's list.
    async fn judge(&self, job_ref: &JobRef, tier: Tier, spec: Value, deliverable: Value) -> Step {
        // 1. The job.
        let job: Job = match self.escrow.job(job_ref.job_id).await {
            Ok(j) => j,
            Err(EscrowError::UnknownJob(id)) => {
                return no(
                    format!("job {id} does not exist on {}", job_ref.contract),
                    "check the job id and the contract address",
                );
            }
            Err(e) => return chain_step(e),
        };
        if job.evaluator != self.me {
            return no(
                format!(
                    "this wallet ({}) is not the job's evaluator ({})",
                    self.me, job.evaluator
                ),
                "run with the evaluator's key (--evaluator-key-file or UMPIRE_EVALUATOR_KEY)",
            );
        }
        let commitment = match self.submitted(job_ref, &job).await {
            Ok(c) => c,
            Err(step) => return step,
        };
        self.judge_submitted(job_ref, commitment, tier, spec, deliverable)
            .await
    }

    /// The rest of step 1 for a job already read and found ours: it must be Submitted
    /// and unexpired. Its commitment (the provider's `JobSubmitted`), read once.
    async fn submitted(&self, job_ref: &JobRef, job: &Job) -> Result<B256, Step> {
        if job.status.is_terminal() {
            return Err(self.report_decided(job_ref, job.status, false).await);
        }
        if job.status != Status::Submitted {
            return Err(no(
                format!(
                    "job {job_ref} is {}: the provider has not submitted its work yet",
                    job.status.name()
                ),
                "run again after the provider's submit (JobSubmitted); nothing was paid",
            ));
        }
        // Past its expiry a job's refund can be claimed by anyone, unless the escrow
        // gives a submitted job an evaluation grace period (the reference one does).
        let now = self.escrow.chain_time().await.map_err(chain_step)?;
        let refundable_at = job.refundable_at(self.escrow.grace());
        if U256::from(now) >= refundable_at {
            let grace = if refundable_at > job.expired_at {
                format!(" and its evaluation grace period ended at {refundable_at}")
            } else {
                String::new()
            };
            return Err(no(
                format!(
                    "job {job_ref} expired at {}{grace} (chain time {now}): anyone may claim its refund, so no verdict is bought for it",
                    job.expired_at
                ),
                "nothing was paid; the client can call claimRefund",
            ));
        }
        match self.escrow.submission(job_ref.job_id).await {
            Ok(Some(s)) => Ok(s.deliverable),
            Ok(None) => Err(no(
                format!("job {job_ref} is Submitted but no JobSubmitted event was found"),
                "look further back with --lookback-blocks N; nothing was paid",
            )),
            Err(e) => Err(chain_step(e)),
        }
    }

    /// Steps 2 to 5, for a job that is ours, Submitted, and committed to `commitment`.
    async fn judge_submitted(
        &self,
        job_ref: &JobRef,
        commitment: B256,
        tier: Tier,
        spec: Value,
        deliverable: Value,
    ) -> Step {
        let escrow = &self.escrow;
        let job_ref = *job_ref;
        let parsed: Deliverable = match parse_deliverable(&deliverable, "deliverable") {
            Ok(d) => d,
            Err(p) => {
                return no(
                    format!("the deliverable: {}", p[0].message),
                    "nothing was paid",
                );
            }
        };
        let Ok(spec_parsed) = parse_spec(&spec, Some(tier)) else {
            return no(
                format!(
                    "the spec is not a valid {} spec; `umpire validate` lists every problem",
                    tier.as_str()
                ),
                "nothing was paid",
            );
        };

        // 2. The provider's commitment against the deliverable in hand.
        let ours = parsed.hash();
        let committed = alloy::hex::encode(commitment);
        if ours != committed {
            return no(
                format!(
                    "the deliverable does not match the provider's commitment: it hashes to 0x{ours}, the provider submitted 0x{committed}"
                ),
                "evaluate the deliverable the provider committed to (`umpire commitment FILE` prints a file's hash); nothing was paid",
            );
        }
        eprintln!("job {job_ref}: Submitted, commitment 0x{committed} matches the deliverable");
        let _lock = match record::lock(&self.data_dir, &job_ref.idempotency_key()) {
            Ok(Some(l)) => l,
            Ok(None) => {
                return Step::Again(format!(
                    "another evaluation of job {job_ref} is running on this machine"
                ));
            }
            Err(e) => return Step::Again(e.0),
        };

        // 3. The verdict, bought once per job.
        let body = Value::object()
            .with("spec", spec)
            .with("deliverable", deliverable)
            .with("job_ref", job_ref.job_ref());
        let answer = match self.verdict(&job_ref, tier, &body).await {
            Ok(a) => a,
            Err(step) => return step,
        };
        let doc = answer.get("document").cloned().unwrap_or(Value::Null);

        // 4. The document, verified offline, about this job, these bytes, this spec.
        let steps = umpire_core::document::verify(&doc, &self.keys, Some(&parsed));
        if let Some(bad) = steps.iter().find(|s| !s.ok) {
            return no(
                format!(
                    "the verdict document does not verify ({}: {})",
                    bad.name, bad.detail
                ),
                "nothing was sent to the escrow; check --umpire-key",
            );
        }
        let text = |k: &str| doc.get(k).and_then(Value::as_str).unwrap_or("");
        let about = [
            ("job_ref", job_ref.job_ref()),
            ("spec_hash", spec_parsed.hash.clone()),
            ("tier", tier.as_str().to_owned()),
        ];
        if let Some((field, want)) = about.iter().find(|(k, want)| text(k) != want) {
            return no(
                format!(
                    "the verdict document's {field} is {:?}, not {want:?}: it is not the verdict this evaluation asked for",
                    text(field)
                ),
                "nothing was sent to the escrow",
            );
        }
        let verdict = text("verdict");
        let decision = match verdict {
            "pass" => Decision::Complete,
            "fail" => Decision::Reject,
            other => {
                return no(
                    format!("the document's verdict is {other:?}, neither pass nor fail"),
                    "nothing was sent to the escrow",
                );
            }
        };
        let Some(reason) = doc
            .get("signature")
            .and_then(|s| s.get("payload_sha256"))
            .and_then(Value::as_str)
            .and_then(bytes32_of)
        else {
            return no("the document has no payload_sha256", "nothing was sent");
        };
        eprintln!(
            "verdict {verdict}, verified offline with {}: {} with reason {}",
            self.key_source,
            decision.name(),
            bytes32_hex(&reason)
        );

        // 5. Complete or reject, unless someone decided the job meanwhile.
        match escrow.job(job_ref.job_id).await {
            Ok(j) if j.status != Status::Submitted => {
                return self.report_decided(&job_ref, j.status, true).await;
            }
            Ok(_) => {}
            Err(e) => return chain_step(e),
        }
        let tx = match escrow.decide(job_ref.job_id, decision, reason).await {
            Ok(tx) => tx,
            Err(EscrowError::Refused { what, message }) => {
                return no(
                    format!("the escrow refused {what}: {message}"),
                    "run again: a job decided meanwhile is reported as such",
                );
            }
            Err(e) => return chain_step(e),
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
        Step::Done(ExitCode::SUCCESS)
    }
}

/// A refusal from the service: "not now" is tried again, "no" ends the evaluation.
fn refused_step(r: &Refused) -> Step {
    if r.is_transient() {
        Step::Again(format!("the service answered {} {}", r.status, r.code))
    } else {
        Step::Done(ExitCode::from(1))
    }
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

/// `umpire commitment FILE`: the bytes32 a provider submits for a deliverable (its
/// `deliverable_hash`), which `umpire evaluate` matches before paying.
fn commitment(path: &std::path::Path) -> ExitCode {
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
