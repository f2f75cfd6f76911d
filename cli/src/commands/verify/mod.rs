//! `umpire verify`: a signed document checked offline against a key document (a file,
//! a URL, or the local key), and with `--job` or `--validation` against what is on
//! chain (`job`, `validation`).

mod job;
mod validation;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use alloy::primitives::B256;
use umpire_core::document::Step;
use umpire_core::json::{Value, parse};
use umpire_core::signer::{PublicKey, Signer, keys_from_document};
use umpire_core::spec::parse_deliverable;
use umpire_escrow::bytes32_of;
use umpire_server::datadir::{default_data_dir, load_signer};

use super::{fail, read_json};
use job::job_steps;
use validation::validation_steps;

pub(crate) async fn load_keys(
    key: Option<&str>,
    data_dir: Option<PathBuf>,
) -> Result<Vec<PublicKey>, String> {
    let doc = match key {
        Some(k) => key_document(k).await?,
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

/// A key document from a file or an http(s) URL.
pub(crate) async fn key_document(source: &str) -> Result<Value, String> {
    if source.starts_with("http://") || source.starts_with("https://") {
        let body = fetch_key_document(source).await?;
        parse(&body).map_err(|e| format!("{source}: {e}"))
    } else {
        read_json(Path::new(source))
    }
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

/// An ERC-8183 job to check the document against, and the RPC to read it from.
pub struct JobCheck {
    pub job: String,
    pub rpc: String,
}

/// Verify a signed document offline with the contract's recipe. Exit 0 when every
/// step passes, 1 when one fails (the failing step is named), 2 on usage errors.
#[derive(clap::Args)]
pub struct Verify {
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
    /// An ERC-8004 validation request the document answers
    /// (erc8004:eip155:CHAIN:REGISTRY:REQUEST_HASH): also check that the document names
    /// it, that the request names the validator Umpire publishes, and that the
    /// validator's final answer on chain is the verdict (100 pass, 0 fail) with the
    /// document's payload_sha256 as responseHash. Needs --rpc.
    #[arg(long, requires = "rpc", conflicts_with = "job")]
    validation: Option<String>,
    /// The validator address to expect (default: the one the document's issuer
    /// publishes at /.well-known/agent-registration.json). Needs --registry.
    #[arg(long, requires = "registry")]
    validator: Option<String>,
    /// The registry the validator answers on, eip155:CHAIN:ADDRESS (with --validator).
    #[arg(long, requires = "validator")]
    registry: Option<String>,
    /// The RPC of the job's (or the registry's) chain.
    #[arg(long)]
    rpc: Option<String>,
}

impl Verify {
    pub async fn run(self) -> ExitCode {
        let on_chain = match (self.job, self.validation, self.rpc) {
            (Some(job), None, Some(rpc)) => Some(OnChain::Job(JobCheck { job, rpc })),
            (None, Some(reference), Some(rpc)) => Some(OnChain::Validation {
                reference,
                rpc,
                validator: self.validator.zip(self.registry),
            }),
            (None, None, Some(_)) => {
                return fail(2, "--rpc goes with --job or --validation");
            }
            _ => None,
        };
        run(
            &self.doc,
            self.key.as_deref(),
            self.deliverable.as_deref(),
            self.data_dir,
            on_chain,
        )
        .await
    }
}

/// What on chain the document is checked against.
enum OnChain {
    Job(JobCheck),
    Validation {
        reference: String,
        rpc: String,
        /// The validator and its registry, when given rather than read from the issuer.
        validator: Option<(String, String)>,
    },
}

async fn run(
    doc: &Path,
    key: Option<&str>,
    deliverable: Option<&Path>,
    data_dir: Option<PathBuf>,
    on_chain: Option<OnChain>,
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
    let mut steps = umpire_core::document::verify(&doc, &keys, deliverable.as_ref());
    let more = match &on_chain {
        None => Ok(Vec::new()),
        Some(OnChain::Job(check)) => job_steps(&doc, check).await,
        Some(OnChain::Validation {
            reference,
            rpc,
            validator,
        }) => validation_steps(&doc, reference, rpc, validator.as_ref()).await,
    };
    match more {
        Ok(more) => steps.extend(more),
        Err(e) => return fail(2, &e),
    }
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

/// One step of the audit, as [`umpire_core::document::verify`] reports its own.
fn step(name: &'static str, ok: bool, detail: String) -> Step {
    Step { name, ok, detail }
}

/// The document's text field `key` (empty when absent or not a string).
fn text<'a>(doc: &'a Value, key: &str) -> &'a str {
    doc.get(key).and_then(Value::as_str).unwrap_or("")
}

/// The document's signed payload_sha256, when it reads as 32 bytes.
fn payload_sha256(doc: &Value) -> Option<B256> {
    doc.get("signature")
        .and_then(|s| s.get("payload_sha256"))
        .and_then(Value::as_str)
        .and_then(bytes32_of)
}
