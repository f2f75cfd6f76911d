//! `POST /v1/feedback`: free, but only with two proofs read from the chain: the payer
//! paid the merchant (a successful USDC transfer, at least the floor, within 90 days)
//! and the payer signed this exact feedback. One row per transaction, permanent,
//! nothing but addresses, a hash, enums and numbers.

use umpire_chain::{FeedbackClaim, ProofError, Signer, claim::lower_hex};
use umpire_core::json::Value;
use umpire_core::product::USDC_DECIMALS;
use umpire_core::spec::problems_value;
use umpire_core::{ApiError, ErrorCode};
use umpire_store::{FeedbackRow, StoreError};

use crate::plumbing::body::json_body;
use crate::plumbing::limits;
use crate::plumbing::respond;
use crate::plumbing::state::{AppState, Request, Response};

pub async fn submit(state: &AppState, req: &Request) -> Response {
    match submit_inner(state, req).await {
        Ok(r) => r,
        Err(e) => respond::error(&e),
    }
}

/// USDC base units as a decimal string ("12.5", "0.01"): exact, no float.
pub fn usdc_decimal(units: u128) -> String {
    let scale = 10u128.pow(USDC_DECIMALS);
    let (whole, frac) = (units / scale, units % scale);
    if frac == 0 {
        return whole.to_string();
    }
    let frac = format!("{frac:0width$}", width = USDC_DECIMALS as usize);
    format!("{whole}.{}", frac.trim_end_matches('0'))
}

fn proof_refusal(e: ProofError) -> ApiError {
    match e {
        ProofError::Unavailable(m) => {
            tracing::warn!(error = m, "feedback chain unavailable");
            ApiError::new(
                ErrorCode::ChainUnavailable,
                "the chain could not be read right now",
                "Retry shortly; nothing was stored.",
            )
        }
        ProofError::Misconfigured(m) => {
            tracing::error!(error = m, "feedback chain misconfigured");
            ApiError::new(
                ErrorCode::ReceiptsOff,
                "feedback payments cannot be checked on this deployment right now",
                "Retry later; nothing was stored.",
            )
        }
        ProofError::NotFound(m) => ApiError::new(
            ErrorCode::PaymentNotFound,
            m,
            "Check the network (Base) and the hash: it must be a successful transaction with a USDC transfer from the payer to the merchant.",
        ),
        ProofError::PayerMismatch(m) => ApiError::new(
            ErrorCode::PayerMismatch,
            m,
            "Submit feedback as the wallet that paid (the Transfer's from), and sign with it.",
        ),
        ProofError::AmountTooSmall(m) => ApiError::new(
            ErrorCode::AmountTooSmall,
            m,
            "Feedback needs a payment of at least 0.01 USDC to the merchant.",
        ),
        ProofError::TooOld(m) => ApiError::new(
            ErrorCode::ReceiptTooOld,
            m,
            "Only payments from the last 90 days can back feedback.",
        ),
        ProofError::BadSignature(m) => ApiError::new(
            ErrorCode::BadSignature,
            m,
            "Sign the exact message of the feedback signing recipe (lines joined with \\n, no trailing newline, lowercase tx and merchant, empty values for omitted options) with the payer wallet: viem signMessage({ message }) or ethers signer.signMessage(message).",
        ),
    }
}

