//! The `umpire` binary: the local server, the reproducibility tool, the offline
//! verifier, and the isolated check worker the server runs.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

mod client;

use clap::{Parser, Subcommand};
use umpire_api::datadir::{default_data_dir, load_signer};
use umpire_api::purchase::{Envelope, assess};
use umpire_api::{AppState, Config};
use umpire_checker::PoolConfig;
use umpire_core::json::{Value, parse};
use umpire_core::product::Tier;
use umpire_core::signer::{PublicKey, Signer, keys_from_document};
use umpire_core::spec::parse_deliverable;
use umpire_store::sqlite::SqliteStore;

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
    rail: client::RailArg,
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
}

impl PayArg {
    fn into_args(self) -> client::PayArgs {
        client::PayArgs {
            rail: self.rail,
            key_file: self.key_file,
            solana_keypair: self.solana_keypair,
            solana_rpc: self.solana_rpc,
        }
    }
}

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
        #[arg(long)]
        secret: String,
        #[command(flatten)]
        remote: Remote,
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
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
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
            } => serve(addr, data_dir, request_budget_ms).await,
            Command::Judge {
                tier,
                spec,
                deliverable,
                job_ref,
                data_dir,
            } => judge(&tier, &spec, &deliverable, job_ref, data_dir).await,
            Command::Verify {
                doc,
                key,
                deliverable,
                data_dir,
            } => verify(&doc, key.as_deref(), deliverable.as_deref(), data_dir).await,
            Command::Keygen { kms_key_id } => keygen(&kms_key_id).await,
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
                let args = client::BuyArgs {
                    tier,
                    spec,
                    deliverable,
                    job_ref,
                    webhook,
                    pay: pay.into_args(),
                    idempotency_key,
                    no_wait,
                };
                remote_call(remote, |api| async move { client::buy(&api, args).await }).await
            }
            Command::Status { id, secret, remote } => {
                remote_call(remote, |api| async move {
                    client::free(
                        &api,
                        reqwest::Method::GET,
                        &format!("/v1/verdicts/{}", umpire_core::urlenc::component(&id)),
                        &[("authorization", format!("Bearer {secret}"))],
                        None,
                    )
                    .await
                })
                .await
            }
            Command::Find {
                spec_hash,
                webhook,
                remote,
            } => {
                remote_call(remote, |api| async move {
                    let path = format!(
                        "/v1/find?spec_hash={}&webhook={}",
                        umpire_core::urlenc::component(&spec_hash),
                        umpire_core::urlenc::component(&webhook)
                    );
                    client::free(&api, reqwest::Method::GET, &path, &[], None).await
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
                remote_call(remote, |api| async move {
                    let mut body = Value::object()
                        .with("tier", tier)
                        .with("spec", client::read_json(&spec)?);
                    if let Some(d) = deliverable {
                        body = body.with("deliverable", client::read_json(&d)?);
                    }
                    if let Some(w) = webhook {
                        body = body.with("webhook_url", w);
                    }
                    client::validate(&api, &body).await
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
                let args = client::FeedbackArgs {
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
                remote_call(
                    remote,
                    |api| async move { client::feedback(&api, args).await },
                )
                .await
            }
            Command::Reputation {
                merchant,
                json,
                remote,
                pay,
            } => {
                let pay = pay.into_args();
                remote_call(remote, |api| async move {
                    client::reputation(&api, &merchant, json, &pay).await
                })
                .await
            }
            Command::CheckWorker => ExitCode::SUCCESS,
        }
    })
}

/// Runs a client command against the service; local problems exit 2.
async fn remote_call<F, Fut>(remote: Remote, f: F) -> ExitCode
where
    F: FnOnce(client::Api) -> Fut,
    Fut: std::future::Future<Output = Result<ExitCode, client::Local>>,
{
    let api = match client::Api::new(remote.base) {
        Ok(a) => a,
        Err(e) => return fail(2, &e.0),
    };
    match f(api).await {
        Ok(code) => code,
        Err(e) => fail(2, &e.0),
    }
}

fn fail(code: u8, message: &str) -> ExitCode {
    eprintln!("umpire: {message}");
    ExitCode::from(code)
}

/// What a command needs: the data directory's key, its embedded store (or a
/// throwaway one), and the isolated checker (this binary re-run as `check-worker`).
async fn state_for(
    data_dir: Option<PathBuf>,
    with_checker: bool,
    persistent: bool,
    request_budget_ms: Option<u64>,
) -> Result<(AppState, Arc<SqliteStore>), String> {
    let mut config = Config::from_env().map_err(|e| e.to_string())?;
    if let Some(ms) = request_budget_ms {
        if !(1_000..=umpire_api::config::MAX_REQUEST_BUDGET_MS).contains(&ms) {
            return Err(format!(
                "--request-budget-ms {ms}: must be from 1000 to {}",
                umpire_api::config::MAX_REQUEST_BUDGET_MS
            ));
        }
        config.request_budget = std::time::Duration::from_millis(ms);
        config.check_budget().map_err(|e| e.to_string())?;
    }
    let dir = data_dir.unwrap_or_else(default_data_dir);
    let checker = if with_checker {
        Some(
            PoolConfig::current_exe(config.check_limit)
                .map_err(|e| format!("cannot find the umpire binary: {e}"))?,
        )
    } else {
        None
    };
    umpire_api::local::embedded_state(config, &dir, persistent, checker).await
}

async fn serve(
    addr: SocketAddr,
    data_dir: Option<PathBuf>,
    request_budget_ms: Option<u64>,
) -> ExitCode {
    let (state, store) = match state_for(data_dir, true, true, request_budget_ms).await {
        Ok((s, store)) => (Arc::new(s), store),
        Err(e) => return fail(2, &e),
    };
    let listener = match tokio::net::TcpListener::bind(addr).await {
        Ok(l) => l,
        Err(e) => return fail(2, &format!("cannot listen on {addr}: {e}")),
    };
    let bound = listener.local_addr().unwrap_or(addr);
    tracing::info!(addr = %bound, key_id = state.signer.key_id(), "umpire serving");
    // The one line tests and scripts wait for.
    println!("umpire listening on http://{bound}");
    let shutdown = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    match umpire_api::local::run(listener, state, store, shutdown).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(1, &e.to_string()),
    }
}

