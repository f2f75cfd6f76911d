//! The PreTraffic hook: CodeDeploy calls it before any traffic moves to a new version of
//! a function (every function's `DeploymentPreference` names it), so a version that
//! cannot answer is rolled back even when no customer would have reached it during its
//! canary. It reads which function and version the deployment is for (the deployment's
//! AppSpec; the function's CloudFormation logical id from its tags), invokes that
//! version with a request it must answer right, and reports `Succeeded` or `Failed`.
//!
//! The requests are the ones a caller makes before paying, so a probe charges nothing,
//! signs nothing and stores nothing: `/healthz`, a valid spec to `/v1/validate`, an
//! unpaid purchase (its `402`), an empty SQS batch for the worker, one length check for
//! the checkers. A stack deployed before its signing key or its payment rails answers
//! the paid and key routes `503 unavailable` on purpose; that is a right answer too.

use std::time::Duration;

use bytes::Bytes;
use serde_json::{Value, json};
use umpire_checker::{Judge, JudgeRequest};
use umpire_core::eval::Outcome;
use umpire_core::spec::Deliverable;

/// The CloudFormation tag naming a function's logical id (CloudFormation tags every
/// resource it creates with it).
pub const LOGICAL_ID_TAG: &str = "aws:cloudformation:logical-id";

/// What one new version must answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Probe {
    /// An API Gateway request and the statuses that are right for it (an error status
    /// with the contract's error body); `unavailable` also takes `503 unavailable` (a
    /// stack not keyed, or without rails yet).
    Http {
        method: &'static str,
        path: &'static str,
        body: Option<&'static str>,
        statuses: &'static [u16],
        unavailable: bool,
    },
    /// An empty SQS batch: no failures reported.
    Jobs,
    /// One length check on a short text: passed.
    Checker,
}

const VALID_SPEC: &str = r#"{"tier":"basic","spec":{"checks":[{"type":"length","min":1}]}}"#;
const PURCHASE: &str =
    r#"{"spec":{"checks":[{"type":"length","min":1}]},"deliverable":{"text":"pre-traffic probe"}}"#;
/// An address that is never a merchant anyone pays (the probe's 402 quotes it).
const PROBE_MERCHANT: &str = "/v1/reputation?merchant=0x0000000000000000000000000000000000000001";

const fn get(path: &'static str, statuses: &'static [u16], unavailable: bool) -> Probe {
    Probe::Http {
        method: "GET",
        path,
        body: None,
        statuses,
        unavailable,
    }
}

const fn post(
    path: &'static str,
    body: &'static str,
    statuses: &'static [u16],
    unavailable: bool,
) -> Probe {
    Probe::Http {
        method: "POST",
        path,
        body: Some(body),
        statuses,
        unavailable,
    }
}

/// The probe for the function whose logical id in template.yaml is `logical_id`; None
/// for a function the hook does not know (refused: every deployed function gets one).
pub fn probe_for(logical_id: &str) -> Option<Probe> {
    Some(match logical_id {
        "HealthFunction" => get("/healthz", &[200], false),
        "KeyFunction" => get("/.well-known/umpire-key.json", &[200], true),
        "QuoteFunction" => get("/v1/quote", &[200], false),
        "OpenApiFunction" => get("/openapi.json", &[200], false),
        "VerifyPageFunction" => get("/verify", &[200], false),
        "ValidateFunction" => post("/v1/validate", VALID_SPEC, &[200], false),
        "VerdictsFunction" => post("/v1/verdicts/basic", PURCHASE, &[402], true),
        "ReputationFunction" => get(PROBE_MERCHANT, &[402], true),
        // An id nobody holds: the same 404 as any unknown or expired one.
        "StatusFunction" => get(
            "/v1/verdicts/vrd_pretrafficprobe?secret=probe",
            &[404],
            true,
        ),
        "FindFunction" => get(
            "/v1/find?spec_hash=0000000000000000000000000000000000000000000000000000000000000000&webhook=https%3A%2F%2Fexample.com%2Fprobe",
            &[200],
            true,
        ),
        // A body that is no feedback: refused before anything is read or stored.
        "FeedbackFunction" => post("/v1/feedback", "{}", &[400, 422], true),
        "McpFunction" => post(
            "/mcp",
            r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"umpire-pretraffic","version":"1"}}}"#,
            &[200],
            true,
        ),
        "WorkerFunction" => Probe::Jobs,
        "CheckerFunction" | "PassTwoCheckerFunction" => Probe::Checker,
        _ => return None,
    })
}

