//! Per-IP rate limits on free routes: fixed one-minute windows counted atomically in
//! the store (DynamoDB `ADD`, SQLite upsert), so every Lambda instance shares them.
//! The window is configurable (`UMPIRE_RATE_LIMIT_WINDOW_MS`) so tests need not wait
//! for a minute to turn.

use crate::plumbing::rate_limits::WINDOW;

use umpire_core::{ApiError, ErrorCode};

use crate::plumbing::state::{AppState, ClientIp};

/// [`enforce`] for the caller of `req`. An MCP tool call is counted here too, in the
/// bucket of the route it stands for, after the `mcp` bucket counted the call itself:
/// otherwise a caller over its validate limit could go on validating through MCP.
pub async fn enforce_for(
    state: &AppState,
    bucket: &'static str,
    req: &crate::plumbing::wire::Request,
) -> Result<(), ApiError> {
    enforce(state, bucket, ClientIp::of(req)).await
}

/// The address a request is counted under: an IPv4 address as it is, an IPv6 address
/// by its /64 (one customer's link usually holds a whole /64, so counting full
/// addresses would give one caller 2^64 buckets), an IPv4-mapped IPv6 address as the
/// IPv4 address it is.
fn counted_as(ip: std::net::IpAddr) -> String {
    match ip {
        std::net::IpAddr::V4(v4) => v4.to_string(),
        std::net::IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => v4.to_string(),
            None => {
                let s = v6.segments();
                let net = std::net::Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0);
                format!("{net}/64")
            }
        },
    }
}

/// Counts this request in `bucket` for the caller's IP; refuses past the limit.
/// If the counter store fails, the request is let through, logged and counted in the
/// `RateLimitStoreFailures` metric: a free read is better served than refused for our
/// own fault, and the operator alarms on the metric.
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
    let now_ms = state.config.clock.now_ms();
    let window_ms = u64::try_from(limits.window.as_millis())
        .unwrap_or(u64::MAX)
        .max(1);
    // With the contract's minute this is the minute's number, as it always was.
    let window = now_ms / window_ms;
    let window_end_ms = (window + 1).saturating_mul(window_ms);
    let who = ip.map_or_else(|| "unknown".to_owned(), |ClientIp(ip)| counted_as(ip));
    let key = format!("{bucket}#{who}#{window}");
    // Kept one window past its end, in whole seconds (the stores' expiry unit).
    let expires_at = window_end_ms.saturating_add(window_ms).div_ceil(1000);
    match state.store.count_request(&key, expires_at).await {
        Ok(count) if count > limit => {
            let retry_after = window_end_ms.saturating_sub(now_ms).div_ceil(1000).max(1);
            let span = if limits.window == WINDOW {
                "this minute".to_owned()
            } else {
                format!("in this {window_ms} ms window")
            };
            Err(ApiError::new(
                ErrorCode::RateLimited,
                format!("more than {limit} {bucket} requests from your address {span}"),
                format!("Wait {retry_after} s (Retry-After) and try again."),
            )
            .with_retry_after(retry_after))
        }
        Ok(_) => Ok(()),
        Err(e) => {
            tracing::warn!(error = %e, bucket, "rate-limit counter unavailable; request let through");
            crate::plumbing::metrics::record(
                crate::plumbing::metrics::Metric::RateLimitUnavailable,
            );
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::counted_as;

    #[test]
    fn ipv6_callers_are_counted_by_their_64() {
        let at = |s: &str| counted_as(s.parse().expect("an address"));
        assert_eq!(at("203.0.113.7"), "203.0.113.7");
        assert_eq!(at("::ffff:203.0.113.7"), "203.0.113.7");
        assert_eq!(at("2001:db8:1:2::1"), "2001:db8:1:2::/64");
        assert_eq!(at("2001:db8:1:2:ffff:ffff:ffff:ffff"), "2001:db8:1:2::/64");
        assert_ne!(at("2001:db8:1:3::1"), at("2001:db8:1:2::1"));
    }
}
