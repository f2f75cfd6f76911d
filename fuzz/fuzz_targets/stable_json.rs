//! The stable JSON encoder: whatever the parser accepts re-encodes to bytes that parse
//! back to the same value and encode identically (a fixed point), and are valid UTF-8.
//! (Agreement with Python's json.dumps on the corpus: `make fuzz` replays it through
//! python3, see fuzz/README.md.)
#![no_main]

use libfuzzer_sys::fuzz_target;
use umpire_core::json::parse;

fuzz_target!(|data: &[u8]| {
    let Ok(v) = parse(data) else { return };
    let bytes = v.to_canonical_vec();
    assert!(std::str::from_utf8(&bytes).is_ok(), "stable JSON is UTF-8");
    let back = parse(&bytes).expect("stable JSON parses");
    assert_eq!(back, v, "round trip");
    assert_eq!(back.to_canonical_vec(), bytes, "fixed point");
});
