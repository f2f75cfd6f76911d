//! Umpire as an ERC-8004 validator (docs/erc8004.md).
//!
//! A purchase whose `job_ref` names a validation request
//! (`erc8004:eip155:<chain>:<registry>:<requestHash>`) is checked before payment: the
//! request exists on the registry this deployment answers on, names our validator, has
//! no final answer of ours yet, and its request file (at `requestURI`, which only the
//! request's event holds) hashes to `requestHash` and carries the spec and deliverable
//! the purchase is judged on (or their hashes). After delivery a queued job answers it:
//! `validationResponse(requestHash, 100 | 0, responseURI, payload_sha256, umpire:<tier>)`
//! from the validator's key, with a provisional answer after a sworn verdict's pass 1.
//! Posting never holds up the paid answer; it retries on its own.

use std::time::Duration;

use alloy::primitives::{B256, U256, keccak256};
use umpire_core::json::{Value, parse};
use umpire_core::product::Tier;
use umpire_core::spec::{parse_deliverable, parse_spec};
use umpire_core::{ApiError, ErrorCode};
use umpire_escrow::EscrowError;
use umpire_escrow::validation::{
    FAILED, PASSED, PROVISIONAL_TAG, Registry, TAG_PREFIX, VALIDATION_REF_PREFIX, ValidationRef,
    final_tag,
};
use umpire_host::Deadline;

use crate::checkout::ledger::PurchaseOutcome;
use crate::plumbing::config::Config;
use crate::plumbing::metrics::{Metric, record};
use crate::plumbing::state::AppState;
use crate::products::verdict::jobs::{JobError, SwornJob, ValidationJob, backoff};
use crate::products::verdict::purchase::Purchase;

/// Attempts at posting one answer before it is given up on (and alarmed): with the
/// webhook's backoff (30 s doubling, 15 min at most), about an hour and a half.
pub const POST_MAX_ATTEMPTS: u32 = 10;
/// The largest request file read (the fetcher's cap applies to http(s) too).
pub const MAX_REQUEST_FILE_BYTES: usize = 256 * 1024;

pub use crate::plumbing::config::{
    DEFAULT_LOW_GAS_WEI, KEY_HEX_ENV, ValidatorConfig, key_from_env,
};

/// The validation request a purchase's `job_ref` names, if it names one.
pub fn named_request(purchase: &Purchase) -> Option<&str> {
    purchase
        .job_ref
        .as_ref()
        .and_then(Value::as_str)
        .filter(|r| r.starts_with(VALIDATION_REF_PREFIX))
}

fn refused(message: impl Into<String>, hint: impl Into<String>) -> ApiError {
    ApiError::new(ErrorCode::InvalidRequest, message, hint)
}

fn chain_down(e: impl std::fmt::Display) -> ApiError {
    ApiError::new(
        ErrorCode::ChainUnavailable,
        format!("the validation registry could not be read: {e}"),
        "Retry in a few seconds; nothing was charged.",
    )
    .with_retry_after(5)
}

/// The checks a purchase naming a validation request passes before any payment is
/// asked for (see the module's comment); `Ok` for a purchase naming none.
pub async fn check_before_payment(
    state: &AppState,
    purchase: &Purchase,
    until: Deadline,
) -> Result<(), ApiError> {
    let Some(given) = named_request(purchase) else {
        return Ok(());
    };
    let hint = "job_ref names an ERC-8004 validation request as erc8004:eip155:<chain id>:<0x registry>:<0x requestHash> (docs/erc8004.md)";
    let reference: ValidationRef = given
        .parse()
        .map_err(|e: umpire_escrow::ValidationRefError| refused(e.to_string(), hint))?;
    let (Some(config), Some(validation)) = (&state.config.validator, &state.validation) else {
        return Err(refused(
            "this deployment answers no ERC-8004 validation requests",
            "Leave job_ref without the erc8004: prefix, or buy from a deployment whose /.well-known/agent-registration.json lists a validator; nothing was charged.",
        ));
    };
    if state.queue.is_none() {
        return Err(ApiError::new(
            ErrorCode::Unavailable,
            "this process has no job queue to post validation answers from",
            "Buy from a deployment with a job queue; nothing was charged.",
        ));
    }
    if reference.registry != config.registry {
        return Err(refused(
            format!(
                "this deployment answers validation requests on {}, not {}",
                config.registry, reference.registry
            ),
            "Ask for validation on the registry /.well-known/agent-registration.json names; nothing was charged.",
        ));
    }
    let checked = tokio::time::timeout_at(until.instant().into(), async {
        let registry = validation.registry().await.map_err(chain_down)?;
        check_request(state, registry, config, &reference, purchase).await
    })
    .await;
    match checked {
        Ok(r) => r,
        Err(_) => Err(chain_down("no answer in time")),
    }
}

