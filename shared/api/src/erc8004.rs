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

use alloy::primitives::{Address, B256, U256, keccak256};
use alloy::signers::local::PrivateKeySigner;
use umpire_core::json::{Value, parse};
use umpire_core::product::Tier;
use umpire_core::spec::{parse_deliverable, parse_spec};
use umpire_core::{ApiError, ErrorCode};
use umpire_escrow::validation::{
    FAILED, PASSED, PROVISIONAL_TAG, Registry, VALIDATION_REF_PREFIX, ValidationRef, final_tag,
};
use umpire_escrow::{ContractRef, EscrowError};
use umpire_host::Deadline;

use crate::config::ConfigError;
use crate::paid::purchase::Purchase;
use crate::plumbing::metrics::{Metric, record};
use crate::sworn::job::{SwornJob, ValidationJob};
use crate::sworn::{JobError, backoff};
use crate::{AppState, Config};

/// Attempts at posting one answer before it is given up on (and alarmed): with the
/// webhook's backoff (30 s doubling, 15 min at most), about an hour and a half.
pub const POST_MAX_ATTEMPTS: u32 = 10;
/// The validator's balance below which every answer posted says so (a metric to alarm
/// on): about 200 answers at Base's usual fees.
pub const DEFAULT_LOW_GAS_WEI: u128 = 1_000_000_000_000_000 / 5;
/// The largest request file read (the fetcher's cap applies to https too).
pub const MAX_REQUEST_FILE_BYTES: usize = 256 * 1024;

/// Where this deployment answers validation requests, from the environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValidatorConfig {
    /// `UMPIRE_VALIDATION_REGISTRY`: `eip155:<chain id>:<registry>`.
    pub registry: ContractRef,
    /// The validator's address: `UMPIRE_VALIDATOR_ADDRESS`, or the address of
    /// `UMPIRE_VALIDATOR_KEY_HEX` (local runs).
    pub validator: Address,
    /// `UMPIRE_VALIDATION_RPC_URL`: where the registry is read and answered (the
    /// functions that do neither need none).
    pub rpc_url: Option<String>,
    /// `UMPIRE_AGENT_REGISTRY` and `UMPIRE_AGENT_ID`: Umpire's own registration as an
    /// agent (`eip155:<chain id>:<identity registry>`, its token id), when registered.
    pub agent: Option<(ContractRef, U256)>,
    /// `UMPIRE_VALIDATOR_LOW_GAS_WEI`.
    pub low_gas_wei: U256,
    /// `UMPIRE_VALIDATION_LOOKBACK_BLOCKS`: how far back a request's event is looked for.
    pub lookback_blocks: u64,
}

fn var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

fn bad(name: &'static str, value: &str, problem: impl Into<String>) -> ConfigError {
    ConfigError {
        name,
        value: value.to_owned(),
        problem: problem.into(),
    }
}

/// The validator's key for local runs (`UMPIRE_VALIDATOR_KEY_HEX`); on AWS the key is
/// sealed (`UMPIRE_VALIDATOR_KEY_CIPHERTEXT`, opened by the worker alone).
pub const KEY_HEX_ENV: &str = "UMPIRE_VALIDATOR_KEY_HEX";

/// `UMPIRE_VALIDATOR_KEY_HEX` as a signer, if set.
pub fn key_from_env() -> Result<Option<PrivateKeySigner>, ConfigError> {
    match var(KEY_HEX_ENV) {
        None => Ok(None),
        Some(v) => v.trim().parse::<PrivateKeySigner>().map(Some).map_err(|_| {
            bad(
                KEY_HEX_ENV,
                "(hidden)",
                "must be a 0x-prefixed 32-byte secp256k1 key",
            )
        }),
    }
}

