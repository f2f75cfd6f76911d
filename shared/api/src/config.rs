//! Service configuration, read once from the environment.

use std::time::Duration;

use umpire_core::product::DEFAULT_ISSUER;

#[derive(Debug, Clone)]
pub struct Config {
    /// The identity documents name as issuer, and the base of links (status URLs).
    pub issuer: String,
    /// Wall-clock limit for one check in the isolated checker.
    pub check_limit: Duration,
    /// Per-IP limits on free routes; None when switched off.
    pub rate_limits: Option<crate::limits::RateLimits>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            issuer: DEFAULT_ISSUER.to_owned(),
            check_limit: umpire_checker::DEFAULT_CHECK_LIMIT,
            rate_limits: Some(crate::limits::RateLimits::default()),
        }
    }
}

#[derive(Debug, thiserror::Error)]
#[error("configuration {name}={value:?}: {problem}")]
pub struct ConfigError {
    pub name: &'static str,
    pub value: String,
    pub problem: &'static str,
}

/// The x402 rails the contract names, in preference order. Payment configuration
/// (payTo, facilitator, enabling) arrives with the payments work; until then the
/// manifest states what will be accepted.
pub const DEFAULT_RAILS: &[(&str, &str, &str, &str)] = &[
    (
        "USDC on Base",
        "eip155:8453",
        "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913",
        "fixed",
    ),
    (
        "USDC on Solana",
        "solana:5eykt4UsFv8P8NJdTREpY1vzqKqZKvdp",
        "EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1v",
        "fixed",
    ),
    (
        "SOL on Solana",
        "solana:5eykt4UsFv8P8NJdTREpY1vzqKqZKvdp",
        "native",
        "spot + 1.5%",
    ),
];

impl Config {
    pub fn rails_value(&self) -> umpire_core::Value {
        use umpire_core::Value;
        Value::Array(
            DEFAULT_RAILS
                .iter()
                .map(|(name, network, asset, pricing)| {
                    Value::object()
                        .with("name", *name)
                        .with("scheme", "exact")
                        .with("network", *network)
                        .with("asset", *asset)
                        .with("pricing", *pricing)
                })
                .collect(),
        )
    }

    /// `UMPIRE_ISSUER`, `UMPIRE_CHECK_LIMIT_MS`, `UMPIRE_RATE_LIMITS(_*)`; unset means the default.
    pub fn from_env() -> Result<Config, ConfigError> {
        let mut c = Config::default();
        if let Ok(v) = std::env::var("UMPIRE_ISSUER") {
            let v = v.trim_end_matches('/').to_owned();
            if !(v.starts_with("https://") || v.starts_with("http://")) {
                return Err(ConfigError {
                    name: "UMPIRE_ISSUER",
                    value: v,
                    problem: "must be an http(s) URL",
                });
            }
            c.issuer = v;
        }
        if let Ok(v) = std::env::var("UMPIRE_CHECK_LIMIT_MS") {
            let ms: u64 = v
                .parse()
                .ok()
                .filter(|ms| (50..=60_000).contains(ms))
                .ok_or(ConfigError {
                    name: "UMPIRE_CHECK_LIMIT_MS",
                    value: v.clone(),
                    problem: "must be milliseconds between 50 and 60000",
                })?;
            c.check_limit = Duration::from_millis(ms);
        }
        c.rate_limits = crate::limits::RateLimits::from_env()?;
        Ok(c)
    }
}
