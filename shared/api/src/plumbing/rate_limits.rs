//! The rate limits in force, as configured: requests per window per bucket (the
//! contract's per-minute table by default). Counting them is `limits`' job.

use std::collections::BTreeMap;
use std::time::Duration;

use umpire_core::product::RATE_LIMITS;

/// The contract's window: limits are per minute.
pub const WINDOW: Duration = Duration::from_secs(60);

/// Requests per window per bucket; `None` switches limiting off.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RateLimits {
    pub(crate) per_minute: BTreeMap<&'static str, u64>,
    pub(crate) window: Duration,
}

impl Default for RateLimits {
    fn default() -> Self {
        RateLimits {
            per_minute: RATE_LIMITS
                .iter()
                .map(|(b, n)| (*b, u64::from(*n)))
                .collect(),
            window: WINDOW,
        }
    }
}

impl RateLimits {
    pub fn limit(&self, bucket: &str) -> Option<u64> {
        self.per_minute.get(bucket).copied()
    }

    /// These limits with `bucket` (one of the contract's) allowing `n` a window.
    pub fn with(mut self, bucket: &str, n: u64) -> RateLimits {
        if let Some(limit) = self.per_minute.get_mut(bucket) {
            *limit = n;
        }
        self
    }
}