impl ValidatorConfig {
    /// None when `UMPIRE_VALIDATION_REGISTRY` is unset: this deployment answers no
    /// validation request (a purchase naming one is refused before payment).
    pub fn from_env() -> Result<Option<ValidatorConfig>, ConfigError> {
        const REGISTRY: &str = "UMPIRE_VALIDATION_REGISTRY";
        const ADDRESS: &str = "UMPIRE_VALIDATOR_ADDRESS";
        let Some(r) = var(REGISTRY) else {
            return Ok(None);
        };
        let registry: ContractRef = r
            .parse()
            .map_err(|e: umpire_escrow::JobRefError| bad(REGISTRY, &r, e.problem))?;
        let from_key = key_from_env()?.map(|k| k.address());
        let validator = match (var(ADDRESS), from_key) {
            (Some(a), key) => {
                let a: Address = a
                    .trim()
                    .parse()
                    .map_err(|_| bad(ADDRESS, &a, "must be a 0x address"))?;
                if key.is_some_and(|k| k != a) {
                    return Err(bad(
                        ADDRESS,
                        &a.to_string(),
                        format!("differs from the address of {KEY_HEX_ENV}"),
                    ));
                }
                a
            }
            (None, Some(k)) => k,
            (None, None) => {
                return Err(bad(
                    ADDRESS,
                    "",
                    format!("is required with {REGISTRY} (or set {KEY_HEX_ENV} locally)"),
                ));
            }
        };
        let agent = match (var("UMPIRE_AGENT_REGISTRY"), var("UMPIRE_AGENT_ID")) {
            (Some(reg), Some(id)) => Some((
                reg.parse().map_err(|e: umpire_escrow::JobRefError| {
                    bad("UMPIRE_AGENT_REGISTRY", &reg, e.problem)
                })?,
                id.trim()
                    .parse::<U256>()
                    .map_err(|_| bad("UMPIRE_AGENT_ID", &id, "must be a decimal token id"))?,
            )),
            (None, None) => None,
            _ => {
                return Err(bad(
                    "UMPIRE_AGENT_ID",
                    "",
                    "UMPIRE_AGENT_REGISTRY and UMPIRE_AGENT_ID go together",
                ));
            }
        };
        let low_gas_wei = match var("UMPIRE_VALIDATOR_LOW_GAS_WEI") {
            None => U256::from(DEFAULT_LOW_GAS_WEI),
            Some(v) => v.trim().parse().map_err(|_| {
                bad(
                    "UMPIRE_VALIDATOR_LOW_GAS_WEI",
                    &v,
                    "must be a decimal amount of wei",
                )
            })?,
        };
        let lookback_blocks = match var("UMPIRE_VALIDATION_LOOKBACK_BLOCKS") {
            None => umpire_escrow::DEFAULT_LOOKBACK_BLOCKS,
            Some(v) => v.trim().parse().ok().filter(|n| *n > 0).ok_or_else(|| {
                bad(
                    "UMPIRE_VALIDATION_LOOKBACK_BLOCKS",
                    &v,
                    "must be a positive number of blocks",
                )
            })?,
        };
        Ok(Some(ValidatorConfig {
            registry,
            validator,
            rpc_url: var("UMPIRE_VALIDATION_RPC_URL"),
            agent,
            low_gas_wei,
            lookback_blocks,
        }))
    }
}

