//! The repository stands on its own: a clone in any folder builds, tests and documents
//! itself with nothing from beside it, and the README stays a page a newcomer can read.

use std::path::PathBuf;
use std::process::Command;

use umpire_blackbox::repo_root;

/// Every tracked file (git's index), or every file outside the ignored folders when the
/// tree is not a git checkout (an exported tarball).
fn tracked_files() -> Vec<PathBuf> {
    let root = repo_root();
    if let Ok(out) = Command::new("git")
        .args(["ls-files", "-z"])
        .current_dir(&root)
        .output()
        && out.status.success()
    {
        return out
            .stdout
            .split(|b| *b == 0)
            .filter(|p| !p.is_empty())
            .map(|p| root.join(String::from_utf8_lossy(p).as_ref()))
            .collect();
    }
    let mut files = Vec::new();
    let mut dirs = vec![root];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            let name = entry.file_name();
            if [".git", ".cache", "node_modules", "target"]
                .iter()
                .any(|skip| name == *skip)
            {
                continue;
            }
            if path.is_dir() {
                dirs.push(path);
            } else {
                files.push(path);
            }
        }
    }
    files
}

#[test]
fn no_tracked_file_refers_to_the_folder_beside_the_repository() {
    // The team's material sits in a folder named like our own `shared/` crates, beside the
    // clone. A reference through `..` to that name counts only when it resolves inside
    // the repository to something that exists (fuzz/Cargo.toml's `../shared/core`);
    // spelled in two halves so this file does not name it itself.
    let outside = format!("{}{}", "../", "shared");
    let root = repo_root();
    let real_root = root.canonicalize().unwrap_or_else(|_| root.clone());
    let files = tracked_files();
    assert!(files.len() > 50, "only {} files found", files.len());
    let mut offenders = Vec::new();
    for p in &files {
        let Ok(bytes) = std::fs::read(p) else {
            continue;
        };
        let text = String::from_utf8_lossy(&bytes);
        let dir = p.parent().unwrap_or(&root);
        for (at, _) in text.match_indices(&outside) {
            // The path runs to the first character a path in prose or TOML does not hold.
            let rest = &text[at..];
            let end = rest
                .find(|c: char| c.is_whitespace() || "\"'`)]>,;".contains(c))
                .unwrap_or(rest.len());
            let target = dir.join(&rest[..end]);
            let inside = target
                .canonicalize()
                .map(|t| t.starts_with(&real_root))
                .unwrap_or(false);
            if !inside {
                offenders.push(format!("{}: {}", p.display(), &rest[..end]));
            }
        }
    }
    assert!(
        offenders.is_empty(),
        "these files refer to {outside}, which a clone does not have: {offenders:?}"
    );
}

#[test]
fn the_readme_fits_on_a_screen_and_links_every_docs_page() {
    let root = repo_root();
    let readme = std::fs::read_to_string(root.join("README.md")).expect("README.md");
    let lines = readme.lines().count();
    assert!(lines <= 150, "README.md has {lines} lines (at most 150)");
    let mut pages: Vec<String> = std::fs::read_dir(root.join("docs"))
        .expect("docs/")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".md"))
        .collect();
    pages.sort();
    assert!(pages.len() >= 10, "docs/ has {pages:?}");
    for page in &pages {
        assert!(
            readme.contains(&format!("(docs/{page})")),
            "README.md does not link docs/{page}"
        );
    }
    // Every relative link in the README and in docs/ leads to a file that exists.
    let mut documents = vec![(root.clone(), readme)];
    for page in &pages {
        let text = std::fs::read_to_string(root.join("docs").join(page)).expect("page");
        documents.push((root.join("docs"), text));
    }
    for (base, text) in &documents {
        for link in text
            .split("](")
            .skip(1)
            .filter_map(|rest| rest.split(')').next())
        {
            if link.contains("://") || link.starts_with('#') || link.starts_with("mailto:") {
                continue;
            }
            let target = link.split('#').next().unwrap_or(link);
            assert!(
                base.join(target).exists(),
                "broken link {link} in a page under {}",
                base.display()
            );
        }
    }
}

