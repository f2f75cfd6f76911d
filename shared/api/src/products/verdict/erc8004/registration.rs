//! `/.well-known/agent-registration.json`: Umpire as an ERC-8004 agent, in the ERC's
//! registration-v1 format.

use umpire_core::json::Value;
use umpire_core::product::Tier;
use umpire_escrow::validation::{PROVISIONAL_TAG, VALIDATION_REF_PREFIX, final_tag};

use crate::plumbing::config::Config;

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
                        Value::Number(umpire_core::json::Number::Int(id.to_string().into())),
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
