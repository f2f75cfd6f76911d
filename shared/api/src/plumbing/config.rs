//! Service configuration, read once from the environment.

use std::time::Duration;

use alloy::primitives::{Address, U256};
use alloy::signers::local::PrivateKeySigner;
use umpire_core::product::{DEFAULT_ISSUER, SWORN_PASS2_DELAY_SECS};
use umpire_escrow::ContractRef;

use crate::plumbing::rate_limits::{RateLimits, WINDOW};

#[derive(Debug, Clone)]
pub struct Config {
    /// The identity documents name as issuer, and the base of links (status URLs).
    pub issuer: String,
    /// Wall-clock limit for one check in the isolated checker.
    pub check_limit: Duration,
    /// Per-IP limits on free routes; None when switched off.
    pub rate_limits: Option<RateLimits>,
    /// The payment rails accepted, in preference order (empty: nothing can be bought).
    pub rails: umpire_x402::Rails,
    /// Seconds between a sworn verdict's two passes.
    pub sworn_delay_secs: u32,
    /// The first webhook retry waits this long; each next one twice as long.
    pub webhook_retry_base: Duration,
    /// How long a paid request holds its Idempotency-Key and payment; a process that
    /// dies mid-purchase frees them after this. Longer than any purchase can run
    /// (more than [`Config::request_budget`]), so a claim that lapsed belongs to a
    /// purchase that has ended.
    pub in_progress_secs: u32,
    /// The time one paid request may take, from arrival to answer: verification,
    /// fetches, checks and settlement all fit inside it (API Gateway ends an HTTP
    /// integration at 30 s; the functions' Timeout is 29 s).
    pub request_budget: Duration,
    /// The wall clock every hold, lapse and validity check reads (the system's; tests
    /// move one ahead).
    pub clock: umpire_host::Clock,
    /// The reputation graph's anchors (lowercase 0x addresses): merchants whose payers
    /// count as anchored (docs/reputation.md). `UMPIRE_REPUTATION_ANCHORS`, comma
    /// separated; by default this deployment's own EVM `pay_to` addresses.
    pub reputation_anchors: Vec<String>,
    /// Where this deployment answers ERC-8004 validation requests (None: nowhere).
    pub validator: Option<ValidatorConfig>,
}

/// How long a claim holds the key while its request runs (checks, signing, settlement),
/// unless `UMPIRE_IN_PROGRESS_SECONDS` says otherwise; longer than the verdicts
/// function's timeout.
pub const IN_PROGRESS_SECS: u64 = 120;

/// [`Config::request_budget`] unless `UMPIRE_REQUEST_BUDGET_MS` says otherwise: API
/// Gateway's 30 s less the margin a Lambda needs to answer (the functions' Timeout is
/// 29 s) and a cold start.
pub const DEFAULT_REQUEST_BUDGET: Duration = Duration::from_secs(25);
/// What `maxTimeoutSeconds` leaves a client, beyond the budget and the settlement
/// margin, between our 402 and its paid request (signing, sending).
pub const SIGN_AND_SEND_SECS: u64 = 3;
/// The largest budget allowed: one that still answers inside API Gateway's 30 s.
pub const MAX_REQUEST_BUDGET_MS: u64 = (umpire_core::platform::API_GATEWAY_TIMEOUT_SECS - 1) * 1000;

impl Default for Config {
    fn default() -> Self {
        Config {
            issuer: DEFAULT_ISSUER.to_owned(),
            check_limit: umpire_checker::DEFAULT_CHECK_LIMIT,
            rate_limits: Some(RateLimits::default()),
            rails: umpire_x402::Rails {
                rails: Vec::new(),
                max_timeout_seconds: 60,
            },
            sworn_delay_secs: SWORN_PASS2_DELAY_SECS as u32,
            webhook_retry_base: Duration::from_secs(30),
            in_progress_secs: IN_PROGRESS_SECS as u32,
            request_budget: DEFAULT_REQUEST_BUDGET,
            clock: umpire_host::Clock::system(),
            reputation_anchors: Vec::new(),
            validator: None,
        }
    }
}