async fn check_request(
    state: &AppState,
    registry: &Registry,
    config: &ValidatorConfig,
    reference: &ValidationRef,
    purchase: &Purchase,
) -> Result<(), ApiError> {
    let hash = reference.request_hash;
    let Some(status) = registry.status(hash).await.map_err(chain_down)? else {
        return Err(refused(
            format!(
                "the registry holds no validation request {}",
                umpire_escrow::bytes32_hex(&hash)
            ),
            "Send validationRequest(validator, agentId, requestURI, requestHash) first (the validator's address is in /.well-known/agent-registration.json), then buy; nothing was charged.",
        ));
    };
    if status.validator != config.validator {
        return Err(refused(
            format!(
                "the request names validator {}, not Umpire's {}",
                status.validator, config.validator
            ),
            "Only the named validator can answer a request: ask again naming Umpire's validator address; nothing was charged.",
        ));
    }
    // Any answer of ours, a sworn verdict's provisional one included: that request is
    // being (or has been) answered by a purchase already.
    if status.tag.starts_with(TAG_PREFIX) {
        return Err(ApiError::new(
            ErrorCode::AlreadyCreated,
            format!(
                "the request already has Umpire's answer ({} under tag {})",
                status.response, status.tag
            ),
            "Read it with getValidationStatus, or ask a new request (a new requestHash) for new work; nothing was charged.",
        ));
    }
    let uri = registry.request_uri(hash).await.map_err(chain_down)?.ok_or_else(|| {
        refused(
            "the request's ValidationRequest event is not within the blocks Umpire looks back through",
            "Ask again with a new request; nothing was charged.",
        )
    })?;
    let file = request_file(state, &uri).await?;
    let got = keccak256(&file);
    if got != hash {
        return Err(refused(
            format!(
                "the request file at {uri} hashes (keccak256) to {}, not the requestHash {}",
                umpire_escrow::bytes32_hex(&got),
                umpire_escrow::bytes32_hex(&hash)
            ),
            "requestHash must be keccak256 of the request file's exact bytes; serve the file the request committed to; nothing was charged.",
        ));
    }
    matches_request(&file, purchase, &status.agent_id)
}

/// The request file at `uri`: a `data:` URI's own bytes, or fetched (http/https) with
/// the fetcher and its URL policy, complete and 2xx.
async fn request_file(state: &AppState, uri: &str) -> Result<Vec<u8>, ApiError> {
    let hint = "Serve the request file over https (or put it on chain as a data: URI); nothing was charged.";
    if let Some(data) = uri.strip_prefix("data:") {
        return data_uri(data)
            .ok_or_else(|| refused("the requestURI data: URI does not decode", hint));
    }
    if !(uri.starts_with("https://") || uri.starts_with("http://")) {
        return Err(refused(
            format!(
                "Umpire cannot read the requestURI {uri:?}: only http(s) and data: URIs are read"
            ),
            hint,
        ));
    }
    let fetcher = state.fetcher.as_ref().ok_or_else(|| {
        ApiError::new(
            ErrorCode::Unavailable,
            "this process fetches no URLs, so it cannot read the request file",
            "Use a deployment that fetches; nothing was charged.",
        )
    })?;
    let fetched = fetcher.fetch(uri).await;
    let Some(body) = fetched.body else {
        let why = fetched
            .observation
            .error
            .unwrap_or_else(|| "no answer".into());
        return Err(refused(
            format!("the request file at {uri} could not be read: {why}"),
            hint,
        ));
    };
    if !(200..300).contains(&body.status) {
        return Err(refused(
            format!("the request file at {uri} answered HTTP {}", body.status),
            hint,
        ));
    }
    if body.truncated || body.body.len() > MAX_REQUEST_FILE_BYTES {
        return Err(refused(
            format!("the request file at {uri} is larger than {MAX_REQUEST_FILE_BYTES} bytes"),
            "Put the deliverable's hash (deliverable_hash) in the request file instead of the deliverable; nothing was charged.",
        ));
    }
    Ok(body.body)
}

