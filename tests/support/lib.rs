//! Helpers for black-box tests: find the `umpire` binary, run it as a server on a
//! free port, speak plain HTTP/1.1 to it, and make scratch directories.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use umpire_core::json::{Value, parse};

pub mod chain;
pub mod cli;
pub mod lambda;
pub mod mirror;
pub mod stack;
pub mod svm;

/// Verifies a signed document with the contract's Python recipe, verbatim
/// (`tests/py/verify_recipe.py`): (verified, everything it printed).
pub fn python_recipe(doc: &Path, keys: &Path, deliverable: &Path) -> (bool, String) {
    recipe_with(&[doc, keys, deliverable])
}

/// The recipe on a document that judged no deliverable (a reputation report).
pub fn python_recipe_signature_only(doc: &Path, keys: &Path) -> (bool, String) {
    recipe_with(&[doc, keys])
}

fn recipe_with(args: &[&Path]) -> (bool, String) {
    let out = Command::new(python())
        .arg(repo_root().join("tests/py/verify_recipe.py"))
        .args(args)
        .output()
        .expect("python3 with the cryptography package (make test installs it)");
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

/// The `umpire` binary: `$UMPIRE_BIN`, else beside this test's `deps/` directory.
pub fn umpire_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("UMPIRE_BIN") {
        return PathBuf::from(p);
    }
    let exe = std::env::current_exe().expect("test executable path");
    let dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("target profile dir");
    let bin = dir.join("umpire");
    assert!(
        bin.exists(),
        "{} is missing: run `cargo build --workspace --bins` first (make test does)",
        bin.display()
    );
    bin
}

/// The contract's prices in USDC base units, written here from the contract rather than
/// taken from the code under test, so a wrong price in the code fails the tests.
/// A rate-limit window for tests that count to a limit: windows are fixed and aligned,
/// so with the contract's minute one turning mid-test would reset the count (a flake
/// seen in faults.rs). A server started with this window starts only when at least
/// [`WINDOW_MARGIN`] of the current hour is left ([`clear_of_window_turn`]), so no test
/// that counts in it sees the hour turn.
pub const HOUR_WINDOW_MS: &str = "3600000";

/// How much of the hour a test counting in [`HOUR_WINDOW_MS`] may take, at most.
pub const WINDOW_MARGIN: Duration = Duration::from_secs(120);

/// Waits, if a server about to start with `env` counts in [`HOUR_WINDOW_MS`] and less
/// than [`WINDOW_MARGIN`] of the hour is left, until the next hour has begun.
fn clear_of_window_turn(env: &[(&str, &str)]) {
    if !env
        .iter()
        .any(|(k, v)| *k == "UMPIRE_RATE_LIMIT_WINDOW_MS" && *v == HOUR_WINDOW_MS)
    {
        return;
    }
    let hour_ms: u64 = HOUR_WINDOW_MS.parse().expect("a number of milliseconds");
    let left = Duration::from_millis(hour_ms - umpire_host::Clock::system().now_ms() % hour_ms);
    if left < WINDOW_MARGIN {
        eprintln!("waiting {left:?} for the rate-limit hour to turn");
        std::thread::sleep(left + Duration::from_millis(500));
    }
}

pub const PRICE_BASIC: u128 = 1_000_000;
pub const PRICE_PROBE: u128 = 2_000_000;
pub const PRICE_SWORN: u128 = 5_000_000;

/// A paid request (`payment` in `PAYMENT-SIGNATURE`, `key` as its Idempotency-Key
/// when given) POSTed as JSON to `path` in a thread of its own, so the test can act
/// while the purchase runs (move funds, execute the authorization, stop the server).
pub fn pay_in_background(
    addr: SocketAddr,
    path: &str,
    body: &str,
    payment: &str,
    key: Option<&str>,
) -> std::thread::JoinHandle<Reply> {
    let (path, body, payment) = (path.to_owned(), body.to_owned(), payment.to_owned());
    let key = key.map(str::to_owned);
    std::thread::spawn(move || {
        let mut headers = vec![
            ("Content-Type", "application/json"),
            ("PAYMENT-SIGNATURE", payment.as_str()),
        ];
        if let Some(key) = &key {
            headers.push(("Idempotency-Key", key.as_str()));
        }
        request(addr, "POST", &path, &headers, Some(body.as_bytes()))
    })
}

