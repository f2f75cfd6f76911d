//! The isolated checker in AWS: its own Lambda function, invoked synchronously.
//!
//! The checker function holds no permissions and no secrets, and its `Timeout` is the
//! hard limit: when a check overruns, Lambda kills the sandbox. One invocation judges
//! the whole pass (the normal case costs one round trip). If that invocation dies, we
//! cannot tell which check killed it, so every check of the pass is judged again alone,
//! each in its own invocation: the one that dies again fails at the limit, the others
//! get their true outcome. A one-check invocation killed at the timeout fails at once;
//! one that died otherwise gets a second try.
//!
//! Lambda refuses payloads over 6 MB. An event carries only what its checks read: each
//! fetched body once (by sha256) and only with the checks that read it, the deliverable's
//! text and JSON only with checks that read them. A pass whose event would still be too
//! large (three different 2 MB bodies) is judged in several invocations, cut where the
//! events fit; a single check always fits within the contract's limits.
//!
//! Wire format: the event is `{"request": "<a worker protocol request line>"}` and the
//! answer `{"answers": "<the worker's answer lines>"}`. The lines travel as strings so
//! that numbers in specs and deliverables survive exactly (stable JSON on both sides).

use std::time::Duration;

use aws_sdk_lambda::primitives::Blob;
use umpire_checker::{CheckerError, Judge, JudgeRequest, crashed, parse_answer, timed_out};
use umpire_core::eval::Outcome;

/// `UMPIRE_CHECKER_FUNCTION`: the checker function's name or ARN. When set, judging
/// functions invoke it instead of starting local worker processes.
pub const CHECKER_FUNCTION_ENV: &str = "UMPIRE_CHECKER_FUNCTION";

/// Lambda refuses a synchronous invocation whose payload is this large or larger ("must
/// be smaller than").
pub const MAX_INVOKE_PAYLOAD_BYTES: usize = umpire_core::platform::LAMBDA_SYNC_PAYLOAD_BYTES;

/// When Lambda throttles without saying when to come back.
const THROTTLED_RETRY_AFTER_SECS: u64 = 2;

/// Invokes the checker function.
pub struct LambdaChecker {
    client: aws_sdk_lambda::Client,
    function: String,
    /// The function's timeout, named in the reason of a check it killed.
    limit: Duration,
}

/// How one invocation ended.
enum Invocation {
    Answered(Vec<Outcome>),
    /// Killed at its timeout.
    TimedOut,
    /// Died otherwise (out of memory, a panic): nothing to read.
    Died(String),
}

impl LambdaChecker {
    pub fn new(client: aws_sdk_lambda::Client, function: String, limit: Duration) -> Self {
        LambdaChecker {
            client,
            function,
            limit,
        }
    }

    async fn invoke(
        &self,
        req: &JudgeRequest,
        start: usize,
        end: usize,
    ) -> Result<Invocation, CheckerError> {
        self.invoke_event(event(req, start, end), start, end).await
    }

    async fn invoke_event(
        &self,
        event: Vec<u8>,
        start: usize,
        end: usize,
    ) -> Result<Invocation, CheckerError> {
        let out = self
            .client
            .invoke()
            .function_name(&self.function)
            .payload(Blob::new(event))
            .send()
            .await
            .map_err(|e| {
                // Throttled (after the SDK's own retries): no capacity now, a purchase
                // answers 503 with Retry-After and a pass-2 job comes back later.
                if let Some(
                    aws_sdk_lambda::operation::invoke::InvokeError::TooManyRequestsException(t),
                ) = e.as_service_error()
                {
                    let retry_after_secs = t
                        .retry_after_seconds()
                        .and_then(|s| s.parse().ok())
                        .unwrap_or(THROTTLED_RETRY_AFTER_SECS);
                    return CheckerError::Busy {
                        retry_after_secs: retry_after_secs.clamp(1, 60),
                    };
                }
                CheckerError::Invoke(aws_sdk_lambda::error::DisplayErrorContext(e).to_string())
            })?;
        let payload = out.payload().map(|b| b.as_ref()).unwrap_or_default();
        if out.function_error().is_some() {
            let message = serde_json::from_slice::<serde_json::Value>(payload)
                .ok()
                .and_then(|v| v.get("errorMessage")?.as_str().map(str::to_owned))
                .unwrap_or_default();
            // Lambda's own words for a sandbox killed at its timeout.
            return Ok(if message.contains("timed out") {
                Invocation::TimedOut
            } else {
                Invocation::Died(message)
            });
        }
        let reply = serde_json::from_slice::<serde_json::Value>(payload).unwrap_or_default();
        let Some(answers) = reply.get("answers").and_then(serde_json::Value::as_str) else {
            // The function refused the request itself (a bug on our side, not the check's).
            return Err(CheckerError::Protocol(
                String::from_utf8_lossy(payload).chars().take(300).collect(),
            ));
        };
        let mut outcomes = Vec::with_capacity(end - start);
        for (expected, line) in (start..end).zip(answers.lines()) {
            match parse_answer(line) {
                Some((i, o)) if i == expected => outcomes.push(o),
                _ => return Err(CheckerError::Protocol(line.chars().take(300).collect())),
            }
        }
        if outcomes.len() != end - start {
            return Err(CheckerError::Protocol(format!(
                "{} answers for {} checks",
                outcomes.len(),
                end - start
            )));
        }
        Ok(Invocation::Answered(outcomes))
    }
}

