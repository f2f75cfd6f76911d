//! The tools the MCP endpoint lists: names, descriptions and input schemas.

use umpire_chain::claim::Outcome;
use umpire_core::json::{Value, parse_str};
use umpire_core::product::Tier;

/// (name, title, description, input schema as JSON text).
pub(super) const TOOLS: &[(&str, &str, &str, &str)] = &[
    (
        "validate",
        "Validate a would-be purchase",
        "Checks a spec (and optionally deliverable, webhook_url, job_ref) for a tier exactly as a purchase would, without paying: every problem with a hint, URL-policy verdicts, the normalized spec and its spec_hash. Free.",
        r#"{"type":"object","properties":{"tier":{"type":"string"},"spec":{"type":"object","description":"{\"checks\":[...]} as in the contract"},"deliverable":{"type":"object","properties":{"text":{"type":"string"},"json":{}}},"webhook_url":{"type":"string"},"job_ref":{"type":"string"}},"required":["tier","spec"]}"#,
    ),
    (
        "quote",
        "Prices, limits and payment rails",
        "The pricing manifest: every tier's price, the accepted payment rails, limits and rate limits. Free.",
        r#"{"type":"object","properties":{}}"#,
    ),
    (
        "get_verdict",
        "Read a verdict",
        "A verdict's status and document by id, with the one-time secret returned at purchase (pending sworn verdicts show pass-1 results). Free.",
        r#"{"type":"object","properties":{"verdict_id":{"type":"string"},"secret":{"type":"string"}},"required":["verdict_id","secret"]}"#,
    ),
    (
        "find",
        "Find sworn verdicts",
        "Ids of sworn verdicts bought with this spec_hash and webhook URL (to recover an id after losing the purchase response). Free.",
        r#"{"type":"object","properties":{"spec_hash":{"type":"string","pattern":"^[0-9a-f]{64}$"},"webhook":{"type":"string"}},"required":["spec_hash","webhook"]}"#,
    ),
    (
        "submit_feedback",
        "Leave payment-verified feedback",
        "Records feedback on a merchant, proven by a USDC payment from payer to merchant on Base (tx_hash) and the payer's EIP-191 signature over the contract's message. Free; one feedback per transaction.",
        r#"{"type":"object","properties":{"merchant":{"type":"string","pattern":"^0x[0-9a-fA-F]{40}$"},"payer":{"type":"string","pattern":"^0x[0-9a-fA-F]{40}$"},"tx_hash":{"type":"string","pattern":"^0x[0-9a-fA-F]{64}$"},"outcome":{"type":"string"},"would_repeat":{"type":"boolean"},"latency_ms":{"type":"integer","minimum":0},"signature":{"type":"string"}},"required":["merchant","payer","tx_hash","outcome","signature"],"additionalProperties":false}"#,
    ),
    (
        "buy_verdict",
        "Buy a signed verdict (x402)",
        "Judges a deliverable against an acceptance spec and returns the Ed25519-signed pass/fail verdict (witness $0.25, basic $1.00, probe $2.00, sworn $5.00: sworn answers with pass-1 results and a status link; the final document follows). Paid with x402 over MCP: called without payment it returns the payment requirements (isError, structuredContent = PaymentRequired); retry with the payment in _meta[\"x402/payment\"]. Refusals before payment cost nothing.",
        r#"{"type":"object","properties":{"tier":{"type":"string"},"spec":{"type":"object","description":"{\"checks\":[...]} as in the contract"},"deliverable":{"type":"object","properties":{"text":{"type":"string"},"json":{}}},"webhook_url":{"type":"string","description":"sworn only"},"job_ref":{"type":"string"},"idempotency_key":{"type":"string","minLength":16,"maxLength":128,"description":"as the Idempotency-Key header: a retry with the same key and arguments gets the original answer, never a second charge"}},"required":["tier","spec"]}"#,
    ),
    (
        "get_reputation",
        "Buy a merchant's reputation report (x402)",
        "The signed, payment-verified reputation report of a merchant wallet ($0.01). Paid with x402 over MCP like buy_verdict.",
        r#"{"type":"object","properties":{"merchant":{"type":"string","pattern":"^0x[0-9a-fA-F]{40}$"},"idempotency_key":{"type":"string","minLength":16,"maxLength":128}},"required":["merchant"]}"#,
    ),
    (
        "verify_document",
        "Verify a signed document",
        "Runs the contract's verification recipe on a signed Umpire document (verdict or reputation report): stable JSON bytes, payload_sha256, the Ed25519 signature against this service's published keys (or key_document), and, given the deliverable, deliverable_hash. Free, nothing stored.",
        r#"{"type":"object","properties":{"document":{"type":"object"},"key_document":{"type":"object","description":"a /.well-known/umpire-key.json document; default: this service's keys"},"deliverable":{"type":"object","properties":{"text":{"type":"string"},"json":{}}}},"required":["document"]}"#,
    ),
];

/// A tool's input schema, with the enums the contract defines filled in from their
/// one source (tiers, feedback outcomes) rather than spelled out again in the text.
pub(super) fn input_schema(text: &str) -> Value {
    let mut schema = parse_str(text).unwrap_or_else(|_| Value::object());
    let mut set_enum = |field: &str, values: Vec<Value>| {
        if let Value::Object(root) = &mut schema
            && let Some(Value::Object(props)) = root.get_mut("properties")
            && let Some(Value::Object(prop)) = props.get_mut(field)
        {
            prop.insert("enum".into(), Value::Array(values));
        }
    };
    set_enum(
        "tier",
        Tier::ALL.iter().map(|t| Value::from(t.as_str())).collect(),
    );
    set_enum(
        "outcome",
        Outcome::ALL
            .iter()
            .map(|o| Value::from(o.as_str()))
            .collect(),
    );
    schema
}

pub(super) fn tools_list() -> Value {
    let tools: Vec<Value> = TOOLS
        .iter()
        .map(|(name, title, description, schema)| {
            Value::object()
                .with("name", *name)
                .with("title", *title)
                .with("description", *description)
                .with("inputSchema", input_schema(schema))
        })
        .collect();
    Value::object().with("tools", Value::Array(tools))
}