/// A release build has no test switches: `umpire serve` (the `fast` build `make test`
/// makes; `make run`'s debug build has the same features, none) refuses to start with
/// one of the fetcher's `UMPIRE_TEST_FETCH_*`, limits off, a window under a minute,
/// webhook retries under 30 s or a Lambda function's plain seed, names it, and starts
/// without it. Would catch: the switches compiled into what we ship, where a mistaken
/// environment turns the SSRF defence or the rate limits off.
#[test]
fn a_release_build_refuses_to_start_with_a_test_switch() {
    let bin = std::env::var_os("UMPIRE_RELEASE_BIN")
        .map(PathBuf::from)
        .expect("UMPIRE_RELEASE_BIN: the release umpire binary (make test builds it)");
    let data = umpire_blackbox::TempDir::new("release-switch");
    let serve = |env: &[(&str, &str)]| {
        let mut cmd = Command::new(&bin);
        cmd.args(["serve", "--addr", "127.0.0.1:0", "--data-dir"])
            .arg(data.path())
            .env("RUST_LOG", "warn")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd.spawn().expect("start umpire serve")
    };
    for (name, value) in [
        ("UMPIRE_TEST_FETCH_ALLOW", "127.0.0.1"),
        ("UMPIRE_TEST_FETCH_HOSTS", "example.com=127.0.0.1"),
        ("UMPIRE_TEST_FETCH_ROOTS", "/dev/null"),
        // Switches that weaken a defence: no release build honours them (#[cfg]).
        ("UMPIRE_RATE_LIMITS", "off"),
        ("UMPIRE_RATE_LIMIT_WINDOW_MS", "100"),
        ("UMPIRE_WEBHOOK_RETRY_BASE_MS", "10"),
        // A function's plain seed: serve signs with its data directory's key.
        ("UMPIRE_SIGNING_SEED_HEX", "11"),
    ] {
        let out = serve(&[(name, value)])
            .wait_with_output()
            .expect("umpire serve exits");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{name}: {stderr}");
        assert!(
            stderr.contains(name)
                && (stderr.contains("test switch")
                    || stderr.contains("between")
                    || stderr.contains("not read by umpire serve")),
            "{stderr}"
        );
    }
    // `umpire evaluate`'s own switch (the sworn wait shortened) stops it the same way,
    // before any service, chain or payment is touched.
    let files = umpire_blackbox::TempDir::new("release-evaluate");
    let out = Command::new(&bin)
        .args([
            "evaluate",
            "--job",
            "eip155:1:0x0000000000000000000000000000000000000001:1",
            "--rpc",
            "http://127.0.0.1:9",
            "--base",
            "http://127.0.0.1:9",
            "--spec",
        ])
        .arg(files.path().join("spec.json"))
        .arg("--deliverable")
        .arg(files.path().join("deliverable.json"))
        .env("UMPIRE_TEST_FINAL_WAIT_SECS", "1")
        .env("UMPIRE_DATA_DIR", files.path())
        .stdin(std::process::Stdio::null())
        .output()
        .expect("umpire evaluate exits");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("UMPIRE_TEST_FINAL_WAIT_SECS") && stderr.contains("test switch"),
        "{stderr}"
    );

    // The positive control: the same binary starts without them.
    let mut child = serve(&[]);
    let mut line = String::new();
    let stdout = child.stdout.take().expect("stdout");
    std::io::BufRead::read_line(&mut std::io::BufReader::new(stdout), &mut line)
        .expect("the listening line");
    let _ = child.kill();
    let _ = child.wait();
    assert!(line.starts_with("umpire listening on "), "{line:?}");
}

/// docs/fetching.md: a test build takes the fetcher's switches, and says so: each one
/// set is logged as a warning when the server starts. Would catch: a switch honoured
/// silently, so a test build run by mistake looks like a production one in its logs.
#[test]
fn a_test_build_warns_of_each_fetch_switch_it_takes() {
    let server = umpire_blackbox::Server::start_logged(&[
        ("UMPIRE_TEST_FETCH_ALLOW", "127.0.0.1"),
        ("UMPIRE_TEST_FETCH_HOSTS", "example.com=127.0.0.1"),
    ]);
    assert_eq!(server.get("/healthz").status, 200);
    let logs = server.logs();
    for warning in [
        "TEST ONLY: the fetch policy admits non-public addresses",
        "TEST ONLY: fixed DNS answers for fetches",
    ] {
        assert!(
            logs.lines()
                .any(|l| l.contains(warning) && l.contains("WARN")),
            "no warning {warning:?} in: {logs}"
        );
    }
}

