//! A feedback submission, parsed strictly: addresses (lowercase or EIP-55 checksummed),
//! a 32-byte transaction hash, the outcome enum, a boolean, a non-negative integer and a
//! hex signature. No other field, and no free text anywhere.

use std::collections::BTreeMap;

use alloy::primitives::{Address, B256, Bytes};
use umpire_core::json::Value;
use umpire_core::problem::ProblemCode;
use umpire_core::spec::Problem;

/// The first line of the message a payer signs.
pub const MESSAGE_TAG: &str = "umpire-feedback-v1";
/// Signatures longer than this are refused unread (smart-wallet signatures are a few
/// hundred bytes; an EOA's is 65).
pub const MAX_SIGNATURE_BYTES: usize = 4096;
const FIELDS: [&str; 7] = [
    "merchant",
    "payer",
    "tx_hash",
    "outcome",
    "would_repeat",
    "latency_ms",
    "signature",
];

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Outcome {
    Fulfilled,
    Partial,
    Failed,
}

impl Outcome {
    pub const ALL: [Outcome; 3] = [Outcome::Fulfilled, Outcome::Partial, Outcome::Failed];

    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Fulfilled => "fulfilled",
            Outcome::Partial => "partial",
            Outcome::Failed => "failed",
        }
    }

    pub fn parse(s: &str) -> Option<Outcome> {
        Outcome::ALL.into_iter().find(|o| o.as_str() == s)
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FeedbackClaim {
    pub merchant: Address,
    pub payer: Address,
    pub tx_hash: B256,
    pub outcome: Outcome,
    pub would_repeat: Option<bool>,
    pub latency_ms: Option<u64>,
    pub signature: Bytes,
}

/// Lowercase `0x…` hex, as the message and the stored row spell addresses and hashes.
pub fn lower_hex(bytes: &[u8]) -> String {
    format!("0x{}", hex::encode(bytes))
}

fn is_hex(s: &str) -> bool {
    s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// `0x` + 40 hex digits, all lowercase or a valid EIP-55 checksum.
pub fn parse_address(s: &str) -> Result<Address, String> {
    let Some(digits) = s.strip_prefix("0x").filter(|d| d.len() == 40 && is_hex(d)) else {
        return Err(format!(
            "{s:?} is not a 20-byte address (0x followed by 40 hex digits)"
        ));
    };
    if digits.bytes().any(|b| b.is_ascii_uppercase()) {
        Address::parse_checksummed(s, None).map_err(|_| {
            format!("{s:?} mixes upper and lower case but is not a valid EIP-55 checksum")
        })
    } else {
        digits.parse::<Address>().map_err(|e| format!("{s:?}: {e}"))
    }
}

impl FeedbackClaim {
    /// Every problem of the body at once, or the claim.
    pub fn parse(body: &Value) -> Result<FeedbackClaim, Vec<Problem>> {
        let mut problems = Vec::new();
        let Some(obj) = body.as_object() else {
            return Err(vec![Problem::new(
                "",
                ProblemCode::WrongType,
                format!("the body must be a JSON object, not {}", body.type_name()),
                "Send {\"merchant\",\"payer\",\"tx_hash\",\"outcome\",\"signature\"} and optionally would_repeat, latency_ms.",
            )]);
        };
        unknown_fields(obj, &mut problems);
        let merchant = address_field(obj, "merchant", &mut problems);
        let payer = address_field(obj, "payer", &mut problems);
        let tx_hash = tx_hash_field(obj, &mut problems);
        let outcome = outcome_field(obj, &mut problems);
        let would_repeat = would_repeat_field(obj, &mut problems);
        let latency_ms = latency_ms_field(obj, &mut problems);
        let signature = signature_field(obj, &mut problems);
        match (merchant, payer, tx_hash, outcome, signature) {
            (Some(merchant), Some(payer), Some(tx_hash), Some(outcome), Some(signature))
                if problems.is_empty() =>
            {
                Ok(FeedbackClaim {
                    merchant,
                    payer,
                    tx_hash,
                    outcome,
                    would_repeat,
                    latency_ms,
                    signature,
                })
            }
            _ => Err(problems),
        }
    }

    /// The exact message the payer signs: lines joined with `\n`, no trailing newline,
    /// lowercase hash and merchant, empty values for omitted options.
    pub fn message(&self) -> String {
        message(
            &self.tx_hash,
            &self.merchant,
            self.outcome,
            self.would_repeat,
            self.latency_ms,
        )
    }
}

/// Reports every key of the body that is not a feedback field.
fn unknown_fields(obj: &BTreeMap<String, Value>, problems: &mut Vec<Problem>) {
    for k in obj.keys() {
        if !FIELDS.contains(&k.as_str()) {
            problems.push(Problem::new(
                k.clone(),
                ProblemCode::UnknownField,
                format!("{k} is not a feedback field; feedback carries no free text"),
                format!("Send only {}.", FIELDS.join(", ")),
            ));
        }
    }
}

/// The required string field `k`, or a problem saying it is missing or not a string.
fn text_field(
    obj: &BTreeMap<String, Value>,
    k: &str,
    problems: &mut Vec<Problem>,
) -> Option<String> {
    match obj.get(k) {
        None => {
            problems.push(Problem::new(
                k,
                ProblemCode::MissingField,
                format!("{k} is required"),
                "See the feedback signing recipe in the API reference.",
            ));
            None
        }
        Some(Value::String(s)) => Some(s.clone()),
        Some(other) => {
            problems.push(Problem::new(
                k,
                ProblemCode::WrongType,
                format!("{k} must be a string, not {}", other.type_name()),
                "Send 0x-prefixed hex strings for addresses, hashes and signatures.",
            ));
            None
        }
    }
}

/// The required address field `k` (lowercase or EIP-55 checksummed), or its problem.
fn address_field(
    obj: &BTreeMap<String, Value>,
    k: &str,
    problems: &mut Vec<Problem>,
) -> Option<Address> {
    let s = text_field(obj, k, problems)?;
    parse_address(&s)
        .map_err(|m| {
            problems.push(Problem::new(
                k,
                ProblemCode::InvalidValue,
                m,
                "Use the address lowercase, or exactly as an EIP-55 checksum.",
            ));
        })
        .ok()
}

/// The required `tx_hash`: `0x` and 64 hex digits, or its problem.
fn tx_hash_field(obj: &BTreeMap<String, Value>, problems: &mut Vec<Problem>) -> Option<B256> {
    text_field(obj, "tx_hash", problems).and_then(|s| {
        s.strip_prefix("0x")
            .filter(|d| d.len() == 64 && is_hex(d))
            .and_then(|d| d.parse::<B256>().ok())
            .or_else(|| {
                problems.push(Problem::new(
                    "tx_hash",
                    ProblemCode::InvalidValue,
                    format!(
                        "{s:?} is not a 32-byte transaction hash (0x followed by 64 hex digits)"
                    ),
                    "Send the hash of the transaction that paid the merchant.",
                ));
                None
            })
    })
}

/// The required `outcome`, one of [`Outcome::ALL`], or its problem.
fn outcome_field(obj: &BTreeMap<String, Value>, problems: &mut Vec<Problem>) -> Option<Outcome> {
    text_field(obj, "outcome", problems).and_then(|s| {
        Outcome::parse(&s).or_else(|| {
            problems.push(Problem::new(
                "outcome",
                ProblemCode::InvalidValue,
                format!("outcome {s:?} is not one of fulfilled, partial, failed"),
                "Send fulfilled, partial or failed.",
            ));
            None
        })
    })
}

/// The optional boolean `would_repeat`; any other type is a problem.
fn would_repeat_field(obj: &BTreeMap<String, Value>, problems: &mut Vec<Problem>) -> Option<bool> {
    match obj.get("would_repeat") {
        None => None,
        Some(Value::Bool(b)) => Some(*b),
        Some(other) => {
            problems.push(Problem::new(
                "would_repeat",
                ProblemCode::WrongType,
                format!(
                    "would_repeat must be true or false, not {}",
                    other.type_name()
                ),
                "Send a boolean, or leave the field out (and the line empty in the message).",
            ));
            None
        }
    }
}

/// The optional non-negative integer `latency_ms`; anything else is a problem.
fn latency_ms_field(obj: &BTreeMap<String, Value>, problems: &mut Vec<Problem>) -> Option<u64> {
    match obj.get("latency_ms") {
        None => None,
        Some(v) => v.as_u64().map(Some).unwrap_or_else(|| {
            problems.push(Problem::new(
                "latency_ms",
                ProblemCode::InvalidValue,
                format!("latency_ms must be a non-negative integer, not {}", v.type_name()),
                "Send whole milliseconds, or leave the field out (and the line empty in the message).",
            ));
            None
        }),
    }
}

/// The required `signature`: non-empty `0x` hex of at most [`MAX_SIGNATURE_BYTES`]
/// bytes, or its problem.
fn signature_field(obj: &BTreeMap<String, Value>, problems: &mut Vec<Problem>) -> Option<Bytes> {
    text_field(obj, "signature", problems).and_then(|s| {
        let decoded = s
            .strip_prefix("0x")
            .filter(|d| d.len() % 2 == 0 && d.len() <= 2 * MAX_SIGNATURE_BYTES && !d.is_empty())
            .and_then(|d| hex::decode(d).ok());
        decoded.map(Bytes::from).or_else(|| {
            problems.push(Problem::new(
                "signature",
                ProblemCode::InvalidValue,
                format!("the signature must be 0x-prefixed hex of at most {MAX_SIGNATURE_BYTES} bytes"),
                "Send what signMessage (viem, ethers) returns: 0x followed by 130 hex digits for a plain wallet.",
            ));
            None
        })
    })
}

pub fn message(
    tx_hash: &B256,
    merchant: &Address,
    outcome: Outcome,
    would_repeat: Option<bool>,
    latency_ms: Option<u64>,
) -> String {
    [
        MESSAGE_TAG.to_owned(),
        format!("tx:{}", lower_hex(tx_hash.as_slice())),
        format!("merchant:{}", lower_hex(merchant.as_slice())),
        format!("outcome:{}", outcome.as_str()),
        format!(
            "would_repeat:{}",
            would_repeat.map(|b| b.to_string()).unwrap_or_default()
        ),
        format!(
            "latency_ms:{}",
            latency_ms.map(|n| n.to_string()).unwrap_or_default()
        ),
    ]
    .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use umpire_core::json::parse;

    const MERCHANT: &str = "0x70997970C51812dc3A010C7d01b50e0d17dc79C8";
    const PAYER: &str = "0x3c44cdddb6a900fa2b585dd299e03d12fa4293bc";
    const TX: &str = "0x59f0aa3a0e6f1b3c8d2e4f5a6b7c8d9e0f1a2b3c4d5e6f7a8b9c0d1e2f3ac21a";

    fn body(extra: &str) -> Value {
        parse(
            format!(
                r#"{{"merchant":"{MERCHANT}","payer":"{PAYER}","tx_hash":"{TX}","outcome":"fulfilled","signature":"0x{}"{extra}}}"#,
                "11".repeat(65)
            )
            .as_bytes(),
        )
        .expect("json")
    }

    #[test]
    fn the_message_is_the_contracts_to_the_byte() {
        let claim = FeedbackClaim::parse(&body("")).expect("claim");
        assert_eq!(
            claim.message(),
            "umpire-feedback-v1\ntx:0x59f0aa3a0e6f1b3c8d2e4f5a6b7c8d9e0f1a2b3c4d5e6f7a8b9c0d1e2f3ac21a\nmerchant:0x70997970c51812dc3a010c7d01b50e0d17dc79c8\noutcome:fulfilled\nwould_repeat:\nlatency_ms:"
        );
        let claim =
            FeedbackClaim::parse(&body(r#","would_repeat":false,"latency_ms":0"#)).expect("claim");
        assert!(
            claim
                .message()
                .ends_with("\nwould_repeat:false\nlatency_ms:0")
        );
    }

    #[test]
    fn addresses_are_lowercase_or_checksummed() {
        assert!(parse_address(MERCHANT).is_ok());
        assert!(parse_address(&MERCHANT.to_lowercase()).is_ok());
        // One letter's case flipped breaks the checksum.
        let broken = MERCHANT.replacen('C', "c", 1);
        assert!(parse_address(&broken).is_err());
        assert!(parse_address("0x1234").is_err());
        assert!(parse_address(&MERCHANT[2..]).is_err());
    }

    #[test]
    fn every_problem_is_reported_and_nothing_else_is_accepted() {
        let v = parse(
            br#"{"merchant":"0xabc","payer":7,"tx_hash":"0x12","outcome":"great","would_repeat":"yes","latency_ms":-1,"signature":"0xzz","comment":"hi"}"#,
        )
        .expect("json");
        let problems = FeedbackClaim::parse(&v).expect_err("refused");
        let at: Vec<&str> = problems.iter().map(|p| p.at.as_str()).collect();
        for field in [
            "comment",
            "merchant",
            "payer",
            "tx_hash",
            "outcome",
            "would_repeat",
            "latency_ms",
            "signature",
        ] {
            assert!(at.contains(&field), "{field} not reported: {at:?}");
        }
        assert!(FeedbackClaim::parse(&body(r#","latency_ms":1.5"#)).is_err());
        assert!(FeedbackClaim::parse(&body(r#","would_repeat":null"#)).is_err());
    }
}
