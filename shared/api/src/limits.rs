//! Per-IP rate limits on free routes: fixed one-minute windows counted atomically in
//! the store (DynamoDB `ADD`, SQLite upsert), so every Lambda instance shares them.

use std::collections::BTreeMap;

use umpire_core::product::RATE_LIMITS;
use umpire_core::{ApiError, ErrorCode};

use crate::{AppState, ClientIp};

const WINDOW_SECS: u64 = 60;

/// Requests per minute per bucket; `None` switches limiting off.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RateLimits {
    per_minute: BTreeMap<&'static str, u64>,
}

impl Default for RateLimits {
    fn default() -> Self {
        RateLimits {
            per_minute: RATE_LIMITS
                .iter()
                .map(|(b, n)| (*b, u64::from(*n)))
                .collect(),
        }
    }
}

impl RateLimits {
    /// The contract's values, each overridable with `UMPIRE_RATE_LIMIT_<BUCKET>`;
    /// `UMPIRE_RATE_LIMITS=off` returns None (local benchmarking, tests not about limits).
    pub fn from_env() -> Result<Option<RateLimits>, crate::config::ConfigError> {
        if std::env::var("UMPIRE_RATE_LIMITS").is_ok_and(|v| v == "off") {
            return Ok(None);
        }
        let mut limits = RateLimits::default();
        for (bucket, n) in limits.per_minute.iter_mut() {
            let name = format!("UMPIRE_RATE_LIMIT_{}", bucket.to_ascii_uppercase());
            if let Ok(v) = std::env::var(&name) {
                *n = v
                    .parse()
                    .ok()
                    .filter(|n| *n > 0)
                    .ok_or(crate::config::ConfigError {
                        name: "UMPIRE_RATE_LIMIT_<BUCKET>",
                        value: format!("{name}={v}"),
                        problem: "must be a positive number of requests per minute".into(),
                    })?;
            }
        }
        Ok(Some(limits))
    }

    pub fn limit(&self, bucket: &str) -> Option<u64> {
        self.per_minute.get(bucket).copied()
    }
}

/// Marks an internal request made by an MCP tool call: it was counted in the `mcp`
/// bucket already, so only the buckets the contract shares with MCP (feedback) count it
/// again.
#[derive(Debug, Clone, Copy)]
pub struct CountedAsMcp;

/// Buckets an MCP tool call is also counted in.
const SHARED_WITH_MCP: &[&str] = &["feedback"];

/// [`enforce`] for the caller of `req`, honouring [`CountedAsMcp`].
pub async fn enforce_for(
    state: &AppState,
    bucket: &'static str,
    req: &crate::Request,
) -> Result<(), ApiError> {
    if req.extensions().get::<CountedAsMcp>().is_some() && !SHARED_WITH_MCP.contains(&bucket) {
        return Ok(());
    }
    enforce(state, bucket, ClientIp::of(req)).await
}

/// Counts this request in `bucket` for the caller's IP; refuses past the limit.
/// If the counter store fails, the request is let through (and logged): a free read
/// is better served than refused for our own fault.
pub async fn enforce(
    state: &AppState,
    bucket: &'static str,
    ip: Option<ClientIp>,
) -> Result<(), ApiError> {
    let Some(limits) = &state.config.rate_limits else {
        return Ok(());
    };
    let Some(limit) = limits.limit(bucket) else {
        return Ok(());
    };
    let now = umpire_core::time::now_unix();
    let window = now / WINDOW_SECS;
    let window_end = (window + 1) * WINDOW_SECS;
    let who = ip.map_or_else(|| "unknown".to_owned(), |ClientIp(ip)| ip.to_string());
    let key = format!("{bucket}#{who}#{window}");
    match state
        .store
        .count_request(&key, window_end + WINDOW_SECS)
        .await
    {
        Ok(count) if count > limit => {
            let retry_after = window_end.saturating_sub(now).max(1);
            Err(ApiError::new(
                ErrorCode::RateLimited,
                format!("more than {limit} {bucket} requests from your address this minute"),
                format!("Wait {retry_after} s (Retry-After) and try again."),
            )
            .with_detail("retry_after_seconds", retry_after))
        }
        Ok(_) => Ok(()),
        Err(e) => {
            tracing::warn!(error = %e, bucket, "rate-limit counter unavailable; request let through");
            Ok(())
        }
    }
}
