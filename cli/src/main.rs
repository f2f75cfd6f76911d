//! The `umpire` binary: the local server, the reproducibility tool, the offline
//! verifier, and the isolated check worker the server runs.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

mod commands;

use commands::{fail, remote_call};

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "umpire",
    version,
    about = "Umpire: signed pass/fail verdicts on deliverables, verifiable offline.",
    long_about = None
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// Where the service is.
#[derive(clap::Args)]
struct Remote {
    /// Base URL of the service. Default: $UMPIRE_BASE_URL, else http://127.0.0.1:8080.
    #[arg(long)]
    base: Option<String>,
}

/// The paying wallet: a file, or $UMPIRE_WALLET_KEY (never a flag value).
#[derive(clap::Args)]
struct KeyArg {
    /// File holding the wallet's private key (0x + 64 hex). Default: $UMPIRE_WALLET_KEY.
    #[arg(long)]
    key_file: Option<PathBuf>,
}

/// How a paid command pays: the rail, and the wallet for it (files or the environment,
/// never a flag value).
#[derive(clap::Args)]
struct PayArg {
    /// The rail to pay on: base (USDC on Base), solana (USDC on Solana) or sol (native
    /// SOL at the 402's quote, the keypair paying the fee).
    #[arg(long, value_enum, default_value = "base")]
    rail: commands::pay::RailArg,
    /// For --rail base: file holding the wallet's private key (0x + 64 hex). Default:
    /// $UMPIRE_WALLET_KEY.
    #[arg(long)]
    key_file: Option<PathBuf>,
    /// For --rail solana|sol: the keypair file (solana-keygen's JSON array of 64 bytes).
    /// Default: $UMPIRE_SOLANA_KEYPAIR.
    #[arg(long)]
    solana_keypair: Option<PathBuf>,
    /// For --rail solana|sol: the Solana RPC the blockhash and the mint are read from.
    /// Default: $UMPIRE_SOLANA_RPC_URL, else Solana's public mainnet RPC.
    #[arg(long)]
    solana_rpc: Option<String>,
    /// The pin file every 402 is checked against (the service's key and prices; see
    /// `umpire pin`). Default: $UMPIRE_PIN, else the pin kept for --base, made on first
    /// use over https or on this machine.
    #[arg(long, env = "UMPIRE_PIN")]
    pin_file: Option<PathBuf>,
    /// The most one payment may be: dollars (1.50) for the USDC rails, SOL (0.02sol)
    /// for native SOL; repeat (or comma-separate) for both. Default: $UMPIRE_MAX_AMOUNT,
    /// else the pinned price (USDC); native SOL, quoted per request, needs a SOL cap.
    #[arg(long, env = "UMPIRE_MAX_AMOUNT", value_delimiter = ',')]
    max_amount: Vec<commands::guard::MaxAmount>,
    /// Pay a service reached over plain http on another machine (anyone on the way
    /// could rewrite what it asks; only for a network that is yours).
    #[arg(long)]
    allow_http: bool,
}

impl PayArg {
    fn into_args(self, budget: Option<commands::guard::Budget>) -> commands::pay::PayArgs {
        commands::pay::PayArgs {
            rail: self.rail,
            key_file: self.key_file,
            solana_keypair: self.solana_keypair,
            solana_rpc: self.solana_rpc,
            guard: commands::guard::GuardArgs {
                pin_file: self.pin_file,
                max_amount: self.max_amount,
                allow_http: self.allow_http,
                budget,
            },
        }
    }
}

/// What an unattended evaluator may spend.
#[derive(clap::Args)]
struct BudgetArg {
    /// The most spent on verdicts in any hour, in dollars (at the pinned prices).
    #[arg(long, env = "UMPIRE_BUDGET_PER_HOUR", default_value = "5.00")]
    budget_per_hour: commands::guard::MaxAmount,
    /// The most spent on verdicts by this run, in dollars; the run stops when it is
    /// spent.
    #[arg(long, env = "UMPIRE_BUDGET_TOTAL", default_value = "25.00")]
    budget_total: commands::guard::MaxAmount,
}

impl BudgetArg {
    fn budget(&self) -> Result<commands::guard::Budget, String> {
        use commands::guard::MaxAmount::Usd;
        match (self.budget_per_hour, self.budget_total) {
            (Usd(per_hour), Usd(total)) => Ok(commands::guard::Budget { per_hour, total }),
            _ => Err("--budget-per-hour and --budget-total are dollars (like 5.00)".into()),
        }
    }
}