/// A `data:` URI's bytes (after `data:`): `[<type>][;base64],<data>`.
fn data_uri(rest: &str) -> Option<Vec<u8>> {
    use base64::Engine as _;
    let (meta, data) = rest.split_once(',')?;
    let bytes = if meta.ends_with(";base64") {
        base64::engine::general_purpose::STANDARD
            .decode(data.trim())
            .ok()?
    } else {
        percent_decode(data)?
    };
    (bytes.len() <= MAX_REQUEST_FILE_BYTES).then_some(bytes)
}

/// A value as the request file spelled it, for a refusal's message.
fn plain(v: &Value) -> String {
    String::from_utf8_lossy(&v.to_canonical_vec()).into_owned()
}

fn percent_decode(s: &str) -> Option<Vec<u8>> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let pair = b.get(i + 1..i + 3)?;
            // Two hex digits exactly (from_str_radix alone would take a sign).
            if !pair.iter().all(u8::is_ascii_hexdigit) {
                return None;
            }
            let hex = std::str::from_utf8(pair).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    Some(out)
}

/// A hash the request file states (`spec_hash`, `deliverable_hash`), and the one of
/// the object it carries beside it, which must agree when both are there.
fn committed(
    carried: Option<Result<String, ApiError>>,
    stated: Option<&Value>,
    name: &str,
    hint: &str,
) -> Result<String, ApiError> {
    let stated = match stated {
        None => None,
        Some(Value::String(h)) => Some(h.to_ascii_lowercase()),
        Some(_) => {
            return Err(refused(
                format!("the request file's {name}_hash is not a string"),
                hint,
            ));
        }
    };
    match (carried.transpose()?, stated) {
        (Some(h), Some(st)) if h != st => Err(refused(
            format!("the request file's {name}_hash is not its {name}'s ({h})"),
            hint,
        )),
        (Some(h), _) | (None, Some(h)) => Ok(h),
        (None, None) => Err(refused(
            format!("the request file names no {name} ({name} or {name}_hash)"),
            hint,
        )),
    }
}

/// The spec and deliverable hashes a request file commits to: from `spec` /
/// `deliverable` (normalized as a purchase's would be) or `spec_hash` /
/// `deliverable_hash` (as a verdict document states them); and, when it names them,
/// the tier and the agent.
fn matches_request(file: &[u8], purchase: &Purchase, agent_id: &U256) -> Result<(), ApiError> {
    let hint = "The request file is a JSON object with \"spec\" (or \"spec_hash\") and \"deliverable\" (or \"deliverable_hash\"), judged exactly as sent in this purchase, and optionally \"tier\" and \"agent_id\" (docs/erc8004.md); nothing was charged.";
    let v = parse(file).map_err(|e| refused(format!("the request file is not JSON: {e}"), hint))?;
    if v.as_object().is_none() {
        return Err(refused("the request file is not a JSON object", hint));
    }
    let tier = purchase.tier;
    // Optional bindings: a file naming its tier or its agent is answered only by a
    // purchase of that tier, for a request of that agent (a copier asking again under
    // another agent id with the same file is refused).
    if let Some(t) = v.get("tier")
        && t.as_str() != Some(tier.as_str())
    {
        return Err(refused(
            format!(
                "the request file asks for tier {}, not {}",
                plain(t),
                tier.as_str()
            ),
            hint,
        ));
    }
    if let Some(a) = v.get("agent_id") {
        let named = match a {
            Value::String(s) => s.parse::<U256>().ok(),
            Value::Number(umpire_core::json::Number::Int(t)) => t.parse::<U256>().ok(),
            _ => None,
        };
        if named.as_ref() != Some(agent_id) {
            return Err(refused(
                format!(
                    "the request file names agent {}, but the request is agent {agent_id}'s",
                    plain(a)
                ),
                hint,
            ));
        }
    }
    let spec = v.get("spec").map(|s| {
        parse_spec(s, Some(tier)).map(|s| s.hash).map_err(|_| {
            refused(
                format!(
                    "the request file's spec is not a valid {} spec",
                    tier.as_str()
                ),
                hint,
            )
        })
    });
    let spec_hash = committed(spec, v.get("spec_hash"), "spec", hint)?;
    let deliverable = v.get("deliverable").map(|d| {
        parse_deliverable(d, "deliverable")
            .map(|d| d.hash())
            .map_err(|_| {
                refused(
                    "the request file's deliverable is not a valid deliverable",
                    hint,
                )
            })
    });
    let deliverable_hash = committed(deliverable, v.get("deliverable_hash"), "deliverable", hint)?;
    if spec_hash != purchase.spec.hash {
        return Err(refused(
            format!(
                "the purchase's spec differs from the request's (spec_hash {} here, {spec_hash} in the request)",
                purchase.spec.hash
            ),
            hint,
        ));
    }
    if deliverable_hash != purchase.deliverable.hash() {
        return Err(refused(
            format!(
                "the purchase's deliverable differs from the request's (deliverable_hash {} here, {deliverable_hash} in the request)",
                purchase.deliverable.hash()
            ),
            hint,
        ));
    }
    Ok(())
}

