//! A Lambda function run by `infra/local/lambda_emulator.py`: the Invoke and Runtime
//! APIs on a free loopback port, with the function's timeout enforced by killing its
//! sandbox, as AWS does. Stopped by PID on drop.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::{TempDir, python, repo_root, request};

pub struct LambdaEmulator {
    child: Child,
    pub addr: std::net::SocketAddr,
    _dir: TempDir,
}

impl LambdaEmulator {
    /// Runs `bootstrap` as the function `name` with a timeout of `timeout`.
    pub fn start(name: &str, bootstrap: &Path, timeout: Duration, env: &[(&str, &str)]) -> Self {
        let dir = TempDir::new("lambda");
        let port_file = dir.path().join("port");
        let child = Command::new(python())
            .arg(repo_root().join("infra/local/lambda_emulator.py"))
            .args(["--name", name, "--bootstrap"])
            .arg(bootstrap)
            .args(["--timeout", &format!("{:.3}", timeout.as_secs_f64())])
            .arg("--port-file")
            .arg(&port_file)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .spawn()
            .expect("start the Lambda emulator (python3)");
        let started = Instant::now();
        let port: u16 = loop {
            if let Ok(p) = std::fs::read_to_string(&port_file)
                && let Ok(p) = p.trim().parse()
            {
                break p;
            }
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "the Lambda emulator did not start"
            );
            std::thread::sleep(Duration::from_millis(50));
        };
        LambdaEmulator {
            child,
            addr: ([127, 0, 0, 1], port).into(),
            _dir: dir,
        }
    }

    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// How many sandboxes were killed at the timeout so far.
    pub fn kills(&self) -> u64 {
        self.stat("kills")
    }

    /// How many invocations reached the function so far (refused payloads do not).
    pub fn invocations(&self) -> u64 {
        self.stat("invocations")
    }

    fn stat(&self, name: &str) -> u64 {
        let r = request(self.addr, "GET", "/stats", &[], None);
        r.json()
            .get(name)
            .and_then(umpire_core::Value::as_u64)
            .unwrap_or(0)
    }
}

impl Drop for LambdaEmulator {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .arg(self.child.id().to_string())
            .status();
        let _ = self.child.wait();
    }
}
