//! The `umpire` client: buy, status, find, validate, feedback and reputation against a
//! running Umpire (`--base`, `$UMPIRE_BASE_URL`, default http://127.0.0.1:8080). Paid
//! commands pay with x402 from a wallet key read from `$UMPIRE_WALLET_KEY` or
//! `--key-file` (never a flag: flags end up in shell history and `ps`).
//!
//! Output: the API's JSON answer on stdout (scripts read it), a readable account on
//! stderr. Exit 0 on success, 1 when the service refused (the error code, what it
//! means and what to do are printed), 2 for local problems (files, keys, network).

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use alloy::primitives::{Address, B256};
use alloy::signers::SignerSync as _;
use alloy::signers::local::PrivateKeySigner;
use reqwest::Method;
use umpire_core::json::{Value, parse};
use umpire_core::signer::LocalSigner;
use umpire_pay::client::{Mint, RailChoice, pick, sign_exact_evm, sign_exact_svm, solana_keypair};
use umpire_pay::solana::SolanaRpc;
use umpire_pay::{HEADER_PAYMENT_SIGNATURE, PaymentRequired, decode_header, svm};

pub const DEFAULT_BASE: &str = "http://127.0.0.1:8080";
/// Transport retries of one paid request (same key, same payment: safe to repeat).
const RETRIES: u32 = 3;

/// A problem on our side of the wire (exit 2).
pub struct Local(pub String);

impl<E: std::fmt::Display> From<E> for Local {
    fn from(e: E) -> Self {
        Local(e.to_string())
    }
}

pub struct Api {
    base: String,
    http: reqwest::Client,
}

/// One HTTP answer.
pub struct Answer {
    pub status: u16,
    pub headers: reqwest::header::HeaderMap,
    pub body: Value,
}

impl Answer {
    fn error_code(&self) -> Option<&str> {
        self.body.get("error")?.get("code")?.as_str()
    }

    fn retry_after(&self) -> Duration {
        let secs = self
            .headers
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(2);
        Duration::from_secs(secs.clamp(1, 30))
    }
}

impl Api {
    pub fn new(base: Option<String>) -> Result<Api, Local> {
        let base = base
            .or_else(|| std::env::var("UMPIRE_BASE_URL").ok())
            .unwrap_or_else(|| DEFAULT_BASE.to_owned());
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(90))
            .user_agent(concat!("umpire-cli/", env!("CARGO_PKG_VERSION")))
            .build()?;
        Ok(Api {
            base: base.trim_end_matches('/').to_owned(),
            http,
        })
    }

    pub async fn send(
        &self,
        method: Method,
        path: &str,
        headers: &[(&str, String)],
        body: Option<&Value>,
    ) -> Result<Answer, Local> {
        let mut req = self.http.request(method, format!("{}{path}", self.base));
        for (k, v) in headers {
            req = req.header(*k, v);
        }
        if let Some(b) = body {
            req = req
                .header("content-type", "application/json")
                .body(b.to_canonical_vec());
        }
        let resp = req
            .send()
            .await
            .map_err(|e| Local(format!("cannot reach {}: {e}", self.base)))?;
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        let bytes = resp.bytes().await?;
        let body = if bytes.is_empty() {
            Value::Null
        } else {
            parse(&bytes)
                .unwrap_or_else(|_| Value::from(String::from_utf8_lossy(&bytes).into_owned()))
        };
        Ok(Answer {
            status,
            headers,
            body,
        })
    }

    /// A paid request: ask, pay the 402 from `payer` with x402 (`exact`, on the payer's
    /// rail), and retry the identical request under the same Idempotency-Key until it
    /// has an answer (in_flight and transport failures are retried; a replay is the
    /// original).
    pub async fn paid(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
        payer: &Payer,
        idempotency_key: &str,
    ) -> Result<Answer, Local> {
        let key = ("idempotency-key", idempotency_key.to_owned());
        let first = self
            .send(method.clone(), path, std::slice::from_ref(&key), body)
            .await?;
        if first.status != 402 {
            return Ok(first);
        }
        let header = first
            .headers
            .get("payment-required")
            .and_then(|v| v.to_str().ok())
            .ok_or_else(|| Local("the 402 has no PAYMENT-REQUIRED header".into()))?;
        let required: PaymentRequired = decode_header(header)
            .map_err(|e| Local(format!("unreadable PAYMENT-REQUIRED: {e}")))?;
        let payment = payer.pay(&required).await?;
        let headers = [key, (HEADER_PAYMENT_SIGNATURE, payment)];
        let mut attempt = 0;
        loop {
            attempt += 1;
            match self.send(method.clone(), path, &headers, body).await {
                Ok(a) if a.status == 409 && a.error_code() == Some("in_flight") => {
                    eprintln!("the purchase is still being processed; asking again");
                    tokio::time::sleep(a.retry_after()).await;
                }
                Ok(a) if a.status >= 500 && attempt <= RETRIES => {
                    eprintln!(
                        "the service answered {}; retrying the same purchase",
                        a.status
                    );
                    tokio::time::sleep(Duration::from_secs(u64::from(attempt) * 2)).await;
                }
                Err(e) if attempt <= RETRIES => {
                    eprintln!("{}; retrying the same purchase", e.0);
                    tokio::time::sleep(Duration::from_secs(u64::from(attempt) * 2)).await;
                }
                other => return other,
            }
        }
    }
}