/// The function and version a Lambda deployment shifts traffic to, from its AppSpec
/// (JSON or YAML, as CodeDeploy stores it: `Resources: [{<name>: {Type, Properties:
/// {Name, Alias, CurrentVersion, TargetVersion}}}]`).
pub fn target_of(appspec: &str) -> Result<(String, String), String> {
    let field = |key: &str| -> Option<String> {
        if let Ok(v) = serde_json::from_str::<Value>(appspec) {
            return v["Resources"]
                .as_array()?
                .iter()
                .filter_map(|r| r.as_object()?.values().next().cloned())
                .find(|r| r["Type"] == "AWS::Lambda::Function")
                .and_then(|r| match &r["Properties"][key] {
                    Value::String(s) => Some(s.clone()),
                    Value::Number(n) => Some(n.to_string()),
                    _ => None,
                });
        }
        // YAML: the first `key: value` line (one function per deployment).
        appspec.lines().find_map(|line| {
            let rest = line.trim().strip_prefix(key)?.strip_prefix(':')?;
            Some(rest.trim().trim_matches(['"', '\'']).to_owned())
        })
    };
    let name = field("Name").filter(|s| !s.is_empty());
    let version = field("TargetVersion").filter(|s| !s.is_empty());
    match (name, version) {
        (Some(n), Some(v)) => Ok((n, v)),
        _ => Err(format!(
            "the deployment's AppSpec names no function and target version: {}",
            appspec.chars().take(300).collect::<String>()
        )),
    }
}