#[derive(Debug, thiserror::Error)]
#[error("configuration {name}={value:?}: {problem}")]
pub struct ConfigError {
    pub name: &'static str,
    pub value: String,
    pub problem: String,
}

/// A duration in milliseconds from the environment variable `name`, within `range`;
/// `default` when unset.
pub fn millis(
    name: &'static str,
    range: std::ops::RangeInclusive<u64>,
    default: Duration,
) -> Result<Duration, ConfigError> {
    let Ok(v) = std::env::var(name) else {
        return Ok(default);
    };
    v.parse::<u64>()
        .ok()
        .filter(|ms| range.contains(ms))
        .map(Duration::from_millis)
        .ok_or_else(|| ConfigError {
            name,
            value: v.clone(),
            problem: format!(
                "must be milliseconds between {} and {}",
                range.start(),
                range.end()
            ),
        })
}

impl Config {
    /// The budget must fit what depends on it: a claim outlives any purchase, and an
    /// authorization signed for `maxTimeoutSeconds` outlasts the whole request.
    pub fn check_budget(&self) -> Result<(), ConfigError> {
        let budget_secs = self.request_budget.as_millis().div_ceil(1000) as u64;
        if u64::from(self.in_progress_secs) <= budget_secs {
            return Err(ConfigError {
                name: "UMPIRE_IN_PROGRESS_SECONDS",
                value: self.in_progress_secs.to_string(),
                problem: format!(
                    "must be longer than the request budget ({} ms, UMPIRE_REQUEST_BUDGET_MS): a lapsed claim must mean its purchase has ended",
                    self.request_budget.as_millis()
                ),
            });
        }
        let need = budget_secs + umpire_x402::evm::VALID_BEFORE_MARGIN_SECS + SIGN_AND_SEND_SECS;
        if self.rails.max_timeout_seconds < need {
            return Err(ConfigError {
                name: "UMPIRE_PAYMENT_TIMEOUT_SECONDS",
                value: self.rails.max_timeout_seconds.to_string(),
                problem: format!(
                    "must be at least {need}: an authorization the client signs for maxTimeoutSeconds must outlast the time to sign and send it, the request budget ({} ms) and the settlement margin",
                    self.request_budget.as_millis()
                ),
            });
        }
        Ok(())
    }

    /// The enabled rails as the pricing manifest shows them, in preference order.
    pub fn rails_value(&self) -> umpire_core::Value {
        use umpire_core::Value;
        Value::Array(
            self.rails
                .rails
                .iter()
                .map(|r| {
                    let rail = Value::object()
                        .with("scheme", r.scheme.as_str())
                        .with("network", r.network.as_str())
                        .with("asset", r.asset.to_string().as_str())
                        .with("pay_to", r.pay_to.to_string().as_str())
                        .with(
                            "pricing",
                            match r.pricing {
                                umpire_x402::RailPricing::Stablecoin { .. } => "fixed",
                                umpire_x402::RailPricing::SolSpot => "spot + 1.5%, rounded up",
                            },
                        );
                    // Who signs as fee payer of a Solana USDC transfer: a payer pins it,
                    // so a 402 naming another cannot have the payer's transfer signed
                    // and landed outside the sale.
                    match r.extra.get("feePayer").and_then(|v| v.as_str()) {
                        Some(fee_payer) => rail.with("fee_payer", fee_payer),
                        None => rail,
                    }
                })
                .collect(),
        )
    }

