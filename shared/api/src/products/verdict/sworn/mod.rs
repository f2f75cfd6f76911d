//! Sworn verdicts: pass 1 in the purchase request, pass 2 about a minute later from a
//! delayed job, the final document signed once, and the webhook delivered with an
//! HMAC signature and retried with backoff.
//!
//! Exactly once, over at-least-once delivery:
//! - the final document is stored by one conditional write (pending → final); a
//!   duplicated or redelivered pass-2 job that loses it uses the stored document, and a
//!   worker that died before storing simply runs pass 2 again (nothing was stored);
//! - each webhook attempt number is claimed once (a duplicated retry job is a no-op), and
//!   a delivered webhook is recorded, so later copies stop before sending.
//!
//! The deliverable lives only inside the pass-2 job (in SQS, or the embedded store's
//! jobs table), sealed under a data key kept with the pending verdict
//! (`umpire_core::seal`): finalizing (or deleting) the verdict removes the key, so every
//! copy of the job — retries, hops, a dead-letter copy — is unreadable from then on. The
//! job keeps in the clear what an operator needs: ids, the deliverable's hash, pass 1.

use std::time::Duration;

use umpire_core::document::{CheckResult, VerdictFacts, sign, verdict_document};
use umpire_core::json::{Value, parse};
use umpire_core::product::Tier;
use umpire_core::seal::{self, DataKey};
use umpire_core::spec::{parse_deliverable, parse_spec};
use umpire_core::{ApiError, ErrorCode};
use umpire_store::{Finalize, Job, MAX_DELAY, VerdictRecord};

use crate::checkout::ledger::{PaymentKey, PurchaseOutcome, purchase_outcome};
use crate::plumbing::state::AppState;
use crate::products::verdict::judge;
use crate::products::verdict::purchase::Purchase;

mod webhook;

pub use webhook::{run_webhook, webhook_signature, webhook_status};

use webhook::schedule_webhook;

pub use crate::products::verdict::jobs::{
    JOB_PASS2, JOB_WEBHOOK, JobError, WEBHOOK_MAX_ATTEMPTS, backoff,
};

use crate::products::verdict::jobs::{JobDeliverable, Pass2Job, SwornJob};

/// A pass-2 job carries the deliverable; an SQS message holds at most 256 KB, and the
/// job's envelope (kind, encoding) takes some of it.
pub const PASS2_JOB_MAX_BYTES: usize = umpire_core::platform::SQS_MESSAGE_BYTES - 16 * 1024;
/// The longest one job can take in the worker, given the checker's limit per check:
/// pass 2 fetches (the fetcher's deadline), judges (a pass killed at the limit, then
/// every check again alone, each at the limit), and writes; a webhook attempt waits the
/// fetcher's deadline. The worker's timeout must be at least this (a test holds it).
pub fn job_worst_case(check_limit: Duration) -> Duration {
    use umpire_core::product::{FETCH_TIMEOUT_SECS, MAX_CHECKS};
    let fetch = Duration::from_secs(FETCH_TIMEOUT_SECS);
    let judge = check_limit * (1 + MAX_CHECKS as u32);
    // Store reads and writes, the next job queued, a cold start's KMS call.
    let bookkeeping = Duration::from_secs(5);
    fetch + judge + bookkeeping
}

/// Deferrals of one pass-2 job (waits for its purchase and for a throttled checker,
/// together) before a throttled checker fails it like any other error: with delays
/// doubling to SQS's 15 minutes, about 8 hours of throttling.
const THROTTLED_HOPS_MAX: u64 = 40;

fn retry(e: impl std::fmt::Display) -> JobError {
    JobError::Retry(e.to_string())
}

/// What pass 2 is told of the sale it finishes.
pub struct Sold<'a> {
    /// The purchase's ledger key: only a paid verdict is finished.
    pub payment_key: &'a str,
    /// When the purchase's hold lapses: pass 2 waits for an unresolved purchase no
    /// longer than that (each wait is a hop, counted in the job).
    pub wait_until: u64,
    /// The purchase passed its ERC-8004 checks: the final document answers its request.
    pub answers_request: bool,
}

