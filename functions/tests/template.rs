//! `template.yaml` deploys every Lambda binary this crate builds, and wires the worker
//! to the jobs queue the way its code assumes (partial batch failures, a visibility
//! timeout that outlasts a run, permission to queue the next job).

use std::collections::BTreeSet;

use umpire_blackbox::{str_at, template_resources};
use umpire_core::json::Value;

fn functions(res: &Value) -> Vec<(&str, &Value)> {
    res.as_object()
        .expect("resources")
        .iter()
        .filter(|(_, r)| str_at(r, &["Type"]) == Some("AWS::Serverless::Function"))
        .map(|(k, r)| (k.as_str(), r))
        .collect()
}

fn number(v: Option<&Value>) -> u64 {
    v.and_then(Value::as_u64)
        .or_else(|| v.and_then(Value::as_str).and_then(|s| s.parse().ok()))
        .unwrap_or_else(|| panic!("not a number: {v:?}"))
}

/// Every `Action` granted to a function, with the resource it names (as JSON text).
fn grants(function: &Value) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for policy in function
        .get("Properties")
        .and_then(|p| p.get("Policies"))
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
    {
        for st in policy
            .get("Statement")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
        {
            let resource = String::from_utf8_lossy(
                &st.get("Resource")
                    .cloned()
                    .unwrap_or(Value::Null)
                    .to_canonical_vec(),
            )
            .into_owned();
            let actions = match st.get("Action") {
                Some(Value::Array(a)) => a
                    .iter()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect(),
                Some(v) => v.as_str().map(str::to_owned).into_iter().collect(),
                None => Vec::new(),
            };
            out.extend(actions.into_iter().map(|a| (a, resource.clone())));
        }
    }
    out
}

fn may(function: &Value, action: &str, resource: &str) -> bool {
    grants(function)
        .iter()
        .any(|(a, r)| a == action && r.contains(resource))
}

#[test]
fn every_binary_is_deployed_once() {
    let res = template_resources();
    let deployed: Vec<&str> = functions(&res)
        .iter()
        .filter_map(|(_, f)| str_at(f, &["Metadata", "BuildProperties", "Binary"]))
        .collect();
    let unique: BTreeSet<&str> = deployed.iter().copied().collect();
    assert_eq!(unique.len(), deployed.len(), "a binary deployed twice");
    let bins: BTreeSet<String> = std::fs::read_dir(umpire_blackbox::crate_dir().join("src/bin"))
        .expect("src/bin")
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            e.file_name()
                .to_str()
                .and_then(|n| n.strip_suffix(".rs"))
                .map(str::to_owned)
        })
        .collect();
    assert_eq!(
        unique
            .iter()
            .map(|s| (*s).to_owned())
            .collect::<BTreeSet<_>>(),
        bins,
        "functions in template.yaml vs functions/src/bin"
    );
}

#[test]
fn the_worker_consumes_the_jobs_queue_with_partial_failures() {
    let res = template_resources();
    let (_, worker) = functions(&res)
        .into_iter()
        .find(|(_, f)| str_at(f, &["Metadata", "BuildProperties", "Binary"]) == Some("worker"))
        .expect("a function for the worker binary");
    let events = worker
        .get("Properties")
        .and_then(|p| p.get("Events"))
        .and_then(Value::as_object)
        .expect("worker events");
    let sqs: Vec<&Value> = events
        .values()
        .filter(|e| str_at(e, &["Type"]) == Some("SQS"))
        .collect();
    assert_eq!(sqs.len(), 1, "one SQS event source");
    let props = sqs[0].get("Properties").expect("event properties");
    assert!(
        String::from_utf8_lossy(&props.get("Queue").expect("queue").to_canonical_vec())
            .contains("JobsQueue"),
        "the worker reads the jobs queue"
    );
    assert_eq!(
        props.get("FunctionResponseTypes"),
        Some(&Value::Array(vec![Value::from("ReportBatchItemFailures")])),
        "handle_batch reports failures per message"
    );
    let timeout = number(worker.get("Properties").and_then(|p| p.get("Timeout")));
    let visibility = number(
        res.get("JobsQueue")
            .and_then(|q| q.get("Properties"))
            .and_then(|p| p.get("VisibilityTimeout")),
    );
    assert!(
        visibility >= 6 * timeout,
        "queue visibility {visibility}s < 6 x worker timeout {timeout}s"
    );
}