    /// `UMPIRE_ISSUER`, `UMPIRE_CHECK_LIMIT_MS`, `UMPIRE_RATE_LIMITS(_*)`, the
    /// `UMPIRE_*_SECONDS` timings; unset means the default.
    pub fn from_env() -> Result<Config, ConfigError> {
        let mut c = Config::default();
        if let Some(issuer) = issuer_from_env()? {
            c.issuer = issuer;
        }
        c.check_limit = millis("UMPIRE_CHECK_LIMIT_MS", 50..=60_000, c.check_limit)?;
        c.rate_limits = rate_limits_from_env()?;
        let max_delay = umpire_core::platform::SQS_MAX_DELAY_SECS;
        c.sworn_delay_secs = secs(
            "UMPIRE_SWORN_DELAY_SECONDS",
            1..=max_delay,
            c.sworn_delay_secs,
        )?;
        // Milliseconds, so tests can run five retries in well under a second.
        c.webhook_retry_base = millis(
            "UMPIRE_WEBHOOK_RETRY_BASE_MS",
            SHORTEST_RETRY_BASE_MS..=u64::from(max_delay) * 1000,
            c.webhook_retry_base,
        )?;
        c.in_progress_secs = secs("UMPIRE_IN_PROGRESS_SECONDS", 5..=900, c.in_progress_secs)?;
        c.request_budget = millis(
            "UMPIRE_REQUEST_BUDGET_MS",
            1_000..=MAX_REQUEST_BUDGET_MS,
            c.request_budget,
        )?;
        c.rails = umpire_pay::config::rails_from_env().map_err(|e| ConfigError {
            name: e.name,
            value: std::env::var(e.name).unwrap_or_default(),
            problem: e.problem,
        })?;
        c.reputation_anchors = anchors_from_env(&c.rails)?;
        c.validator = ValidatorConfig::from_env()?;
        c.check_budget()?;
        Ok(c)
    }
}

/// `UMPIRE_ISSUER`, if set: an http(s) URL, without its trailing slash.
fn issuer_from_env() -> Result<Option<String>, ConfigError> {
    let Ok(v) = std::env::var("UMPIRE_ISSUER") else {
        return Ok(None);
    };
    let v = v.trim_end_matches('/').to_owned();
    if !(v.starts_with("https://") || v.starts_with("http://")) {
        return Err(ConfigError {
            name: "UMPIRE_ISSUER",
            value: v,
            problem: "must be an http(s) URL".into(),
        });
    }
    Ok(Some(v))
}

/// Whole seconds from `name`, within `range`; `default` when unset.
fn secs(
    name: &'static str,
    range: std::ops::RangeInclusive<u32>,
    default: u32,
) -> Result<u32, ConfigError> {
    match std::env::var(name) {
        Err(_) => Ok(default),
        Ok(v) => v
            .parse::<u32>()
            .ok()
            .filter(|s| range.contains(s))
            .ok_or_else(|| ConfigError {
                name,
                value: v.clone(),
                problem: format!("must be seconds from {} to {}", range.start(), range.end()),
            }),
    }
}

const ANCHORS_ENV: &str = "UMPIRE_REPUTATION_ANCHORS";

/// `UMPIRE_REPUTATION_ANCHORS` (comma-separated addresses; `none` or empty for no
/// anchor) or, unset, the EVM addresses this deployment is paid at: a payer who bought
/// from us paid a party that does not hand the money back.
fn anchors_from_env(rails: &umpire_x402::Rails) -> Result<Vec<String>, ConfigError> {
    anchors_from(std::env::var(ANCHORS_ENV).ok().as_deref(), rails)
}

/// The anchors `value` of `UMPIRE_REPUTATION_ANCHORS` names (None: the variable is
/// unset), lowercase, sorted, each once. A value separate from the environment so tests
/// can read every spelling without setting a variable.
fn anchors_from(
    value: Option<&str>,
    rails: &umpire_x402::Rails,
) -> Result<Vec<String>, ConfigError> {
    let mut anchors: Vec<String> = match value {
        None => rails
            .rails
            .iter()
            .filter_map(|r| r.pay_to.evm())
            .map(|a| umpire_chain::claim::lower_hex(a.as_slice()))
            .collect(),
        Some(v) if matches!(v.trim(), "none" | "") => Vec::new(),
        Some(v) => v
            .split(',')
            .map(|a| {
                umpire_chain::claim::parse_address(a.trim())
                    .map(|a| umpire_chain::claim::lower_hex(a.as_slice()))
                    .map_err(|problem| ConfigError {
                        name: ANCHORS_ENV,
                        value: v.to_owned(),
                        problem: format!("{a:?}: {problem}"),
                    })
            })
            .collect::<Result<_, _>>()?,
    };
    anchors.sort();
    anchors.dedup();
    Ok(anchors)
}

