//! Digests and random identifiers.

use sha2::{Digest, Sha256};

pub fn sha256(bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(bytes).into()
}

pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(sha256(bytes))
}

/// `n` bytes from the operating system's CSPRNG.
pub fn random_bytes<const N: usize>() -> [u8; N] {
    let mut b = [0u8; N];
    // The OS RNG failing is unrecoverable for a service that mints secrets and keys.
    #[allow(clippy::expect_used)]
    getrandom::fill(&mut b).expect("operating system random number generator unavailable");
    b
}

/// An identifier with a readable prefix and 128 random bits: `vrd_3f9a…`.
pub fn random_id(prefix: &str) -> String {
    format!("{prefix}_{}", hex::encode(random_bytes::<16>()))
}

/// Constant-time comparison of two byte strings (length is not secret).
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}
