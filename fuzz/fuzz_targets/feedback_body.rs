//! POST /v1/feedback bodies: the strict parser never panics, and an accepted claim's
//! signed message is the contract's six lines.
#![no_main]

use libfuzzer_sys::fuzz_target;
use umpire_chain::claim::FeedbackClaim;
use umpire_core::json::parse;

fuzz_target!(|data: &[u8]| {
    let Ok(v) = parse(data) else { return };
    if let Ok(claim) = FeedbackClaim::parse(&v) {
        let message = claim.message();
        assert_eq!(message.lines().count(), 6, "{message:?}");
        assert!(!message.ends_with('\n'));
    }
});