/// The contract's values, each overridable with `UMPIRE_RATE_LIMIT_<BUCKET>`;
/// `UMPIRE_RATE_LIMITS=off` returns None in a test build (tests that need no limits);
/// see [`limits_off`].
fn rate_limits_from_env() -> Result<Option<RateLimits>, ConfigError> {
    if std::env::var("UMPIRE_RATE_LIMITS").is_ok_and(|v| v == "off") {
        return limits_off();
    }
    let mut limits = RateLimits::default();
    for (bucket, n) in limits.per_minute.iter_mut() {
        let name = format!("UMPIRE_RATE_LIMIT_{}", bucket.to_ascii_uppercase());
        if let Ok(v) = std::env::var(&name) {
            *n = v.parse().ok().filter(|n| *n > 0).ok_or(ConfigError {
                name: "UMPIRE_RATE_LIMIT_<BUCKET>",
                value: format!("{name}={v}"),
                problem: "must be a positive number of requests per minute".into(),
            })?;
        }
    }
    limits.window = millis(
        "UMPIRE_RATE_LIMIT_WINDOW_MS",
        SHORTEST_WINDOW_MS..=3_600_000,
        WINDOW,
    )?;
    Ok(Some(limits))
}

// Switches that weaken a defence exist only in a build made for tests (feature
// `test-switches`, which `make test` builds and no release does): limits off, a
// rate-limit window under the contract's minute (a higher rate), webhook retries
// sooner than the documented 30 s base. Any other build has no code that honours them:
// set, they stop the process at start with the variable's name.

/// `UMPIRE_RATE_LIMITS=off` in a test build: no limits.
#[cfg(feature = "test-switches")]
fn limits_off() -> Result<Option<RateLimits>, ConfigError> {
    Ok(None)
}

/// `UMPIRE_RATE_LIMITS=off` in any other build: refused.
#[cfg(not(feature = "test-switches"))]
fn limits_off() -> Result<Option<RateLimits>, ConfigError> {
    Err(ConfigError {
        name: "UMPIRE_RATE_LIMITS",
        value: "off".into(),
        problem: "turning the per-IP limits off is a test switch, and this build has none \
                  (built without the test-switches feature, as every release is): remove it, \
                  or raise one bucket with UMPIRE_RATE_LIMIT_<BUCKET>"
            .into(),
    })
}

#[cfg(feature = "test-switches")]
const SHORTEST_WINDOW_MS: u64 = 100;
/// Never under the contract's minute outside a test build: a shorter window is a
/// higher rate than the contract's.
#[cfg(not(feature = "test-switches"))]
const SHORTEST_WINDOW_MS: u64 = WINDOW.as_millis() as u64;

#[cfg(feature = "test-switches")]
const SHORTEST_RETRY_BASE_MS: u64 = 10;
/// Never sooner than the documented 30 s outside a test build: a receiver that is down
/// is not hammered.
#[cfg(not(feature = "test-switches"))]
const SHORTEST_RETRY_BASE_MS: u64 = 30_000;

#[cfg(test)]
mod budget_tests {
    use super::*;

