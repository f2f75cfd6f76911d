//! Judging a purchase and signing the verdict: the one path every tier, the CLI's
//! `judge` and the sworn worker's pass 2 go through.

use std::sync::Arc;

use umpire_checker::{CheckerError, JudgeRequest};
use umpire_core::Value;
use umpire_core::document::{CheckResult, VerdictFacts, sign, verdict_document};
use umpire_core::eval::FetchedBody;
use umpire_fetch::Fetched;

use crate::plumbing::state::AppState;
use crate::products::verdict::purchase::Purchase;

#[derive(Debug, thiserror::Error)]
pub enum JudgeError {
    #[error("this process has no checker configured")]
    NoChecker,
    #[error("this process has no fetcher configured")]
    NoFetcher,
    #[error(transparent)]
    Checker(#[from] CheckerError),
}

/// The refusal of a purchase whose judging failed; nothing is charged. At capacity (the
/// checker function throttled), a 503 saying when to come back; otherwise a 500.
pub fn judge_failed(e: JudgeError) -> umpire_core::ApiError {
    let not_now = |why: &str, retry_after_secs: u64| {
        umpire_core::ApiError::new(
            umpire_core::ErrorCode::Unavailable,
            format!("Umpire {why} and could not judge this now."),
            "Nothing was charged: send the request again after Retry-After seconds.",
        )
        .with_retry_after(retry_after_secs)
    };
    match e {
        JudgeError::Checker(CheckerError::Busy { retry_after_secs }) => {
            tracing::warn!("the checker function is throttled: purchase refused");
            not_now("is at capacity", retry_after_secs)
        }
        // Mid-deploy, this function and its checker on different protocol versions.
        JudgeError::Checker(CheckerError::Protocol(m))
            if m.contains(umpire_checker::PROTOCOL_MISMATCH) =>
        {
            tracing::warn!(refusal = %m, "checker on another protocol version: purchase refused");
            not_now("is being upgraded", 10)
        }
        e => crate::plumbing::state::internal(e),
    }
}

/// Runs every check of one pass in the isolated checker.
pub async fn run_checks(
    state: &AppState,
    purchase: &Purchase,
    fetched: Vec<Option<Arc<FetchedBody>>>,
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

/// One pass: fetch every URL the checks name (each distinct URL once, concurrently),
/// judge in the isolated checker, and attach each fetch's observation to its checks.
/// A check whose URL could not be fetched fails and says why.
pub async fn judge(state: &AppState, purchase: &Purchase) -> Result<Vec<CheckResult>, JudgeError> {
    let urls: Vec<Option<&str>> = purchase
        .spec
        .checks
        .iter()
        .map(|c| c.network_url())
        .collect();
    let mut distinct: Vec<&str> = urls.iter().flatten().copied().collect();
    distinct.sort_unstable();
    distinct.dedup();
    // Each distinct URL's body once, shared by every check that reads it.
    let fetches: Vec<(&str, Fetched, Option<Arc<FetchedBody>>)> = if distinct.is_empty() {
        Vec::new()
    } else {
        let fetcher = state.fetcher.as_ref().ok_or(JudgeError::NoFetcher)?;
        let done = futures::future::join_all(distinct.iter().map(|u| fetcher.fetch(u))).await;
        distinct
            .into_iter()
            .zip(done)
            .map(|(u, mut f)| {
                let body = f.body.take().map(Arc::new);
                (u, f, body)
            })
            .collect()
    };
    let fetched_for = |url: Option<&str>| {
        let url = url?;
        fetches.iter().find(|(u, ..)| *u == url)
    };
    let bodies = urls
        .iter()
        .map(|u| fetched_for(*u).and_then(|(.., b)| b.clone()))
        .collect();
    let mut results = run_checks(state, purchase, bodies).await?;
    for (r, url) in results.iter_mut().zip(&urls) {
        if let Some((_, f, _)) = fetched_for(*url) {
            r.observations = Some(vec![f.observation.to_value()]);
            if let Some(e) = &f.observation.error {
                r.passed = false;
                r.reason = format!("the URL could not be fetched: {e}");
            }
        }
    }
    Ok(results)
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
        issued_at: &umpire_core::time::rfc3339(state.config.clock.now()),
        issuer: &state.config.issuer,
    };
    sign(
        verdict_document(&facts, state.signer.key_id()),
        state.signer.as_ref(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use umpire_core::ErrorCode;

    #[test]
    fn capacity_and_upgrades_are_503_with_retry_after_and_the_rest_500() {
        let busy = judge_failed(JudgeError::Checker(CheckerError::Busy {
            retry_after_secs: 3,
        }));
        assert_eq!(
            (busy.code, busy.retry_after),
            (ErrorCode::Unavailable, Some(3))
        );
        // The refusal a checker of another protocol version writes.
        let text = umpire_checker::judge_line(r#"{"protocol":1}"#).expect_err("refused");
        assert!(text.contains(umpire_checker::PROTOCOL_MISMATCH), "{text}");
        let upgrading = judge_failed(JudgeError::Checker(CheckerError::Protocol(text)));
        assert_eq!(upgrading.code, ErrorCode::Unavailable);
        assert!(upgrading.retry_after.is_some());
        let broken = judge_failed(JudgeError::Checker(CheckerError::Protocol(
            "garbled".into(),
        )));
        assert_eq!(broken.code, ErrorCode::Internal);
    }
}
