//! `umpire verify`: a signed document checked offline against a key document (a file,
//! a URL, or the local key).

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use umpire_core::json::{Value, parse};
use umpire_core::signer::{PublicKey, Signer, keys_from_document};
use umpire_core::spec::parse_deliverable;
use umpire_server::datadir::{default_data_dir, load_signer};

use alloy::primitives::Address;
use umpire_core::document::Step;
use umpire_escrow::{ContractRef, Escrow, EscrowError, JobRef, Registry, Status, ValidationRef};

use super::{fail, read_json};
use umpire_escrow::{bytes32_hex, bytes32_of};

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

/// The auditor's check of an evaluated ERC-8183 job: the document names the job, the
/// provider's commitment is the document's deliverable_hash, and the evaluator's
/// on-chain reason is the document's payload_sha256, with the outcome its verdict.
async fn job_steps(doc: &Value, check: &JobCheck) -> Result<Vec<Step>, String> {
    let job: JobRef = check.job.parse().map_err(|e| format!("--job: {e}"))?;
    let escrow = Escrow::connect(&check.rpc, &job.contract_ref(), None)
        .await
        .map_err(|e| format!("escrow: {e}"))?;
    let mut steps = Vec::new();
    let mut step = |name: &'static str, ok: bool, detail: String| {
        steps.push(Step { name, ok, detail });
    };
    let text = |k: &str| doc.get(k).and_then(Value::as_str).unwrap_or("");
    let named = text("job_ref").parse::<JobRef>().ok();
    step(
        "job_ref",
        named == Some(job),
        if named == Some(job) {
            format!("the document names job {job}")
        } else {
            format!(
                "the document's job_ref is {:?}, not job {job}",
                text("job_ref")
            )
        },
    );
    let state = match escrow.job(job.job_id).await {
        Ok(state) => state,
        // Not the chain failing for now: a contract whose jobs cannot be read fails the
        // audit (exit 1), rather than asking to be run again.
        Err(e @ EscrowError::Unreadable(_)) => {
            step("escrow", false, e.to_string());
            return Ok(steps);
        }
        Err(e) => return Err(format!("escrow: {e}")),
    };
    let submission = escrow
        .submission(job.job_id)
        .await
        .map_err(|e| format!("escrow: {e}"))?;
    let dh = bytes32_of(text("deliverable_hash"));
    match submission {
        Some(s) if Some(s.deliverable) == dh => step(
            "commitment",
            true,
            format!(
                "the provider's submit committed {}, the document's deliverable_hash",
                bytes32_hex(&s.deliverable)
            ),
        ),
        Some(s) => step(
            "commitment",
            false,
            format!(
                "the provider committed {}, the document judged deliverable_hash {}",
                bytes32_hex(&s.deliverable),
                text("deliverable_hash")
            ),
        ),
        None => step(
            "commitment",
            false,
            "no JobSubmitted event for the job was found".into(),
        ),
    }
    let outcome = escrow
        .outcome(job.job_id)
        .await
        .map_err(|e| format!("escrow: {e}"))?;
    let payload = doc
        .get("signature")
        .and_then(|s| s.get("payload_sha256"))
        .and_then(Value::as_str)
        .and_then(bytes32_of);
    match outcome {
        Some(o) => {
            step(
                "onchain_reason",
                Some(o.reason) == payload,
                if Some(o.reason) == payload {
                    format!(
                        "the evaluator's reason {} is the document's payload_sha256",
                        bytes32_hex(&o.reason)
                    )
                } else {
                    format!(
                        "the on-chain reason is {}, not the document's payload_sha256",
                        bytes32_hex(&o.reason)
                    )
                },
            );
            let verdict = text("verdict");
            let agrees = matches!(
                (o.status, verdict),
                (Status::Completed, "pass") | (Status::Rejected, "fail")
            );
            step(
                "onchain_outcome",
                agrees && o.by == state.evaluator,
                format!(
                    "the job is {} by {} (its evaluator: {}), the verdict is {verdict}",
                    o.status.name(),
                    o.by,
                    state.evaluator
                ),
            );
        }
        None => step(
            "onchain_reason",
            false,
            format!(
                "the job is {} and has no complete or reject on chain yet",
                state.status.name()
            ),
        ),
    }
    Ok(steps)
}

/// The validator the document's issuer publishes in its ERC-8004 registration file: the
/// `validator` service's endpoint (`eip155:<chain>:<address>`) and the registry it
/// answers on (`validationRegistry`).
async fn published_validator(doc: &Value) -> Result<(Address, Option<ContractRef>), String> {
    let issuer = doc
        .get("issuer")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let url = format!(
        "{}/.well-known/agent-registration.json",
        issuer.trim_end_matches('/')
    );
    if !(url.starts_with("https://") || url.starts_with("http://")) {
        return Err(format!(
            "the document names no http(s) issuer to ask for its validator ({issuer:?}); pass --validator"
        ));
    }
    let body = fetch_key_document(&url).await?;
    let file = parse(&body).map_err(|e| format!("{url}: {e}"))?;
    let service = file
        .get("services")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find(|s| s.get("name").and_then(Value::as_str) == Some("validator"))
        .ok_or_else(|| format!("{url} lists no validator; pass --validator"))?;
    let address = service
        .get("endpoint")
        .and_then(Value::as_str)
        .and_then(|e| e.rsplit(':').next())
        .and_then(|a| a.parse().ok())
        .ok_or_else(|| {
            format!("{url}: the validator's endpoint is not eip155:<chain>:<address>")
        })?;
    let registry = service
        .get("validationRegistry")
        .and_then(Value::as_str)
        .and_then(|r| r.parse().ok());
    Ok((address, registry))
}

