//! `GET /verify`: the self-contained verification page, in headless Chromium. Its
//! stable JSON agrees with Python on our stable-JSON vectors; a genuine document
//! shows every step green; a tampered one and a wrong deliverable show which step
//! failed; the page saved to disk verifies offline; it loads nothing from anywhere.

use umpire_blackbox::chain::node_json;
use umpire_blackbox::{Server, TempDir, repo_root, run_umpire};

/// The stable-JSON vectors Python made (`shared/core/tests/vectors/make_canonical.py`).
fn vectors() -> std::path::PathBuf {
    repo_root().join("shared/core/tests/vectors/canonical-json.jsonl")
}

#[test]
fn the_page_verifies_genuine_documents_and_names_the_failing_step() {
    let server = Server::start();
    let page = server.get("/verify");
    assert_eq!(page.status, 200);
    assert!(
        page.header("content-type")
            .is_some_and(|c| c.starts_with("text/html"))
    );
    let csp = page.header("content-security-policy").unwrap_or_default();
    assert!(csp.contains("default-src 'none'"), "{csp}");
    let html = String::from_utf8_lossy(&page.body);
    assert!(
        !html.contains("__PUBLISHED_KEYS__"),
        "the keys are written in"
    );
    for external in ["src=\"http", "href=\"http", "@import", "url("] {
        assert!(!html.contains(external), "the page refers to {external}");
    }

    let files = TempDir::new("verify-page");
    let spec = files.write(
        "spec.json",
        br#"{"checks":[{"type":"regex","pattern":"^ok"},{"type":"length","unit":"chars","min":2,"max":100},{"type":"json_path","path":"$.n","op":"eq","value":12345678901234567890}]}"#,
    );
    let deliverable = files.write(
        "deliverable.json",
        r#"{"text":"ok, déjà vu 🚀","json":{"n":12345678901234567890,"f":1e-7}}"#.as_bytes(),
    );
    let path = |p: &std::path::Path| p.to_str().expect("utf-8 path").to_owned();
    let (code, doc, err) = run_umpire(
        &[
            "judge",
            "--tier",
            "basic",
            "--spec",
            &path(&spec),
            "--deliverable",
            &path(&deliverable),
            "--data-dir",
            &path(server.data.path()),
        ],
        &[],
    );
    assert_eq!(code, 0, "{err}");
    let document = files.write("document.json", doc.as_bytes());
    let out = node_json(
        "tests/js/verify_page.mjs",
        &[
            "--url",
            &format!("http://{}/verify", server.addr),
            "--document",
            &path(&document),
            "--deliverable",
            &path(&deliverable),
            "--vectors",
            &path(&vectors()),
            "--save-to",
            &path(files.path()),
        ],
    );
    assert_eq!(
        out["vector_mismatches"],
        serde_json::json!([]),
        "the page's stable JSON differs from Python's"
    );
    assert!(out["vectors"].as_u64().unwrap_or(0) >= 10);

    let genuine = &out["genuine"];
    assert_eq!(genuine["verified"], true, "{genuine}");
    let names: Vec<&str> = genuine["steps"]
        .as_array()
        .expect("steps")
        .iter()
        .filter_map(|s| s["name"].as_str())
        .collect();
    for step in [
        "stable JSON bytes",
        "payload_sha256",
        "Ed25519 signature",
        "spec_hash",
        "deliverable_hash",
    ] {
        assert!(names.contains(&step), "{step} is shown: {names:?}");
    }
    assert!(
        genuine["steps"]
            .as_array()
            .expect("steps")
            .iter()
            .all(|s| s["ok"] == "true"),
        "all green: {genuine}"
    );
    assert!(
        genuine["checks_shown"].as_u64().unwrap_or(0) >= 3,
        "per-check results are laid out"
    );

    let failed_step = |case: &serde_json::Value| {
        case["steps"]
            .as_array()
            .expect("steps")
            .iter()
            .find(|s| s["ok"] == "false")
            .and_then(|s| s["name"].as_str())
            .map(str::to_owned)
    };
    assert_eq!(out["tampered"]["verified"], false);
    assert_eq!(
        failed_step(&out["tampered"]).as_deref(),
        Some("payload_sha256"),
        "{}",
        out["tampered"]
    );
    assert_eq!(out["wrong_deliverable"]["verified"], false);
    assert_eq!(
        failed_step(&out["wrong_deliverable"]).as_deref(),
        Some("deliverable_hash")
    );
    assert_eq!(
        out["offline_verified"], true,
        "the saved page verifies from disk"
    );
    let requests: Vec<&str> = out["requests"]
        .as_array()
        .expect("requests")
        .iter()
        .filter_map(|r| r.as_str())
        .collect();
    assert_eq!(
        requests.len(),
        1,
        "the page loads nothing but itself: {requests:?}"
    );
}