// Parsed once per run: the size of the largest command's flags costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand)]
enum Command {
    /// Serve every endpoint in one process, with state in the data directory.
    Serve {
        /// Address to listen on.
        #[arg(long, default_value = "127.0.0.1:8080")]
        addr: SocketAddr,
        /// Data directory (signing key, embedded store). Default: $UMPIRE_DATA_DIR, else
        /// ~/.local/share/umpire.
        #[arg(long)]
        data_dir: Option<PathBuf>,
        /// The time one paid request may take, in ms, from arrival to answer (fetches,
        /// checks and settlement fit inside it; settlement is not started past it).
        /// Default: $UMPIRE_REQUEST_BUDGET_MS, else 25000 (API Gateway ends requests at
        /// 30 s). At most 29000.
        #[arg(long)]
        request_budget_ms: Option<u64>,
    },
    /// Judge a deliverable locally and print the signed verdict document, exactly as
    /// the service builds it (checks that fetch URLs are not run here).
    Judge {
        /// witness, basic, probe or sworn.
        #[arg(long, default_value = "basic")]
        tier: String,
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
    },
    /// Verify a signed document offline with the contract's recipe. Exit 0 when every
    /// step passes, 1 when one fails (the failing step is named), 2 on usage errors.
    Verify {
        /// The document (JSON file, or - for stdin).
        doc: PathBuf,
        /// Key document: a file or an http(s) URL (/.well-known/umpire-key.json).
        /// Default: the key of the local data directory.
        #[arg(long)]
        key: Option<String>,
        /// The deliverable object, to check deliverable_hash too.
        #[arg(long)]
        deliverable: Option<PathBuf>,
        /// Data directory for the default key.
        #[arg(long)]
        data_dir: Option<PathBuf>,
        /// An ERC-8183 job the document was used to decide (eip155:CHAIN:CONTRACT:JOB):
        /// also check that the document names it, that the provider's commitment is the
        /// document's deliverable_hash and that the evaluator's on-chain reason is its
        /// payload_sha256. Needs --rpc.
        #[arg(long, requires = "rpc")]
        job: Option<String>,
        /// The RPC of the job's chain.
        #[arg(long, requires = "job")]
        rpc: Option<String>,
    },
    /// Evaluate an ERC-8183 job with an Umpire verdict: check the deliverable against
    /// the provider's on-chain commitment, buy the verdict (job_ref names the job),
    /// verify it offline, then `complete` on pass or `reject` on fail with
    /// reason = the document's payload_sha256. Run again, it pays nothing and sends
    /// nothing twice.
    Evaluate {
        /// The job: eip155:CHAIN_ID:CONTRACT:JOB_ID.
        #[arg(long, required_unless_present = "watch", conflicts_with = "watch")]
        job: Option<String>,
        /// The RPC of the job's chain.
        #[arg(long)]
        rpc: String,
        /// witness, basic, probe or sworn (sworn waits for the final document). With
        /// --watch, for jobs whose description names no tier.
        #[arg(long, default_value = "basic")]
        tier: String,
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
        pay: PayArg,
        #[command(flatten)]
        budget: BudgetArg,
    },
    /// Print the bytes32 a provider submits to an ERC-8183 job for a deliverable (its
    /// deliverable_hash: sha256 of the stable JSON of {"json","text"}).
    Commitment {
        /// File holding the deliverable: {"text"?, "json"?}.
        deliverable: PathBuf,
    },
    /// Buy a verdict: pays with x402 from your wallet ($UMPIRE_WALLET_KEY or --key-file),
    /// prints the answer (document, verdict id, one-time secret) as JSON. Sworn purchases
    /// wait for the final document unless --no-wait.
    Buy {
        /// witness, basic, probe or sworn.
        tier: String,
        /// File holding the spec: {"checks":[...]}.
        #[arg(long)]
        spec: PathBuf,
        /// File holding the deliverable: {"text"?, "json"?}.
        #[arg(long)]
        deliverable: PathBuf,
        /// Echoed in the signed document (e.g. an ERC-8183 job id).
        #[arg(long)]
        job_ref: Option<String>,
        /// Sworn only: where the final document is POSTed (HMAC-signed).
        #[arg(long)]
        webhook: Option<String>,
        /// Resume an earlier purchase: the same key never pays twice.
        #[arg(long)]
        idempotency_key: Option<String>,
        /// Sworn: print the pass-1 answer and return instead of waiting for pass 2.
        #[arg(long)]
        no_wait: bool,
        #[command(flatten)]
        remote: Remote,
        #[command(flatten)]
        pay: PayArg,
    },
    /// A verdict's status and document, with the one-time secret from the purchase.
    Status {
        id: String,
        /// The one-time secret the purchase returned. Without it, the wallet that paid
        /// proves itself instead (sign-in-with-x): --rail and its key, as for `buy`.
        #[arg(long)]
        secret: Option<String>,
        #[command(flatten)]
        remote: Remote,
        #[command(flatten)]
        pay: PayArg,
    },
    /// Sworn verdict ids bought with this spec_hash and webhook URL.
    Find {
        #[arg(long)]
        spec_hash: String,
        #[arg(long)]
        webhook: String,
        #[command(flatten)]
        remote: Remote,
    },
    /// Validate a would-be purchase for a tier (free): every problem, with hints.
    Validate {
        tier: String,
        #[arg(long)]
        spec: PathBuf,
        #[arg(long)]
        deliverable: Option<PathBuf>,
        #[arg(long)]
        webhook: Option<String>,
        #[command(flatten)]
        remote: Remote,
    },
    /// Leave feedback on a merchant you paid (free): signs the contract's message with
    /// your wallet (EIP-191) and submits it; refusals are explained.
    Feedback {
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
        remote: Remote,
        #[command(flatten)]
        key: KeyArg,
    },
    /// Buy a merchant's signed reputation report ($0.01) and print it readably.
    Reputation {
        merchant: String,
        /// Print the whole answer (report and receipt) as JSON.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        remote: Remote,
        #[command(flatten)]
        pay: PayArg,
    },
    /// Pin the service's key and prices: from then on every payment's 402 must carry
    /// offers signed by this key, at no more than these prices, or nothing is signed
    /// (docs/client.md). Run it again to accept a new key or new prices.
    Pin {
        /// The key document to pin, a file or URL, taken from a source you trust.
        /// Default: BASE/.well-known/umpire-key.json.
        #[arg(long)]
        key_document: Option<String>,
        #[command(flatten)]
        remote: Remote,
    },
    /// Make a new signing key for an AWS deployment: a fresh Ed25519 seed, encrypted
    /// under the KMS key (kms:Encrypt with the encryption context purpose=umpire-signing-seed)
    /// and printed as the two stack parameters to deploy together. The seed itself is
    /// never printed or written. AWS credentials and region come from the usual
    /// environment (AWS_PROFILE, AWS_REGION, AWS_ENDPOINT_URL, ...).
    Keygen {
        /// The KMS key: id, ARN or alias (the stack's SigningKeyId output).
        #[arg(long)]
        kms_key_id: String,
    },
    /// Run as an isolated check worker (JSON lines on stdin/stdout); the server
    /// starts these itself.
    #[command(name = "check-worker", hide = true)]
    CheckWorker,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Command::CheckWorker = cli.command {
        // No runtime, no logging: the worker is a plain loop the parent can kill.
        return match umpire_checker::worker_main() {
            Ok(()) => ExitCode::SUCCESS,
            Err(_) => ExitCode::FAILURE,
        };
    }
    init_logging();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return fail(2, &format!("cannot start the async runtime: {e}")),
    };
    runtime.block_on(async {
        match cli.command {
            Command::Serve {
                addr,
                data_dir,
                request_budget_ms,
            } => commands::serve::run(addr, data_dir, request_budget_ms).await,
            Command::Judge {
                tier,
                spec,
                deliverable,
                job_ref,
                data_dir,
            } => commands::judge::run(&tier, &spec, &deliverable, job_ref, data_dir).await,
            Command::Verify {
                doc,
                key,
                deliverable,
                data_dir,
                job,
                rpc,
            } => {
                let job = job
                    .zip(rpc)
                    .map(|(job, rpc)| commands::verify::JobCheck { job, rpc });
                commands::verify::run(&doc, key.as_deref(), deliverable.as_deref(), data_dir, job)
                    .await
            }
            Command::Evaluate {
                job,
                rpc,
                tier,
                spec,
                deliverable,
                watch,
                contract,
                from_block,
                poll_seconds,
                once,
                clients,
                any_client,
                data_dir,
                evaluator_key_file,
                umpire_key,
                lookback_blocks,
                remote,
                pay,
                budget,
            } => {
                use commands::evaluate::{Target, WatchArgs};
                let budget = match budget.budget() {
                    Ok(b) => b,
                    Err(e) => return fail(2, &e),
                };
                let mut client_addresses = Vec::new();
                for c in &clients {
                    match c.parse::<alloy::primitives::Address>() {
                        Ok(a) => client_addresses.push(a),
                        Err(_) => return fail(2, &format!("--client {c}: not a 0x address")),
                    }
                }
                let target = match (watch, contract, job, spec, deliverable) {
                    (true, Some(contract), ..) => Target::Watch(WatchArgs {
                        contract,
                        from_block,
                        poll_seconds,
                        once,
                        clients: client_addresses,
                        any_client,
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
                let args = commands::evaluate::EvaluateArgs {
                    target,
                    rpc,
                    tier,
                    pay: pay.into_args(Some(budget)),
                    evaluator_key_file,
                    umpire_key,
                    lookback_blocks,
                    data_dir,
                };
                remote_call(remote, |api| async move {
                    commands::evaluate::evaluate(&api, args).await
                })
                .await
            }
            Command::Commitment { deliverable } => commands::evaluate::commitment(&deliverable),
            Command::Keygen { kms_key_id } => commands::keygen::run(&kms_key_id).await,
            Command::Buy {
                tier,
                spec,
                deliverable,
                job_ref,
                webhook,
                idempotency_key,
                no_wait,
                remote,
                pay,
            } => {
                let args = commands::buy::BuyArgs {
                    tier,
                    spec,
                    deliverable,
                    job_ref,
                    webhook,
                    pay: pay.into_args(None),
                    idempotency_key,
                    no_wait,
                };
                remote_call(
                    remote,
                    |api| async move { commands::buy::buy(&api, args).await },
                )
                .await
            }
            Command::Status {
                id,
                secret,
                remote,
                pay,
            } => {
                use commands::lookup::Credential;
                let credential = match secret {
                    Some(s) => Credential::Secret(s),
                    None => match commands::pay::Wallet::from_args(&pay.into_args(None)) {
                        Ok(w) => Credential::Wallet(w),
                        Err(e) => {
                            return fail(
                                2,
                                &format!("no --secret, and no wallet to sign in with: {}", e.0),
                            );
                        }
                    },
                };
                remote_call(remote, |api| async move {
                    commands::lookup::status(&api, &id, credential).await
                })
                .await
            }
            Command::Find {
                spec_hash,
                webhook,
                remote,
            } => {
                remote_call(remote, |api| async move {
                    commands::lookup::find(&api, &spec_hash, &webhook).await
                })
                .await
            }
            Command::Validate {
                tier,
                spec,
                deliverable,
                webhook,
                remote,
            } => {
                let args = commands::validate::ValidateArgs {
                    tier,
                    spec,
                    deliverable,
                    webhook,
                };
                remote_call(remote, |api| async move {
                    commands::validate::validate(&api, args).await
                })
                .await
            }
            Command::Feedback {
                tx,
                merchant,
                outcome,
                would_repeat,
                would_not_repeat,
                latency_ms,
                remote,
                key,
            } => {
                let args = commands::feedback::FeedbackArgs {
                    tx,
                    merchant,
                    outcome,
                    would_repeat: match (would_repeat, would_not_repeat) {
                        (true, _) => Some(true),
                        (_, true) => Some(false),
                        _ => None,
                    },
                    latency_ms,
                    key_file: key.key_file,
                };
                remote_call(remote, |api| async move {
                    commands::feedback::feedback(&api, args).await
                })
                .await
            }
            Command::Reputation {
                merchant,
                json,
                remote,
                pay,
            } => {
                let pay = pay.into_args(None);
                remote_call(remote, |api| async move {
                    commands::reputation::reputation(&api, &merchant, json, &pay).await
                })
                .await
            }
            Command::Pin {
                key_document,
                remote,
            } => {
                remote_call(remote, |api| async move {
                    commands::guard::pin(&api, key_document.as_deref()).await
                })
                .await
            }
            Command::CheckWorker => ExitCode::SUCCESS,
        }
    })
}

/// Logs to stderr, as text (each line prefixed by its span, e.g. one purchase's
/// `purchase{product=verdict tier=basic payment_key=…}`) or, with
/// `UMPIRE_LOG_FORMAT=json`, one JSON object a line with the span's fields under
/// `span`, as the Lambda functions write them.
fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    if std::env::var("UMPIRE_LOG_FORMAT").is_ok_and(|f| f.trim().eq_ignore_ascii_case("json")) {
        builder
            .json()
            .with_current_span(true)
            .with_span_list(false)
            .init();
    } else {
        builder
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .init();
    }
}