fn by_binary<'a>(res: &'a Value, binary: &str) -> &'a Value {
    functions(res)
        .into_iter()
        .find(|(_, f)| str_at(f, &["Metadata", "BuildProperties", "Binary"]) == Some(binary))
        .map(|(_, f)| f)
        .unwrap_or_else(|| panic!("a function for the {binary} binary"))
}

fn env_var<'a>(function: &'a Value, name: &str) -> Option<&'a Value> {
    function
        .get("Properties")?
        .get("Environment")?
        .get("Variables")?
        .get(name)
}

/// API Gateway ends an HTTP integration at 30 s: every function behind a route stops
/// before that, and the paid ones fit their request budget (plus the time to answer)
/// inside their Timeout, so no paid request is cut off while it settles.
#[test]
fn http_functions_end_before_api_gateway_and_paid_ones_fit_their_budget() {
    let res = template_resources();
    let globals = umpire_blackbox::template_section("Globals");
    let global_timeout = number(globals.get("Function").and_then(|f| f.get("Timeout")));
    let mut routed = 0;
    for (name, f) in functions(&res) {
        let http = f
            .get("Properties")
            .and_then(|p| p.get("Events"))
            .and_then(Value::as_object)
            .is_some_and(|events| {
                events
                    .values()
                    .any(|e| str_at(e, &["Type"]) == Some("HttpApi"))
            });
        if !http {
            continue;
        }
        routed += 1;
        let timeout = f
            .get("Properties")
            .and_then(|p| p.get("Timeout"))
            .map_or(global_timeout, |t| number(Some(t)));
        assert!(
            timeout <= 29,
            "{name}: Timeout {timeout}s outlives API Gateway's 30 s"
        );
        let binary = str_at(f, &["Metadata", "BuildProperties", "Binary"]).unwrap_or(name);
        if matches!(binary, "verdicts" | "reputation") {
            let budget = f
                .get("Properties")
                .and_then(|p| p.get("Environment"))
                .and_then(|e| e.get("Variables"))
                .and_then(|v| v.get("UMPIRE_REQUEST_BUDGET_MS"))
                .map_or(
                    umpire_api::config::DEFAULT_REQUEST_BUDGET.as_millis() as u64,
                    |b| number(Some(b)),
                );
            assert!(
                budget + 2_000 <= timeout * 1000,
                "{name}: a {budget} ms budget leaves no time to answer inside {timeout}s"
            );
        }
    }
    assert!(routed >= 10, "found the routed functions ({routed})");
}

#[test]
fn the_checker_is_isolated_and_its_timeout_is_the_check_limit() {
    let res = template_resources();
    let checker = by_binary(&res, "checker");
    let props = checker.get("Properties").expect("properties");
    assert!(
        props.get("Policies").is_none() && props.get("Role").is_none(),
        "the checker gets no permissions beyond its own logs"
    );
    assert!(
        props.get("Environment").is_none(),
        "the checker gets no variables of its own: only the globals (names, the public key), never a secret"
    );
    assert!(
        props.get("ReservedConcurrentExecutions").is_some(),
        "the checker has its own reserved pool"
    );
    let timeout = number(props.get("Timeout"));
    assert!(timeout <= 5, "a short hard timeout, not {timeout}s");
    let globals = umpire_blackbox::template_section("Globals");
    let limit_ms = number(
        globals
            .get("Function")
            .and_then(|f| f.get("Environment"))
            .and_then(|e| e.get("Variables"))
            .and_then(|v| v.get("UMPIRE_CHECK_LIMIT_MS")),
    );
    assert_eq!(
        limit_ms,
        timeout * 1000,
        "verdicts name the checker's real limit"
    );

    // Only the functions that judge may invoke it, and they are told its name.
    for (name, f) in functions(&res) {
        let invokes = may(f, "lambda:InvokeFunction", "CheckerFunction");
        let binary = str_at(f, &["Metadata", "BuildProperties", "Binary"]).unwrap_or(name);
        let judges = matches!(binary, "verdicts" | "worker");
        assert_eq!(
            invokes, judges,
            "{binary}: lambda:InvokeFunction on the checker"
        );
        assert_eq!(
            env_var(f, "UMPIRE_CHECKER_FUNCTION").is_some(),
            judges,
            "{binary}: UMPIRE_CHECKER_FUNCTION"
        );
    }
}