/// The checker event for checks `start..end`: `{"request": "<request line>"}`.
pub fn event(req: &JudgeRequest, start: usize, end: usize) -> Vec<u8> {
    let line = String::from_utf8_lossy(&req.line_for(start, end)).into_owned();
    serde_json::json!({ "request": line })
        .to_string()
        .into_bytes()
}

/// The pass cut into runs of checks whose events Lambda accepts: the whole pass when it
/// fits (the normal case, one round trip), otherwise halves, and so on. Within the
/// contract's limits (three network checks, 2 MB each, a 1 MiB request) every single
/// check fits: a URL check carries its body and not the deliverable.
pub fn batches(req: &JudgeRequest, start: usize, end: usize) -> Vec<(usize, usize, Vec<u8>)> {
    let e = event(req, start, end);
    if e.len() < MAX_INVOKE_PAYLOAD_BYTES || end - start <= 1 {
        return vec![(start, end, e)];
    }
    let mid = start + (end - start) / 2;
    let mut out = batches(req, start, mid);
    out.extend(batches(req, mid, end));
    out
}

#[async_trait::async_trait]
impl Judge for LambdaChecker {
    async fn judge(&self, req: &JudgeRequest) -> Result<Vec<Outcome>, CheckerError> {
        let n = req.check_count();
        let mut outcomes = Vec::with_capacity(n);
        for (start, end, event) in batches(req, 0, n) {
            if event.len() >= MAX_INVOKE_PAYLOAD_BYTES {
                // Cannot happen within the contract's limits (a check carries only what
                // it reads; a test holds the largest legal probe under the limit). Not
                // a verdict on the check: the purchase is voided, nothing is charged.
                return Err(CheckerError::Invoke(format!(
                    "checks {start}..{end} need a {}-byte event, over Lambda's {MAX_INVOKE_PAYLOAD_BYTES}",
                    event.len()
                )));
            }
            let why = match self.invoke_event(event, start, end).await? {
                Invocation::Answered(answered) => {
                    outcomes.extend(answered);
                    continue;
                }
                Invocation::TimedOut => None,
                Invocation::Died(why) => Some(why),
            };
            // A batch of one names its culprit: at the limit it fails; a sandbox that
            // died otherwise (out of memory, a crash of the platform) gets one more try.
            if end - start == 1 {
                outcomes.push(match why {
                    None => timed_out(self.limit),
                    Some(_) => match self.invoke(req, start, end).await? {
                        Invocation::Answered(mut one) => one.remove(0),
                        Invocation::TimedOut => timed_out(self.limit),
                        Invocation::Died(_) => crashed(),
                    },
                });
                continue;
            }
            // Which check killed the sandbox is unknown: each again, alone.
            tracing::warn!(
                why = why.as_deref().unwrap_or("timed out"),
                "the checker function died on a batch; judging its checks one by one"
            );
            for i in start..end {
                outcomes.push(match self.invoke(req, i, i + 1).await? {
                    Invocation::Answered(mut one) => one.remove(0),
                    Invocation::TimedOut => timed_out(self.limit),
                    Invocation::Died(_) => crashed(),
                });
            }
        }
        Ok(outcomes)
    }
}

/// The checker function's handler: judge the request line in this process. The
/// sandbox's timeout is the limit around it; nothing here reaches the network or AWS.
/// A request it cannot read is answered `{"error": ...}` (a function error is kept
/// for a sandbox that died, which the caller blames on the check).
pub fn handle_event(event: &serde_json::Value) -> serde_json::Value {
    let Some(request) = event.get("request").and_then(serde_json::Value::as_str) else {
        return serde_json::json!({ "error": "the event has no \"request\" string" });
    };
    match umpire_checker::judge_line(request) {
        Ok(answers) => serde_json::json!({ "answers": answers }),
        Err(error) => serde_json::json!({ "error": error }),
    }
}
