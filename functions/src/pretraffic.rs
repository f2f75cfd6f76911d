//! The PreTraffic hook: CodeDeploy calls it before any traffic moves to a new version of
//! a function (every function's `DeploymentPreference` names it), so a version that
//! cannot answer is rolled back even when no customer would have reached it during its
//! canary. It reads which function and version the deployment is for (the deployment's
//! AppSpec; the function's CloudFormation logical id from its tags), invokes that
//! version with a request it must answer right, and reports `Succeeded` or `Failed`.
//!
//! The requests are the ones a caller makes before paying, so a probe charges nothing
//! and signs nothing; it stores nothing but the per-IP rate-limit counters any caller
//! moves (the "unknown" bucket: a probe has no address): `/healthz`, a valid spec to
//! `/v1/validate`, an unpaid purchase (its `402`), an empty SQS batch for the worker,
//! one length check for the checkers. A stack deployed before its signing key or its payment rails answers
//! the paid and key routes `503 unavailable` on purpose; that is a right answer too.

use std::time::{Duration, Instant};

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
        /// What a right 200 carries (another function's bootstrap answers 200 too).
        shows: &'static str,
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

const fn get(
    path: &'static str,
    statuses: &'static [u16],
    unavailable: bool,
    shows: &'static str,
) -> Probe {
    Probe::Http {
        method: "GET",
        path,
        body: None,
        statuses,
        unavailable,
        shows,
    }
}

const fn post(
    path: &'static str,
    body: &'static str,
    statuses: &'static [u16],
    unavailable: bool,
    shows: &'static str,
) -> Probe {
    Probe::Http {
        method: "POST",
        path,
        body: Some(body),
        statuses,
        unavailable,
        shows,
    }
}

/// The probe for the function whose logical id in template.yaml is `logical_id`; None
/// for a function the hook does not know (refused: every deployed function gets one).
pub fn probe_for(logical_id: &str) -> Option<Probe> {
    Some(match logical_id {
        "HealthFunction" => get("/healthz", &[200], false, "\"key_id\""),
        "KeyFunction" => get("/.well-known/umpire-key.json", &[200], true, "\"key_id\""),
        "QuoteFunction" => get("/v1/quote", &[200], false, "\"limits\""),
        "OpenApiFunction" => get("/openapi.json", &[200], false, "\"openapi\""),
        "VerifyPageFunction" => get("/verify", &[200], false, "<html"),
        "ValidateFunction" => post("/v1/validate", VALID_SPEC, &[200], false, "\"spec_hash\""),
        "VerdictsFunction" => post("/v1/verdicts/basic", PURCHASE, &[402], true, ""),
        "ReputationFunction" => get(PROBE_MERCHANT, &[402], true, ""),
        // An id nobody holds: the same 404 as any unknown or expired one.
        "StatusFunction" => get(
            "/v1/verdicts/vrd_pretrafficprobe?secret=probe",
            &[404],
            true,
            "",
        ),
        "FindFunction" => get(
            "/v1/find?spec_hash=0000000000000000000000000000000000000000000000000000000000000000&webhook=https%3A%2F%2Fexample.com%2Fprobe",
            &[200],
            true,
            "\"verdict_ids\"",
        ),
        // A body that is no feedback: refused before anything is read or stored.
        "FeedbackFunction" => post("/v1/feedback", "{}", &[400, 422], true, ""),
        "McpFunction" => post(
            "/mcp",
            r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"umpire-pretraffic","version":"1"}}}"#,
            &[200],
            true,
            "\"jsonrpc\"",
        ),
        "WorkerFunction" => Probe::Jobs,
        "CheckerFunction" | "PassTwoCheckerFunction" => Probe::Checker,
        _ => return None,
    })
}

/// What a Lambda deployment does, from its AppSpec (JSON or YAML, as CodeDeploy stores
/// it: `Resources: [{<name>: {Type, Properties: {Name, Alias, CurrentVersion,
/// TargetVersion}}}]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub function: String,
    /// The version live now, behind the alias.
    pub current: String,
    /// The version the deployment moves the alias to.
    pub version: String,
}

pub fn target_of(appspec: &str) -> Result<Target, String> {
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
    let named = |key: &str| field(key).filter(|s| !s.is_empty());
    match (
        named("Name"),
        named("CurrentVersion"),
        named("TargetVersion"),
    ) {
        (Some(function), Some(current), Some(version)) => Ok(Target {
            function,
            current,
            version,
        }),
        _ => Err(format!(
            "the deployment's AppSpec names no function, current and target version: {}",
            appspec.chars().take(300).collect::<String>()
        )),
    }
}

/// How a version answered its probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answered {
    Right,
    /// `503 unavailable`, which is right only where the live version says the same.
    Unavailable,
}

