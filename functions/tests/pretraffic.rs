//! docs/aws.md: every deploy's new versions are proved before any traffic moves to them.
//! CodeDeploy calls the stack's PreTraffic hook (its own function and role) for each
//! function's deployment; the hook reads the deployment (CodeDeploy's API, as the stack
//! emulator serves it), the function's logical id (its CloudFormation tag), invokes the
//! new version with that function's probe, and reports. Here, on the local stack under
//! the IAM gate, with every function's real bootstrap:
//! - a version deployed with a mistyped key (its cold start fails) and a verdicts
//!   version packaged with another function's bootstrap are both refused: the alias
//!   stays on the old version, which goes on answering;
//! - a good new version of every function passes, and the alias moves to it.
//!
//! `make test` starts the local AWS server and sets `UMPIRE_TEST_AWS_ENDPOINT`.

use serde_json::{Value as Json, json};
use umpire_blackbox::request;
use umpire_blackbox::stack::{LocalStack, StackOptions};

const FUNCTIONS: [&str; 15] = [
    "HealthFunction",
    "KeyFunction",
    "QuoteFunction",
    "OpenApiFunction",
    "VerifyPageFunction",
    "ValidateFunction",
    "VerdictsFunction",
    "ReputationFunction",
    "StatusFunction",
    "FindFunction",
    "FeedbackFunction",
    "McpFunction",
    "WorkerFunction",
    "CheckerFunction",
    "PassTwoCheckerFunction",
];

/// The functions' log, its last lines (what the hook and the versions said).
fn log_tail(stack: &LocalStack) -> String {
    let logs = stack.logs();
    let lines: Vec<&str> = logs.lines().collect();
    lines[lines.len().saturating_sub(40)..].join("\n")
}

fn refused(stack: &LocalStack, outcome: &Json, why: &str) {
    assert_eq!(
        outcome["reported"],
        "Failed",
        "{outcome}\n{}",
        log_tail(stack)
    );
    assert_eq!(outcome["live"], "1", "the alias stays: {outcome}");
    assert!(
        outcome["hook"]["answer"]
            .as_str()
            .is_some_and(|a| a.contains(why)),
        "the hook says why ({why}): {outcome}"
    );
}

/// Would catch: a hook that passes what it cannot read or probe, a probe that accepts
/// a crash or another function's answer, a probe wrong about a function's right answer
/// (a good version refused: no deploy could go out), or the hook's role missing a grant
/// (its calls go through the IAM gate).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pre_traffic_hook_refuses_a_broken_version_and_passes_a_good_one() {
    let stack = tokio::task::block_in_place(|| {
        LocalStack::start(StackOptions {
            run_functions: true,
            ..StackOptions::default()
        })
    });
    let api = stack.api.expect("api");
    tokio::task::block_in_place(|| {
        // A rotation's first deploy with the next key mistyped: the new version cannot
        // start (its cold start refuses the key).
        let mistyped = stack.deploy(
            "HealthFunction",
            json!({"env": {"UMPIRE_NEXT_PUBLIC_KEY": "3q2+7w-mistyped"}}),
        );
        refused(&stack, &mistyped, "HealthFunction version 2");
        let health = request(api, "GET", "/healthz", &[], None);
        assert_eq!(health.status, 200, "version 1 still answers");

        // A build that packaged the health bootstrap as the verdicts function: it
        // starts, and answers the unpaid purchase with something other than its 402.
        let wrong = stack.deploy(
            "VerdictsFunction",
            json!({"bootstrap_of": "HealthFunction"}),
        );
        refused(&stack, &wrong, "POST /v1/verdicts/basic");

        // Good versions, one per function: each passes and goes live.
        for function in FUNCTIONS {
            let good = stack.deploy(function, json!({}));
            assert_eq!(
                good["reported"],
                "Succeeded",
                "{function}: {good}\n{}",
                log_tail(&stack)
            );
            assert_eq!(good["live"], good["version"], "{function}: {good}");
        }
        let health = request(api, "GET", "/healthz", &[], None);
        assert_eq!(health.status, 200, "the new version answers");
    });
    // Every call the hook made was its role's to make.
    let denied = stack.denied();
    assert!(denied.is_empty(), "denied: {denied:?}");
    let calls = stack.calls();
    let hook_made = |action: &str| {
        calls.iter().any(|c| {
            c["principal"] == "PreTrafficHookFunction"
                && c["action"] == action
                && c["allowed"] == true
        })
    };
    for action in [
        "codedeploy:GetDeployment",
        "codedeploy:GetApplicationRevision",
        "codedeploy:PutLifecycleEventHookExecutionStatus",
        "lambda:ListTags",
        "lambda:InvokeFunction",
    ] {
        assert!(hook_made(action), "the hook's {action}");
    }
}