    /// docs/sworn.md's defaults, which every test overrides: pass 2 a minute after the
    /// answer, webhook retries 30 s × 2^(n-1) apart, and a rate-limit window of a
    /// minute. Would catch: a default changed in the code and not in the docs, never
    /// seen by a test that sets its own.
    #[test]
    fn the_documented_defaults() {
        let c = Config::default();
        assert_eq!(c.sworn_delay_secs, 60);
        assert_eq!(c.webhook_retry_base, Duration::from_secs(30));
        assert_eq!(WINDOW, Duration::from_secs(60));
    }

    #[test]
    fn the_budget_must_fit_the_claim_and_the_authorization() {
        let mut c = Config::default();
        assert!(c.check_budget().is_ok(), "the defaults agree");
        c.in_progress_secs = 25;
        let e = c
            .check_budget()
            .expect_err("a claim no longer than the budget");
        assert_eq!(e.name, "UMPIRE_IN_PROGRESS_SECONDS");
        c.in_progress_secs = 26;
        assert!(c.check_budget().is_ok());
        c.rails.max_timeout_seconds = 33;
        let e = c
            .check_budget()
            .expect_err("25 s + 6 s margin + 3 s to sign and send");
        assert_eq!(e.name, "UMPIRE_PAYMENT_TIMEOUT_SECONDS");
        c.rails.max_timeout_seconds = 34;
        assert!(c.check_budget().is_ok());
        c.request_budget = Duration::from_millis(25_001);
        assert!(
            c.check_budget().is_err(),
            "budgets round up to whole seconds"
        );
    }
}

#[cfg(test)]
mod tests;

// ---- ERC-8004: where this deployment answers validation requests (docs/erc8004.md).

/// The validator's balance below which every answer posted says so (a metric to alarm
/// on): 0.005 ETH, hundreds of answers at Base's usual fees.
pub const DEFAULT_LOW_GAS_WEI: u128 = 5_000_000_000_000_000;

/// Where this deployment answers validation requests, from the environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValidatorConfig {
    /// `UMPIRE_VALIDATION_REGISTRY`: `eip155:<chain id>:<registry>`.
    pub registry: ContractRef,
    /// The validator's address: `UMPIRE_VALIDATOR_ADDRESS`, or the address of
    /// `UMPIRE_VALIDATOR_KEY_HEX` (local runs).
    pub validator: Address,
    /// `UMPIRE_VALIDATION_RPC_URL`: where the registry is read and answered (the
    /// functions that do neither need none).
    pub rpc_url: Option<String>,
    /// `UMPIRE_AGENT_REGISTRY` and `UMPIRE_AGENT_ID`: Umpire's own registration as an
    /// agent (`eip155:<chain id>:<identity registry>`, its token id), when registered.
    pub agent: Option<(ContractRef, U256)>,
    /// `UMPIRE_VALIDATOR_LOW_GAS_WEI`.
    pub low_gas_wei: U256,
    /// `UMPIRE_VALIDATION_LOOKBACK_BLOCKS`: how far back a request's event is looked for.
    pub lookback_blocks: u64,
}

fn var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

fn bad(name: &'static str, value: &str, problem: impl Into<String>) -> ConfigError {
    ConfigError {
        name,
        value: value.to_owned(),
        problem: problem.into(),
    }
}

/// A Lambda function's plain signing seed, in hex: local runs of the functions only
/// (`make watch`, tests). A deployed function carries the seed sealed under KMS, and
/// `umpire serve` signs with its data directory's key; both refuse this variable.
pub const SEED_HEX_ENV: &str = "UMPIRE_SIGNING_SEED_HEX";

/// The validator's key for local runs (`UMPIRE_VALIDATOR_KEY_HEX`); on AWS the key is
/// sealed (`UMPIRE_VALIDATOR_KEY_CIPHERTEXT`, opened by the worker alone).
pub const KEY_HEX_ENV: &str = "UMPIRE_VALIDATOR_KEY_HEX";

