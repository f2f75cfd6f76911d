//! Any bytes as a purchase's spec, for every tier: parsing and normalization never
//! panic, and a spec that parses normalizes to a fixed point (its normalized form
//! parses again to the same normalized form and hash).
#![no_main]

use libfuzzer_sys::fuzz_target;
use umpire_core::json::parse;
use umpire_core::product::Tier;
use umpire_core::spec::parse_spec;

fuzz_target!(|data: &[u8]| {
    let Ok(v) = parse(data) else { return };
    for tier in Tier::ALL {
        if let Ok(spec) = parse_spec(&v, Some(tier)) {
            let again = parse_spec(&spec.normalized, Some(tier)).expect("a normalized spec parses");
            assert_eq!(
                again.normalized, spec.normalized,
                "normalization is idempotent"
            );
            assert_eq!(again.hash, spec.hash);
        }
    }
    let _ = parse_spec(&v, None);
});