/// The answer for a delivered verdict: 100 or 0, its document's `payload_sha256` (none
/// for a provisional answer: pass 1 signs no document), under `tag`.
pub struct Answer<'a> {
    pub passed: bool,
    pub response_hash: Option<&'a str>,
    pub tag: String,
}

impl Answer<'_> {
    /// The final answer for a signed verdict document.
    pub fn final_for(document: &Value, tier: Tier) -> Answer<'_> {
        Answer {
            passed: document.get("verdict").and_then(Value::as_str) == Some("pass"),
            response_hash: document
                .get("signature")
                .and_then(|s| s.get("payload_sha256"))
                .and_then(Value::as_str),
            tag: final_tag(tier.as_str()),
        }
    }

    /// The provisional answer after a sworn verdict's pass 1.
    pub fn provisional(passed: bool) -> Answer<'static> {
        Answer {
            passed,
            response_hash: None,
            tag: PROVISIONAL_TAG.to_owned(),
        }
    }
}

/// The purchase an answer waits for: a witness/basic/probe verdict's answer is queued
/// before its payment settles (so no crash between the two loses it), and its job asks
/// the ledger first, as pass 2 does: only a verdict that was sold is answered.
pub struct Paying<'a> {
    pub payment_key: &'a str,
    /// When its hold lapses (and then one hold more): past this, a purchase still
    /// unresolved is not waited for.
    pub wait_until: u64,
}

/// How long an answer waits before asking again whether its purchase settled.
const SETTLEMENT_WAIT: Duration = Duration::from_secs(2);

/// Queues the answer to the request `job_ref` names (if it names one) for the verdict
/// `verdict_id`. `Err` when it names one and the job could not be queued: the caller
/// refuses the purchase before settling it (or, in pass 2, tries again), so a sold
/// verdict always has its answer on the way.
pub async fn queue_answer(
    state: &AppState,
    verdict_id: &str,
    job_ref: Option<&Value>,
    answer: Answer<'_>,
    paying: Option<Paying<'_>>,
) -> Result<(), String> {
    let Some(reference) = job_ref
        .and_then(Value::as_str)
        .filter(|r| r.starts_with(VALIDATION_REF_PREFIX))
    else {
        return Ok(());
    };
    let job = SwornJob::Validation(ValidationJob {
        verdict_id: verdict_id.to_owned(),
        reference: reference.to_owned(),
        response: if answer.passed { PASSED } else { FAILED },
        response_uri: format!("{}/v1/verdicts/{verdict_id}", state.config.issuer),
        response_hash: answer.response_hash.map(str::to_owned),
        tag: answer.tag,
        attempt: 1,
        payment_key: paying.as_ref().map(|p| p.payment_key.to_owned()),
        wait_until: paying.as_ref().map(|p| p.wait_until),
    });
    let delay = if paying.is_some() {
        SETTLEMENT_WAIT
    } else {
        Duration::ZERO
    };
    let queued = match &state.queue {
        Some(q) => q
            .enqueue(&job.to_job(), delay)
            .await
            .map_err(|e| e.to_string()),
        None => Err("no job queue".to_owned()),
    };
    queued.map_err(|e| {
        tracing::error!(verdict_id, error = %e, "the validation answer could not be queued");
        format!("the validation answer could not be queued: {e}")
    })
}

