//! Checks run in an isolated worker process with a hard wall-clock limit per check.
//!
//! A thread cannot be killed, and fancy-regex's backtrack limit bounds steps, not time,
//! so the only hard limit is a process boundary: the worker is a child process
//! (`umpire check-worker`, or any binary that calls [`worker_main`]) speaking JSON
//! lines over stdin/stdout. When a check overruns, the parent kills the worker, records
//! that check as failed at the limit, and carries on with the next check in a fresh
//! worker. In AWS the same protocol runs in the checker Lambda, whose own timeout is
//! the hard limit.
//!
//! Protocol (one JSON value per line, stable JSON, so exact numbers survive):
//! request  `{"protocol": 2, "spec": <normalized spec>, "deliverable": {"text","json"}, "fetched": [{"status","body_sha256","truncated"} or null per check], "bodies": {"<sha256>": "<base64>"}, "start": k, "end": e}`
//!          (only what checks k..e read: each body once, text and json only if read;
//!          a request of another protocol, or missing a body, is refused)
//! answers  `{"index": i, "passed": bool, "reason": "..."}` for i = k..e (e defaults to n), in order.

mod pool;
mod protocol;

pub use pool::{CheckerError, CheckerPool, DEFAULT_CHECK_LIMIT, PoolConfig};
pub use protocol::{
    JudgeRequest, PROTOCOL_MISMATCH, judge_line, parse_answer, worker_loop, worker_main,
};

use umpire_core::eval::Outcome;

/// Whatever runs one pass's checks in isolation: a pool of local worker processes, or
/// the checker Lambda.
#[async_trait::async_trait]
pub trait Judge: Send + Sync {
    /// One outcome per check, in order; a check that overruns its limit or crashes its
    /// sandbox fails alone.
    async fn judge(&self, req: &JudgeRequest) -> Result<Vec<Outcome>, CheckerError>;
}

#[async_trait::async_trait]
impl Judge for CheckerPool {
    async fn judge(&self, req: &JudgeRequest) -> Result<Vec<Outcome>, CheckerError> {
        CheckerPool::judge(self, req).await
    }
}

/// The outcome of a check whose sandbox was killed at the time limit.
pub fn timed_out(limit: std::time::Duration) -> Outcome {
    Outcome {
        passed: false,
        reason: format!(
            "stopped at the {} ms time limit of the isolated checker; the check fails",
            limit.as_millis()
        ),
    }
}

/// The outcome of a check whose sandbox died while running it.
pub fn crashed() -> Outcome {
    Outcome {
        passed: false,
        reason: "the isolated checker crashed while running this check; the check fails".into(),
    }
}

/// The argument that makes a binary act as a check worker.
pub const WORKER_ARG: &str = "check-worker";