/// The auditor's check of an answered ERC-8004 validation request: the document names
/// the request, the request names the validator Umpire publishes, and that validator's
/// final answer on chain is the document's verdict with its payload_sha256.
async fn validation_steps(
    doc: &Value,
    reference: &str,
    rpc: &str,
    validator: Option<&(String, String)>,
) -> Result<Vec<Step>, String> {
    use umpire_escrow::validation::{FAILED, PASSED, final_tag};
    let reference: ValidationRef = reference
        .parse()
        .map_err(|e| format!("--validation: {e}"))?;
    let (expected, published_registry): (Address, Option<ContractRef>) = match validator {
        Some((v, r)) => (
            v.parse()
                .map_err(|_| format!("--validator {v:?} is not an address"))?,
            Some(r.parse().map_err(|e| format!("--registry: {e}"))?),
        ),
        None => published_validator(doc).await?,
    };
    let registry = Registry::connect(rpc, &reference.registry, None)
        .await
        .map_err(|e| format!("registry: {e}"))?;
    let mut steps = Vec::new();
    let mut step = |name: &'static str, ok: bool, detail: String| {
        steps.push(Step { name, ok, detail });
    };
    let text = |k: &str| doc.get(k).and_then(Value::as_str).unwrap_or("");
    let named = text("job_ref").parse::<ValidationRef>().ok();
    step(
        "job_ref",
        named == Some(reference) && text("job_ref").starts_with("erc8004:"),
        if named == Some(reference) {
            format!("the document names request {reference}")
        } else {
            format!(
                "the document's job_ref is {:?}, not {reference}",
                text("job_ref")
            )
        },
    );
    // Any contract can emit events naming Umpire's validator: the registry must be the
    // one Umpire says it answers on.
    match published_registry {
        Some(published) => step(
            "registry",
            published == reference.registry,
            format!(
                "the request is on {}; Umpire answers on {published}",
                reference.registry
            ),
        ),
        None => step(
            "registry",
            false,
            "the issuer publishes no registry its validator answers on: pass --validator and --registry"
                .into(),
        ),
    }
    let hash = reference.request_hash;
    let Some(status) = registry
        .status(hash)
        .await
        .map_err(|e| format!("registry: {e}"))?
    else {
        step(
            "request",
            false,
            "the registry holds no such request".into(),
        );
        return Ok(steps);
    };
    step(
        "validator",
        status.validator == expected,
        format!(
            "the request names validator {}; Umpire's is {expected}",
            status.validator
        ),
    );
    let payload = doc
        .get("signature")
        .and_then(|s| s.get("payload_sha256"))
        .and_then(Value::as_str)
        .and_then(bytes32_of);
    let want = match text("verdict") {
        "pass" => PASSED,
        _ => FAILED,
    };
    let tag = final_tag(text("tier"));
    let answers = registry
        .responses(hash)
        .await
        .map_err(|e| format!("registry: {e}"))?;
    // This document's answer (its hash), else the validator's latest under the tag.
    let ours = |r: &&umpire_escrow::Response| r.validator == expected && r.tag == tag;
    let answer = answers
        .iter()
        .rev()
        .find(|r| ours(r) && Some(r.response_hash) == payload)
        .or_else(|| answers.iter().rev().find(ours));
    match answer {
        Some(a) => {
            step(
                "response_hash",
                Some(a.response_hash) == payload,
                if Some(a.response_hash) == payload {
                    format!(
                        "the answer's responseHash {} is the document's payload_sha256",
                        bytes32_hex(&a.response_hash)
                    )
                } else {
                    format!(
                        "the answer's responseHash is {}, not the document's payload_sha256",
                        bytes32_hex(&a.response_hash)
                    )
                },
            );
            step(
                "response",
                a.response == want,
                format!(
                    "the answer is {} under tag {}; the verdict is {} ({want})",
                    a.response,
                    a.tag,
                    text("verdict")
                ),
            );
        }
        None => step(
            "response",
            false,
            format!(
                "no answer tagged {tag} from {expected} on chain (latest status: {} under {:?})",
                status.response, status.tag
            ),
        ),
    }
    // What readers of the registry see (getValidationStatus, getSummary) is the latest
    // answer: it must be this one.
    let current =
        Some(status.response_hash) == payload && status.tag == tag && status.response == want;
    step(
        "current",
        current,
        if current {
            "the request's status is this answer".to_owned()
        } else {
            format!(
                "the request's status is now {} under {:?} with responseHash {}, not this document's answer",
                status.response,
                status.tag,
                bytes32_hex(&status.response_hash)
            )
        },
    );
    Ok(steps)
}