/// The registry this deployment answers on, connected (with `key` where answers are
/// posted); None when it answers none.
pub async fn connect(
    config: &Config,
    key: Option<PrivateKeySigner>,
) -> Result<Option<Registry>, String> {
    let Some(v) = &config.validator else {
        return Ok(None);
    };
    let rpc = v.rpc_url.as_deref().ok_or(
        "UMPIRE_VALIDATION_RPC_URL is required where validation requests are checked or answered",
    )?;
    if let Some(k) = &key
        && k.address() != v.validator
    {
        return Err(format!(
            "the validator key is {}'s, but this deployment publishes {} as its validator",
            k.address(),
            v.validator
        ));
    }
    let registry = Registry::connect(rpc, &v.registry, key)
        .await
        .map_err(|e| format!("the validation registry {}: {e}", v.registry))?;
    Ok(Some(registry.with_lookback(v.lookback_blocks)))
}

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
    let (Some(config), Some(registry)) = (&state.config.validator, &state.validation) else {
        return Err(refused(
            "this deployment answers no ERC-8004 validation requests",
            "Leave job_ref without the erc8004: prefix, or buy from a deployment whose /.well-known/agent-registration.json lists a validator; nothing was charged.",
        ));
    };
    if reference.registry != config.registry {
        return Err(refused(
            format!(
                "this deployment answers validation requests on {}, not {}",
                config.registry, reference.registry
            ),
            "Ask for validation on the registry /.well-known/agent-registration.json names; nothing was charged.",
        ));
    }
    let checked = tokio::time::timeout_at(
        until.instant().into(),
        check_request(state, registry, config, &reference, purchase),
    )
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
    if status.answered_finally() {
        return Err(ApiError::new(
            ErrorCode::AlreadyCreated,
            format!(
                "the request already has Umpire's final answer ({} under tag {})",
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
    matches_request(&file, purchase)
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
                "Umpire cannot read the requestURI {uri:?}: only https and data: URIs are read"
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

fn percent_decode(s: &str) -> Option<Vec<u8>> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = std::str::from_utf8(b.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    Some(out)
}

/// The spec and deliverable hashes a request file commits to: from `spec` /
/// `deliverable` (normalized as a purchase's would be) or `spec_hash` /
/// `deliverable_hash` (as a verdict document states them).
fn matches_request(file: &[u8], purchase: &Purchase) -> Result<(), ApiError> {
    let hint = "The request file is a JSON object with \"spec\" (or \"spec_hash\") and \"deliverable\" (or \"deliverable_hash\"), judged exactly as sent in this purchase (docs/erc8004.md); nothing was charged.";
    let v = parse(file).map_err(|e| refused(format!("the request file is not JSON: {e}"), hint))?;
    if v.as_object().is_none() {
        return Err(refused("the request file is not a JSON object", hint));
    }
    let tier = purchase.tier;
    let spec_hash = match (v.get("spec"), v.get("spec_hash").and_then(Value::as_str)) {
        (Some(s), _) => parse_spec(s, Some(tier)).map(|s| s.hash).map_err(|_| {
            refused(
                format!(
                    "the request file's spec is not a valid {} spec",
                    tier.as_str()
                ),
                hint,
            )
        })?,
        (None, Some(h)) => h.to_ascii_lowercase(),
        (None, None) => {
            return Err(refused(
                "the request file names no spec (spec or spec_hash)",
                hint,
            ));
        }
    };
    let deliverable_hash = match (
        v.get("deliverable"),
        v.get("deliverable_hash").and_then(Value::as_str),
    ) {
        (Some(d), _) => parse_deliverable(d, "deliverable")
            .map(|d| d.hash())
            .map_err(|_| {
                refused(
                    "the request file's deliverable is not a valid deliverable",
                    hint,
                )
            })?,
        (None, Some(h)) => h.to_ascii_lowercase(),
        (None, None) => {
            return Err(refused(
                "the request file names no deliverable (deliverable or deliverable_hash)",
                hint,
            ));
        }
    };
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

/// Queues the answer to the request `job_ref` names (if it names one) for the verdict
/// `verdict_id`. A failure is logged and alarmed, never the purchase's: the customer
/// has paid and gets the verdict either way.
pub async fn queue_answer(
    state: &AppState,
    verdict_id: &str,
    job_ref: Option<&Value>,
    answer: Answer<'_>,
) {
    let Some(reference) = job_ref
        .and_then(Value::as_str)
        .filter(|r| r.starts_with(VALIDATION_REF_PREFIX))
    else {
        return;
    };
    let job = SwornJob::Validation(ValidationJob {
        verdict_id: verdict_id.to_owned(),
        reference: reference.to_owned(),
        response: if answer.passed { PASSED } else { FAILED },
        response_uri: format!("{}/v1/verdicts/{verdict_id}", state.config.issuer),
        response_hash: answer.response_hash.map(str::to_owned),
        tag: answer.tag,
        attempt: 1,
    });
    let queued = match &state.queue {
        Some(q) => q
            .enqueue(&job.to_job(), Duration::ZERO)
            .await
            .map_err(|e| e.to_string()),
        None => Err("no job queue".to_owned()),
    };
    if let Err(e) = queued {
        tracing::error!(verdict_id, error = %e, "the validation answer could not be queued");
        record(Metric::ValidationFailed);
    }
}

/// Posts one answer (a queued [`ValidationJob`]): at most once per `(requestHash, tag)`,
/// never a provisional one over a final one; a failure the chain may get over is
/// tried again later as a new job (attempt + 1) until [`POST_MAX_ATTEMPTS`].
pub async fn run_post(state: &AppState, job: &ValidationJob) -> Result<(), JobError> {
    let verdict_id = job.verdict_id.as_str();
    let reference: ValidationRef = match job.reference.parse() {
        Ok(r) => r,
        Err(e) => {
            tracing::error!(verdict_id, error = %e, "a validation job naming no request; dropped");
            return Ok(());
        }
    };
    match post(state, &reference, job).await {
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

/// The answer sent, or None when there is nothing to send (posted already, or a
/// provisional answer a final one has overtaken).
async fn post(
    state: &AppState,
    reference: &ValidationRef,
    job: &ValidationJob,
) -> Result<Option<B256>, EscrowError> {
    let registry = state
        .validation
        .as_ref()
        .filter(|r| r.validator().is_some())
        .ok_or_else(|| EscrowError::Config("this process holds no validator key".into()))?;
    if state.config.validator.as_ref().map(|v| v.registry) != Some(reference.registry) {
        return Err(EscrowError::Config(format!(
            "this process does not answer on {}",
            reference.registry
        )));
    }
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
    let provisional = job.tag == PROVISIONAL_TAG;
    if status.tag == job.tag
        && status.response_hash == response_hash
        && status.response == job.response
    {
        return Ok(None);
    }
    if provisional && status.answered_finally() {
        return Ok(None);
    }
    // The status holds the latest answer only: an answer of this tag given earlier and
    // overtaken since (a final over our provisional) is in the events.
    let given = registry.responses(hash).await?;
    if given
        .iter()
        .any(|r| r.tag == job.tag && r.response_hash == response_hash && r.response == job.response)
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
        Value::object()
            .with("name", "web")
            .with("endpoint", format!("{issuer}/openapi.json")),
        Value::object()
            .with("name", "MCP")
            .with("endpoint", format!("{issuer}/mcp"))
            .with("version", crate::mcp::PROTOCOL_VERSIONS[0]),
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
