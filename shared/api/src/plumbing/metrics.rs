//! Business metrics as CloudWatch embedded metric format (EMF): one JSON line on
//! stdout per event, which CloudWatch Logs turns into a metric without an API call or
//! an agent. Outside Lambda the same events are debug log lines.
//!
//! Every metric has one dimension, `Service`: the stack's name (`UMPIRE_SERVICE`, set by
//! the template), stable across deployments, so an alarm on it survives functions being
//! replaced (a physical function name does not).

use std::sync::OnceLock;

use umpire_core::Value;

/// The namespace every metric is published under.
pub const NAMESPACE: &str = "Umpire";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Metric {
    /// A signed verdict document was delivered (witness/basic/probe 201, sworn pass 1 202).
    VerdictIssued,
    /// A sworn verdict's final document was signed by pass 2.
    SwornFinalized,
    /// A payment settled and its purchase was delivered.
    Settlement,
    /// Settlement (or our own failure after judging) voided a purchase: nothing kept.
    Void,
    /// A webhook attempt failed (it will be retried, or it was the last).
    WebhookFailure,
    /// The rate-limit counter could not be read or written: the request was let through
    /// uncounted (fail-open, see `limits::enforce`). Alarm on it.
    RateLimitUnavailable,
    /// Pass 2 stopped waiting for a purchase whose settlement was still unknown when its
    /// hold lapsed: the verdict stays pending until someone looks. Alarm on it.
    SwornUnresolved,
    /// A paid request refused because the deployment has no signing key (before the
    /// first `umpire keygen` deploy, or after a deploy that lost the key's parameters).
    /// Alarm on it: the stack sells nothing.
    NotKeyed,
    /// An HTTP function answered 500 (our own failure, not a refusal): recorded per
    /// function version, so a rollout's new version that fails is rolled back.
    Internal5xx,
    /// An ERC-8004 validation answer was posted on chain.
    ValidationPosted,
    /// An ERC-8004 validation answer could not be queued, or was given up on after its
    /// retries: a paid verdict whose request shows no answer. Alarm on it.
    ValidationFailed,
    /// The validator's gas balance is below `UMPIRE_VALIDATOR_LOW_GAS_WEI`: answers
    /// will stop being posted when it runs out. Alarm on it.
    ValidatorGasLow,
    /// A purchase's settlement had no outcome by its request's deadline: it is
    /// followed to its end by the reconciler.
    PurchasePending,
    /// A pending purchase turned out paid and was delivered.
    PendingDelivered,
    /// A pending purchase's payment can no longer land: voided, nothing taken.
    PendingVoided,
    /// A purchase is still pending past the last moment its payment could land (the
    /// chain cannot be read, or something is stuck). Alarm on it.
    PendingOverdue,
}

impl Metric {
    pub fn name(self) -> &'static str {
        match self {
            Metric::VerdictIssued => "VerdictsIssued",
            Metric::SwornFinalized => "SwornFinalized",
            Metric::Settlement => "Settlements",
            Metric::Void => "Voids",
            Metric::WebhookFailure => "WebhookFailures",
            Metric::RateLimitUnavailable => "RateLimitStoreFailures",
            Metric::SwornUnresolved => "SwornUnresolved",
            Metric::NotKeyed => "NotKeyed",
            Metric::Internal5xx => "Internal5xx",
            Metric::ValidationPosted => "ValidationsPosted",
            Metric::ValidationFailed => "ValidationFailures",
            Metric::ValidatorGasLow => "ValidatorGasLow",
            Metric::PurchasePending => "PurchasesPending",
            Metric::PendingDelivered => "PendingDelivered",
            Metric::PendingVoided => "PendingVoided",
            Metric::PendingOverdue => "PendingOverdue",
        }
    }
}

/// The service dimension when `UMPIRE_SERVICE` is not set.
pub const DEFAULT_SERVICE: &str = "umpire";

/// One EMF line: the metric with value 1, dimensioned by service.
pub fn emf_line(metric: Metric, service: &str, timestamp_ms: u64) -> String {
    emf_line_with(metric, &[("Service", service)], timestamp_ms)
}