/// docs/development.md's promise table names real tests: every `file::test` in its
/// "Held by" column is a file of the repository holding a test function of that name
/// (a module path between them is read as part of the name), and no row is held by
/// nothing. Would catch: a row left pointing at a test renamed or deleted, so the table
/// claims a promise is held when nothing holds it.
#[test]
fn every_promise_in_the_table_names_a_test_that_exists() {
    let text = std::fs::read_to_string(repo_root().join("docs/development.md"))
        .expect("docs/development.md");
    let table = text
        .split("| Doc | Promise | Held by |")
        .nth(1)
        .expect("the promise table")
        .split("\n\n")
        .next()
        .unwrap_or_default();
    let mut rows = 0;
    for row in table
        .lines()
        .filter(|l| l.starts_with("| ") && !l.starts_with("|---"))
    {
        let held = row.rsplit('|').nth(1).unwrap_or_default();
        let names: Vec<&str> = held
            .split('`')
            .skip(1)
            .step_by(2)
            .filter(|n| n.contains("::"))
            .collect();
        assert!(!names.is_empty(), "a promise held by no test: {row}");
        for name in names {
            let (file, path) = name.split_once("::").expect("file::test");
            let source = std::fs::read_to_string(repo_root().join(file))
                .unwrap_or_else(|e| panic!("{name}: {file}: {e} (row: {row})"));
            let test = path.rsplit("::").next().unwrap_or(path);
            assert!(
                source.contains(&format!("fn {test}(")),
                "{name}: no test {test} in {file} (row: {row})"
            );
        }
        rows += 1;
    }
    assert!(rows > 150, "the table was read: {rows} rows");
}

/// The emulator's speed-up is faithful: `infra/local/moto_serial.py` serves a later page
/// of an index Query from the candidates it kept, and must answer every page exactly as
/// stock moto does (Limit and the 1 MB cut, both directions, a range condition, a
/// write between two pages). Would catch: a page cache that skips, repeats or keeps
/// items past a write, which would make the DynamoDB report tests pass on a lie.
#[test]
fn moto_serial_pages_like_stock_moto() {
    let out = Command::new(umpire_blackbox::python())
        .arg(repo_root().join("infra/local/moto_serial_check.py"))
        .output()
        .expect("python (make test's virtualenv)");
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `make test`'s verdict (infra/local/test_summary.py) fails every way a sub-run can
/// break without a red test line: no summary (a test binary that does not link, moto not
/// starting), a non-zero exit with nothing counted, no status at all, and `exec failed`
/// or `timed out` in a summary. Would catch: a gate that adds up whatever summaries it
/// finds and passes a run that never ran.
#[test]
fn the_test_gate_fails_a_sub_run_that_broke_without_a_failed_test() {
    let dir = std::env::temp_dir().join(format!("umpire-gate-{}", std::process::id()));
    let ok =
        "        PASS [   0.1s] a::b\n     Summary [   1.0s] 3 tests run: 3 passed, 1 skipped\n";
    let cases: &[(&str, &str, Option<&str>, bool, &str)] = &[
        ("every run sound", ok, Some("0"), true, "6 passed, 0 failed"),
        (
            "no summary",
            "error: could not compile `x`\n",
            Some("101"),
            false,
            "3 passed, 1 failed",
        ),
        (
            "exited non-zero",
            ok,
            Some("2"),
            false,
            "6 passed, 1 failed",
        ),
        ("no status", ok, None, false, "6 passed, 1 failed"),
        (
            "exec failed",
            "     Summary [   1.0s] 3 tests run: 2 passed, 1 exec failed, 0 skipped\n",
            Some("100"),
            false,
            "5 passed, 1 failed",
        ),
        (
            "timed out",
            "     Summary [   1.0s] 3 tests run: 2 passed, 1 timed out, 0 skipped\n",
            Some("100"),
            false,
            "5 passed, 1 failed",
        ),
    ];
    for (name, second_log, second_status, passes, total) in cases {
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("temp dir");
        std::fs::write(dir.join("test-main.log"), ok).expect("log");
        std::fs::write(dir.join("test-main.status"), "0\n").expect("status");
        std::fs::write(dir.join("test-alone.log"), second_log).expect("log");
        if let Some(status) = second_status {
            std::fs::write(dir.join("test-alone.status"), format!("{status}\n")).expect("status");
        }
        let out = Command::new(umpire_blackbox::python())
            .arg(repo_root().join("infra/local/test_summary.py"))
            .arg(&dir)
            .args(["main", "alone"])
            .output()
            .expect("python");
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert_eq!(out.status.success(), *passes, "{name}: {stdout}");
        assert_eq!(stdout.lines().last(), Some(*total), "{name}: {stdout}");
        assert!(
            stdout.starts_with("main: 3 passed, 0 failed\n"),
            "{name}: {stdout}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
