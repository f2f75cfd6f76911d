//! The stack as AWS runs it: every function's own bootstrap, in its own sandbox, behind
//! API Gateway and its SQS trigger, with the template's environment and, through the
//! IAM gate, exactly its role's permissions (tests/support/stack.rs). Every route and
//! job the template serves is driven once; a call any role's policy does not allow
//! fails the test, and the statements no call needed are printed (the surplus report;
//! infra/local/iam_removal.py checks each statement is needed by removing it).

use umpire_blackbox::request;
use umpire_blackbox::stack::{LocalStack, StackOptions};

fn get(stack: &LocalStack, path: &str) -> umpire_blackbox::Reply {
    request(stack.api.expect("api"), "GET", path, &[], None)
}

fn post_json(stack: &LocalStack, path: &str, body: &str) -> umpire_blackbox::Reply {
    request(
        stack.api.expect("api"),
        "POST",
        path,
        &[("Content-Type", "application/json")],
        Some(body.as_bytes()),
    )
}

/// Every decision was an allow; otherwise the refused calls, as the gate saw them.
fn assert_nothing_denied(stack: &LocalStack) {
    let denied = stack.denied();
    assert!(
        denied.is_empty(),
        "calls the template's policies do not allow:\n{}",
        serde_json::to_string_pretty(&denied).unwrap_or_default()
    );
}

#[test]
fn the_free_routes_answer_under_their_own_roles() {
    let stack = LocalStack::start(StackOptions {
        run_functions: true,
        ..StackOptions::default()
    });
    for path in [
        "/healthz",
        "/.well-known/umpire-key.json",
        "/openapi.json",
        "/verify",
        "/v1/quote",
    ] {
        let r = get(&stack, path);
        assert_eq!(
            r.status,
            200,
            "{path}: {}",
            String::from_utf8_lossy(&r.body)
        );
    }
    let r = post_json(
        &stack,
        "/v1/validate",
        r#"{"tier":"basic","spec":{"checks":[{"type":"length","min":1}]}}"#,
    );
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert_nothing_denied(&stack);
    eprintln!(
        "{}",
        serde_json::to_string_pretty(&stack.calls()).unwrap_or_default()
    );
}