/// Who pays, and on which rail: an EVM wallet (USDC on Base), or a Solana keypair
/// (USDC on Solana, or native SOL at the 402's quote) with the RPC node its
/// transaction's blockhash and the token's mint are read from.
pub enum Payer {
    Evm(PrivateKeySigner),
    Solana {
        keypair: LocalSigner,
        address: svm::Pubkey,
        rpc: SolanaRpc,
        choice: RailChoice,
    },
}

/// What `--rail` names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum RailArg {
    /// USDC on Base (an EVM wallet: --key-file or $UMPIRE_WALLET_KEY).
    Base,
    /// USDC on Solana (a Solana keypair: --solana-keypair or $UMPIRE_SOLANA_KEYPAIR).
    Solana,
    /// Native SOL on Solana, at the quote in the 402 (the same keypair; it pays the fee).
    Sol,
}

/// How a paid command pays.
pub struct PayArgs {
    pub rail: RailArg,
    pub key_file: Option<PathBuf>,
    pub solana_keypair: Option<PathBuf>,
    pub solana_rpc: Option<String>,
}

/// Solana's public mainnet RPC (rate-limited; pass your own with --solana-rpc).
const SOLANA_PUBLIC_RPC: &str = "https://api.mainnet-beta.solana.com";

impl Payer {
    pub fn from_args(args: &PayArgs) -> Result<Payer, Local> {
        let choice = match args.rail {
            RailArg::Base => return Ok(Payer::Evm(wallet(args.key_file.as_deref())?)),
            RailArg::Solana => RailChoice::SolanaUsdc,
            RailArg::Sol => RailChoice::NativeSol,
        };
        let path = args
            .solana_keypair
            .clone()
            .or_else(|| std::env::var_os("UMPIRE_SOLANA_KEYPAIR").map(PathBuf::from))
            .ok_or_else(|| {
                Local("no Solana keypair: pass --solana-keypair FILE (solana-keygen's JSON) or set UMPIRE_SOLANA_KEYPAIR".into())
            })?;
        let text = std::fs::read_to_string(&path)
            .map_err(|e| Local(format!("{}: {e}", path.display())))?;
        let (keypair, address) =
            solana_keypair(&text).map_err(|e| Local(format!("{}: {e}", path.display())))?;
        let url = args
            .solana_rpc
            .clone()
            .or_else(|| std::env::var("UMPIRE_SOLANA_RPC_URL").ok())
            .unwrap_or_else(|| SOLANA_PUBLIC_RPC.to_owned());
        let rpc = SolanaRpc::new(&url).map_err(|e| Local(e.message))?;
        Ok(Payer::Solana {
            keypair,
            address,
            rpc,
            choice,
        })
    }

