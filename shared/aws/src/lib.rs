//! The AWS SDK as a Lambda function needs it, and no more.
//!
//! `aws-config` resolves region and credentials through a chain built for every place
//! an SDK may run (profiles, SSO, IMDS, STS web identity, ECS), and the SDK's default
//! HTTP client negotiates HTTP/2. A Lambda function has its region and credentials in its
//! environment and talks to regional AWS endpoints that answer HTTP/1.1, so each
//! bootstrap carried code it never runs: the STS and SSO clients, `h2`, a second
//! hyper/rustls stack beside reqwest's. Here the configuration is read from the
//! variables Lambda sets, and the SDK sends its requests through reqwest (HTTP/1.1 only,
//! the client alloy and the fetcher already link).
//!
//! The `umpire` CLI, which runs on an operator's machine, keeps `aws-config`.

mod http_client;

pub use aws_types::SdkConfig;
pub use http_client::ReqwestHttpClient;

use aws_credential_types::Credentials;
use aws_credential_types::provider::SharedCredentialsProvider;
use aws_smithy_runtime_api::client::behavior_version::BehaviorVersion;
use aws_types::region::Region;
use aws_types::sdk_config::{RetryConfig, TimeoutConfig};
use std::time::Duration;

/// aws-config's default connect timeout.
pub const CONNECT_TIMEOUT: Duration = Duration::from_millis(3100);
/// aws-config's default: the first attempt and two retries.
pub const DEFAULT_MAX_ATTEMPTS: u32 = 3;

/// A service whose endpoint can be pointed elsewhere with `AWS_ENDPOINT_URL_<ID>` (the
/// variable names the AWS SDKs share), as tests point the checker at a local emulator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Service {
    DynamoDb,
    Sqs,
    Kms,
    Lambda,
    SecretsManager,
}

impl Service {
    /// The service's part of its endpoint variable's name.
    pub const fn env_id(self) -> &'static str {
        match self {
            Service::DynamoDb => "DYNAMODB",
            Service::Sqs => "SQS",
            Service::Kms => "KMS",
            Service::Lambda => "LAMBDA",
            Service::SecretsManager => "SECRETS_MANAGER",
        }
    }
}

/// Reads the configuration from variables, the way Lambda provides it: `AWS_REGION`
/// (or `AWS_DEFAULT_REGION`), `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY` and
/// `AWS_SESSION_TOKEN` (the function's role); and, when set, `AWS_ENDPOINT_URL` (local
/// AWS in tests), `AWS_MAX_ATTEMPTS`, `AWS_USE_FIPS_ENDPOINT` and
/// `AWS_USE_DUALSTACK_ENDPOINT`. Errors name the variable.
/// A variable's value, trimmed (a stray newline in a secret would fail every
/// signature); unset and blank are the same.
fn nonempty(var: &dyn Fn(&str) -> Option<String>, name: &str) -> Option<String> {
    var(name)
        .map(|v| v.trim().to_owned())
        .filter(|v| !v.is_empty())
}

pub fn sdk_config_from(var: &dyn Fn(&str) -> Option<String>) -> Result<SdkConfig, String> {
    let nonempty = |name: &str| nonempty(var, name);
    let region = nonempty("AWS_REGION")
        .or_else(|| nonempty("AWS_DEFAULT_REGION"))
        .ok_or("AWS_REGION is not set (Lambda sets it for every function)")?;
    let key = nonempty("AWS_ACCESS_KEY_ID")
        .ok_or("AWS_ACCESS_KEY_ID is not set (Lambda sets the function role's credentials)")?;
    let secret = nonempty("AWS_SECRET_ACCESS_KEY").ok_or("AWS_SECRET_ACCESS_KEY is not set")?;
    let credentials = Credentials::new(
        key,
        secret,
        nonempty("AWS_SESSION_TOKEN"),
        None,
        "lambda-environment",
    );
    let flag = |name: &str| -> Result<Option<bool>, String> {
        match nonempty(name).map(|v| v.to_ascii_lowercase()).as_deref() {
            None => Ok(None),
            Some("true") => Ok(Some(true)),
            Some("false") => Ok(Some(false)),
            Some(other) => Err(format!("{name} must be true or false, not {other:?}")),
        }
    };
    let max_attempts =
        match nonempty("AWS_MAX_ATTEMPTS") {
            None => DEFAULT_MAX_ATTEMPTS,
            Some(v) => v.parse::<u32>().ok().filter(|n| *n >= 1).ok_or_else(|| {
                format!("AWS_MAX_ATTEMPTS must be a whole number from 1, not {v:?}")
            })?,
        };
    // What aws-config sets and the SDK clients do not: standard retries (throttling,
    // 5xx, I/O errors) and a connect timeout, so that a black-holed connection fails in
    // seconds, inside the function's own timeout.
    let timeouts = TimeoutConfig::builder()
        .connect_timeout(CONNECT_TIMEOUT)
        .build();
    let mut builder = SdkConfig::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new(region))
        .credentials_provider(SharedCredentialsProvider::new(credentials))
        // The connector for exactly these timeouts is built here, at cold start, so the
        // SDK's first request finds it.
        .http_client(ReqwestHttpClient::prepared((
            timeouts.connect_timeout(),
            timeouts.read_timeout(),
        )))
        .retry_config(RetryConfig::standard().with_max_attempts(max_attempts))
        .timeout_config(timeouts);
    if let Some(url) = nonempty("AWS_ENDPOINT_URL") {
        builder = builder.endpoint_url(url);
    }
    if let Some(fips) = flag("AWS_USE_FIPS_ENDPOINT")? {
        builder = builder.use_fips(fips);
    }
    if let Some(dual_stack) = flag("AWS_USE_DUALSTACK_ENDPOINT")? {
        builder = builder.use_dual_stack(dual_stack);
    }
    Ok(builder.build())
}