/// A test whose scenario cannot run here (a tool missing, a privilege not granted):
/// it fails, unless the run names it in `UMPIRE_ALLOWED_SKIPS` (comma-separated; `make
/// test` sets it only where the tool is known missing), in which case the skip is
/// written to `UMPIRE_SKIPS_FILE` for the run's summary and the caller returns. A skip
/// never passes silently.
pub fn cannot_run(name: &str, why: &str) {
    let allowed = std::env::var("UMPIRE_ALLOWED_SKIPS").unwrap_or_default();
    if !allowed.split(',').any(|n| n.trim() == name) {
        panic!(
            "{name} cannot run its scenario: {why}. A run may skip it only by naming it in UMPIRE_ALLOWED_SKIPS (make test does where the tool is known missing)"
        );
    }
    if let Err(e) = append_line("UMPIRE_SKIPS_FILE", &format!("allowed skip: {name}: {why}")) {
        panic!("{name}: could not record its allowed skip: {e}");
    }
}

/// A figure a test measured that the run's summary shows (a goal the test reports
/// without asserting it, such as the worst hostile body's CPU under the run's load):
/// appended to `UMPIRE_MEASURES_FILE` when the run names one.
pub fn record_measure(line: &str) {
    if let Err(e) = append_line("UMPIRE_MEASURES_FILE", &format!("measured: {line}")) {
        panic!("could not record a measure: {e}");
    }
}

/// Appends `line` to the file the environment variable `var` names, if it names one
/// (tests running side by side append to it; the run's summary reads it).
fn append_line(var: &str, line: &str) -> std::io::Result<()> {
    use std::io::Write as _;
    let Ok(file) = std::env::var(var) else {
        return Ok(());
    };
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&file)
        .and_then(|mut f| f.write_all(format!("{line}\n").as_bytes()))
        .map_err(|e| std::io::Error::new(e.kind(), format!("{var}={file}: {e}")))
}

pub fn python() -> String {
    std::env::var("UMPIRE_PYTHON").unwrap_or_else(|_| "python3".into())
}

/// The directory of the crate whose test is running, read at run time: a test binary
/// cargo reuses from another checkout's build (a shared target directory, identical
/// sources) carries that checkout's path in `env!`, and the support crate serves tests
/// of other crates too.
pub fn crate_dir() -> PathBuf {
    PathBuf::from(
        std::env::var("CARGO_MANIFEST_DIR")
            .unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").to_owned()),
    )
}

/// The repository root: the nearest directory holding Cargo.lock above [`crate_dir`].
pub fn repo_root() -> PathBuf {
    let start = crate_dir();
    start
        .ancestors()
        .find(|d| d.join("Cargo.lock").exists())
        .unwrap_or(&start)
        .to_owned()
}

const LOAD_TEMPLATE: &str = r#"
import json, sys
from cfnlint.decode import decode
tpl, errors = decode(sys.argv[1])
if errors:
    sys.exit("template does not load: %s" % errors)
print(json.dumps(tpl[sys.argv[2]]))
"#;

/// `template.yaml`'s resources, read with cfn-lint's own loader (it knows the
/// CloudFormation tags such as `!GetAtt`), as JSON.
pub fn template_resources() -> Value {
    template_section("Resources")
}

/// One top-level section of `template.yaml` (Resources, Globals, Parameters...).
pub fn template_section(section: &str) -> Value {
    let out = Command::new(python())
        .args(["-c", LOAD_TEMPLATE])
        .arg(repo_root().join("template.yaml"))
        .arg(section)
        .output()
        .expect("python with cfn-lint (make test installs it)");
    assert!(
        out.status.success(),
        "cannot read template.yaml: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    parse(&out.stdout).expect("resources JSON")
}

/// The string at `path` inside `v`, if every step exists.
pub fn str_at<'a>(v: &'a Value, path: &[&str]) -> Option<&'a str> {
    let mut cur = v;
    for p in path {
        cur = cur.get(p)?;
    }
    cur.as_str()
}

