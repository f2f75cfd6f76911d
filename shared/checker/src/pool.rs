//! The parent side: a warm pool of worker processes and the per-check deadline.

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Mutex;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::sync::Semaphore;
use umpire_core::eval::Outcome;

use crate::protocol::{JudgeRequest, parse_answer};

/// Default hard limit for one check in the worker.
pub const DEFAULT_CHECK_LIMIT: Duration = Duration::from_secs(2);

#[derive(Debug, Clone)]
pub struct PoolConfig {
    /// The worker executable and its arguments (e.g. `umpire check-worker`).
    pub program: PathBuf,
    pub args: Vec<String>,
    /// Wall-clock limit for one check; the worker is killed when it passes.
    pub check_limit: Duration,
    /// Most workers alive at once (concurrent passes beyond this wait their turn).
    pub max_workers: usize,
}

impl PoolConfig {
    /// Workers are this very binary re-run with [`crate::WORKER_ARG`].
    pub fn current_exe(check_limit: Duration) -> std::io::Result<PoolConfig> {
        Ok(PoolConfig::program(std::env::current_exe()?, check_limit))
    }

    /// Workers are the executable `name` beside this one, run with
    /// [`crate::WORKER_ARG`]: a binary that only sends work to the checker need not
    /// carry the checks' code itself.
    pub fn sibling(name: &str, check_limit: Duration) -> std::io::Result<PoolConfig> {
        let program = std::env::current_exe()?
            .with_file_name(format!("{name}{}", std::env::consts::EXE_SUFFIX));
        Ok(PoolConfig::program(program, check_limit))
    }

    fn program(program: PathBuf, check_limit: Duration) -> PoolConfig {
        PoolConfig {
            program,
            args: vec![crate::WORKER_ARG.to_owned()],
            check_limit,
            max_workers: std::thread::available_parallelism()
                .map(|n| n.get() * 2)
                .unwrap_or(4),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum CheckerError {
    #[error("could not start the check worker {program}: {source}")]
    Spawn {
        program: String,
        source: std::io::Error,
    },
    #[error("the check worker keeps failing before it answers")]
    Unavailable,
    #[error("the check worker refused the request: {0}")]
    Protocol(String),
    #[error("the checker function could not be invoked: {0}")]
    Invoke(String),
    /// Refused for want of concurrency (Lambda's 429: the account's quota or the
    /// checker's reserved concurrency is used up); worth retrying in `retry_after_secs`.
    #[error("the checker function is at its concurrency limit")]
    Busy { retry_after_secs: u64 },
}

struct Worker {
    child: Child,
    stdin: ChildStdin,
    lines: Lines<BufReader<ChildStdout>>,
}

impl Worker {
    async fn kill(mut self) {
        let _ = self.child.kill().await;
    }
}

pub struct CheckerPool {
    config: PoolConfig,
    idle: Mutex<Vec<Worker>>,
    slots: Semaphore,
}

enum Step {
    Answered(Outcome),
    /// The worker is gone; the check at hand is recorded with this outcome.
    Lost(Outcome),
}

impl CheckerPool {
    pub fn new(config: PoolConfig) -> CheckerPool {
        let slots = Semaphore::new(config.max_workers.max(1));
        CheckerPool {
            config,
            idle: Mutex::new(Vec::new()),
            slots,
        }
    }

    /// Starts `n` workers ahead of the first request and proves they judge correctly,
    /// so a broken worker binary stops the service at start instead of failing every
    /// check of paying customers.
    pub async fn prewarm(&self, n: usize) -> Result<(), CheckerError> {
        let probe = JudgeRequest {
            spec: umpire_core::json::parse_str(
                r#"{"checks":[{"type":"length","unit":"chars","min":1,"max":1}]}"#,
            )
            .map_err(|e| CheckerError::Protocol(e.to_string()))?,
            deliverable: umpire_core::spec::Deliverable {
                text: Some("x".into()),
                json: None,
            },
            fetched: vec![None],
        };
        let mut started = Vec::new();
        for _ in 0..n.clamp(1, self.config.max_workers) {
            started.push(self.spawn()?);
        }
        self.idle_pool().extend(started);
        match self.judge(&probe).await?.as_slice() {
            [o] if o.passed => Ok(()),
            other => Err(CheckerError::Protocol(format!(
                "self-test failed: {other:?}"
            ))),
        }
    }

    fn idle_pool(&self) -> std::sync::MutexGuard<'_, Vec<Worker>> {
        // A poisoned lock only means another request panicked mid-push; the Vec is intact.
        self.idle.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn spawn(&self) -> Result<Worker, CheckerError> {
        let mut child = Command::new(&self.config.program)
            .args(&self.config.args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .map_err(|source| CheckerError::Spawn {
                program: self.config.program.display().to_string(),
                source,
            })?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return Err(CheckerError::Unavailable);
        };
        Ok(Worker {
            child,
            stdin,
            lines: BufReader::new(stdout).lines(),
        })
    }

    fn take(&self) -> Result<Worker, CheckerError> {
        if let Some(w) = self.idle_pool().pop() {
            return Ok(w);
        }
        self.spawn()
    }

    /// Judges every check of one pass. Each check gets the full limit; a check that
    /// overruns or crashes the worker fails alone, and the rest go on in a new worker.
    pub async fn judge(&self, req: &JudgeRequest) -> Result<Vec<Outcome>, CheckerError> {
        let n = req.check_count();
        let _slot = self
            .slots
            .acquire()
            .await
            .map_err(|_| CheckerError::Unavailable)?;
        let mut outcomes: Vec<Outcome> = Vec::with_capacity(n);
        // Workers that cannot even take the request: a broken binary, not a hostile check.
        let mut silent_deaths = 0;
        while outcomes.len() < n {
            let start = outcomes.len();
            let mut worker = self.take()?;
            if worker.stdin.write_all(&req.line(start)).await.is_err()
                || worker.stdin.flush().await.is_err()
            {
                worker.kill().await;
                silent_deaths += 1;
                if silent_deaths > 2 {
                    return Err(CheckerError::Unavailable);
                }
                continue;
            }
            let mut alive = true;
            for i in start..n {
                match self.next_answer(&mut worker, i).await? {
                    Step::Answered(o) => outcomes.push(o),
                    Step::Lost(o) => {
                        outcomes.push(o);
                        alive = false;
                        break;
                    }
                }
            }
            if alive {
                self.idle_pool().push(worker);
            } else {
                worker.kill().await;
            }
        }
        Ok(outcomes)
    }

    async fn next_answer(&self, worker: &mut Worker, index: usize) -> Result<Step, CheckerError> {
        let limit = self.config.check_limit;
        match tokio::time::timeout(limit, worker.lines.next_line()).await {
            Err(_elapsed) => Ok(Step::Lost(crate::timed_out(limit))),
            Ok(Ok(Some(line))) => match parse_answer(&line) {
                Some((i, o)) if i == index => Ok(Step::Answered(o)),
                _ => Err(CheckerError::Protocol(line.chars().take(300).collect())),
            },
            Ok(Ok(None) | Err(_)) => Ok(Step::Lost(crate::crashed())),
        }
    }
}
