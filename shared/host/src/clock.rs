//! The clock: wall time as the service reads it, and deadlines on the monotonic clock.

use std::time::{SystemTime, UNIX_EPOCH};

/// The system's time in unix milliseconds (0 before 1970, which no host reports).
fn system_unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// The wall clock as the purchase path reads it (the ledger's holds, an authorization's
/// validity, a claim's lapse): the system's, or one a test moves forward to make a hold
/// lapse or an authorization expire without waiting. Budgets stay on the monotonic
/// clock ([`Deadline`]); only unix seconds move.
#[derive(Clone, Default)]
pub struct Clock {
    /// Seconds added to the system's time; None on the system clock.
    ahead: Option<std::sync::Arc<std::sync::atomic::AtomicU64>>,
    /// A clock stopped at this unix millisecond (then moved only by `advance`), so a
    /// test's rate-limit windows do not depend on where the wall clock sits in one.
    stopped_ms: Option<u64>,
}

impl std::fmt::Debug for Clock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let Some(ms) = self.stopped_ms {
            return write!(f, "Clock(stopped at {ms} ms + {} s)", self.ahead_secs());
        }
        match &self.ahead {
            None => f.write_str("Clock(system)"),
            Some(a) => write!(
                f,
                "Clock(system + {} s)",
                a.load(std::sync::atomic::Ordering::Relaxed)
            ),
        }
    }
}

impl Clock {
    /// The system's clock.
    pub fn system() -> Clock {
        Clock::default()
    }

    /// A clock that starts at the system's time and moves ahead by [`Clock::advance`].
    pub fn adjustable() -> Clock {
        Clock {
            ahead: Some(std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0))),
            stopped_ms: None,
        }
    }

    /// A clock stopped at `unix_ms`, moved only by [`Clock::advance`]: for tests whose
    /// windows (rate limits) must not depend on where the wall clock is.
    pub fn stopped_at(unix_ms: u64) -> Clock {
        Clock {
            stopped_ms: Some(unix_ms),
            ..Clock::adjustable()
        }
    }

    fn base_ms(&self) -> u64 {
        self.stopped_ms.unwrap_or_else(system_unix_ms)
    }

    fn ahead_secs(&self) -> u64 {
        self.ahead
            .as_ref()
            .map_or(0, |a| a.load(std::sync::atomic::Ordering::SeqCst))
    }

    /// Moves an adjustable clock `secs` ahead (every copy of it); no effect on the
    /// system clock.
    pub fn advance(&self, secs: u64) {
        if let Some(a) = &self.ahead {
            a.fetch_add(secs, std::sync::atomic::Ordering::SeqCst);
        }
    }

    /// Unix seconds.
    pub fn now(&self) -> u64 {
        (self.base_ms() / 1000).saturating_add(self.ahead_secs())
    }

    /// Unix milliseconds (rate-limit windows, job delays shorter than a second).
    pub fn now_ms(&self) -> u64 {
        self.base_ms()
            .saturating_add(self.ahead_secs().saturating_mul(1000))
    }

    /// `budget` from now, its unix seconds read on this clock.
    pub fn deadline(&self, budget: std::time::Duration) -> Deadline {
        let budget_ms = u64::try_from(budget.as_millis()).unwrap_or(u64::MAX);
        Deadline {
            at: std::time::Instant::now() + budget,
            unix: self.now_ms().saturating_add(budget_ms).div_ceil(1000),
        }
    }
}

/// When a request must have been answered: the platform's limit (API Gateway ends an
/// integration at 30 s) less a margin, fixed when the request arrives and handed to
/// everything the request waits on (fetches, checks, the chain, the facilitator).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Deadline {
    at: std::time::Instant,
    /// The same moment as unix seconds, rounded up: what an authorization's validity
    /// must cover.
    unix: u64,
}

impl Deadline {
    /// `budget` from now.
    pub fn after(budget: std::time::Duration) -> Deadline {
        let now_ms = system_unix_ms();
        let budget_ms = u64::try_from(budget.as_millis()).unwrap_or(u64::MAX);
        Deadline {
            at: std::time::Instant::now() + budget,
            unix: now_ms.saturating_add(budget_ms).div_ceil(1000),
        }
    }

    pub fn instant(&self) -> std::time::Instant {
        self.at
    }

    /// Unix seconds (rounded up).
    pub fn unix(&self) -> u64 {
        self.unix
    }

    /// What is left (zero once passed).
    pub fn remaining(&self) -> std::time::Duration {
        self.at.saturating_duration_since(std::time::Instant::now())
    }

    /// This deadline moved `d` earlier: the end of one phase that must leave `d` for
    /// the next.
    pub fn less(&self, d: std::time::Duration) -> Deadline {
        Deadline {
            at: self.at.checked_sub(d).unwrap_or(self.at),
            unix: self.unix.saturating_sub(d.as_secs()),
        }
    }

    /// Whether `d` still fits before it.
    pub fn allows(&self, d: std::time::Duration) -> bool {
        self.remaining() >= d
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{Clock, Deadline};

    #[test]
    fn an_adjustable_clock_moves_every_copy_and_the_system_clock_does_not() {
        let clock = Clock::adjustable();
        let copy = clock.clone();
        let before = clock.now();
        copy.advance(300);
        assert!(clock.now() >= before + 300);
        assert!(clock.now_ms() >= (before + 300) * 1000);
        assert!(clock.deadline(Duration::from_secs(1)).unix() >= before + 301);
        let system = Clock::system();
        system.advance(300);
        assert!(system.now() < before + 300);
    }

    #[test]
    fn a_deadline_counts_down_and_rounds_its_unix_time_up() {
        let before = Clock::system().now();
        let d = Deadline::after(Duration::from_millis(1500));
        assert!(d.remaining() <= Duration::from_millis(1500));
        assert!(d.allows(Duration::from_millis(1000)));
        assert!(!d.allows(Duration::from_secs(2)));
        assert!(d.unix() >= before + 2, "rounded up, never early");
        let phase = d.less(Duration::from_secs(1));
        assert!(phase < d && phase.remaining() <= Duration::from_millis(500));
        assert_eq!(Deadline::after(Duration::ZERO).remaining(), Duration::ZERO);
    }

    #[test]
    fn a_stopped_clock_moves_only_when_advanced() {
        let c = Clock::stopped_at(1_800_000_000_123);
        assert_eq!(c.now_ms(), 1_800_000_000_123);
        std::thread::sleep(Duration::from_millis(5));
        assert_eq!(c.now_ms(), 1_800_000_000_123);
        c.clone().advance(60);
        assert_eq!((c.now_ms(), c.now()), (1_800_000_060_123, 1_800_000_060));
        // Its deadlines' unix seconds read the same clock.
        assert_eq!(c.deadline(Duration::from_millis(900)).unix(), 1_800_000_062);
    }
}