/// The pass-2 job for a sworn purchase: everything pass 2 needs, the deliverable sealed
/// under `key` (bound to the verdict).
pub fn pass2_job(
    verdict_id: &str,
    key: &DataKey,
    purchase: &Purchase,
    pass1: &[CheckResult],
    created_at: u64,
    sold: Sold<'_>,
) -> Result<Job, String> {
    let sealed = seal::seal(
        key,
        verdict_id.as_bytes(),
        &purchase.deliverable.hash_input().to_canonical_vec(),
        umpire_host::random_bytes(),
    )
    .ok_or("the deliverable could not be sealed")?;
    Ok(SwornJob::Pass2(Box::new(Pass2Job {
        verdict_id: verdict_id.to_owned(),
        spec: Some(purchase.spec.normalized.clone()),
        deliverable: Some(JobDeliverable::Sealed(sealed)),
        deliverable_hash: Some(purchase.deliverable.hash()),
        job_ref: purchase.job_ref.clone(),
        webhook_url: purchase.webhook_url.clone(),
        pass1: pass1.iter().map(CheckResult::to_value).collect(),
        created_at: Some(created_at),
        payment_key: Some(sold.payment_key.to_owned()),
        wait_until: Some(sold.wait_until),
        hops: 0,
        answers_request: sold.answers_request,
    }))
    .to_job())
}

/// Refuses (before payment) a sworn purchase whose pass-2 job could not be queued.
pub fn check_job_size(purchase: &Purchase) -> Result<(), ApiError> {
    let size = pass2_job(
        "vrd_00000000000000000000000000000000",
        &DataKey::from_bytes(umpire_host::random_bytes()),
        purchase,
        &[],
        u64::MAX,
        Sold {
            payment_key: &crate::checkout::ledger::raw_payment_key(&serde_json::Value::Null),
            wait_until: u64::MAX,
            answers_request: true,
        },
    )
    .map_err(crate::plumbing::state::internal)?
    .payload
    .len();
    if size > PASS2_JOB_MAX_BYTES {
        return Err(ApiError::new(
            ErrorCode::InvalidRequest,
            format!(
                "a sworn purchase keeps its spec and deliverable for pass 2 in at most {PASS2_JOB_MAX_BYTES} bytes; this one needs {size}"
            ),
            "Send a smaller deliverable (judge large artifacts by content_hash), or buy a probe verdict; nothing was charged.",
        ));
    }
    Ok(())
}

/// The pass-1 preview shown by the 202 and by the status link while pending.
pub fn preview(pass1: &[CheckResult], final_due_at: u64) -> Value {
    Value::object()
        .with("pass", 1u64)
        .with(
            "verdict_so_far",
            if umpire_core::document::verdict_passed(pass1) {
                "pass"
            } else {
                "fail"
            },
        )
        .with(
            "results",
            Value::Array(pass1.iter().map(CheckResult::to_value).collect()),
        )
        .with("final_due_at", umpire_core::time::rfc3339(final_due_at))
}

/// Forgets the key of a still-pending verdict whose pass-2 job is being dead-lettered.
pub async fn shred_dead_letter(state: &AppState, verdict_id: &str, failed: &JobError) {
    let now = state.config.clock.now();
    match state.store.get_verdict(verdict_id, now).await {
        // Final already (only its webhook failed) or gone: nothing readable remains.
        Ok(Some(record)) if record.document.is_some() || record.job_key.is_none() => return,
        Ok(None) => return,
        _ => {}
    }
    match state.store.forget_job_key(verdict_id).await {
        Ok(()) => {
            tracing::error!(
                verdict_id,
                error = %failed,
                "pass 2 failed on its last receive: its key is forgotten, so its dead-letter copy cannot be opened; the verdict stays pending for an operator"
            );
            crate::plumbing::metrics::record(crate::plumbing::metrics::Metric::SwornUnresolved);
        }
        Err(e) => tracing::error!(
            verdict_id,
            error = %e,
            "pass 2 failed on its last receive and its key could not be forgotten: its dead-letter copy stays readable (redrive it once the store is back, or purge it)"
        ),
    }
}

