//! Any text as a pattern, cut to the 1000-character cap a spec allows: everything done
//! with it before payment (length cap, case-folding allowance, backtracking guard,
//! weighing against the spec's compiled-size allowance, compiling without a prefilter),
//! as a regex check and as a JSON Schema pattern, ends within a per-input time budget.
//!
//! The allowances bound that work; the budget holds the bound. It is twice the slowest
//! of the most expensive patterns the allowances admit (a pattern compiling to nearly
//! the whole 3 MiB, three case-insensitive classes over all of Unicode), timed in this
//! very build at start, since the fuzzer's instrumentation slows parts of the regex
//! engine unevenly (2x for compiling, 14x for case folding). `UMPIRE_GUARD_BUDGET_MS`
//! sets it instead. In a release build those patterns cost ~60 ms and ~20 ms
//! (tests/hostile_input.rs holds whole requests to 100 ms there).
#![no_main]

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use libfuzzer_sys::fuzz_target;
use umpire_core::patterns::{MAX_PATTERN_CHARS, RegexBudget, check_regex, check_schema_pattern};

/// What one pattern costs before payment: as a regex check with every flag, then as a
/// schema pattern, each with a whole spec's allowance.
fn both_ways(pattern: &str) -> (Duration, Duration) {
    let started = Instant::now();
    let _ = check_regex(pattern, "ims", &mut RegexBudget::default());
    let regex = started.elapsed();
    let started = Instant::now();
    let _ = check_schema_pattern(pattern, &mut RegexBudget::default());
    (regex, started.elapsed())
}

fn budget() -> Duration {
    static BUDGET: OnceLock<Duration> = OnceLock::new();
    *BUDGET.get_or_init(|| {
        if let Some(ms) = std::env::var("UMPIRE_GUARD_BUDGET_MS")
            .ok()
            .and_then(|v| v.parse().ok())
        {
            return Duration::from_millis(ms);
        }
        let admitted = [
            "^\\w{1,150}$".to_owned(),
            "[\\x00-\\x{10FFFF}]".repeat(3),
        ];
        let worst = admitted
            .iter()
            .map(|p| {
                (0..3)
                    .map(|_| {
                        let (r, s) = both_ways(p);
                        r.max(s)
                    })
                    .min()
                    .unwrap_or_default()
            })
            .max()
            .unwrap_or_default();
        let budget = worst * 2 + Duration::from_millis(5);
        eprintln!("guard budget: {budget:?} (twice the slowest admitted pattern, {worst:?})");
        budget
    })
}

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let pattern: String = text.chars().take(MAX_PATTERN_CHARS).collect();
    let budget = budget();
    let (regex, schema) = both_ways(&pattern);
    for (what, took) in [("a regex check", regex), ("a schema pattern", schema)] {
        assert!(
            took <= budget,
            "{took:?} (budget {budget:?}) as {what} for the pattern {pattern:?}"
        );
    }
});