/// One EMF line: the metric with value 1 and these dimensions.
pub fn emf_line_with(metric: Metric, dimensions: &[(&str, &str)], timestamp_ms: u64) -> String {
    let definition = Value::object()
        .with("Namespace", NAMESPACE)
        .with(
            "Dimensions",
            Value::Array(vec![Value::Array(
                dimensions.iter().map(|(k, _)| Value::from(*k)).collect(),
            )]),
        )
        .with(
            "Metrics",
            Value::Array(vec![
                Value::object()
                    .with("Name", metric.name())
                    .with("Unit", "Count"),
            ]),
        );
    let mut line = Value::object().with(
        "_aws",
        Value::object()
            .with("Timestamp", timestamp_ms)
            .with("CloudWatchMetrics", Value::Array(vec![definition])),
    );
    for (k, v) in dimensions {
        line = line.with(*k, *v);
    }
    line.with(metric.name(), 1u64).to_canonical_string()
}

/// Records `metric` for this function's version (dimensions FunctionName and Version,
/// as Lambda names them), in Lambda only: what a rollout's alarm on the new version
/// reads.
pub fn record_for_version(metric: Metric) {
    if let (Ok(name), Ok(version)) = (
        std::env::var("AWS_LAMBDA_FUNCTION_NAME"),
        std::env::var("AWS_LAMBDA_FUNCTION_VERSION"),
    ) {
        let now_ms = umpire_host::Clock::system().now_ms();
        println!(
            "{}",
            emf_line_with(
                metric,
                &[("FunctionName", &name), ("Version", &version)],
                now_ms
            )
        );
    }
}

/// The service dimension, when running in Lambda (None elsewhere: no EMF lines).
fn lambda_service() -> Option<&'static str> {
    static SERVICE: OnceLock<Option<String>> = OnceLock::new();
    SERVICE
        .get_or_init(|| {
            std::env::var("AWS_LAMBDA_FUNCTION_NAME")
                .ok()
                .map(|_| std::env::var("UMPIRE_SERVICE").unwrap_or_else(|_| DEFAULT_SERVICE.into()))
        })
        .as_deref()
}

pub fn record(metric: Metric) {
    match lambda_service() {
        Some(service) => {
            let now_ms = umpire_host::Clock::system().now_ms();
            // stdout, not the tracing subscriber: EMF must be a line of its own.
            println!("{}", emf_line(metric, service, now_ms));
        }
        None => tracing::debug!(metric = metric.name(), "metric"),
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn a_versioned_line_names_the_function_and_its_version() {
        let line = emf_line_with(
            Metric::Internal5xx,
            &[("FunctionName", "umpire-Verdicts"), ("Version", "7")],
            1,
        );
        let v = umpire_core::json::parse(line.as_bytes()).expect("JSON");
        assert_eq!(
            v.get("_aws")
                .and_then(|a| a.get("CloudWatchMetrics"))
                .map(|m| m.to_canonical_string()),
            Some(r#"[{"Dimensions":[["FunctionName","Version"]],"Metrics":[{"Name":"Internal5xx","Unit":"Count"}],"Namespace":"Umpire"}]"#.to_owned())
        );
        assert_eq!(v.get("Version").and_then(|x| x.as_str()), Some("7"));
        assert_eq!(v.get("Internal5xx").and_then(|x| x.as_u64()), Some(1));
    }

    use super::*;

    #[test]
    fn an_emf_line_declares_its_metric_and_carries_its_value() {
        let line = emf_line(Metric::Void, "umpire-prod", 1_700_000_000_000);
        let v = umpire_core::json::parse_str(&line).expect("json");
        assert_eq!(v.get("Voids").and_then(Value::as_u64), Some(1));
        assert_eq!(
            v.get("Service").and_then(Value::as_str),
            Some("umpire-prod")
        );
        let aws = v.get("_aws").expect("_aws");
        assert_eq!(
            aws.get("Timestamp").and_then(Value::as_u64),
            Some(1_700_000_000_000)
        );
        let def = &aws
            .get("CloudWatchMetrics")
            .and_then(Value::as_array)
            .expect("defs")[0];
        assert_eq!(
            def.get("Namespace").and_then(Value::as_str),
            Some(NAMESPACE)
        );
        let metric = &def
            .get("Metrics")
            .and_then(Value::as_array)
            .expect("metrics")[0];
        assert_eq!(metric.get("Name").and_then(Value::as_str), Some("Voids"));
        assert!(!line.contains('\n'), "one line");
    }
}