#[test]
fn only_signing_functions_may_open_the_sealed_seed() {
    let res = template_resources();
    for (name, f) in functions(&res) {
        let binary = str_at(f, &["Metadata", "BuildProperties", "Binary"]).unwrap_or(name);
        let signs = matches!(binary, "verdicts" | "worker" | "reputation");
        assert_eq!(
            may(f, "kms:Decrypt", "SigningKey"),
            signs,
            "{binary}: kms:Decrypt on the signing key"
        );
        assert_eq!(
            env_var(f, "UMPIRE_SIGNING_SEED_CIPHERTEXT").is_some(),
            signs,
            "{binary}: the sealed seed in its environment"
        );
    }
    let policy = String::from_utf8_lossy(
        &by_binary(&res, "verdicts")
            .get("Properties")
            .and_then(|p| p.get("Policies"))
            .expect("policies")
            .to_canonical_vec(),
    )
    .into_owned();
    assert!(
        policy.contains("kms:EncryptionContext:purpose") && policy.contains("umpire-signing-seed"),
        "Decrypt only with the seed's encryption context"
    );
}

/// Cargo.toml's router section, read with Python's own TOML parser.
const LOAD_ROUTER: &str = r#"
import json, sys, tomllib
print(json.dumps(tomllib.load(open(sys.argv[1], "rb"))["workspace"]["metadata"]["lambda"]["watch"]["router"]))
"#;

/// (path, method or "*", function) from `[workspace.metadata.lambda.watch.router]`.
fn watch_routes() -> BTreeSet<(String, String, String)> {
    let out = std::process::Command::new(umpire_blackbox::python())
        .args(["-c", LOAD_ROUTER])
        .arg(umpire_blackbox::repo_root().join("Cargo.toml"))
        .output()
        .expect("python3 (3.11+, for tomllib)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let router = umpire_core::json::parse(&out.stdout).expect("router JSON");
    let mut routes = BTreeSet::new();
    for (path, target) in router.as_object().expect("a table of paths") {
        match target {
            Value::String(function) => {
                routes.insert((path.clone(), "*".into(), function.clone()));
            }
            Value::Array(entries) => {
                for e in entries {
                    let field = |k: &str| str_at(e, &[k]).expect("method and function").to_owned();
                    routes.insert((path.clone(), field("method"), field("function")));
                }
            }
            other => panic!("{path}: unexpected router entry {other:?}"),
        }
    }
    routes
}

#[test]
fn cargo_lambda_watch_routes_the_api_as_the_http_api_does() {
    let res = template_resources();
    let watch = watch_routes();
    assert!(!watch.is_empty(), "the watch router is configured");
    let mut deployed = BTreeSet::new();
    for (_, f) in functions(&res) {
        let binary = str_at(f, &["Metadata", "BuildProperties", "Binary"]).expect("binary");
        for event in f
            .get("Properties")
            .and_then(|p| p.get("Events"))
            .and_then(Value::as_object)
            .map(|m| m.values().cloned().collect::<Vec<_>>())
            .unwrap_or_default()
        {
            if str_at(&event, &["Type"]) != Some("HttpApi") {
                continue;
            }
            let path = str_at(&event, &["Properties", "Path"])
                .expect("path")
                .to_owned();
            let method = str_at(&event, &["Properties", "Method"])
                .expect("method")
                .to_owned();
            deployed.insert((path, method, binary.to_owned()));
        }
    }
    for (path, method, binary) in &deployed {
        assert!(
            watch.contains(&(path.clone(), method.clone(), binary.clone()))
                || watch.contains(&(path.clone(), "*".into(), binary.clone())),
            "{method} {path} -> {binary} is deployed but not routed by cargo lambda watch"
        );
    }
    for (path, method, binary) in &watch {
        assert!(
            deployed
                .iter()
                .any(|(p, m, b)| p == path && b == binary && (method == "*" || m == method)),
            "cargo lambda watch routes {method} {path} -> {binary}, which the template does not"
        );
    }
}
