//! A function as it ships: the release build of a bootstrap (the `fast` profile, which
//! inherits `release`, built without the `test-switches` feature as every deploy is),
//! started with each variable only a local run or a test may set. Each stops the cold
//! start with the variable's name, before any AWS call and before the keyless first
//! deploy's answer. Would catch: a refusal compiled only into test builds, a seed or
//! validator key in the clear honoured by a deployed function (readable by anyone with
//! lambda:GetFunctionConfiguration), a paying function judging in its own process when
//! its checker is not named, or a weakening switch read by a shipped function.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Where the release bootstrap `make test` builds is (`cargo build --profile fast -p
/// umpire-functions --bin verdicts`, without the test switches, as every shipped build:
/// one function, the one that signs, judges and takes payments; every function runs the
/// same refusal at its cold start, `refuse_local_switches`).
fn release_dir() -> PathBuf {
    std::env::var_os("UMPIRE_RELEASE_FUNCTIONS_DIR")
        .map(PathBuf::from)
        .expect(
            "UMPIRE_RELEASE_FUNCTIONS_DIR: the release function bootstraps (make test builds them)",
        )
}

/// How a start ended: its exit code (None when still running at the deadline, then
/// killed: waiting on a runtime API, past every refusal) and its output (logs and
/// the error `main` printed).
struct Ended {
    code: Option<i32>,
    stderr: String,
}

/// Starts `bin` with nothing but `env` (and a runtime API address nothing listens on,
/// so a bootstrap that got past its cold start waits or fails there, differently from a
/// refusal), for at most 15 s.
fn start(bin: &str, env: &[(&str, &str)]) -> Ended {
    let path = release_dir().join(bin);
    assert!(path.exists(), "{} is not built", path.display());
    let mut cmd = Command::new(&path);
    cmd.env_clear()
        .env("AWS_LAMBDA_RUNTIME_API", "127.0.0.1:9")
        .env("AWS_LAMBDA_FUNCTION_NAME", bin)
        .env("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "512")
        .env("AWS_LAMBDA_FUNCTION_VERSION", "1")
        .env("AWS_LAMBDA_LOG_STREAM_NAME", "test")
        .env("AWS_LAMBDA_LOG_GROUP_NAME", "test")
        .env("AWS_REGION", "us-east-1")
        .env("AWS_ACCESS_KEY_ID", "testing")
        .env("AWS_SECRET_ACCESS_KEY", "testing")
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("start the bootstrap");
    // Its logs (stdout, as Lambda reads them) and what `main` printed on failing.
    let read = |mut pipe: Box<dyn std::io::Read + Send>| {
        std::thread::spawn(move || {
            let mut text = String::new();
            let _ = pipe.read_to_string(&mut text);
            text
        })
    };
    let out = read(Box::new(child.stdout.take().expect("stdout")));
    let err = read(Box::new(child.stderr.take().expect("stderr")));
    let deadline = Instant::now() + Duration::from_secs(15);
    let code = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break Some(status.code().unwrap_or(-1));
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Ended {
        code,
        stderr: format!(
            "{}{}",
            out.join().expect("stdout"),
            err.join().expect("stderr")
        ),
    }
}

const SEED: &str = "1111111111111111111111111111111111111111111111111111111111111111";
const VALIDATOR: &str = "2222222222222222222222222222222222222222222222222222222222222222";

#[test]
fn a_release_bootstrap_refuses_every_local_only_variable_by_name() {
    let checker = ("UMPIRE_CHECKER_FUNCTION", "umpire-checker:live");
    // The purchase function: it signs and judges, and refuses in its run loop before
    // the keyless first deploy's path.
    let bin = "verdicts";
    for (name, value) in [
        ("UMPIRE_SIGNING_SEED_HEX", SEED),
        ("UMPIRE_VALIDATOR_KEY_HEX", VALIDATOR),
        ("UMPIRE_RATE_LIMITS", "off"),
        ("UMPIRE_RATE_LIMIT_WINDOW_MS", "100"),
        ("UMPIRE_WEBHOOK_RETRY_BASE_MS", "10"),
    ] {
        let Ended { code, stderr } = start(bin, &[checker, (name, value)]);
        assert!(
            code.is_some_and(|c| c != 0),
            "{bin} with {name}: refused at start, not {code:?}: {stderr}"
        );
        assert!(
            stderr.contains(name),
            "{bin} with {name}: the refusal names it: {stderr}"
        );
    }
    // A judging function without its checker function: never in-process on AWS.
    let Ended { code, stderr } = start(bin, &[]);
    assert!(
        code.is_some_and(|c| c != 0),
        "{bin} without a checker: refused at start, not {code:?}: {stderr}"
    );
    assert!(
        stderr.contains("UMPIRE_CHECKER_FUNCTION"),
        "{bin} without a checker: {stderr}"
    );
    // The positive control: the purchase function with its checker named and no key
    // yet (a first deploy) gets past every refusal and on to the runtime API, where
    // nothing listens (it waits there, or gives up naming no variable of ours). So the
    // refusals above are the variables', not any start's.
    let Ended { stderr, .. } = start(bin, &[checker]);
    assert!(
        !stderr.contains("UMPIRE_"),
        "a deploy-like environment refuses nothing: {stderr}"
    );
    assert!(
        stderr.contains("no signing key yet"),
        "it reached the keyless first deploy's loop: {stderr}"
    );
}