    /// Signs a payment for the 402's option on this payer's rail: the header value.
    async fn pay(&self, required: &PaymentRequired) -> Result<String, Local> {
        let choice = match self {
            Payer::Evm(_) => RailChoice::Evm,
            Payer::Solana { choice, .. } => *choice,
        };
        let accepted = pick(required, choice).ok_or_else(|| {
            Local(format!(
                "none of the accepted rails is one this client pays on {choice:?}: {}",
                required
                    .accepts
                    .iter()
                    .map(|r| format!("{} {} {}", r.scheme, r.network, r.asset))
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
        })?;
        let from = match self {
            Payer::Evm(w) => w.address().to_string(),
            Payer::Solana { address, .. } => address.to_base58(),
        };
        let what = if accepted.asset == svm::NATIVE_SOL_ASSET {
            "lamports of native SOL".to_owned()
        } else {
            format!("base units of {}", accepted.asset)
        };
        eprintln!(
            "paying {} {what} on {} to {} from {from}",
            accepted.amount, accepted.network, accepted.pay_to
        );
        match self {
            Payer::Evm(wallet) => sign_exact_evm(
                wallet,
                required,
                accepted,
                umpire_core::time::now_unix(),
                umpire_core::hash::random_bytes::<32>(),
            )
            .map_err(Local),
            Payer::Solana { keypair, rpc, .. } => {
                let mint = if accepted.asset == svm::NATIVE_SOL_ASSET {
                    None
                } else {
                    let (owner, data) = rpc
                        .account(&accepted.asset)
                        .await
                        .map_err(|e| Local(e.message))?
                        .ok_or_else(|| {
                            Local(format!(
                                "the mint {} does not exist on this RPC's chain",
                                accepted.asset
                            ))
                        })?;
                    Some(Mint::from_account(&owner, &data).map_err(Local)?)
                };
                let blockhash = rpc.latest_blockhash().await.map_err(|e| Local(e.message))?;
                sign_exact_svm(
                    keypair,
                    required,
                    accepted,
                    blockhash,
                    mint,
                    umpire_core::hash::random_bytes::<16>(),
                )
                .map_err(Local)
            }
        }
    }
}

pub fn wallet(key_file: Option<&Path>) -> Result<PrivateKeySigner, Local> {
    let (text, source) = match key_file {
        Some(p) => (
            std::fs::read_to_string(p).map_err(|e| Local(format!("{}: {e}", p.display())))?,
            p.display().to_string(),
        ),
        None => (
            std::env::var("UMPIRE_WALLET_KEY").map_err(|_| {
                Local("no wallet: set UMPIRE_WALLET_KEY to the paying wallet's private key (0x + 64 hex), or pass --key-file FILE".into())
            })?,
            "UMPIRE_WALLET_KEY".to_owned(),
        ),
    };
    text.trim().parse::<PrivateKeySigner>().map_err(|_| {
        Local(format!(
            "{source} does not hold a private key (0x + 64 hex characters)"
        ))
    })
}

/// What each refusal means, in plain words (the service's own hint follows). Matched on
/// the contract's error codes, so a renamed code cannot silently lose its words.
fn plain_words(code: &str) -> Option<&'static str> {
    use umpire_core::ErrorCode as E;
    Some(match E::parse(code)? {
        E::BadSignature => {
            "the signature is not the payer wallet's signature over this exact feedback (check the key, the outcome and the options)"
        }
        E::PaymentNotFound => {
            "no successful USDC payment from the payer to the merchant was found in that transaction (or it lacks confirmations yet)"
        }
        E::PayerMismatch => "the transaction pays the merchant, but not from this payer's wallet",
        E::ReceiptTooOld => {
            "the payment is more than 90 days old; feedback must follow a recent purchase"
        }
        E::SelfFeedback => "the payer and the merchant are the same address",
        E::DuplicateFeedback => {
            "feedback for this transaction was already recorded; one per transaction"
        }
        E::AmountTooSmall => "the payment is below the 0.01 USDC floor",
        E::ReceiptsOff => "this deployment does not read the chain, so it cannot accept feedback",
        E::ChainUnavailable => {
            "the chain (or the payment facilitator) could not be reached; nothing was charged or stored"
        }
        E::RateLimited => "too many requests from your address this minute",
        E::InvalidSpec => "the spec has problems; nothing was charged",
        E::PaymentRequired => "the payment was refused; nothing was charged",
        E::IdempotencyKeyReuse => "that Idempotency-Key was used for a different request",
        E::InFlight => "the original request with this key is still being processed",
        E::NotFound => "no such verdict, or the secret does not match",
        _ => return None,
    })
}

/// Prints a refusal and returns exit code 1.
pub fn refused(a: &Answer) -> ExitCode {
    let e = a.body.get("error");
    let field = |k: &str| {
        e.and_then(|e| e.get(k))
            .and_then(Value::as_str)
            .unwrap_or("")
    };
    let code = field("code");
    eprintln!(
        "umpire: the service refused ({} {code}): {}",
        a.status,
        field("message")
    );
    if let Some(words) = plain_words(code) {
        eprintln!("  meaning: {words}");
    }
    if let Some(problems) = e.and_then(|e| e.get("problems")).and_then(Value::as_array) {
        for p in problems {
            let s = |k: &str| p.get(k).and_then(Value::as_str).unwrap_or("");
            eprintln!("  {}: {} ({})", s("where"), s("message"), s("code"));
            if !s("hint").is_empty() {
                eprintln!("    hint: {}", s("hint"));
            }
        }
    }
    if !field("hint").is_empty() {
        eprintln!("  what to do: {}", field("hint"));
    }
    if let Some(reason) = a
        .headers
        .get("payment-response")
        .and_then(|v| v.to_str().ok())
        .and_then(|h| decode_header::<serde_json::Value>(h).ok())
        .and_then(|s| {
            s.get("errorReason")
                .and_then(|r| r.as_str())
                .map(str::to_owned)
        })
    {
        eprintln!("  payment: {reason}");
    }
    ExitCode::from(1)
}

/// Stable JSON, one line: exact numbers (a pretty-printer through f64 could change a
/// signed document's bytes), and `umpire verify` reads it back as is.
pub fn print_json(v: &Value) {
    println!("{}", v.to_canonical_string());
}

pub fn read_json(path: &Path) -> Result<Value, Local> {
    let bytes = std::fs::read(path).map_err(|e| Local(format!("{}: {e}", path.display())))?;
    parse(&bytes).map_err(|e| Local(format!("{}: not JSON: {e}", path.display())))
}

pub struct BuyArgs {
    pub tier: String,
    pub spec: PathBuf,
    pub deliverable: PathBuf,
    pub job_ref: Option<String>,
    pub webhook: Option<String>,
    pub pay: PayArgs,
    pub idempotency_key: Option<String>,
    pub no_wait: bool,
}

pub async fn buy(api: &Api, args: BuyArgs) -> Result<ExitCode, Local> {
    let payer = Payer::from_args(&args.pay)?;
    let mut body = Value::object()
        .with("spec", read_json(&args.spec)?)
        .with("deliverable", read_json(&args.deliverable)?);
    if let Some(j) = args.job_ref {
        body = body.with("job_ref", j);
    }
    if let Some(w) = args.webhook {
        body = body.with("webhook_url", w);
    }
    let key = args
        .idempotency_key
        .unwrap_or_else(|| umpire_core::hash::random_id("umpire-cli"));
    eprintln!(
        "Idempotency-Key: {key}  (run again with --idempotency-key {key} to resume this purchase without paying twice)"
    );
    let path = format!("/v1/verdicts/{}", args.tier);
    let a = api
        .paid(Method::POST, &path, Some(&body), &payer, &key)
        .await?;
    if a.status != 201 && a.status != 202 {
        return Ok(refused(&a));
    }
    let s = |k: &str| {
        a.body
            .get(k)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned()
    };
    let (id, secret) = (s("verdict_id"), s("secret"));
    eprintln!(
        "verdict {id}: {}",
        if a.status == 201 {
            s("verdict")
        } else {
            "pass 1 done, pending pass 2".into()
        }
    );
    eprintln!(
        "secret {secret}  (shown once: keep it to read the verdict at {})",
        s("status_url")
    );
    if a.status == 201 || args.no_wait {
        print_json(&a.body);
        return Ok(ExitCode::SUCCESS);
    }
    // Sworn: wait for pass 2 and its signed final document.
    let due = a
        .body
        .get("final_due_at")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned();
    eprintln!(
        "waiting for pass 2 (due {due}); Ctrl-C is safe: `umpire status {id} --secret ...` reads it later"
    );
    let started = std::time::Instant::now();
    loop {
        tokio::time::sleep(Duration::from_secs(3)).await;
        let st = api
            .send(
                Method::GET,
                &format!("/v1/verdicts/{id}"),
                &[("authorization", format!("Bearer {secret}"))],
                None,
            )
            .await?;
        if st.status != 200 {
            return Ok(refused(&st));
        }
        if st.body.get("status").and_then(Value::as_str) == Some("final") {
            eprintln!();
            let final_doc = st.body.get("document").cloned().unwrap_or(Value::Null);
            eprintln!(
                "final: verdict {}",
                final_doc
                    .get("verdict")
                    .and_then(Value::as_str)
                    .unwrap_or("?")
            );
            print_json(
                &Value::object()
                    .with("verdict_id", id.as_str())
                    .with("secret", secret.as_str())
                    .with("status", "final")
                    .with("document", final_doc),
            );
            return Ok(ExitCode::SUCCESS);
        }
        eprint!(
            "\r  waiting for pass 2... {} s",
            started.elapsed().as_secs()
        );
    }
}

/// A free GET/POST: the answer on stdout, or the refusal explained.
pub async fn free(
    api: &Api,
    method: Method,
    path: &str,
    headers: &[(&str, String)],
    body: Option<&Value>,
) -> Result<ExitCode, Local> {
    let a = api.send(method, path, headers, body).await?;
    if a.status >= 400 {
        return Ok(refused(&a));
    }
    print_json(&a.body);
    Ok(ExitCode::SUCCESS)
}

/// Validation: the answer on stdout; exit 1 when the purchase would be refused.
pub async fn validate(api: &Api, body: &Value) -> Result<ExitCode, Local> {
    let a = api
        .send(Method::POST, "/v1/validate", &[], Some(body))
        .await?;
    if a.status >= 400 {
        return Ok(refused(&a));
    }
    print_json(&a.body);
    if a.body.get("valid").and_then(Value::as_bool) == Some(true) {
        eprintln!("valid: this purchase would be judged");
        return Ok(ExitCode::SUCCESS);
    }
    eprintln!("not valid: a purchase would be refused (nothing charged) for:");
    for p in a
        .body
        .get("problems")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let s = |k: &str| p.get(k).and_then(Value::as_str).unwrap_or("");
        eprintln!("  {}: {} ({})", s("where"), s("message"), s("code"));
        if !s("hint").is_empty() {
            eprintln!("    hint: {}", s("hint"));
        }
    }
    Ok(ExitCode::from(1))
}

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

pub async fn reputation(
    api: &Api,
    merchant: &str,
    json: bool,
    pay: &PayArgs,
) -> Result<ExitCode, Local> {
    let payer = Payer::from_args(pay)?;
    let key = umpire_core::hash::random_id("umpire-cli");
    let a = api
        .paid(
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

/// Nested objects as indented `name: value` lines (the signature last and short).
fn print_readable(v: &Value, depth: usize) {
    let Some(map) = v.as_object() else { return };
    let pad = "  ".repeat(depth);
    for (k, val) in map {
        if k == "signature" {
            continue;
        }
        match val {
            Value::Object(_) => {
                println!("{pad}{k}:");
                print_readable(val, depth + 1);
            }
            Value::String(s) => println!("{pad}{k}: {s}"),
            other => println!("{pad}{k}: {}", other.to_canonical_string()),
        }
    }
    if let Some(sig) = map.get("signature") {
        println!(
            "{pad}signed by key {} (verify the JSON with `umpire verify`)",
            sig.get("key_id").and_then(Value::as_str).unwrap_or("?")
        );
    }
}
