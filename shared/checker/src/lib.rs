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
//! request  `{"spec": <normalized spec>, "deliverable": {"text","json"}, "fetched": [<body or null> per check], "start": k}`
//! answers  `{"index": i, "passed": bool, "reason": "..."}` for i = k..n, in order.

mod pool;
mod protocol;

pub use pool::{CheckerError, CheckerPool, DEFAULT_CHECK_LIMIT, PoolConfig};
pub use protocol::{JudgeRequest, worker_loop, worker_main};

/// The argument that makes a binary act as a check worker.
pub const WORKER_ARG: &str = "check-worker";