fn read_json(path: &Path) -> Result<Value, String> {
    let bytes = if path == Path::new("-") {
        let mut b = Vec::new();
        std::io::Read::read_to_end(&mut std::io::stdin(), &mut b)
            .map_err(|e| format!("stdin: {e}"))?;
        b
    } else {
        std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?
    };
    parse(&bytes).map_err(|e| format!("{}: {e}", path.display()))
}

async fn judge(
    tier: &str,
    spec: &Path,
    deliverable: &Path,
    job_ref: Option<String>,
    data_dir: Option<PathBuf>,
) -> ExitCode {
    let Some(tier) = Tier::parse(tier) else {
        return fail(
            2,
            &format!("unknown tier {tier:?}; use witness, basic, probe or sworn"),
        );
    };
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
    let results = match umpire_api::verdict::run_checks(&state, &purchase, Vec::new()).await {
        Ok(r) => r,
        Err(e) => return fail(1, &e.to_string()),
    };
    let id = umpire_core::hash::random_id("vrd");
    let doc = umpire_api::verdict::signed_verdict(&state, &purchase, &id, &results);
    println!("{}", doc.to_canonical_string());
    ExitCode::SUCCESS
}

async fn load_keys(key: Option<&str>, data_dir: Option<PathBuf>) -> Result<Vec<PublicKey>, String> {
    let doc = match key {
        Some(k) if k.starts_with("http://") || k.starts_with("https://") => {
            let body = fetch_key_document(k).await?;
            parse(&body).map_err(|e| format!("{k}: {e}"))?
        }
        Some(k) => read_json(Path::new(k))?,
        None => {
            let dir = data_dir.unwrap_or_else(default_data_dir);
            let signer = load_signer(&dir).map_err(|e| {
                format!("no --key given and no local key to default to ({e}); pass --key FILE or --key https://…/.well-known/umpire-key.json")
            })?;
            return Ok(vec![PublicKey::of(&signer as &dyn Signer)]);
        }
    };
    let keys = keys_from_document(&doc);
    if keys.is_empty() {
        return Err("the key document lists no usable keys".into());
    }
    Ok(keys)
}