/// Posts one answer (a queued [`ValidationJob`]): only for a verdict that was sold, at
/// most once per `(requestHash, tag)` as the request's status shows it, never a
/// provisional one once the verdict is final; a failure the chain may get over is tried
/// again later as a new job (attempt + 1) until [`POST_MAX_ATTEMPTS`].
pub async fn run_post(state: &AppState, job: &ValidationJob) -> Result<(), JobError> {
    let verdict_id = job.verdict_id.as_str();
    let reference: ValidationRef = match job.reference.parse() {
        Ok(r) => r,
        Err(e) => {
            tracing::error!(verdict_id, error = %e, "a validation job naming no request; dropped");
            return Ok(());
        }
    };
    let outcome = match sold(state, job).await {
        Ok(Sold::No) => {
            tracing::info!(
                verdict_id,
                "a validation answer for a verdict never sold; dropped"
            );
            return Ok(());
        }
        // Its purchase is still settling: asked again shortly, as long as its hold lasts
        // (a pending purchase, followed to its end by its reconciler, however long).
        Ok(Sold::NotYet { pending }) => {
            let now = state.config.clock.now();
            if !pending && job.wait_until.is_none_or(|until| now >= until) {
                tracing::error!(
                    verdict_id,
                    "the validation answer's purchase never settled; not answered"
                );
                record(Metric::ValidationFailed);
                return Ok(());
            }
            let queue = state
                .queue
                .as_ref()
                .ok_or_else(|| JobError::Retry("no job queue configured".into()))?;
            return queue
                .enqueue(&SwornJob::Validation(job.clone()).to_job(), SETTLEMENT_WAIT)
                .await
                .map_err(|e| JobError::Retry(e.to_string()));
        }
        Ok(Sold::Yes) => post(state, &reference, job).await,
        Err(e) => Err(e),
    };
    match outcome {
        Ok(Some(tx)) => {
            tracing::info!(verdict_id, tag = job.tag, transaction = %tx, "validation answered");
            record(Metric::ValidationPosted);
            Ok(())
        }
        Ok(None) => Ok(()),
        Err(e) if e.is_transient() && job.attempt < POST_MAX_ATTEMPTS => {
            let delay = backoff(state.config.webhook_retry_base, job.attempt);
            tracing::warn!(verdict_id, attempt = job.attempt, error = %e, delay_ms = delay.as_millis() as u64, "posting the validation answer failed; trying again later");
            let again = SwornJob::Validation(ValidationJob {
                attempt: job.attempt + 1,
                ..job.clone()
            });
            let queue = state
                .queue
                .as_ref()
                .ok_or_else(|| JobError::Retry("no job queue configured".into()))?;
            queue
                .enqueue(&again.to_job(), delay)
                .await
                .map_err(|e| JobError::Retry(e.to_string()))
        }
        Err(e) => {
            tracing::error!(verdict_id, attempt = job.attempt, tag = job.tag, error = %e, "the validation answer was not posted; given up");
            record(Metric::ValidationFailed);
            Ok(())
        }
    }
}

/// Whether the verdict an answer is for was sold.
enum Sold {
    Yes,
    No,
    /// Its purchase has not settled yet: still running, or `pending` (its outcome was
    /// not known in time, and its reconciler follows it).
    NotYet {
        pending: bool,
    },
}

async fn sold(state: &AppState, job: &ValidationJob) -> Result<Sold, EscrowError> {
    let Some(key) = &job.payment_key else {
        // Queued by pass 2, which finishes only a verdict that was paid for.
        return Ok(Sold::Yes);
    };
    let key = crate::checkout::ledger::PaymentKey::from_stored(key.clone());
    let outcome = crate::checkout::ledger::purchase_outcome(state, &key, &job.verdict_id)
        .await
        .map_err(|e| EscrowError::Rpc {
            what: "the purchase ledger",
            message: e.message,
        })?;
    Ok(match outcome {
        PurchaseOutcome::Paid => Sold::Yes,
        PurchaseOutcome::NotSold => Sold::No,
        PurchaseOutcome::Unresolved => Sold::NotYet { pending: false },
        PurchaseOutcome::Pending => Sold::NotYet { pending: true },
    })
}

