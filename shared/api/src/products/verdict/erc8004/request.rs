//! The checks a purchase naming a validation request passes before any payment is
//! asked for: the request on the registry (ours to answer, not answered by us yet),
//! its request file fetched and hashed, and the spec and deliverable it commits to
//! matched against the purchase's.

use alloy::primitives::{U256, keccak256};
use umpire_core::json::{Value, parse};
use umpire_core::product::Tier;
use umpire_core::spec::{parse_deliverable, parse_spec};
use umpire_core::{ApiError, ErrorCode};
use umpire_escrow::validation::{Registry, TAG_PREFIX, ValidationRef};
use umpire_host::Deadline;

use super::{MAX_REQUEST_FILE_BYTES, ValidatorConfig, named_request};
use crate::plumbing::state::AppState;
use crate::products::verdict::purchase::Purchase;

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
        return match data_uri(data) {
            Ok(bytes) => Ok(bytes),
            Err(DataUri::Undecodable) => {
                Err(refused("the requestURI data: URI does not decode", hint))
            }
            Err(DataUri::TooLarge(n)) => Err(too_large(&format!(
                "the request file in the requestURI data: URI is {n} bytes, larger than \
                 {MAX_REQUEST_FILE_BYTES}"
            ))),
        };
    }
    if !(uri.starts_with("https://") || uri.starts_with("http://")) {
        return Err(refused(
            format!(
                "Umpire cannot read the requestURI {uri:?}: only http(s) and data: URIs are read"
            ),
            "Serve the request file over https (an IPFS or Arweave gateway URL works) or put \
             it on chain as a data: URI; nothing was charged.",
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
        return Err(too_large(&format!(
            "the request file at {uri} is larger than {MAX_REQUEST_FILE_BYTES} bytes"
        )));
    }
    Ok(body.body)
}

fn too_large(message: &str) -> ApiError {
    refused(
        message,
        "Put the deliverable's hash (deliverable_hash) in the request file instead of the deliverable; nothing was charged.",
    )
}

/// Why a `data:` URI gives no request file.
#[derive(Debug, PartialEq)]
enum DataUri {
    Undecodable,
    /// Its bytes, decoded, are more than [`MAX_REQUEST_FILE_BYTES`].
    TooLarge(usize),
}

/// A `data:` URI's bytes (after `data:`): `[<type>][;base64],<data>`.
fn data_uri(rest: &str) -> Result<Vec<u8>, DataUri> {
    use base64::Engine as _;
    let (meta, data) = rest.split_once(',').ok_or(DataUri::Undecodable)?;
    let bytes = if meta.ends_with(";base64") {
        base64::engine::general_purpose::STANDARD
            .decode(data.trim())
            .map_err(|_| DataUri::Undecodable)?
    } else {
        percent_decode(data).ok_or(DataUri::Undecodable)?
    };
    if bytes.len() > MAX_REQUEST_FILE_BYTES {
        return Err(DataUri::TooLarge(bytes.len()));
    }
    Ok(bytes)
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
    check_bindings(&v, purchase.tier, agent_id, hint)?;
    let tier = purchase.tier;
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

/// Optional bindings: a file naming its tier or its agent is answered only by a
/// purchase of that tier, for a request of that agent (a copier asking again under
/// another agent id with the same file is refused).
fn check_bindings(v: &Value, tier: Tier, agent_id: &U256, hint: &str) -> Result<(), ApiError> {
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
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::products::verdict::purchase::Purchase;

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
            Ok(br#"{"a":1}"#.to_vec())
        );
        assert_eq!(
            data_uri("application/json,%7B%22a%22%3A1%7D"),
            Ok(br#"{"a":1}"#.to_vec())
        );
        let bad = Err(DataUri::Undecodable);
        assert_eq!(data_uri(",%+f"), bad, "a sign is not a hex digit");
        assert_eq!(data_uri(",%4"), bad);
        assert_eq!(data_uri("no comma"), bad);
        assert_eq!(data_uri(";base64,***"), bad);
    }

    /// docs/erc8004.md: a request file over 256 KB is refused, and said to be too large
    /// (not undecodable); 256 KB exactly is read. Would catch: the cap moved or lost (a
    /// chain-borne file of any size read before payment), or a refusal that misleads.
    #[test]
    fn a_data_uri_over_256_kb_is_refused_as_too_large() {
        use base64::Engine as _;
        assert_eq!(MAX_REQUEST_FILE_BYTES, 256 * 1024);
        let b64 = |n: usize| {
            format!(
                ";base64,{}",
                base64::engine::general_purpose::STANDARD.encode(vec![b'x'; n])
            )
        };
        assert_eq!(
            data_uri(&b64(MAX_REQUEST_FILE_BYTES)).map(|b| b.len()),
            Ok(MAX_REQUEST_FILE_BYTES)
        );
        assert_eq!(
            data_uri(&b64(MAX_REQUEST_FILE_BYTES + 1)),
            Err(DataUri::TooLarge(MAX_REQUEST_FILE_BYTES + 1))
        );
        let plain = format!(",{}", "y".repeat(MAX_REQUEST_FILE_BYTES + 1));
        assert_eq!(
            data_uri(&plain),
            Err(DataUri::TooLarge(MAX_REQUEST_FILE_BYTES + 1))
        );
    }
}
