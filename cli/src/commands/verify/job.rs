//! `umpire verify --job`: the audit of an evaluated ERC-8183 job against the document.

use umpire_core::document::Step;
use umpire_core::json::Value;
use umpire_escrow::{
    Escrow, EscrowError, Job, JobRef, Outcome, Status, Submission, bytes32_hex, bytes32_of,
};

use super::{JobCheck, payload_sha256, step, text};

/// The auditor's check of an evaluated ERC-8183 job: the document names the job, the
/// provider's commitment is the document's deliverable_hash, and the evaluator's
/// on-chain reason is the document's payload_sha256, with the outcome its verdict.
pub(super) async fn job_steps(doc: &Value, check: &JobCheck) -> Result<Vec<Step>, String> {
    let job: JobRef = check.job.parse().map_err(|e| format!("--job: {e}"))?;
    let escrow = Escrow::connect(&check.rpc, &job.contract_ref(), None)
        .await
        .map_err(|e| format!("escrow: {e}"))?;
    let mut steps = vec![job_ref_step(doc, job)];
    let state = match escrow.job(job.job_id).await {
        Ok(state) => state,
        // Not the chain failing for now: a contract whose jobs cannot be read fails the
        // audit (exit 1), rather than asking to be run again.
        Err(e @ EscrowError::Unreadable(_)) => {
            steps.push(step("escrow", false, e.to_string()));
            return Ok(steps);
        }
        Err(e) => return Err(format!("escrow: {e}")),
    };
    let submission = escrow
        .submission(job.job_id)
        .await
        .map_err(|e| format!("escrow: {e}"))?;
    steps.push(commitment_step(doc, submission));
    let outcome = escrow
        .outcome(job.job_id)
        .await
        .map_err(|e| format!("escrow: {e}"))?;
    steps.extend(outcome_steps(doc, outcome, &state));
    Ok(steps)
}

/// `job_ref`: whether the document names the job being audited.
fn job_ref_step(doc: &Value, job: JobRef) -> Step {
    let named = text(doc, "job_ref").parse::<JobRef>().ok();
    step(
        "job_ref",
        named == Some(job),
        if named == Some(job) {
            format!("the document names job {job}")
        } else {
            format!(
                "the document's job_ref is {:?}, not job {job}",
                text(doc, "job_ref")
            )
        },
    )
}

/// `commitment`: whether the provider's submit committed the document's
/// deliverable_hash.
fn commitment_step(doc: &Value, submission: Option<Submission>) -> Step {
    let dh = bytes32_of(text(doc, "deliverable_hash"));
    match submission {
        Some(s) if Some(s.deliverable) == dh => step(
            "commitment",
            true,
            format!(
                "the provider's submit committed {}, the document's deliverable_hash",
                bytes32_hex(&s.deliverable)
            ),
        ),
        Some(s) => step(
            "commitment",
            false,
            format!(
                "the provider committed {}, the document judged deliverable_hash {}",
                bytes32_hex(&s.deliverable),
                text(doc, "deliverable_hash")
            ),
        ),
        None => step(
            "commitment",
            false,
            "no JobSubmitted event for the job was found".into(),
        ),
    }
}

/// `onchain_reason` and `onchain_outcome`: whether the evaluator's complete or reject
/// carries the document's payload_sha256 and agrees with its verdict (only the first,
/// failed, while the job has neither).
fn outcome_steps(doc: &Value, outcome: Option<Outcome>, state: &Job) -> Vec<Step> {
    let Some(o) = outcome else {
        return vec![step(
            "onchain_reason",
            false,
            format!(
                "the job is {} and has no complete or reject on chain yet",
                state.status.name()
            ),
        )];
    };
    let payload = payload_sha256(doc);
    let reason = step(
        "onchain_reason",
        Some(o.reason) == payload,
        if Some(o.reason) == payload {
            format!(
                "the evaluator's reason {} is the document's payload_sha256",
                bytes32_hex(&o.reason)
            )
        } else {
            format!(
                "the on-chain reason is {}, not the document's payload_sha256",
                bytes32_hex(&o.reason)
            )
        },
    );
    let verdict = text(doc, "verdict");
    let agrees = matches!(
        (o.status, verdict),
        (Status::Completed, "pass") | (Status::Rejected, "fail")
    );
    let decided = step(
        "onchain_outcome",
        agrees && o.by == state.evaluator,
        format!(
            "the job is {} by {} (its evaluator: {}), the verdict is {verdict}",
            o.status.name(),
            o.by,
            state.evaluator
        ),
    );
    vec![reason, decided]
}