/// Invokes `function:version` with its probe, within `deadline`, and says what was
/// wrong with the answer.
pub async fn run_probe(
    client: &aws_sdk_lambda::Client,
    qualified: &str,
    probe: Probe,
    deadline: Instant,
) -> Result<Answered, String> {
    match probe {
        Probe::Http {
            method,
            path,
            body,
            statuses,
            unavailable,
            shows,
        } => {
            let req = http::Request::builder()
                .method(method)
                .uri(path)
                .header("content-type", "application/json")
                .header("accept", "application/json, text/event-stream")
                .header("user-agent", "umpire-pretraffic")
                .body(Bytes::from(body.unwrap_or_default()))
                .map_err(|e| format!("the probe request: {e}"))?;
            let answer = invoke(client, qualified, crate::paid::http_event(&req), deadline).await?;
            // An API Gateway answer names its status: a bare JSON (another kind of
            // function's answer) would pass for a 200.
            let framed = serde_json::from_slice::<Value>(&answer)
                .is_ok_and(|v| v.get("statusCode").is_some_and(Value::is_u64));
            let response = crate::paid::http_response(&answer)
                .filter(|_| framed)
                .ok_or_else(|| {
                    format!(
                        "{method} {path}: not an API Gateway answer: {}",
                        excerpt(&answer)
                    )
                })?;
            judge_http(method, path, statuses, unavailable, shows, &response)
        }
        Probe::Jobs => {
            let answer = invoke(client, qualified, br#"{"Records":[]}"#.to_vec(), deadline).await?;
            let v: Value = serde_json::from_slice(&answer).unwrap_or_default();
            match v.get("batchItemFailures").and_then(Value::as_array) {
                Some(failures) if failures.is_empty() => Ok(Answered::Right),
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
            let left = deadline.saturating_duration_since(Instant::now());
            match tokio::time::timeout(left, checker.judge(&request)).await {
                Ok(Ok(outcomes))
                    if matches!(outcomes.as_slice(), [Outcome { passed: true, .. }]) =>
                {
                    Ok(Answered::Right)
                }
                Ok(Ok(outcomes)) => Err(format!(
                    "one length check on a short text: expected a pass, got {outcomes:?}"
                )),
                Ok(Err(e)) => Err(format!("one length check: {e}")),
                Err(_) => Err(format!("{qualified} did not answer within {left:?}")),
            }
        }
    }
}

fn judge_http(
    method: &str,
    path: &str,
    statuses: &[u16],
    unavailable: bool,
    shows: &str,
    response: &umpire_api::Response,
) -> Result<Answered, String> {
    let got = response.status().as_u16();
    let body: Value = serde_json::from_slice(response.body()).unwrap_or(Value::Null);
    let text = excerpt(response.body());
    if statuses.contains(&got) {
        // The error statuses the probe expects carry the contract's error body; a 200
        // carries what only this route answers.
        if got >= 400 && body["error"]["code"].as_str().is_none() {
            return Err(format!(
                "{method} {path}: {got} without the error body: {text}"
            ));
        }
        if !String::from_utf8_lossy(response.body()).contains(shows) {
            return Err(format!("{method} {path}: {got} without {shows}: {text}"));
        }
        return Ok(Answered::Right);
    }
    if unavailable && got == 503 && body["error"]["code"] == "unavailable" {
        return Ok(Answered::Unavailable);
    }
    Err(format!(
        "{method} {path}: expected {statuses:?}, got {got}: {text}"
    ))
}

/// One synchronous invocation within `deadline`; a function error (a crash, a cold
/// start that failed, a timeout) is a wrong answer. Throttling is waited out: every
/// function of a deploy is probed at once, on an account that may allow 10 executions.
async fn invoke(
    client: &aws_sdk_lambda::Client,
    qualified: &str,
    payload: Vec<u8>,
    deadline: Instant,
) -> Result<Vec<u8>, String> {
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let call = client
            .invoke()
            .function_name(qualified)
            .payload(aws_sdk_lambda::primitives::Blob::new(payload.clone()))
            .send();
        let out = match tokio::time::timeout(left, call).await {
            Err(_) => return Err(format!("{qualified} did not answer within {left:?}")),
            Ok(Err(e)) => {
                let throttled = matches!(
                    e.as_service_error(),
                    Some(
                        aws_sdk_lambda::operation::invoke::InvokeError::TooManyRequestsException(_)
                    )
                );
                if throttled && left > THROTTLE_PAUSE * 2 {
                    tokio::time::sleep(THROTTLE_PAUSE).await;
                    continue;
                }
                return Err(format!(
                    "invoking {qualified}: {}",
                    aws_sdk_lambda::error::DisplayErrorContext(e)
                ));
            }
            Ok(Ok(out)) => out,
        };
        let answer = out
            .payload()
            .map(|b| b.as_ref().to_vec())
            .unwrap_or_default();
        if let Some(kind) = out.function_error() {
            return Err(format!("{qualified} failed ({kind}): {}", excerpt(&answer)));
        }
        return Ok(answer);
    }
}

/// Between two tries of a throttled probe.
const THROTTLE_PAUSE: Duration = Duration::from_secs(2);

/// What the hook keeps of its own time to report, whatever the probes took.
const REPORT_MARGIN: Duration = Duration::from_secs(10);

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

    /// One lifecycle event: the verdict on the new version, reported to CodeDeploy
    /// before the hook's own time is up (`time_left`, from Lambda's deadline). A
    /// deployment that cannot be read, or a target without a probe, fails: traffic
    /// moves only to a version that answered right. An error only when the report
    /// itself could not be made (CodeDeploy then fails the hook at its own timeout).
    pub async fn handle(
        &self,
        event: &Value,
        own_arn: &str,
        time_left: Duration,
    ) -> Result<Value, String> {
        let (deployment, execution) = hook_ids(event)?;
        let deadline = Instant::now() + time_left.saturating_sub(REPORT_MARGIN);
        let verdict = self.verdict(&deployment, own_arn, deadline).await;
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

    /// Probes the deployment's target; its qualified name when it answered right. A
    /// refusal of the hook's own calls is tried again for a while: on the deploy that
    /// adds the hook, its role's grants may still be reaching IAM's every endpoint.
    async fn verdict(
        &self,
        deployment: &str,
        own_arn: &str,
        deadline: Instant,
    ) -> Result<String, String> {
        let mut tries = 0;
        loop {
            match self.probe_target(deployment, own_arn, deadline).await {
                Err(why)
                    if why.contains("AccessDenied")
                        && tries < ACCESS_RETRIES
                        && deadline.saturating_duration_since(Instant::now())
                            > ACCESS_PAUSE * 2 =>
                {
                    tries += 1;
                    tracing::warn!(deployment, %why, "the hook's own call was refused; trying again");
                    tokio::time::sleep(ACCESS_PAUSE).await;
                }
                done => return done,
            }
        }
    }

    async fn probe_target(
        &self,
        deployment: &str,
        own_arn: &str,
        deadline: Instant,
    ) -> Result<String, String> {
        let target = self.target(deployment).await?;
        let logical = self.logical_id(own_arn, &target.function).await?;
        let probe = probe_for(&logical).ok_or_else(|| {
            format!("no probe for {logical}: every function of the stack needs one (functions/src/pretraffic.rs)")
        })?;
        let qualified = format!("{}:{}", target.function, target.version);
        let failed = |why: String| format!("{logical} version {}: {why}", target.version);
        match run_probe(&self.lambda, &qualified, probe, deadline)
            .await
            .map_err(failed)?
        {
            Answered::Right => Ok(qualified),
            // Not keyed, or no rails yet: right only if the live version says so too (a
            // version that lost the stack's key or rails answers the same 503).
            Answered::Unavailable => {
                let live = format!("{}:{}", target.function, target.current);
                match run_probe(&self.lambda, &live, probe, deadline).await {
                    Ok(Answered::Right) => Err(failed(format!(
                        "answers 503 unavailable where version {} (live) answers",
                        target.current
                    ))),
                    _ => Ok(qualified),
                }
            }
        }
    }

    /// The function and versions `deployment` is for, from its AppSpec.
    async fn target(&self, deployment: &str) -> Result<Target, String> {
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
        let revision = self
            .codedeploy
            .get_application_revision()
            .application_name(&application)
            .revision(revision)
            .send()
            .await
            .map_err(|e| shown(&aws_sdk_codedeploy::error::DisplayErrorContext(e)))?
            .revision
            .ok_or_else(|| shown(&"no revision"))?;
        // A Lambda deployment CloudFormation starts reads back as a plain string (the
        // `String` revision type, deprecated for new deployments made through the API,
        // which use AppSpecContent): both are read.
        #[allow(deprecated)]
        let raw = revision.string.and_then(|r| r.content);
        let appspec = raw
            .or_else(|| revision.app_spec_content.and_then(|c| c.content))
            .ok_or_else(|| shown(&"a revision without AppSpec content"))?;
        target_of(&appspec)
    }

    /// The function's logical id in template.yaml, from CloudFormation's tag.
    async fn logical_id(&self, own_arn: &str, function: &str) -> Result<String, String> {
        let arn = function_arn(own_arn, function)?;
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
        tags.tags()
            .and_then(|t| t.get(LOGICAL_ID_TAG))
            .cloned()
            .ok_or_else(|| {
                format!("{function} has no {LOGICAL_ID_TAG} tag: not a function of this stack")
            })
    }
}

/// Tries of the hook's own calls refused by IAM, and the pause between them.
const ACCESS_RETRIES: u32 = 5;
const ACCESS_PAUSE: Duration = Duration::from_secs(5);

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
        let expected = Target {
            function: "umpire-HealthFunction-AbC".into(),
            current: "3".into(),
            version: "4".into(),
        };
        assert_eq!(target_of(json).as_ref(), Ok(&expected));
        let yaml = "version: 0.0\nResources:\n  - health:\n      Type: AWS::Lambda::Function\n      Properties:\n        Name: \"umpire-HealthFunction-AbC\"\n        Alias: \"live\"\n        CurrentVersion: \"3\"\n        TargetVersion: \"4\"\n";
        assert_eq!(target_of(yaml), Ok(expected));
        assert!(target_of("{}").is_err());
    }
}