/// Whether the verdict's final document is signed (pass 2 has finished).
async fn verdict_final(state: &AppState, verdict_id: &str) -> Result<bool, EscrowError> {
    let now = state.config.clock.now();
    match state.store.get_verdict(verdict_id, now).await {
        Ok(rec) => Ok(rec.is_some_and(|r| r.document.is_some())),
        Err(e) => Err(EscrowError::Rpc {
            what: "reading the verdict",
            message: e.to_string(),
        }),
    }
}

/// The answer sent, or None when there is nothing to send (the status shows it
/// already, or a provisional answer the final one has overtaken).
async fn post(
    state: &AppState,
    reference: &ValidationRef,
    job: &ValidationJob,
) -> Result<Option<B256>, EscrowError> {
    let validation = state
        .validation
        .as_ref()
        .filter(|v| v.posts())
        .ok_or_else(|| EscrowError::Config("this process holds no validator key".into()))?;
    if state.config.validator.as_ref().map(|v| v.registry) != Some(reference.registry) {
        return Err(EscrowError::Config(format!(
            "this process does not answer on {}",
            reference.registry
        )));
    }
    let registry = validation.registry().await?;
    let hash = reference.request_hash;
    let response_hash = match &job.response_hash {
        Some(h) => umpire_escrow::bytes32_of(h).ok_or_else(|| {
            EscrowError::Config(format!("response hash {h:?} is not 64 hex digits"))
        })?,
        None => B256::ZERO,
    };
    let Some(status) = registry.status(hash).await? else {
        return Err(EscrowError::Config(
            "the registry has no such request".into(),
        ));
    };
    if job.tag == PROVISIONAL_TAG {
        // A final answer stands, or this one is there already, or pass 2 has finished
        // (its final answer is queued; a provisional one sent after it would replace it).
        if status.answered_finally()
            || (status.tag == job.tag && status.response == job.response)
            || verdict_final(state, &job.verdict_id).await?
        {
            return Ok(None);
        }
    } else if status.tag == job.tag
        && status.response_hash == response_hash
        && status.response == job.response
    {
        return Ok(None);
    }
    let tx = registry
        .respond(
            hash,
            job.response,
            &job.response_uri,
            response_hash,
            &job.tag,
        )
        .await?;
    if let Ok(Some(balance)) = registry.validator_balance().await
        && let Some(v) = &state.config.validator
        && balance < v.low_gas_wei
    {
        tracing::warn!(balance = %balance, "the validator's gas balance is low: top it up");
        record(Metric::ValidatorGasLow);
    }
    Ok(Some(tx))
}