/// A scratch directory removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        let name = format!(
            "umpire-{tag}-{}",
            umpire_host::random_id("t").trim_start_matches("t_")
        );
        let p = std::env::temp_dir().join(name);
        std::fs::create_dir_all(&p).expect("create temp dir");
        TempDir(p)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }

    pub fn write(&self, name: &str, contents: &[u8]) -> PathBuf {
        let p = self.0.join(name);
        std::fs::write(&p, contents).expect("write temp file");
        p
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        if self.0.as_os_str().is_empty() {
            return;
        }
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The app on 127.0.0.1 and a free port, stopped on drop: `umpire serve` in a process
/// of its own when the test sets its environment, logs or crashes it, and otherwise
/// the same app (`umpire_server`) inside the test process.
pub struct Server {
    pub addr: SocketAddr,
    runner: Runner,
    pub data: TempDir,
}

enum Runner {
    Process(Child),
    InProcess {
        stop: Option<tokio::sync::oneshot::Sender<()>>,
        thread: Option<std::thread::JoinHandle<()>>,
    },
}

impl Server {
    pub fn start() -> Server {
        Server::start_with(&[])
    }

    pub fn start_with(env: &[(&str, &str)]) -> Server {
        Server::start_in(TempDir::new("serve"), env)
    }

    /// Serves an existing data directory (seeded by the test).
    pub fn start_in(data: TempDir, env: &[(&str, &str)]) -> Server {
        if env.is_empty() {
            Server::in_process(data)
        } else {
            Server::spawn(data, env, Stdio::inherit())
        }
    }

    /// The app in this process, configured as `umpire serve` is with no environment
    /// (rate limits off, as for every test not about them), on the data directory.
    fn in_process(data: TempDir) -> Server {
        Server::in_process_with(
            data,
            umpire_api::Config {
                rate_limits: None,
                ..umpire_api::Config::default()
            },
        )
    }

    /// The app in this process with `config` (a test's own limits, or a stopped clock
    /// its windows follow), on the data directory.
    pub fn in_process_with(data: TempDir, config: umpire_api::Config) -> Server {
        let dir = data.path().to_owned();
        let (ready_tx, ready) = std::sync::mpsc::channel();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .expect("tokio runtime");
            rt.block_on(async move {
                let checker = umpire_checker::PoolConfig {
                    program: umpire_bin(),
                    args: vec![umpire_checker::WORKER_ARG.to_owned()],
                    check_limit: config.check_limit,
                    max_workers: 4,
                };
                let (state, store) =
                    umpire_server::embedded_state(config, &dir, true, Some(checker))
                        .await
                        .expect("the in-process app's state");
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                    .await
                    .expect("bind");
                let _ = ready_tx.send(listener.local_addr().expect("addr"));
                let shutdown = async {
                    let _ = stopped.await;
                };
                umpire_server::run(listener, std::sync::Arc::new(state), store, shutdown)
                    .await
                    .expect("serve");
            });
        });
        let addr = ready
            .recv_timeout(Duration::from_secs(60))
            .expect("the in-process app did not start");
        Server {
            addr,
            runner: Runner::InProcess {
                stop: Some(stop),
                thread: Some(thread),
            },
            data,
        }
    }

    /// Like [`Server::start_with`], logging at debug level into `serve.log` in its data
    /// directory (read with [`Server::logs`]).
    pub fn start_logged(env: &[(&str, &str)]) -> Server {
        let data = TempDir::new("serve");
        let log = std::fs::File::create(data.path().join("serve.log")).expect("log file");
        let mut all = vec![("RUST_LOG", "debug")];
        all.extend_from_slice(env);
        Server::spawn(data, &all, Stdio::from(log))
    }

    /// Kills the process with SIGKILL (no shutdown of any kind) and hands back its
    /// data directory, to start another server on it.
    pub fn crash(mut self) -> TempDir {
        let Runner::Process(child) = &mut self.runner else {
            panic!("only a server in its own process can be crashed (start it with an env)");
        };
        let _ = child.kill();
        let _ = child.wait();
        std::mem::replace(&mut self.data, TempDir(PathBuf::new()))
    }

    /// Sends the server's process `signal` (`INT`, as Ctrl-C does; `TERM`, as a service
    /// manager does).
    pub fn signal(&self, signal: &str) {
        let pid = self.pid();
        let sent = Command::new("kill")
            .args([&format!("-{signal}"), &pid.to_string()])
            .status()
            .expect("kill");
        assert!(sent.success(), "kill -{signal} {pid}");
    }

    /// Whether the server's process has ended (gone, or a zombie left for our wait).
    pub fn has_ended(&self) -> bool {
        let stat =
            std::fs::read_to_string(format!("/proc/{}/stat", self.pid())).unwrap_or_default();
        stat.is_empty() || stat.rsplit(") ").next().is_some_and(|s| s.starts_with('Z'))
    }

    fn pid(&self) -> u32 {
        match &self.runner {
            Runner::Process(child) => child.id(),
            Runner::InProcess { .. } => {
                panic!("only a server in its own process has a pid (start it with an env)")
            }
        }
    }

    /// What the server logged so far (only for [`Server::start_logged`]).
    pub fn logs(&self) -> String {
        std::fs::read_to_string(self.data.path().join("serve.log")).unwrap_or_default()
    }

    fn spawn(data: TempDir, env: &[(&str, &str)], stderr: Stdio) -> Server {
        Server::spawn_bin(&umpire_bin(), data, env, stderr)
    }

    /// `umpire serve` from the binary `bin` (a release build, say) in its own process.
    pub fn start_bin(bin: &Path, env: &[(&str, &str)]) -> Server {
        Server::spawn_bin(bin, TempDir::new("serve"), env, Stdio::inherit())
    }

    /// CPU time (user + system, every thread, finished ones included) the server's
    /// process has used so far, from `/proc/<pid>/stat`; only for a server in its own
    /// process. Its resolution is the kernel's clock tick (10 ms at 100 Hz).
    pub fn cpu_time(&self) -> Duration {
        let Runner::Process(child) = &self.runner else {
            panic!("only a server in its own process has its own CPU time");
        };
        process_cpu_time(child.id())
    }

    fn spawn_bin(bin: &Path, data: TempDir, env: &[(&str, &str)], stderr: Stdio) -> Server {
        clear_of_window_turn(env);
        // A server whose issuer is on this machine listens where its issuer says (a
        // sign-in is bound to the issuer's host and port); any other on a free port.
        let addr = env
            .iter()
            .find(|(k, _)| *k == "UMPIRE_ISSUER")
            .and_then(|(_, v)| v.strip_prefix("http://"))
            .filter(|a| a.starts_with("127.0.0.1:"))
            .unwrap_or("127.0.0.1:0");
        let mut cmd = Command::new(bin);
        cmd.args(["serve", "--addr", addr, "--data-dir"])
            .arg(data.path())
            .env("RUST_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(stderr);
        // Tests not about rate limits must not trip them; those that are say so with
        // UMPIRE_RATE_LIMITS (and set the limits they count in). Every bucket raised
        // rather than limits off: a release build refuses the switch.
        if !env.iter().any(|(k, _)| *k == "UMPIRE_RATE_LIMITS") {
            for (bucket, _) in umpire_core::product::RATE_LIMITS {
                cmd.env(
                    format!("UMPIRE_RATE_LIMIT_{}", bucket.to_ascii_uppercase()),
                    "1000000000",
                );
            }
        }
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("start umpire serve");
        let stdout = child.stdout.take().expect("stdout");
        let mut line = String::new();
        BufReader::new(stdout)
            .read_line(&mut line)
            .expect("read the listening line");
        let addr = line
            .trim()
            .strip_prefix("umpire listening on http://")
            .unwrap_or_else(|| panic!("unexpected first line from umpire serve: {line:?}"))
            .parse()
            .expect("socket address");
        Server {
            addr,
            runner: Runner::Process(child),
            data,
        }
    }

    pub fn get(&self, path: &str) -> Reply {
        request(self.addr, "GET", path, &[], None)
    }

    /// `GET /v1/verdicts/{id}` with its one-time secret.
    pub fn verdict_status(&self, id: &str, secret: &str) -> Reply {
        let bearer = format!("Bearer {secret}");
        request(
            self.addr,
            "GET",
            &format!("/v1/verdicts/{id}"),
            &[("Authorization", &bearer)],
            None,
        )
    }

    /// `POST /v1/verdicts/{tier}` as an x402 client sends it: the JSON body, the v2
    /// payment header and an Idempotency-Key.
    pub fn buy(&self, tier: &str, body: &str, payment: &str, key: &str) -> Reply {
        post_paid(
            self.addr,
            &format!("/v1/verdicts/{tier}"),
            body,
            payment,
            key,
        )
    }

    /// `POST /v1/validate` (free).
    pub fn validate(&self, body: &str) -> Reply {
        self.post_json("/v1/validate", body)
    }

    /// `POST /v1/feedback` (free).
    pub fn feedback(&self, body: &str) -> Reply {
        self.post_json("/v1/feedback", body)
    }

    pub fn post_json(&self, path: &str, body: &str) -> Reply {
        request(
            self.addr,
            "POST",
            path,
            &[("Content-Type", "application/json")],
            Some(body.as_bytes()),
        )
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        match &mut self.runner {
            Runner::Process(child) => {
                let _ = child.kill();
                let _ = child.wait();
            }
            Runner::InProcess { stop, thread } => {
                if let Some(stop) = stop.take() {
                    let _ = stop.send(());
                }
                // Connections still open end with the runtime.
                if let Some(thread) = thread.take() {
                    let _ = thread.join();
                }
            }
        }
    }
}

