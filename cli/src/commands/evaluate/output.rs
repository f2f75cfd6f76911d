//! What an evaluation prints on stdout: one JSON object per job, for the decision sent
//! or for a job found already decided.

use alloy::primitives::B256;
use umpire_core::json::Value;
use umpire_escrow::{Decision, JobRef, Outcome, Status, bytes32_hex};

use crate::commands::client::print_json;

/// What a decided job looks like on stdout.
pub(super) fn print_decided(job: &JobRef, status: Status, outcome: Option<&Outcome>) {
    let mut v = Value::object()
        .with("job", job.to_string())
        .with("status", status.name())
        .with("already_decided", true);
    if let Some(o) = outcome {
        v = v
            .with("reason", bytes32_hex(&o.reason))
            .with("by", o.by.to_string());
        if let Some(tx) = o.transaction {
            v = v.with("transaction", bytes32_hex(&tx));
        }
    }
    print_json(&v);
}

/// What a decision sent looks like on stdout: the job as it now stands, the transaction,
/// and the document that justifies it.
pub(super) fn print_decision(
    job_ref: &JobRef,
    decision: Decision,
    tx: &B256,
    reason: &B256,
    verdict: &str,
    doc: Value,
) {
    print_json(
        &Value::object()
            .with("job", job_ref.to_string())
            .with(
                "status",
                match decision {
                    Decision::Complete => Status::Completed.name(),
                    Decision::Reject => Status::Rejected.name(),
                },
            )
            .with("decision", decision.name())
            .with("transaction", bytes32_hex(tx))
            .with("reason", bytes32_hex(reason))
            .with("verdict", verdict)
            .with("document", doc),
    );
}