/// `UMPIRE_VALIDATOR_KEY_HEX` as a signer, if set.
pub fn key_from_env() -> Result<Option<PrivateKeySigner>, ConfigError> {
    match var(KEY_HEX_ENV) {
        None => Ok(None),
        Some(v) => v.trim().parse::<PrivateKeySigner>().map(Some).map_err(|_| {
            bad(
                KEY_HEX_ENV,
                "(hidden)",
                "must be a 0x-prefixed 32-byte secp256k1 key",
            )
        }),
    }
}

/// `UMPIRE_AGENT_REGISTRY` and `UMPIRE_AGENT_ID` (together or not at all): the
/// ERC-8004 agent this deployment registers as.
fn agent_from_env() -> Result<Option<(ContractRef, U256)>, ConfigError> {
    match (var("UMPIRE_AGENT_REGISTRY"), var("UMPIRE_AGENT_ID")) {
        (Some(reg), Some(id)) => Ok(Some((
            reg.parse().map_err(|e: umpire_escrow::JobRefError| {
                bad("UMPIRE_AGENT_REGISTRY", &reg, e.problem)
            })?,
            id.trim()
                .parse::<U256>()
                .map_err(|_| bad("UMPIRE_AGENT_ID", &id, "must be a decimal token id"))?,
        ))),
        (None, None) => Ok(None),
        _ => Err(bad(
            "UMPIRE_AGENT_ID",
            "",
            "UMPIRE_AGENT_REGISTRY and UMPIRE_AGENT_ID go together",
        )),
    }
}

impl ValidatorConfig {
    /// None when `UMPIRE_VALIDATION_REGISTRY` is unset: this deployment answers no
    /// validation request (a purchase naming one is refused before payment).
    pub fn from_env() -> Result<Option<ValidatorConfig>, ConfigError> {
        const REGISTRY: &str = "UMPIRE_VALIDATION_REGISTRY";
        const ADDRESS: &str = "UMPIRE_VALIDATOR_ADDRESS";
        let Some(r) = var(REGISTRY) else {
            return Ok(None);
        };
        let registry: ContractRef = r
            .parse()
            .map_err(|e: umpire_escrow::JobRefError| bad(REGISTRY, &r, e.problem))?;
        let from_key = key_from_env()?.map(|k| k.address());
        let validator = match (var(ADDRESS), from_key) {
            (Some(a), key) => {
                let a: Address = a
                    .trim()
                    .parse()
                    .map_err(|_| bad(ADDRESS, &a, "must be a 0x address"))?;
                if key.is_some_and(|k| k != a) {
                    return Err(bad(
                        ADDRESS,
                        &a.to_string(),
                        format!("differs from the address of {KEY_HEX_ENV}"),
                    ));
                }
                a
            }
            (None, Some(k)) => k,
            (None, None) => {
                return Err(bad(
                    ADDRESS,
                    "",
                    format!("is required with {REGISTRY} (or set {KEY_HEX_ENV} locally)"),
                ));
            }
        };
        let agent = agent_from_env()?;
        let low_gas_wei = match var("UMPIRE_VALIDATOR_LOW_GAS_WEI") {
            None => U256::from(DEFAULT_LOW_GAS_WEI),
            Some(v) => v.trim().parse().map_err(|_| {
                bad(
                    "UMPIRE_VALIDATOR_LOW_GAS_WEI",
                    &v,
                    "must be a decimal amount of wei",
                )
            })?,
        };
        let lookback_blocks = match var("UMPIRE_VALIDATION_LOOKBACK_BLOCKS") {
            None => umpire_escrow::DEFAULT_LOOKBACK_BLOCKS,
            Some(v) => v.trim().parse().ok().filter(|n| *n > 0).ok_or_else(|| {
                bad(
                    "UMPIRE_VALIDATION_LOOKBACK_BLOCKS",
                    &v,
                    "must be a positive number of blocks",
                )
            })?,
        };
        Ok(Some(ValidatorConfig {
            registry,
            validator,
            rpc_url: var("UMPIRE_VALIDATION_RPC_URL"),
            agent,
            low_gas_wei,
            lookback_blocks,
        }))
    }
}
