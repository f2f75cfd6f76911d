//! A sworn verdict's webhook: the final document POSTed to the customer's URL, signed
//! with HMAC-SHA256 under the verdict's webhook key, each attempt claimed once and
//! retried with backoff until delivered or given up.

use std::time::Duration;

use hmac::{Hmac, Mac};
use sha2::Sha256;
use umpire_store::{MAX_DELAY, VerdictRecord, WebhookOutcome};

use super::retry;
use crate::plumbing::state::AppState;
use crate::products::verdict::jobs::{
    JobError, SwornJob, WEBHOOK_MAX_ATTEMPTS, WebhookJob, backoff,
};

/// How long a worker holds a webhook attempt it claimed (the POST waits at most 12 s);
/// a worker that dies leaves it to the redelivered job after this.
const WEBHOOK_ATTEMPT_HOLD_SECS: u64 = 120;

/// Queues attempt `attempt` of the verdict's webhook `delay` from now (none when the
/// purchase named no webhook).
pub(super) async fn schedule_webhook(
    state: &AppState,
    verdict_id: &str,
    has_webhook: bool,
    attempt: u32,
    delay: Duration,
) -> Result<(), JobError> {
    if !has_webhook {
        return Ok(());
    }
    let queue = state
        .queue
        .as_ref()
        .ok_or_else(|| retry("no job queue configured"))?;
    let job = SwornJob::Webhook(WebhookJob {
        verdict_id: verdict_id.to_owned(),
        attempt,
    });
    queue
        .enqueue(&job.to_job(), delay.min(MAX_DELAY))
        .await
        .map_err(retry)
}

/// `sha256=<hex>`: HMAC-SHA256 over the raw body, keyed with the 64-character hex
/// string of sha256(secret), used as text (derived again per delivery, see `secret`).
pub fn webhook_signature(secret_hash_hex: &str, body: &[u8]) -> String {
    // HMAC accepts keys of any length; this cannot fail.
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(secret_hash_hex.as_bytes())
        .unwrap_or_else(|_| unreachable!("HMAC takes any key length"));
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

/// How a sworn verdict's webhook stands, from the verdict itself: delivered, failed
/// (every attempt failed), or pending.
pub fn webhook_status(record: &VerdictRecord) -> &'static str {
    match record.webhook_outcome {
        Some(WebhookOutcome::Delivered) => "delivered",
        Some(WebhookOutcome::GaveUp) => "failed",
        None => "pending",
    }
}

pub async fn run_webhook(state: &AppState, w: &WebhookJob) -> Result<(), JobError> {
    let (verdict_id, attempt) = (w.verdict_id.as_str(), w.attempt);
    let now = state.config.clock.now();
    let Some(record_v) = state
        .store
        .get_verdict(verdict_id, now)
        .await
        .map_err(retry)?
    else {
        return Ok(());
    };
    let (Some(url), Some(document)) = (&record_v.webhook_url, &record_v.document) else {
        return Ok(());
    };
    // Each attempt number is made once, whatever the queue delivers, and never once
    // the webhook was delivered (the claim is a conditional write on the verdict). The
    // attempt is finished last, after its follow-up is in place: a worker that dies in
    // between leaves the claim to lapse and the redelivered job to try again, never a gap.
    if record_v.webhook_outcome.is_some()
        || !state
            .store
            .claim_webhook_attempt(verdict_id, attempt, now, now + WEBHOOK_ATTEMPT_HOLD_SECS)
            .await
            .map_err(retry)?
    {
        return Ok(());
    }
    let Some(fetcher) = &state.fetcher else {
        return Err(retry("no fetcher configured for webhook delivery"));
    };
    let body = document.as_bytes().to_vec();
    let Some(key) = crate::checkout::secret::webhook_key(state.signer.as_ref(), &record_v) else {
        // The seed that derived this verdict's secret is gone (rotated): a webhook
        // signed with any other key would not verify for the customer.
        tracing::error!(
            verdict_id,
            "cannot derive the webhook key of this verdict; not delivered"
        );
        return Ok(());
    };
    let signature = webhook_signature(&key, &body);
    let outcome = fetcher
        .post_json(
            url,
            body,
            &[
                ("x-umpire-signature", signature),
                ("x-umpire-verdict-id", verdict_id.to_owned()),
                ("x-umpire-delivery-attempt", attempt.to_string()),
            ],
        )
        .await;
    record_attempt(state, verdict_id, attempt, outcome).await?;
    state
        .store
        .finish_webhook_attempt(verdict_id, attempt)
        .await
        .map_err(retry)
}

/// Records how one delivery attempt went: delivered, failed with another attempt
/// scheduled after the backoff, or failed for the last time.
async fn record_attempt(
    state: &AppState,
    verdict_id: &str,
    attempt: u32,
    outcome: Result<u16, String>,
) -> Result<(), JobError> {
    match outcome {
        Ok(status) => {
            tracing::info!(verdict_id, attempt, status, "webhook delivered");
            state
                .store
                .record_webhook_outcome(verdict_id, WebhookOutcome::Delivered)
                .await
                .map_err(retry)?;
        }
        Err(e) if attempt < WEBHOOK_MAX_ATTEMPTS => {
            crate::plumbing::metrics::record(crate::plumbing::metrics::Metric::WebhookFailure);
            let delay = backoff(state.config.webhook_retry_base, attempt);
            tracing::warn!(
                verdict_id,
                attempt,
                error = e,
                delay_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
                "webhook failed; retrying"
            );
            schedule_webhook(state, verdict_id, true, attempt + 1, delay).await?;
        }
        Err(e) => {
            crate::plumbing::metrics::record(crate::plumbing::metrics::Metric::WebhookFailure);
            tracing::warn!(
                verdict_id,
                attempt,
                error = e,
                "webhook failed for the last time; the document stays at the status link"
            );
            state
                .store
                .record_webhook_outcome(verdict_id, WebhookOutcome::GaveUp)
                .await
                .map_err(retry)?;
        }
    }
    Ok(())
}