/// Invokes `function:version` with its probe and says what was wrong with the answer.
pub async fn run_probe(
    client: &aws_sdk_lambda::Client,
    qualified: &str,
    probe: Probe,
) -> Result<(), String> {
    match probe {
        Probe::Http {
            method,
            path,
            body,
            statuses,
            unavailable,
        } => {
            let req = http::Request::builder()
                .method(method)
                .uri(path)
                .header("content-type", "application/json")
                .header("accept", "application/json, text/event-stream")
                .header("user-agent", "umpire-pretraffic")
                .body(Bytes::from(body.unwrap_or_default()))
                .map_err(|e| format!("the probe request: {e}"))?;
            let answer = invoke(client, qualified, crate::paid::http_event(&req)).await?;
            let response = crate::paid::http_response(&answer).ok_or_else(|| {
                format!(
                    "{method} {path}: not an API Gateway answer: {}",
                    excerpt(&answer)
                )
            })?;
            judge_http(method, path, statuses, unavailable, &response)
        }
        Probe::Jobs => {
            let answer = invoke(client, qualified, br#"{"Records":[]}"#.to_vec()).await?;
            let v: Value = serde_json::from_slice(&answer).unwrap_or_default();
            match v.get("batchItemFailures").and_then(Value::as_array) {
                Some(failures) if failures.is_empty() => Ok(()),
                _ => Err(format!(
                    "an empty batch: expected no failures, got {}",
                    excerpt(&answer)
                )),
            }
        }
        Probe::Checker => {
            let checker = crate::checker::LambdaChecker::new(
                client.clone(),
                qualified.to_owned(),
                Duration::from_secs(10),
            );
            let request = JudgeRequest {
                spec: umpire_core::json::parse_str(r#"{"checks":[{"type":"length","min":1}]}"#)
                    .map_err(|e| e.to_string())?,
                deliverable: Deliverable {
                    text: Some("pre-traffic probe".into()),
                    json: None,
                },
                fetched: vec![None],
            };
            match checker.judge(&request).await {
                Ok(outcomes) if matches!(outcomes.as_slice(), [Outcome { passed: true, .. }]) => {
                    Ok(())
                }
                Ok(outcomes) => Err(format!(
                    "one length check on a short text: expected a pass, got {outcomes:?}"
                )),
                Err(e) => Err(format!("one length check: {e}")),
            }
        }
    }
}

fn judge_http(
    method: &str,
    path: &str,
    statuses: &[u16],
    unavailable: bool,
    response: &umpire_api::Response,
) -> Result<(), String> {
    let got = response.status().as_u16();
    let body: Value = serde_json::from_slice(response.body()).unwrap_or(Value::Null);
    let text = excerpt(response.body());
    if statuses.contains(&got) {
        // The error statuses the probe expects carry the contract's error body.
        if got >= 400 && body["error"]["code"].as_str().is_none() {
            return Err(format!(
                "{method} {path}: {got} without the error body: {text}"
            ));
        }
        return Ok(());
    }
    if unavailable && got == 503 && body["error"]["code"] == "unavailable" {
        return Ok(());
    }
    Err(format!(
        "{method} {path}: expected {statuses:?}, got {got}: {text}"
    ))
}

/// One synchronous invocation; a function error (a crash, a cold start that failed, a
/// timeout) is a wrong answer.
async fn invoke(
    client: &aws_sdk_lambda::Client,
    qualified: &str,
    payload: Vec<u8>,
) -> Result<Vec<u8>, String> {
    let out = client
        .invoke()
        .function_name(qualified)
        .payload(aws_sdk_lambda::primitives::Blob::new(payload))
        .send()
        .await
        .map_err(|e| {
            format!(
                "invoking {qualified}: {}",
                aws_sdk_lambda::error::DisplayErrorContext(e)
            )
        })?;
    let answer = out
        .payload()
        .map(|b| b.as_ref().to_vec())
        .unwrap_or_default();
    if let Some(kind) = out.function_error() {
        return Err(format!("{qualified} failed ({kind}): {}", excerpt(&answer)));
    }
    Ok(answer)
}

fn excerpt(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).chars().take(300).collect()
}

/// The hook's clients: CodeDeploy (read the deployment, report on it) and Lambda
/// (read the target's tags, invoke its new version).
pub struct Hook {
    codedeploy: aws_sdk_codedeploy::Client,
    lambda: aws_sdk_lambda::Client,
}

impl Hook {
    pub fn new(aws: &umpire_aws::SdkConfig) -> Hook {
        Hook {
            codedeploy: aws_sdk_codedeploy::Client::new(aws),
            lambda: aws_sdk_lambda::Client::new(&umpire_aws::for_service(
                aws,
                umpire_aws::Service::Lambda,
            )),
        }
    }

    /// One lifecycle event: the verdict on the new version, reported to CodeDeploy. A
    /// deployment that cannot be read, or a target without a probe, fails: traffic
    /// moves only to a version that answered right. An error only when the report
    /// itself could not be made (CodeDeploy then fails the hook at its own timeout).
    pub async fn handle(&self, event: &Value, own_arn: &str) -> Result<Value, String> {
        let (deployment, execution) = hook_ids(event)?;
        let verdict = self.verdict(&deployment, own_arn).await;
        let (status, reason) = match &verdict {
            Ok(target) => (
                aws_sdk_codedeploy::types::LifecycleEventStatus::Succeeded,
                format!("{target} answered right"),
            ),
            Err(why) => (
                aws_sdk_codedeploy::types::LifecycleEventStatus::Failed,
                why.clone(),
            ),
        };
        if verdict.is_ok() {
            tracing::info!(deployment, %reason, "pre-traffic probe passed");
        } else {
            tracing::error!(deployment, %reason, "pre-traffic probe failed: the deployment is stopped");
        }
        self.codedeploy
            .put_lifecycle_event_hook_execution_status()
            .deployment_id(&deployment)
            .lifecycle_event_hook_execution_id(&execution)
            .status(status.clone())
            .send()
            .await
            .map_err(|e| {
                format!(
                    "reporting {status:?} for deployment {deployment}: {}",
                    aws_sdk_codedeploy::error::DisplayErrorContext(e)
                )
            })?;
        Ok(json!({ "deployment": deployment, "status": status.as_str(), "reason": reason }))
    }

    /// Probes the deployment's target; its qualified name when it answered right.
    async fn verdict(&self, deployment: &str, own_arn: &str) -> Result<String, String> {
        let shown = |e: &dyn std::fmt::Display| format!("reading deployment {deployment}: {e}");
        let info = self
            .codedeploy
            .get_deployment()
            .deployment_id(deployment)
            .send()
            .await
            .map_err(|e| shown(&aws_sdk_codedeploy::error::DisplayErrorContext(e)))?
            .deployment_info
            .ok_or_else(|| shown(&"no deployment info"))?;
        // GetDeployment never returns the AppSpec's content, only its hash: the
        // revision itself is read from the application.
        let (application, revision) = match (info.application_name, info.revision) {
            (Some(a), Some(r)) => (a, r),
            _ => return Err(shown(&"no application or revision")),
        };
        let appspec = self
            .codedeploy
            .get_application_revision()
            .application_name(&application)
            .revision(revision)
            .send()
            .await
            .map_err(|e| shown(&aws_sdk_codedeploy::error::DisplayErrorContext(e)))?
            .revision
            .and_then(|r| r.app_spec_content)
            .and_then(|c| c.content)
            .ok_or_else(|| shown(&"a revision without AppSpec content"))?;
        let (function, version) = target_of(&appspec)?;
        let arn = function_arn(own_arn, &function)?;
        let tags = self
            .lambda
            .list_tags()
            .resource(&arn)
            .send()
            .await
            .map_err(|e| {
                format!(
                    "reading {function}'s tags: {}",
                    aws_sdk_lambda::error::DisplayErrorContext(e)
                )
            })?;
        let logical = tags
            .tags()
            .and_then(|t| t.get(LOGICAL_ID_TAG))
            .ok_or_else(|| {
                format!("{function} has no {LOGICAL_ID_TAG} tag: not a function of this stack")
            })?;
        let probe = probe_for(logical).ok_or_else(|| {
            format!("no probe for {logical}: every function of the stack needs one (functions/src/pretraffic.rs)")
        })?;
        let qualified = format!("{function}:{version}");
        run_probe(&self.lambda, &qualified, probe)
            .await
            .map(|()| qualified.clone())
            .map_err(|why| format!("{logical} version {version}: {why}"))
    }
}

/// The ARN of function `name` in the hook's own account, region and partition (taken
/// from the hook's ARN, which Lambda gives every invocation).
fn function_arn(own_arn: &str, name: &str) -> Result<String, String> {
    if name.starts_with("arn:") {
        return Ok(name.to_owned());
    }
    let parts: Vec<&str> = own_arn.split(':').collect();
    match parts.as_slice() {
        ["arn", partition, "lambda", region, account, "function", ..] => Ok(format!(
            "arn:{partition}:lambda:{region}:{account}:function:{name}"
        )),
        _ => Err(format!("the hook's own ARN is not a function's: {own_arn}")),
    }
}

/// The hook's event, as CodeDeploy sends it.
pub fn hook_ids(event: &Value) -> Result<(String, String), String> {
    let text = |k: &str| event.get(k).and_then(Value::as_str).map(str::to_owned);
    match (text("DeploymentId"), text("LifecycleEventHookExecutionId")) {
        (Some(d), Some(h)) => Ok((d, h)),
        _ => Err(format!(
            "not a CodeDeploy lifecycle hook event: {}",
            json!(event)
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Would catch: the target read from the wrong field, or a YAML AppSpec (CodeDeploy
    /// stores either) not read at all.
    #[test]
    fn the_target_is_read_from_json_and_yaml_appspecs() {
        let json = r#"{"version":0.0,"Resources":[{"HealthFunction":{"Type":"AWS::Lambda::Function","Properties":{"Name":"umpire-HealthFunction-AbC","Alias":"live","CurrentVersion":"3","TargetVersion":"4"}}}]}"#;
        assert_eq!(
            target_of(json),
            Ok(("umpire-HealthFunction-AbC".into(), "4".into()))
        );
        let yaml = "version: 0.0\nResources:\n  - health:\n      Type: AWS::Lambda::Function\n      Properties:\n        Name: \"umpire-HealthFunction-AbC\"\n        Alias: \"live\"\n        CurrentVersion: \"3\"\n        TargetVersion: \"4\"\n";
        assert_eq!(
            target_of(yaml),
            Ok(("umpire-HealthFunction-AbC".into(), "4".into()))
        );
        assert!(target_of("{}").is_err());
    }
}
