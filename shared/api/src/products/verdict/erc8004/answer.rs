//! Answering a validation request once its verdict is sold: the answer queued before
//! the payment settles, and the job that posts it (only for a verdict that was sold, at
//! most once per tag, retried with backoff).

use std::time::Duration;

use alloy::primitives::B256;
use umpire_core::json::Value;
use umpire_core::product::Tier;
use umpire_escrow::EscrowError;
use umpire_escrow::validation::{
    FAILED, PASSED, PROVISIONAL_TAG, VALIDATION_REF_PREFIX, ValidationRef, final_tag,
};

use super::{MAX_MINED_REVERTS, POST_MAX_ATTEMPTS};
use crate::checkout::ledger::PurchaseOutcome;
use crate::plumbing::metrics::{Metric, record};
use crate::plumbing::state::AppState;
use crate::products::verdict::jobs::{JobError, SwornJob, ValidationJob, backoff};

/// The answer for a delivered verdict: 100 or 0, its document's `payload_sha256` (none
/// for a provisional answer: pass 1 signs no document), under `tag`.
#[derive(Debug, Clone)]
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
        mined_reverts: 0,
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
        Err(e) if worth_another_attempt(&e, job) => {
            let delay = backoff(state.config.webhook_retry_base, job.attempt);
            tracing::warn!(verdict_id, attempt = job.attempt, error = %e, delay_ms = delay.as_millis() as u64, "posting the validation answer failed; trying again later");
            let mined_reverts = match e {
                EscrowError::Reverted { .. } => job.mined_reverts + 1,
                _ => 0,
            };
            let again = SwornJob::Validation(ValidationJob {
                attempt: job.attempt + 1,
                mined_reverts,
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

/// A failure the chain may get over, with attempts left, and not the last mined revert
/// allowed in a row (each one is paid for in gas).
fn worth_another_attempt(e: &EscrowError, job: &ValidationJob) -> bool {
    let reverts_spent =
        matches!(e, EscrowError::Reverted { .. }) && job.mined_reverts + 1 >= MAX_MINED_REVERTS;
    e.is_transient() && job.attempt < POST_MAX_ATTEMPTS && !reverts_spent
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
