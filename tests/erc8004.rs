//! ERC-8004 on the devnet: the Identity and Validation registries we wrote from the ERC
//! and its reference implementation's public interface (infra/devnet/IdentityRegistry.sol,
//! ValidationRegistry.sol, driven by infra/devnet/validation.mjs) hold what Umpire's
//! validator will rely on: only the agent's owner asks, one request per hash, only the
//! named validator answers, within 0-100, answers repeat and the latest stands, and the
//! summary counts answered requests by tag.

use std::process::Command;

use serde_json::Value;
use umpire_blackbox::chain::Devnet;
use umpire_blackbox::repo_root;

/// `node infra/devnet/validation.mjs <args> --devnet …`: success, its JSON, its stderr.
fn validation(devnet: &Devnet, args: &[&str]) -> (bool, Value, String) {
    let out = Command::new("node")
        .arg(repo_root().join("infra/devnet/validation.mjs"))
        .args(args)
        .args(["--devnet", &devnet.devnet_json()])
        .current_dir(repo_root())
        .output()
        .expect("run node");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let json = serde_json::from_str(stdout.lines().last().unwrap_or("null")).unwrap_or(Value::Null);
    (
        out.status.success(),
        json,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn ok(devnet: &Devnet, args: &[&str]) -> Value {
    let (done, v, err) = validation(devnet, args);
    assert!(done, "{args:?}: {err}");
    v
}

/// Refused by the registry, with the error it names.
fn refused(devnet: &Devnet, args: &[&str], error: &str) {
    let (done, v, err) = validation(devnet, args);
    assert!(!done, "{args:?} went through: {v}");
    assert!(err.contains(error), "{args:?}: expected {error}, got {err}");
}

#[test]
fn a_request_is_answered_only_by_the_validator_it_names() {
    let devnet = Devnet::start();
    let agent = ok(
        &devnet,
        &[
            "register",
            "--uri",
            "https://agent.example/registration.json",
        ],
    );
    let agent_id = agent["agent_id"].as_str().expect("agent_id").to_owned();
    assert_eq!(
        agent["owner"].as_str(),
        Some(devnet.get("agent_owner").as_str())
    );
    let hash = format!("0x{}", "ab".repeat(32));
    let request = [
        "request",
        "--agent-id",
        &agent_id,
        "--request-uri",
        "https://agent.example/requests/1.json",
        "--request-hash",
        &hash,
    ];
    ok(&devnet, &request);
    // One request per hash.
    refused(&devnet, &request, "RequestExists");
    // Only the agent's owner (or its operator) asks for it.
    let stranger = devnet.get("payer_private_key");
    let other = format!("0x{}", "cd".repeat(32));
    let mut theirs = request.to_vec();
    theirs[6] = &other;
    theirs.extend(["--key", &stranger]);
    refused(&devnet, &theirs, "NotAuthorized");

    // Only the named validator answers, and within 0-100.
    let respond = |response: &str, tag: &str, key: Option<&str>| {
        let response_hash = format!("0x{}", "ef".repeat(32));
        let mut args = vec![
            "respond",
            "--request-hash",
            &hash,
            "--response",
            response,
            "--tag",
            tag,
            "--response-hash",
            &response_hash,
        ];
        if let Some(k) = key {
            args.extend(["--key", k]);
        }
        validation(&devnet, &args)
    };
    let (done, _, err) = respond("100", "umpire:sworn:pass1", Some(&stranger));
    assert!(!done && err.contains("NotTheValidator"), "{err}");
    let (done, _, err) = respond("101", "umpire:sworn", None);
    assert!(!done && err.contains("ResponseOutOfRange"), "{err}");

    // A provisional answer, then the final one: the latest stands.
    let (done, _, err) = respond("100", "umpire:sworn:pass1", None);
    assert!(done, "{err}");
    let status = ok(&devnet, &["status", "--request-hash", &hash]);
    assert_eq!(
        status["validator"].as_str(),
        Some(devnet.get("validator").as_str())
    );
    assert_eq!(status["agent_id"], agent_id.as_str());
    assert_eq!(
        (status["response"].as_u64(), status["tag"].as_str()),
        (Some(100), Some("umpire:sworn:pass1"))
    );
    let (done, _, err) = respond("0", "umpire:sworn", None);
    assert!(done, "{err}");
    let status = ok(
        &devnet,
        &[
            "status",
            "--request-hash",
            &hash,
            "--agent-id",
            &agent_id,
            "--tag",
            "umpire:sworn",
        ],
    );
    assert_eq!(
        (status["response"].as_u64(), status["tag"].as_str()),
        (Some(0), Some("umpire:sworn"))
    );
    assert_eq!(status["response_hash"], format!("0x{}", "ef".repeat(32)));
    assert_eq!(
        status["summary"],
        serde_json::json!({"count": 1, "average": 0})
    );
    // An unknown request has no status.
    let (done, _, err) = validation(&devnet, &["status", "--request-hash", &other]);
    assert!(!done && err.contains("UnknownRequest"), "{err}");
}