/// User + system CPU time of process `pid`, from `/proc/<pid>/stat` (fields 14 and 15,
/// counted after the command name, which may itself hold spaces and parentheses).
pub fn process_cpu_time(pid: u32) -> Duration {
    static TICKS_PER_SECOND: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    let hz = *TICKS_PER_SECOND.get_or_init(|| {
        Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
            .unwrap_or(100)
    });
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("/proc/<pid>/stat");
    let after_name = &stat[stat.rfind(')').expect("a command name") + 2..];
    let fields: Vec<u64> = after_name
        .split(' ')
        .map(|f| f.parse().unwrap_or(0))
        .collect();
    // After the name: state is field 3, so utime (14) and stime (15) are at 11 and 12.
    let ticks = fields[11] + fields[12];
    Duration::from_micros(ticks * 1_000_000 / hz)
}

#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Reply {
    pub fn json(&self) -> Value {
        parse(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&self.body)))
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The message of an error body.
    pub fn error_message(&self) -> String {
        self.json()
            .get("error")
            .and_then(|e| e.get("message"))
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned()
    }

    /// The error code of an error body.
    pub fn error_code(&self) -> String {
        self.json()
            .get("error")
            .and_then(|e| e.get("code"))
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned()
    }
}

/// A paid POST as an x402 client sends it: a JSON body, the v2 payment header and an
/// Idempotency-Key.
pub fn post_paid(addr: SocketAddr, path: &str, body: &str, payment: &str, key: &str) -> Reply {
    request(
        addr,
        "POST",
        path,
        &[
            ("Content-Type", "application/json"),
            ("PAYMENT-SIGNATURE", payment),
            ("Idempotency-Key", key),
        ],
        Some(body.as_bytes()),
    )
}