/// The deliverable a pass-2 job carries, opened with its verdict's key; `None` when the
/// key is gone. Jobs queued before sealing existed carry it in the clear.
fn unseal_deliverable(
    p: &Pass2Job,
    key: Option<&str>,
) -> Result<Option<umpire_core::spec::Deliverable>, JobError> {
    let verdict_id = &p.verdict_id;
    let value = match (&p.deliverable, key) {
        (Some(JobDeliverable::Sealed(sealed)), Some(key)) => {
            let key = DataKey::from_hex(key).ok_or_else(|| retry("a malformed job key"))?;
            let plain = seal::open(&key, verdict_id.as_bytes(), sealed)
                .ok_or_else(|| retry("the pass-2 job does not open with its verdict's key"))?;
            parse(&plain).map_err(retry)?
        }
        (Some(JobDeliverable::Sealed(_)), None) => return Ok(None),
        (Some(JobDeliverable::Clear(clear)), _) => clear.clone(),
        (None, _) => return Err(retry("job payload lacks deliverable")),
    };
    parse_deliverable(&value, "deliverable")
        .map(Some)
        .map_err(|e| retry(format!("stored deliverable no longer parses: {e:?}")))
}

/// Both passes of one check: it passes only if it passed twice; its observations
/// are pass 1's followed by pass 2's.
fn merge(pass1: &[Value], pass2: Vec<CheckResult>) -> Vec<CheckResult> {
    pass2
        .into_iter()
        .enumerate()
        .map(|(i, r2)| {
            let r1 = pass1.get(i);
            let passed1 = r1.and_then(|r| r.get("passed")) == Some(&Value::Bool(true));
            let reason1 = r1
                .and_then(|r| r.get("reason"))
                .and_then(Value::as_str)
                .unwrap_or("not judged");
            let mut observations: Vec<Value> = r1
                .and_then(|r| r.get("observations"))
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            observations.extend(r2.observations.clone().unwrap_or_default());
            CheckResult {
                index: r2.index,
                check_type: r2.check_type,
                passed: passed1 && r2.passed,
                reason: format!("pass 1: {reason1}; pass 2: {}", r2.reason),
                observations: (!observations.is_empty()).then_some(observations),
            }
        })
        .collect()
}

pub async fn run_pass2(state: &AppState, p: &Pass2Job) -> Result<(), JobError> {
    let verdict_id = p.verdict_id.as_str();
    let now = state.config.clock.now();
    let Some(record) = state
        .store
        .get_verdict(verdict_id, now)
        .await
        .map_err(retry)?
    else {
        // Voided (settlement failed) or expired: nothing to finish.
        tracing::info!(
            verdict_id,
            "pass 2 for a verdict that does not exist; dropped"
        );
        return Ok(());
    };
    if let Some(text) = &record.document {
        // A duplicate: the final document exists; make sure its answer to a validation
        // request and its webhook are on their way (the first copy may have died after
        // finalizing; posting and delivery are idempotent).
        if p.answers_request {
            answer_validation(state, verdict_id, p.job_ref.as_ref(), text).await?;
        }
        return schedule_webhook(
            state,
            verdict_id,
            record.webhook_url.is_some(),
            1,
            Duration::ZERO,
        )
        .await;
    }
    // Only a verdict that was paid for is finished (its purchase may have died before
    // settling, or lost the settlement's answer).
    if let Some(payment_key) = &p.payment_key
        && let Sale::Handled = sale(state, p, payment_key, now).await?
    {
        return Ok(());
    }
    let Some(purchase) = purchase_of(p, &record)? else {
        return Ok(());
    };
    let pass2 = match judge::judge(state, &purchase).await {
        Ok(r) => r,
        // No capacity now (the checker throttled): asked again later as a new job, not
        // failed, so a spell of throttling cannot walk a paid job to the dead-letter
        // queue (each failure counts toward its 5 receives). Each deferral waits twice
        // as long (Retry-After first, SQS's 15 minutes at most); past
        // THROTTLED_HOPS_MAX hops the job fails as any other would, toward the alarmed
        // DLQ, rather than circling quietly for days.
        Err(judge::JudgeError::Checker(umpire_checker::CheckerError::Busy {
            retry_after_secs,
        })) if p.hops < THROTTLED_HOPS_MAX => {
            let delay =
                Duration::from_secs(retry_after_secs.max(1) << p.hops.min(10)).min(MAX_DELAY);
            tracing::warn!(
                verdict_id,
                hops = p.hops,
                delay_secs = delay.as_secs(),
                "pass 2's checker is throttled: asked again later"
            );
            return again(state, p, delay).await;
        }
        Err(e) => return Err(retry(e)),
    };
    let Some(standing) = finalize(state, p, &purchase, pass2, now).await? else {
        return Ok(());
    };
    if p.answers_request {
        answer_validation(state, verdict_id, purchase.job_ref.as_ref(), &standing).await?;
    }
    schedule_webhook(
        state,
        verdict_id,
        purchase.webhook_url.is_some(),
        1,
        Duration::ZERO,
    )
    .await
}

