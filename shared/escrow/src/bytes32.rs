//! The bytes32 values the escrow and the registry carry (commitments, reasons,
//! transactions), written as and read from hex.

use alloy::primitives::B256;

/// `0x` and the 64 hex digits of a 32-byte value (a commitment, a reason, a
/// transaction).
pub fn bytes32_hex(b: &B256) -> String {
    format!("0x{}", alloy::hex::encode(b))
}

/// The bytes32 a sha256 hex string (a `deliverable_hash`, a `payload_sha256`) is.
pub fn bytes32_of(hex: &str) -> Option<B256> {
    (hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit()))
        .then(|| hex.parse().ok())
        .flatten()
}