async fn submit_inner(state: &AppState, req: &Request) -> Result<Response, ApiError> {
    limits::enforce_for(state, "feedback", req).await?;
    let body = json_body(req)?;
    let claim = parse_claim(&body)?;
    if claim.payer == claim.merchant {
        return Err(ApiError::new(
            ErrorCode::SelfFeedback,
            "the payer and the merchant are the same address",
            "Feedback is about a merchant you paid; nobody reviews themselves.",
        ));
    }
    let chain = state.feedback_chain.as_ref().ok_or_else(|| {
        ApiError::new(
            ErrorCode::ReceiptsOff,
            "this deployment does not read payments, so it cannot accept feedback",
            "Use a deployment with chain reading on (UMPIRE_FEEDBACK_RPC_URL); nothing was stored.",
        )
    })?;
    // The signature first: for a plain wallet it costs one read, and a forgery is
    // refused before the receipt is looked at.
    let signer = chain
        .verify_signature(&claim)
        .await
        .map_err(proof_refusal)?;
    let now = state.config.clock.now();
    let proof = chain
        .prove_payment(&claim, now)
        .await
        .map_err(proof_refusal)?;
    let merchant = lower_hex(claim.merchant.as_slice());
    let row = FeedbackRow {
        tx_hash: lower_hex(claim.tx_hash.as_slice()),
        anchor: state.config.reputation_anchors.contains(&merchant),
        merchant,
        payer: lower_hex(claim.payer.as_slice()),
        outcome: claim.outcome.as_str().to_owned(),
        would_repeat: claim.would_repeat,
        latency_ms: claim.latency_ms,
        amount_units: proof.amount.to_string(),
        block_time: proof.block_time,
        created_at: now,
    };
    store_row(state, &row).await?;
    tracing::info!(
        tx = row.tx_hash,
        merchant = row.merchant,
        "feedback accepted"
    );
    Ok(respond::cache(
        respond::json(
            201,
            &Value::object()
                .with("feedback", row_value(&row))
                .with(
                    "signature_checked_by",
                    match signer {
                        Signer::Eoa => "ecrecover",
                        Signer::Erc1271 => "erc1271",
                        Signer::Delegated => "ecrecover (eip-7702 account)",
                    },
                )
                .with("block_number", proof.block_number),
        ),
        "no-store",
    ))
}

/// The feedback claim in the body, or every problem it has.
fn parse_claim(body: &Value) -> Result<FeedbackClaim, ApiError> {
    FeedbackClaim::parse(body).map_err(|problems| {
        let first = problems.first();
        ApiError::new(
            ErrorCode::InvalidRequest,
            match problems.len() {
                1 => first.map_or_else(String::new, |p| format!("{}: {}", p.at, p.message)),
                n => format!("the feedback has {n} problems"),
            },
            first.map_or_else(String::new, |p| p.hint.clone()),
        )
        .with_detail("problems", problems_value(&problems))
    })
}

/// Stores the row; a transaction that already backs a feedback is refused.
async fn store_row(state: &AppState, row: &FeedbackRow) -> Result<(), ApiError> {
    match state.store.put_feedback(row).await {
        Ok(()) => Ok(()),
        Err(StoreError::AlreadyExists) => Err(ApiError::new(
            ErrorCode::DuplicateFeedback,
            format!("transaction {} already backs a feedback", row.tx_hash),
            "One feedback per transaction: pay again to leave another.",
        )),
        Err(e) => Err(crate::plumbing::state::internal(e)),
    }
}

/// A row as the API shows it.
pub fn row_value(row: &FeedbackRow) -> Value {
    let units: u128 = row.amount_units.parse().unwrap_or(0);
    Value::object()
        .with("tx_hash", row.tx_hash.as_str())
        .with("merchant", row.merchant.as_str())
        .with("payer", row.payer.as_str())
        .with("outcome", row.outcome.as_str())
        .with("would_repeat", row.would_repeat)
        .with("latency_ms", row.latency_ms)
        .with("amount_usdc", usdc_decimal(units))
        .with("block_time", umpire_core::time::rfc3339(row.block_time))
        .with("created_at", umpire_core::time::rfc3339(row.created_at))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usdc_amounts_are_exact_decimals() {
        assert_eq!(usdc_decimal(10_000), "0.01");
        assert_eq!(usdc_decimal(1_000_000), "1");
        assert_eq!(usdc_decimal(12_500_000), "12.5");
        assert_eq!(usdc_decimal(1), "0.000001");
        assert_eq!(usdc_decimal(0), "0");
    }
}