/// One HTTP/1.1 exchange with `Connection: close`.
pub fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&[u8]>,
) -> Reply {
    let mut s = TcpStream::connect(addr).expect("connect");
    // Long enough for a purchase whose store writes all wait out their busy timeouts.
    s.set_read_timeout(Some(Duration::from_secs(90)))
        .expect("timeout");
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    let body = body.unwrap_or_default();
    req.push_str(&format!("Content-Length: {}\r\n\r\n", body.len()));
    s.write_all(req.as_bytes()).expect("send head");
    // The server may answer (413) before reading a huge body; a broken pipe then is fine.
    let _ = s.write_all(body);
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw);
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("no HTTP head in {:?}", String::from_utf8_lossy(&raw)));
    let head = String::from_utf8_lossy(&raw[..split]).to_string();
    let mut lines = head.split("\r\n");
    let status: u16 = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|c| c.parse().ok())
        .expect("status line");
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
        .collect();
    let mut body = raw[split + 4..].to_vec();
    let chunked = headers
        .iter()
        .any(|(k, v)| k.eq_ignore_ascii_case("transfer-encoding") && v.contains("chunked"));
    if chunked {
        body = dechunk(&body);
    }
    Reply {
        status,
        headers,
        body,
    }
}

fn dechunk(mut b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let Some(eol) = b.windows(2).position(|w| w == b"\r\n") else {
            return out;
        };
        let size =
            usize::from_str_radix(String::from_utf8_lossy(&b[..eol]).trim(), 16).unwrap_or(0);
        if size == 0 {
            return out;
        }
        out.extend_from_slice(&b[eol + 2..eol + 2 + size]);
        b = &b[eol + 2 + size + 2..];
    }
}

