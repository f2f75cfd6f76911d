//! The command line of `umpire evaluate` and `umpire commitment`: flags read into an
//! evaluation (one job, or a watched contract) under a spending budget.

use std::path::PathBuf;
use std::process::ExitCode;

use umpire_core::product::Tier;
use umpire_core::spec::parse_deliverable;

use super::{EvaluateArgs, Target, WatchArgs, evaluate};
use crate::commands::guard::{Budget, MaxAmount};
use crate::commands::pay::PayArgs;
use crate::commands::{Remote, fail, parse_tier, read_json, remote_call};

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
    #[arg(long, default_value = "basic", value_parser = parse_tier)]
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
    remote: Remote,
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
    budget_per_hour: MaxAmount,
    /// The most spent on verdicts by this run, in dollars; the run stops when it is
    /// spent.
    #[arg(long, env = "UMPIRE_BUDGET_TOTAL", default_value = "25.00")]
    budget_total: MaxAmount,
}

impl BudgetArg {
    fn budget(&self) -> Result<Budget, String> {
        use MaxAmount::Usd;
        match (self.budget_per_hour, self.budget_total) {
            (Usd(per_hour), Usd(total)) => Ok(Budget { per_hour, total }),
            _ => Err("--budget-per-hour and --budget-total are dollars (like 5.00)".into()),
        }
    }
}

impl Evaluate {
    pub async fn run(self) -> ExitCode {
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
        remote_call(self.remote, |api| async move { evaluate(&api, args).await }).await
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

/// `umpire commitment FILE`: the bytes32 a provider submits for a deliverable (its
/// `deliverable_hash`), which `umpire evaluate` matches before paying.
fn commitment(path: &std::path::Path) -> ExitCode {
    let v = match read_json(path) {
        Ok(v) => v,
        Err(e) => return fail(2, &e),
    };
    match parse_deliverable(&v, "deliverable") {
        Ok(d) => {
            println!("0x{}", d.hash());
            ExitCode::SUCCESS
        }
        Err(p) => fail(2, &format!("{}: {}", path.display(), p[0].message)),
    }
}
