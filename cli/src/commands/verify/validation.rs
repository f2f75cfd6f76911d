//! `umpire verify --validation`: the audit of an answered ERC-8004 validation request
//! against the document, and the validator its issuer publishes.

use alloy::primitives::{Address, B256};
use umpire_core::document::Step;
use umpire_core::json::{Value, parse};
use umpire_escrow::validation::{FAILED, PASSED, final_tag};
use umpire_escrow::{ContractRef, Registry, RequestStatus, Response, ValidationRef, bytes32_hex};

use super::{fetch_key_document, payload_sha256, step, text};

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
pub(super) async fn validation_steps(
    doc: &Value,
    reference: &str,
    rpc: &str,
    validator: Option<&(String, String)>,
) -> Result<Vec<Step>, String> {
    let reference: ValidationRef = reference
        .parse()
        .map_err(|e| format!("--validation: {e}"))?;
    let (expected, published_registry) = expected_validator(doc, validator).await?;
    let registry = Registry::connect(rpc, &reference.registry, None)
        .await
        .map_err(|e| format!("registry: {e}"))?;
    let mut steps = vec![
        request_ref_step(doc, reference),
        registry_step(published_registry, &reference),
    ];
    let hash = reference.request_hash;
    let Some(status) = registry
        .status(hash)
        .await
        .map_err(|e| format!("registry: {e}"))?
    else {
        steps.push(step(
            "request",
            false,
            "the registry holds no such request".into(),
        ));
        return Ok(steps);
    };
    steps.push(step(
        "validator",
        status.validator == expected,
        format!(
            "the request names validator {}; Umpire's is {expected}",
            status.validator
        ),
    ));
    let wanted = WantedAnswer::of(doc, expected);
    let answers = registry
        .responses(hash)
        .await
        .map_err(|e| format!("registry: {e}"))?;
    steps.extend(answer_steps(doc, &answers, &status, &wanted));
    steps.push(current_step(&status, &wanted));
    Ok(steps)
}

/// The validator to expect and the registry it answers on: `--validator` and
/// `--registry` when given, else what the document's issuer publishes.
async fn expected_validator(
    doc: &Value,
    validator: Option<&(String, String)>,
) -> Result<(Address, Option<ContractRef>), String> {
    Ok(match validator {
        Some((v, r)) => (
            v.parse()
                .map_err(|_| format!("--validator {v:?} is not an address"))?,
            Some(r.parse().map_err(|e| format!("--registry: {e}"))?),
        ),
        None => published_validator(doc).await?,
    })
}

/// `job_ref`: whether the document names the validation request being audited.
fn request_ref_step(doc: &Value, reference: ValidationRef) -> Step {
    let named = text(doc, "job_ref").parse::<ValidationRef>().ok();
    step(
        "job_ref",
        named == Some(reference) && text(doc, "job_ref").starts_with("erc8004:"),
        if named == Some(reference) {
            format!("the document names request {reference}")
        } else {
            format!(
                "the document's job_ref is {:?}, not {reference}",
                text(doc, "job_ref")
            )
        },
    )
}

/// `registry`: whether the request is on the registry Umpire says it answers on (any
/// contract can emit events naming Umpire's validator).
fn registry_step(published: Option<ContractRef>, reference: &ValidationRef) -> Step {
    match published {
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
}

/// The answer the document stands for: from the expected validator, under the final
/// tag of the document's tier, its verdict (100 pass, 0 fail) with its payload_sha256.
struct WantedAnswer {
    validator: Address,
    tag: String,
    response: u8,
    payload: Option<B256>,
}

impl WantedAnswer {
    /// The answer `doc` stands for, from `validator`.
    fn of(doc: &Value, validator: Address) -> Self {
        let response = match text(doc, "verdict") {
            "pass" => PASSED,
            _ => FAILED,
        };
        WantedAnswer {
            validator,
            tag: final_tag(text(doc, "tier")),
            response,
            payload: payload_sha256(doc),
        }
    }
}

/// `response_hash` and `response`: whether the validator's answer on chain (this
/// document's, else its latest under the tag) carries the document's payload_sha256
/// and verdict (a failed `response` alone when it gave none).
fn answer_steps(
    doc: &Value,
    answers: &[Response],
    status: &RequestStatus,
    wanted: &WantedAnswer,
) -> Vec<Step> {
    // This document's answer (its hash), else the validator's latest under the tag.
    let ours = |r: &&Response| r.validator == wanted.validator && r.tag == wanted.tag;
    let answer = answers
        .iter()
        .rev()
        .find(|r| ours(r) && Some(r.response_hash) == wanted.payload)
        .or_else(|| answers.iter().rev().find(ours));
    let Some(a) = answer else {
        return vec![step(
            "response",
            false,
            format!(
                "no answer tagged {} from {} on chain (latest status: {} under {:?})",
                wanted.tag, wanted.validator, status.response, status.tag
            ),
        )];
    };
    let hash = step(
        "response_hash",
        Some(a.response_hash) == wanted.payload,
        if Some(a.response_hash) == wanted.payload {
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
    let response = step(
        "response",
        a.response == wanted.response,
        format!(
            "the answer is {} under tag {}; the verdict is {} ({})",
            a.response,
            a.tag,
            text(doc, "verdict"),
            wanted.response
        ),
    );
    vec![hash, response]
}

/// `current`: whether the request's status, what readers of the registry see
/// (getValidationStatus, getSummary), is this document's answer.
fn current_step(status: &RequestStatus, wanted: &WantedAnswer) -> Step {
    let current = Some(status.response_hash) == wanted.payload
        && status.tag == wanted.tag
        && status.response == wanted.response;
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
    )
}