/// What pass 2 learned of its purchase.
enum Sale {
    /// Paid: the verdict is finished.
    Paid,
    /// Not (yet) known to be paid, and dealt with: asked again later, given up on, or
    /// the verdict deleted as never sold. The job is done.
    Handled,
}

/// Asks the ledger whether the purchase behind the verdict was paid, and deals with a
/// purchase that was not or is not known yet.
async fn sale(
    state: &AppState,
    p: &Pass2Job,
    payment_key: &str,
    now: u64,
) -> Result<Sale, JobError> {
    let verdict_id = p.verdict_id.as_str();
    let payment_key = PaymentKey::from_stored(payment_key.to_owned());
    let outcome = purchase_outcome(state, &payment_key, verdict_id)
        .await
        .map_err(|e| retry(e.message))?;
    match outcome {
        PurchaseOutcome::Paid => Ok(Sale::Paid),
        PurchaseOutcome::NotSold => {
            tracing::warn!(verdict_id, "pass 2 for a verdict never sold; deleted");
            state
                .store
                .delete_verdict(verdict_id)
                .await
                .map_err(retry)?;
            Ok(Sale::Handled)
        }
        PurchaseOutcome::Unresolved | PurchaseOutcome::Pending => {
            let hops = p.hops;
            // Jobs queued before the deadline existed wait as long as a hold can.
            let wait_until = p.wait_until.unwrap_or_else(|| {
                p.created_at.unwrap_or(now) + crate::checkout::idempotency::IN_PROGRESS_SECS
            });
            // A pending purchase is waited for however long the chain takes: its
            // reconciler decides it (delivered, and pass 2 runs; voided, and the
            // verdict is deleted here).
            if outcome == PurchaseOutcome::Unresolved && now >= wait_until {
                give_up(state, verdict_id, hops).await?;
                return Ok(Sale::Handled);
            }
            // Asked again a pass-2 delay later (an interrupted purchase is settled
            // by its customer's retry, or its hold lapses).
            tracing::info!(verdict_id, hops, "pass 2 waits for its purchase to settle");
            let delay = Duration::from_secs(state.config.sworn_delay_secs.into());
            again(state, p, delay).await?;
            Ok(Sale::Handled)
        }
    }
}

/// The purchase's hold lapsed and its settlement is still unknown (its customer never
/// came back to learn the outcome): stop carrying the deliverable around. The verdict
/// stays pending; the metric tells an operator, who can find the payment on chain.
async fn give_up(state: &AppState, verdict_id: &str, hops: u64) -> Result<(), JobError> {
    tracing::error!(
        verdict_id,
        hops,
        "pass 2 gave up on a purchase whose settlement is still unknown"
    );
    // Nothing will open this job any more: its key goes, so no copy of it (a retry, a
    // dead letter) keeps the deliverable readable.
    state
        .store
        .forget_job_key(verdict_id)
        .await
        .map_err(retry)?;
    crate::plumbing::metrics::record(crate::plumbing::metrics::Metric::SwornUnresolved);
    Ok(())
}

/// This pass-2 job queued again `delay` from now, one hop further.
async fn again(state: &AppState, p: &Pass2Job, delay: Duration) -> Result<(), JobError> {
    let queue = state
        .queue
        .as_ref()
        .ok_or_else(|| retry("no job queue configured"))?;
    let again = SwornJob::Pass2(Box::new(Pass2Job {
        hops: p.hops + 1,
        ..p.clone()
    }))
    .to_job();
    queue.enqueue(&again, delay).await.map_err(retry)
}

