//! The customer's side of a purchase, as a person runs it: `umpire buy` in its own
//! process, with its own pins and data directory (where the payment it signs is held
//! under its key), shared by its runs, stopped and rerun as a person would.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;

use crate::{TempDir, umpire_bin};

/// One customer of one service, buying one body's verdict.
pub struct Customer {
    pins: TempDir,
    data: TempDir,
    files: TempDir,
    pub base: String,
    pub wallet_key: String,
}

impl Customer {
    /// A customer of the service at `base` (`http://host:port`) paying from the wallet
    /// `wallet_key`, buying `body` (`{"spec", "deliverable"}`).
    pub fn new(base: &str, wallet_key: &str, body: &str) -> Customer {
        let files = TempDir::new("customer-files");
        let body: serde_json::Value = serde_json::from_str(body).expect("body");
        files.write("spec.json", body["spec"].to_string().as_bytes());
        files.write(
            "deliverable.json",
            body["deliverable"].to_string().as_bytes(),
        );
        Customer {
            pins: TempDir::new("customer-pins"),
            data: TempDir::new("customer-data"),
            files,
            base: base.to_owned(),
            wallet_key: wallet_key.to_owned(),
        }
    }

    /// `umpire buy basic`, running (its output piped), under `key` if given.
    pub fn buy(&self, key: Option<&str>) -> Child {
        let spec = self.files.path().join("spec.json");
        let deliverable = self.files.path().join("deliverable.json");
        let mut cmd = Command::new(umpire_bin());
        cmd.args(["buy", "basic", "--base", &self.base])
            .arg("--spec")
            .arg(&spec)
            .arg("--deliverable")
            .arg(&deliverable);
        if let Some(k) = key {
            cmd.args(["--idempotency-key", k]);
        }
        cmd.env("UMPIRE_WALLET_KEY", &self.wallet_key)
            .env("UMPIRE_PIN_DIR", self.pins.path())
            .env("UMPIRE_DATA_DIR", self.data.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run umpire buy")
    }

    /// The payments held for a rerun.
    pub fn held(&self) -> usize {
        std::fs::read_dir(self.data.path().join("payments"))
            .map(|d| d.count())
            .unwrap_or(0)
    }
}

/// Reads `child`'s stderr until a line containing `needle`: the Idempotency-Key it
/// printed, and every line read.
pub fn read_until(child: &mut Child, needle: &str, within: Duration) -> (String, Vec<String>) {
    let stderr = child.stderr.take().expect("stderr");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let started = Instant::now();
    let mut lines = Vec::new();
    loop {
        let left = within.saturating_sub(started.elapsed());
        match rx.recv_timeout(left) {
            Ok(line) => {
                let done = line.contains(needle);
                lines.push(line);
                if done {
                    break;
                }
            }
            Err(_) => panic!("no {needle:?} within {within:?}; umpire buy said: {lines:#?}"),
        }
    }
    let key = lines
        .iter()
        .find_map(|l| l.strip_prefix("Idempotency-Key: "))
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_default()
        .to_owned();
    (key, lines)
}

/// What a finished `umpire buy` printed on stdout, as JSON, its stderr, and its exit
/// code.
pub fn finished(child: Child, within: Duration) -> (i32, serde_json::Value, String) {
    let started = Instant::now();
    let mut child = child;
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            let out = child.wait_with_output().expect("output");
            let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
            let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
            let v = serde_json::from_str(stdout.trim()).unwrap_or(json!(null));
            return (status.code().unwrap_or(-1), v, stderr);
        }
        if started.elapsed() > within {
            let _ = child.kill();
            panic!("umpire buy did not finish within {within:?}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}
