//! The worker Lambda: SQS delivers a batch of delayed jobs (sworn pass 2, webhook
//! deliveries); each runs through `routes::jobs::run_delivery`, the same job code as
//! `umpire serve`'s local worker, and a pass-2 job failing its last receive forgets its
//! key before SQS dead-letters it. Failures are reported per message (`ReportBatchItemFailures`), so
//! one bad job does not make SQS redeliver the ones that succeeded.
//!
//! SQS delivers at least once, so a job may run twice: in two batches, on two workers
//! at once, or twice in one batch (the template's batch size is 1, so one account's
//! concurrency bounds the checkers pass 2 starts; a larger batch would run its jobs
//! concurrently). Exactly-once effects rest on `run_job`'s conditional writes, not on
//! the queue. A message that cannot be decoded is reported as failed, so
//! after the queue's `maxReceiveCount` it rests in the dead-letter queue for a human.

use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent, SqsMessage};
use umpire_api::AppState;
use umpire_api::routes::jobs::run_delivery;
use umpire_store::sqs::SqsQueue;

/// Runs one message's job; false when SQS should deliver it again.
async fn run_message(state: &AppState, message: &SqsMessage) -> bool {
    let id = message.message_id.as_deref().unwrap_or("");
    // Real SQS events always carry it; without it, the first receive is assumed (the
    // last one's key-shredding is then skipped rather than done early).
    let receives: u32 = message
        .attributes
        .get("ApproximateReceiveCount")
        .and_then(|c| c.parse().ok())
        .unwrap_or(1);
    let job = match SqsQueue::decode(message.body.as_deref().unwrap_or("")) {
        Ok(job) => job,
        Err(e) => {
            tracing::error!(message_id = id, receives, error = %e, "undecodable job");
            return false;
        }
    };
    match run_delivery(state, &job, receives).await {
        Ok(()) => true,
        Err(e) => {
            tracing::warn!(message_id = id, receives, kind = job.kind, error = %e, "job failed; SQS will deliver it again");
            false
        }
    }
}

/// One invocation: every message of the batch, concurrently; the ones to redeliver.
pub async fn handle_batch(state: &AppState, event: SqsEvent) -> SqsBatchResponse {
    let outcomes =
        futures::future::join_all(event.records.iter().map(|m| run_message(state, m))).await;
    let mut response = SqsBatchResponse::default();
    for (message, done) in event.records.iter().zip(outcomes) {
        // Without an id a failure cannot be reported and SQS treats the message as
        // done; real SQS events always carry one.
        match (&message.message_id, done) {
            (Some(id), false) => response.add_failure(id.clone()),
            (None, false) => tracing::error!("a failed message without an id is lost"),
            (_, true) => {}
        }
    }
    response
}
