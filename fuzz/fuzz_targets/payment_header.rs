//! A PAYMENT-SIGNATURE / X-PAYMENT header as a client may send it: decoding and
//! payload parsing never panic, whatever the base64 and JSON inside.
#![no_main]

use libfuzzer_sys::fuzz_target;
use umpire_x402::{PaymentPayload, decode_header};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(raw) = decode_header::<serde_json::Value>(text) {
        let _ = PaymentPayload::from_json(raw);
    }
    // The JSON inside, directly (most base64 the fuzzer makes is not JSON).
    if let Ok(raw) = serde_json::from_slice::<serde_json::Value>(data) {
        let _ = PaymentPayload::from_json(raw);
    }
});
