//! A hostile mirror of a service (tests/js/hostile_mirror.mjs): it forwards every
//! request to the genuine service and rewrites the paid 402 as its mode says, and logs
//! every request that carried a payment.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

use serde_json::Value;

use crate::{TempDir, repo_root};

/// A hostile mirror of `upstream` (tests/js/hostile_mirror.mjs), stopped on drop.
pub struct Mirror {
    child: Child,
    pub base: String,
    log: TempDir,
}

impl Mirror {
    pub fn start(upstream: &str, mode: &str) -> Mirror {
        let log = TempDir::new("mirror");
        let mut child = Command::new("node")
            .arg(repo_root().join("tests/js/hostile_mirror.mjs"))
            .args(["--upstream", upstream, "--mode", mode, "--log"])
            .arg(log.path().join("paid.log"))
            .current_dir(repo_root())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start the mirror");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("the mirror's port line");
        let v: Value = serde_json::from_str(line.trim()).expect("port line");
        Mirror {
            child,
            base: format!("http://127.0.0.1:{}", v["port"]),
            log,
        }
    }

    /// The requests that carried a payment through the mirror.
    pub fn payments_seen(&self) -> usize {
        std::fs::read_to_string(self.log.path().join("paid.log"))
            .map(|t| t.lines().count())
            .unwrap_or(0)
    }
}

impl Drop for Mirror {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