/// A tiny HTTP server on 127.0.0.1 that answers every request with the same response,
/// for as long as the test process lives: a stand-in for a page, an API or a feed.
pub fn serve_fixed(status: &'static str, content_type: &'static str, body: Vec<u8>) -> SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    std::thread::spawn(move || {
        for mut conn in listener.incoming().flatten() {
            let mut buf = [0u8; 8192];
            let _ = conn.read(&mut buf);
            let _ = write!(
                conn,
                "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            );
            let _ = conn.write_all(&body);
        }
    });
    addr
}

/// One request a [`Scripted`] server received.
#[derive(Debug, Clone)]
pub struct Received {
    pub method: String,
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Received {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// An HTTP server on 127.0.0.1 that answers from a script (the n-th request gets the
/// n-th answer, the last answer repeats) and records every request: a page whose
/// content changes, or a webhook receiver that fails a few times.
pub struct Scripted {
    pub addr: SocketAddr,
    received: std::sync::Arc<std::sync::Mutex<Vec<Received>>>,
}

impl Scripted {
    pub fn start(script: Vec<(u16, &'static str)>) -> Scripted {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        let received = std::sync::Arc::new(std::sync::Mutex::new(Vec::<Received>::new()));
        let log = received.clone();
        std::thread::spawn(move || {
            for mut conn in listener.incoming().flatten() {
                let Some(req) = read_request(&mut conn) else {
                    continue;
                };
                let n = {
                    let mut l = log.lock().unwrap_or_else(|p| p.into_inner());
                    l.push(req);
                    l.len()
                };
                let (status, body) = script[(n - 1).min(script.len() - 1)];
                let _ = write!(
                    conn,
                    "HTTP/1.1 {status} X\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
            }
        });
        Scripted { addr, received }
    }

    pub fn received(&self) -> Vec<Received> {
        self.received
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

pub fn read_request(conn: &mut TcpStream) -> Option<Received> {
    conn.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    let mut raw = Vec::new();
    let mut buf = [0u8; 8192];
    let head_end = loop {
        let n = conn.read(&mut buf).ok()?;
        if n == 0 {
            return None;
        }
        raw.extend_from_slice(&buf[..n]);
        if let Some(p) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
            break p;
        }
    };
    let head = String::from_utf8_lossy(&raw[..head_end]).to_string();
    let mut lines = head.split("\r\n");
    let mut first = lines.next()?.split(' ');
    let method = first.next()?.to_owned();
    let path = first.next()?.to_owned();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
        .collect();
    let len: usize = headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    let mut body = raw[head_end + 4..].to_vec();
    while body.len() < len {
        let n = conn.read(&mut buf).ok()?;
        if n == 0 {
            break;
        }
        body.extend_from_slice(&buf[..n]);
    }
    Some(Received {
        method,
        path,
        headers,
        body,
    })
}

/// An HTTP server on 127.0.0.1 that holds the first request it gets until the test
/// releases it (later ones are answered at once): a test can act at the exact moment
/// the service is fetching, instead of sleeping and hoping it got there.
pub struct Held {
    pub addr: SocketAddr,
    arrived: std::sync::mpsc::Receiver<()>,
    release: std::sync::mpsc::Sender<()>,
}

impl Held {
    /// Answers `200` with `body` (text/plain), the first time only once released.
    pub fn start(body: &'static str) -> Held {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        let (arrived_tx, arrived) = std::sync::mpsc::channel();
        let (release, release_rx) = std::sync::mpsc::channel::<()>();
        std::thread::spawn(move || {
            let mut first = true;
            for mut conn in listener.incoming().flatten() {
                if read_request(&mut conn).is_none() {
                    continue;
                }
                if first {
                    first = false;
                    let _ = arrived_tx.send(());
                    let _ = release_rx.recv();
                }
                let _ = write!(
                    conn,
                    "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
            }
        });
        Held {
            addr,
            arrived,
            release,
        }
    }

    /// Blocks until the first request is being held.
    pub fn wait_for_request(&self, within: Duration) {
        self.arrived
            .recv_timeout(within)
            .expect("the held server was never asked");
    }

    /// Lets the held request (and every later one) be answered.
    pub fn release(&self) {
        let _ = self.release.send(());
    }

    /// Whether any request has arrived so far.
    pub fn was_asked(&self) -> bool {
        self.arrived.try_recv().is_ok()
    }
}

/// Percent-encodes everything but unreserved characters, for query strings.
pub fn urlencode(s: &str) -> String {
    umpire_core::urlenc::component(s)
}

/// Runs `umpire` with arguments, returning (exit code, stdout, stderr).
pub fn run_umpire(args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    let mut cmd = Command::new(umpire_bin());
    cmd.args(args);
    // Pins of its own, unless the test chose: servers of one run reuse ports with
    // other keys, and a pin left by another server would (rightly) refuse to pay.
    let pins = TempDir::new("pins");
    if !env.iter().any(|(k, _)| k.starts_with("UMPIRE_PIN")) {
        cmd.env("UMPIRE_PIN_DIR", pins.path());
    }
    // A data directory of its own too (payments held under their keys), unless the
    // test chose one to share between runs.
    let data = TempDir::new("cli-data");
    if !env.iter().any(|(k, _)| *k == "UMPIRE_DATA_DIR") {
        cmd.env("UMPIRE_DATA_DIR", data.path());
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run umpire");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The JSON inside an x402 header (standard base64).
pub fn decode_b64_json(s: &str) -> serde_json::Value {
    use base64::Engine as _;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(s)
        .expect("standard base64");
    serde_json::from_slice(&bytes).expect("JSON")
}

/// The signed document verifies with the contract's Python recipe, against the
/// server's published keys and the deliverable.
pub fn assert_recipe_verifies(server: &Server, document: &Value, deliverable: &str) {
    let tmp = TempDir::new("paid-recipe");
    let doc = tmp.write("doc.json", &document.to_canonical_vec());
    let keys = tmp.write(
        "keys.json",
        &server.get("/.well-known/umpire-key.json").body,
    );
    let d = tmp.write("deliverable.json", deliverable.as_bytes());
    let (ok, said) = python_recipe(&doc, &keys, &d);
    assert!(ok, "the recipe rejected a paid document: {said}");
}
