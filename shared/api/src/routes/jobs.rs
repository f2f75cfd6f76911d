//! The job runner: every delayed job, whatever queued it, run by kind. The worker Lambda
//! runs SQS's deliveries here ([`run_delivery`]); `umpire serve` polls its embedded
//! queue ([`work_forever`]). Kinds: a purchase's reconciler (checkout), a sworn
//! verdict's pass 2 and webhook, an ERC-8004 answer.

use std::time::Duration;

use umpire_store::{JOB_MAX_RECEIVES, Job};

use crate::checkout::reconcile::{self, ReconcileJob};
use crate::plumbing::state::AppState;
use crate::products::verdict::erc8004;
use crate::products::verdict::jobs::{JobError, SwornJob};
use crate::products::verdict::sworn::{run_pass2, run_webhook, shred_dead_letter};

fn retry(e: impl std::fmt::Display) -> JobError {
    JobError::Retry(e.to_string())
}

/// Runs one delayed job. `Ok` means done (acknowledge it); `Err` means try again later.
pub async fn run_job(state: &AppState, job: &Job) -> Result<(), JobError> {
    use tracing::Instrument as _;
    // One span per job, as per purchase: its kind and verdict, ids only.
    let span = |verdict_id: &str| tracing::info_span!("job", kind = job.kind.as_str(), verdict_id);
    if let Some(parsed) = ReconcileJob::parse(job) {
        let r = parsed.map_err(retry)?;
        let span = tracing::info_span!(
            "job",
            kind = job.kind.as_str(),
            payment_key = r.payment_key.as_str()
        );
        return reconcile::run(state, &r)
            .instrument(span)
            .await
            .map(|_| ())
            .map_err(retry);
    }
    match SwornJob::parse(job).map_err(retry)? {
        Some(SwornJob::Pass2(p)) => run_pass2(state, &p).instrument(span(&p.verdict_id)).await,
        Some(SwornJob::Webhook(w)) => run_webhook(state, &w).instrument(span(&w.verdict_id)).await,
        Some(SwornJob::Validation(v)) => {
            erc8004::run_post(state, &v)
                .instrument(span(&v.verdict_id))
                .await
        }
        None => {
            tracing::error!(kind = job.kind, "unknown job kind; dropped");
            Ok(())
        }
    }
}

/// Runs a job SQS delivered for the `receive_count`-th time (the worker Lambda). A
/// pass-2 job that fails its last receive ([`JOB_MAX_RECEIVES`]; SQS dead-letters it
/// next) first forgets its verdict's key: the copy resting in the dead-letter queue
/// (kept 14 days) can no longer be opened, so the deliverable is not kept past the job's
/// last chance. Its verdict stays pending for an operator (`SwornUnresolved`, logged
/// with the verdict id); a redrive finds the key gone and ends cleanly. Not covered: a
/// failure that never returns here (the function timing out or crashing on that
/// receive) dead-letters the copy with its key, as does a store that cannot forget it;
/// a redrive of such a copy finishes pass 2.
///
/// `umpire serve`'s worker runs [`run_job`] instead: the embedded store has no
/// dead-letter queue, and its failing jobs come back every 5 minutes for as long as
/// they fail, key and all.
pub async fn run_delivery(state: &AppState, job: &Job, receive_count: u32) -> Result<(), JobError> {
    let failed = match run_job(state, job).await {
        Ok(()) => return Ok(()),
        Err(e) => e,
    };
    if receive_count >= JOB_MAX_RECEIVES
        && let Ok(Some(SwornJob::Pass2(p))) = SwornJob::parse(job)
    {
        shred_dead_letter(state, &p.verdict_id, &failed).await;
    }
    Err(failed)
}

/// How long a job `umpire serve`'s worker took stays hidden: a job that fails (or whose
/// worker died) comes back this long after it was taken (docs/sworn.md: 5 minutes).
pub const EMBEDDED_RETRY_SECS: u32 = 300;

/// `umpire serve`'s worker: polls the embedded store's delayed jobs and runs them,
/// like the worker Lambda does for SQS.
pub async fn work_forever(state: std::sync::Arc<AppState>, poll: Duration) {
    let Some(queue) = state.queue.clone() else {
        return;
    };
    // A back-off shorter than the poll would wait for the poll instead.
    let poll = poll.min(state.config.webhook_retry_base);
    loop {
        match queue.receive(10, EMBEDDED_RETRY_SECS).await {
            Ok(deliveries) if !deliveries.is_empty() => {
                for d in deliveries {
                    match run_job(&state, &d.job).await {
                        Ok(()) => {
                            if let Err(e) = queue.ack(&d.receipt).await {
                                tracing::error!(error = %e, "could not acknowledge a job");
                            }
                        }
                        Err(e) => {
                            tracing::warn!(error = %e, kind = d.job.kind, "job failed; it will be retried")
                        }
                    }
                }
            }
            Ok(_) => tokio::time::sleep(poll).await,
            Err(e) => {
                tracing::error!(error = %e, "job queue unavailable");
                tokio::time::sleep(poll * 4).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};

    use umpire_store::JobQueue as _;
    use umpire_store::sqlite::SqliteStore;

    use super::*;

    /// docs/sworn.md: on the embedded store a job that failed comes back every 5
    /// minutes, its receive counted: hidden 299 s after it was taken, due at 300 s.
    /// Would catch: the retry delay changed (a failing webhook hammered, or a pass 2
    /// left for an hour) or a taken job never coming back.
    #[tokio::test]
    async fn a_failed_job_on_the_embedded_store_comes_back_five_minutes_later() {
        assert_eq!(EMBEDDED_RETRY_SECS, 5 * 60);
        let now = Arc::new(AtomicU64::new(1_700_000_000_000));
        let clock = now.clone();
        let store = SqliteStore::in_memory()
            .expect("sqlite")
            .with_clock(move || clock.load(Ordering::SeqCst));
        let job = Job {
            kind: "sworn_pass2".into(),
            payload: "{}".into(),
        };
        store.enqueue(&job, Duration::ZERO).await.expect("enqueue");
        let taken = store
            .receive(10, EMBEDDED_RETRY_SECS)
            .await
            .expect("receive");
        assert_eq!(taken.len(), 1);
        // Its run failed: not acknowledged.
        now.fetch_add(299_000, Ordering::SeqCst);
        assert!(
            store
                .receive(10, EMBEDDED_RETRY_SECS)
                .await
                .expect("receive")
                .is_empty(),
            "hidden for 5 minutes"
        );
        now.fetch_add(1_000, Ordering::SeqCst);
        let again = store
            .receive(10, EMBEDDED_RETRY_SECS)
            .await
            .expect("receive");
        assert_eq!(again.len(), 1, "back after 5 minutes");
        assert_eq!(again[0].receive_count, 2);
        assert_eq!(again[0].job.payload, job.payload);
    }
}