async fn fetch_key_document(url: &str) -> Result<Vec<u8>, String> {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(15))
        .build()
        .map_err(|e| e.to_string())?;
    let resp = client
        .get(url)
        .send()
        .await
        .map_err(|e| format!("{url}: {e}"))?;
    if !resp.status().is_success() {
        return Err(format!("{url}: HTTP {}", resp.status()));
    }
    resp.bytes()
        .await
        .map(|b| b.to_vec())
        .map_err(|e| format!("{url}: {e}"))
}

async fn verify(
    doc: &Path,
    key: Option<&str>,
    deliverable: Option<&Path>,
    data_dir: Option<PathBuf>,
) -> ExitCode {
    let doc = match read_json(doc) {
        Ok(d) => d,
        Err(e) => return fail(2, &e),
    };
    // `umpire buy` and `umpire reputation --json` print the whole answer: verify the
    // signed document inside it.
    let doc = if doc.get("signature").is_none() {
        match doc.get("document").or_else(|| doc.get("report")) {
            Some(inner) if inner.get("signature").is_some() => inner.clone(),
            _ => doc,
        }
    } else {
        doc
    };
    let keys = match load_keys(key, data_dir).await {
        Ok(k) => k,
        Err(e) => return fail(2, &e),
    };
    let deliverable = match deliverable.map(read_json).transpose() {
        Ok(None) => None,
        Ok(Some(v)) => match parse_deliverable(&v, "deliverable") {
            Ok(d) => Some(d),
            Err(p) => return fail(2, &format!("deliverable: {}", p[0].message)),
        },
        Err(e) => return fail(2, &e),
    };
    let steps = umpire_core::document::verify(&doc, &keys, deliverable.as_ref());
    for s in &steps {
        println!(
            "{} {:<17} {}",
            if s.ok { "ok  " } else { "FAIL" },
            s.name,
            s.detail
        );
    }
    if steps.iter().all(|s| s.ok) && steps.iter().any(|s| s.name == "ed25519") {
        if let Some(v) = doc.get("verdict").and_then(Value::as_str) {
            println!("verified: verdict {v}");
        } else {
            println!("verified");
        }
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

async fn keygen(kms_key_id: &str) -> ExitCode {
    let aws = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
    let kms = aws_sdk_kms::Client::new(&aws);
    let seed = umpire_core::signer::LocalSigner::generate().seed();
    match umpire_keys::seal(&kms, kms_key_id, seed).await {
        Ok(sealed) => {
            let public = base64::Engine::encode(
                &base64::engine::general_purpose::STANDARD,
                sealed.public_key.bytes,
            );
            println!("SigningSeedCiphertext={}", sealed.ciphertext_base64);
            println!("SigningPublicKey={public}");
            eprintln!(
                "umpire: new key {} sealed under {kms_key_id}. Deploy both values together, e.g.\n  sam deploy --parameter-overrides SigningSeedCiphertext=... SigningPublicKey=...\nTo rotate, add the old SigningPublicKey to RetiredPublicKeys so documents it signed still verify.",
                sealed.public_key.key_id
            );
            ExitCode::SUCCESS
        }
        Err(e) => fail(1, &e.to_string()),
    }
}
