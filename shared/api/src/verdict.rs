//! Judging a purchase and signing the verdict: the one path every tier, the CLI's
//! `judge` and (later) the sworn worker go through.

use umpire_checker::{CheckerError, JudgeRequest};
use umpire_core::Value;
use umpire_core::document::{CheckResult, VerdictFacts, sign, verdict_document};
use umpire_core::eval::FetchedBody;

use crate::AppState;
use crate::purchase::Purchase;

#[derive(Debug, thiserror::Error)]
pub enum JudgeError {
    #[error("this process has no checker configured")]
    NoChecker,
    #[error(transparent)]
    Checker(#[from] CheckerError),
}

/// Runs every check of one pass in the isolated checker.
pub async fn run_checks(
    state: &AppState,
    purchase: &Purchase,
    fetched: Vec<Option<FetchedBody>>,
) -> Result<Vec<CheckResult>, JudgeError> {
    let checker = state.checker.as_ref().ok_or(JudgeError::NoChecker)?;
    let n = purchase.spec.checks.len();
    let mut fetched = fetched;
    fetched.resize(n, None);
    let req = JudgeRequest {
        spec: purchase.spec.normalized.clone(),
        deliverable: purchase.deliverable.clone(),
        fetched,
    };
    let outcomes = checker.judge(&req).await?;
    Ok(purchase
        .spec
        .checks
        .iter()
        .zip(outcomes)
        .enumerate()
        .map(|(index, (check, o))| CheckResult {
            index,
            check_type: check.type_name(),
            passed: o.passed,
            reason: o.reason,
            observations: None,
        })
        .collect())
}

/// The signed verdict document for a judged purchase.
pub fn signed_verdict(
    state: &AppState,
    purchase: &Purchase,
    verdict_id: &str,
    results: &[CheckResult],
) -> Value {
    let facts = VerdictFacts {
        verdict_id,
        tier: purchase.tier,
        spec: &purchase.spec,
        deliverable_hash: &purchase.deliverable.hash(),
        results,
        job_ref: purchase.job_ref.as_ref(),
        issued_at: &umpire_core::time::now_rfc3339(),
        issuer: &state.config.issuer,
    };
    sign(
        verdict_document(&facts, state.signer.key_id()),
        state.signer.as_ref(),
    )
}