/// `/.well-known/agent-registration.json`: Umpire as an ERC-8004 agent (the ERC's
/// registration-v1 format): its endpoints, x402 support, and where it validates.
pub fn registration(config: &Config) -> Value {
    let issuer = config.issuer.as_str();
    let mut services = vec![
        // The HTTP API (x402-paid routes), and its OpenAPI description.
        Value::object().with("name", "web").with("endpoint", issuer),
        Value::object()
            .with("name", "OpenAPI")
            .with("endpoint", format!("{issuer}/openapi.json"))
            .with("version", "3.1.0"),
        Value::object()
            .with("name", "MCP")
            .with("endpoint", format!("{issuer}/mcp"))
            .with(
                "version",
                crate::plumbing::protocol::MCP_PROTOCOL_VERSIONS[0],
            ),
    ];
    let mut trust = Vec::new();
    if let Some(v) = &config.validator {
        services.push(
            Value::object()
                .with("name", "validator")
                .with(
                    "endpoint",
                    format!(
                        "eip155:{}:{}",
                        v.registry.chain_id,
                        v.validator.to_checksum(None)
                    ),
                )
                .with("validationRegistry", v.registry.to_string())
                .with(
                    "jobRef",
                    format!("{VALIDATION_REF_PREFIX}{}:<requestHash>", v.registry),
                )
                .with(
                    "tags",
                    Value::Array(
                        Tier::ALL
                            .iter()
                            .map(|t| Value::from(final_tag(t.as_str())))
                            .chain([Value::from(PROVISIONAL_TAG)])
                            .collect(),
                    ),
                ),
        );
        trust.push(Value::from("validation"));
    }
    let registrations = config
        .validator
        .as_ref()
        .and_then(|v| v.agent.as_ref())
        .map(|(registry, id)| {
            vec![
                Value::object()
                    .with(
                        "agentId",
                        Value::Number(umpire_core::json::Number::Int(id.to_string())),
                    )
                    .with("agentRegistry", registry.to_string()),
            ]
        })
        .unwrap_or_default();
    Value::object()
        .with("type", "https://eips.ethereum.org/EIPS/eip-8004#registration-v1")
        .with("name", "Umpire")
        .with(
            "description",
            "A neutral third party for agent commerce: Ed25519-signed pass/fail verdicts on a deliverable against an acceptance spec (checkable offline), paid per request over x402, and payment-verified merchant reputation. As an ERC-8004 validator it answers validation requests with 100 (pass) or 0 (fail) and the signed document's hash.",
        )
        .with("image", Value::Null)
        .with("services", Value::Array(services))
        .with("x402Support", !config.rails.rails.is_empty())
        .with("active", true)
        .with("registrations", Value::Array(registrations))
        .with("supportedTrust", Value::Array(trust))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn purchase() -> Purchase {
        let spec =
            parse(br##"{"checks":[{"type":"regex","pattern":"^# Report"}]}"##).expect("json");
        let deliverable = parse(br##"{"text":"# Report"}"##).expect("json");
        Purchase {
            tier: Tier::Basic,
            spec: parse_spec(&spec, Some(Tier::Basic)).expect("spec"),
            deliverable: parse_deliverable(&deliverable, "deliverable").expect("deliverable"),
            webhook_url: None,
            job_ref: None,
        }
    }

    fn check(file: &str) -> Result<(), String> {
        matches_request(file.as_bytes(), &purchase(), &U256::from(7)).map_err(|e| e.message)
    }

    #[test]
    fn a_request_file_commits_to_the_spec_and_deliverable_or_their_hashes() {
        let p = purchase();
        let (spec, del) = (&p.spec.hash, p.deliverable.hash());
        let full = r##"{"spec":{"checks":[{"type":"regex","pattern":"^# Report"}]},"deliverable":{"text":"# Report"}}"##;
        assert_eq!(check(full), Ok(()));
        // Spelled differently, normalized the same: the same spec.
        let spaced = r##"{ "deliverable": {"text":"# Report"}, "spec": {"checks":[{"pattern":"^# Report","type":"regex"}]} }"##;
        assert_eq!(check(spaced), Ok(()));
        assert_eq!(
            check(&format!(
                r#"{{"spec_hash":"{spec}","deliverable_hash":"{del}","agent_id":7,"tier":"basic"}}"#
            )),
            Ok(())
        );
        for (file, why) in [
            (
                format!(r#"{{"spec_hash":"{spec}"}}"#),
                "names no deliverable",
            ),
            (
                format!(
                    r#"{{"spec_hash":"{spec}","deliverable_hash":"{}"}}"#,
                    "0".repeat(64)
                ),
                "deliverable differs",
            ),
            (
                format!(r#"{{"spec_hash":"{spec}","deliverable_hash":"{del}","agent_id":"8"}}"#),
                "names agent",
            ),
            (
                format!(r#"{{"spec_hash":"{spec}","deliverable_hash":"{del}","tier":"sworn"}}"#),
                "asks for tier",
            ),
            // Both forms, disagreeing: the file contradicts itself.
            (
                format!(
                    r##"{{"spec":{{"checks":[{{"type":"regex","pattern":"^# Report"}}]}},"spec_hash":"{}","deliverable_hash":"{del}"}}"##,
                    "1".repeat(64)
                ),
                "spec_hash is not its spec's",
            ),
            ("[1]".to_owned(), "not a JSON object"),
            ("nope".to_owned(), "not JSON"),
        ] {
            let got = check(&file).expect_err(&file);
            assert!(got.contains(why), "{file}: {got}");
        }
    }

    #[test]
    fn data_uris_decode_strictly() {
        assert_eq!(
            data_uri("application/json;base64,eyJhIjoxfQ=="),
            Some(br#"{"a":1}"#.to_vec())
        );
        assert_eq!(
            data_uri("application/json,%7B%22a%22%3A1%7D"),
            Some(br#"{"a":1}"#.to_vec())
        );
        assert_eq!(data_uri(",%+f"), None, "a sign is not a hex digit");
        assert_eq!(data_uri(",%4"), None);
        assert_eq!(data_uri("no comma"), None);
        assert_eq!(data_uri(";base64,***"), None);
    }
}