/// [`sdk_config_from`] the process's environment.
pub fn sdk_config_from_env() -> Result<SdkConfig, String> {
    sdk_config_from(&|name| std::env::var(name).ok())
}

/// The configuration for one service's client: `AWS_ENDPOINT_URL_<ID>` overrides the
/// shared endpoint for that service alone.
pub fn for_service(config: &SdkConfig, service: Service) -> SdkConfig {
    for_service_with(config, service, &|name| std::env::var(name).ok())
}

fn for_service_with(
    config: &SdkConfig,
    service: Service,
    var: &dyn Fn(&str) -> Option<String>,
) -> SdkConfig {
    match nonempty(var, &format!("AWS_ENDPOINT_URL_{}", service.env_id())) {
        Some(url) => config.to_builder().endpoint_url(url).build(),
        None => config.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn vars(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |name| map.get(name).cloned()
    }

    #[test]
    fn reads_what_lambda_sets() {
        let config = sdk_config_from(&vars(&[
            ("AWS_REGION", "eu-west-1"),
            ("AWS_ACCESS_KEY_ID", "AKID"),
            ("AWS_SECRET_ACCESS_KEY", "secret"),
            ("AWS_SESSION_TOKEN", "token"),
        ]))
        .expect("config");
        assert_eq!(config.region().map(|r| r.as_ref()), Some("eu-west-1"));
        assert_eq!(config.endpoint_url(), None);
        assert!(config.credentials_provider().is_some());
        assert!(config.http_client().is_some());
        assert_eq!(config.use_fips(), None);
        let timeouts = config.timeout_config().expect("timeouts");
        assert_eq!(timeouts.connect_timeout(), Some(CONNECT_TIMEOUT));
    }

    #[test]
    fn honours_the_sdk_switches() {
        let base = [
            ("AWS_REGION", "us-gov-west-1"),
            ("AWS_ACCESS_KEY_ID", "k"),
            ("AWS_SECRET_ACCESS_KEY", "s"),
        ];
        let with = |extra: &[(&str, &str)]| {
            let mut all = base.to_vec();
            all.extend_from_slice(extra);
            sdk_config_from(&vars(&all))
        };
        let fips =
            with(&[("AWS_USE_FIPS_ENDPOINT", "true"), ("AWS_MAX_ATTEMPTS", "5")]).expect("config");
        assert_eq!(fips.use_fips(), Some(true));
        assert_eq!(fips.retry_config().map(|r| r.max_attempts()), Some(5));
        let bad = with(&[("AWS_USE_DUALSTACK_ENDPOINT", "yes")]).expect_err("refused");
        assert!(bad.contains("AWS_USE_DUALSTACK_ENDPOINT"), "{bad}");
        let zero = with(&[("AWS_MAX_ATTEMPTS", "0")]).expect_err("refused");
        assert!(zero.contains("AWS_MAX_ATTEMPTS"), "{zero}");
    }

    #[test]
    fn names_what_is_missing() {
        let missing = sdk_config_from(&vars(&[("AWS_REGION", "us-east-1")])).expect_err("refused");
        assert!(missing.contains("AWS_ACCESS_KEY_ID"), "{missing}");
        let no_region = sdk_config_from(&vars(&[("AWS_ACCESS_KEY_ID", "k")])).expect_err("refused");
        assert!(no_region.contains("AWS_REGION"), "{no_region}");
    }

    #[test]
    fn a_service_endpoint_overrides_the_shared_one() {
        let var = vars(&[
            ("AWS_DEFAULT_REGION", "us-east-1"),
            ("AWS_ACCESS_KEY_ID", "k"),
            ("AWS_SECRET_ACCESS_KEY", "s"),
            ("AWS_ENDPOINT_URL", "http://127.0.0.1:1"),
            ("AWS_ENDPOINT_URL_LAMBDA", "http://127.0.0.1:2"),
        ]);
        let config = sdk_config_from(&var).expect("config");
        let lambda = for_service_with(&config, Service::Lambda, &var);
        let sqs = for_service_with(&config, Service::Sqs, &var);
        assert_eq!(lambda.endpoint_url(), Some("http://127.0.0.1:2"));
        assert_eq!(sqs.endpoint_url(), Some("http://127.0.0.1:1"));
    }
}