/// The purchase pass 2 judges, from its job (the deliverable opened with the verdict's
/// key); `None` when the key is gone.
fn purchase_of(p: &Pass2Job, record: &VerdictRecord) -> Result<Option<Purchase>, JobError> {
    let spec_v = p
        .spec
        .as_ref()
        .ok_or_else(|| retry("job payload lacks spec"))?;
    let spec = parse_spec(spec_v, Some(Tier::Sworn))
        .map_err(|e| retry(format!("stored spec no longer parses: {e:?}")))?;
    let Some(deliverable) = unseal_deliverable(p, record.job_key.as_deref())? else {
        // The key is gone (the verdict was finalized, or its job given up on or
        // dead-lettered meanwhile): this copy can no longer be read, and is not needed.
        tracing::warn!(
            verdict_id = p.verdict_id,
            "pass 2 job whose key is gone; dropped"
        );
        return Ok(None);
    };
    Ok(Some(Purchase {
        tier: Tier::Sworn,
        spec,
        deliverable,
        webhook_url: p.webhook_url.clone(),
        job_ref: p.job_ref.clone(),
    }))
}

/// Signs the final document from pass 1 and pass 2 and stores it once (pending →
/// final); the standing document (ours, or the first worker's), or `None` when the
/// verdict is gone.
async fn finalize(
    state: &AppState,
    p: &Pass2Job,
    purchase: &Purchase,
    pass2: Vec<CheckResult>,
    now: u64,
) -> Result<Option<String>, JobError> {
    let verdict_id = p.verdict_id.as_str();
    let results = merge(&p.pass1, pass2);
    let facts = VerdictFacts {
        verdict_id,
        tier: Tier::Sworn,
        spec: &purchase.spec,
        deliverable_hash: &purchase.deliverable.hash(),
        results: &results,
        job_ref: purchase.job_ref.as_ref(),
        issued_at: &umpire_core::time::rfc3339(state.config.clock.now()),
        issuer: &state.config.issuer,
    };
    let document = sign(
        verdict_document(&facts, state.signer.key_id()),
        state.signer.as_ref(),
    );
    let text = String::from_utf8_lossy(&document.to_canonical_vec()).into_owned();
    match state
        .store
        .finalize_verdict(verdict_id, &text)
        .await
        .map_err(retry)?
    {
        Finalize::Done => {
            tracing::info!(verdict_id, "sworn verdict final");
            crate::plumbing::metrics::record(crate::plumbing::metrics::Metric::SwornFinalized);
        }
        Finalize::AlreadyFinal(_) => {
            tracing::info!(
                verdict_id,
                "another worker finalized first; its document stands"
            );
        }
        Finalize::NotFound => return Ok(None),
    }
    let standing = match state
        .store
        .get_verdict(verdict_id, now)
        .await
        .map_err(retry)?
    {
        Some(VerdictRecord {
            document: Some(standing),
            ..
        }) => standing,
        _ => text,
    };
    Ok(Some(standing))
}

/// Queues the final answer to the validation request `job_ref` names (if any) from the
/// final document `text`; a queue that refuses fails the job, which comes back (its
/// copy finds the document and queues the answer then).
async fn answer_validation(
    state: &AppState,
    verdict_id: &str,
    job_ref: Option<&Value>,
    text: &str,
) -> Result<(), JobError> {
    if job_ref
        .and_then(Value::as_str)
        .is_none_or(|r| !r.starts_with(umpire_escrow::validation::VALIDATION_REF_PREFIX))
    {
        return Ok(());
    }
    let document = parse(text.as_bytes()).map_err(retry)?;
    crate::products::verdict::erc8004::queue_answer(
        state,
        verdict_id,
        job_ref,
        crate::products::verdict::erc8004::Answer::final_for(&document, Tier::Sworn),
        None,
    )
    .await
    .map_err(retry)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_and_caps_at_the_sqs_limit() {
        assert_eq!(
            (1..=5)
                .map(|n| backoff(Duration::from_secs(30), n).as_secs())
                .collect::<Vec<_>>(),
            vec![30, 60, 120, 240, 480]
        );
        assert_eq!(backoff(Duration::from_secs(500), 3), MAX_DELAY);
        assert_eq!(
            backoff(Duration::from_millis(40), 3),
            Duration::from_millis(160)
        );
    }

    #[test]
    fn the_signature_matches_an_independent_hmac() {
        // Python: hmac.new(sha256(b"sec_test").hexdigest().encode(), body, sha256).
        assert_eq!(
            webhook_signature(
                &umpire_core::hash::sha256_hex(b"sec_test"),
                br#"{"verdict":"pass"}"#
            ),
            "sha256=f216a98418a0ea1a0df243bbfa39630b5c4850e823902484bef2d36fff95b5c1"
        );
    }
}
