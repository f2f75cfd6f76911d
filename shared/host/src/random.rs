//! Random numbers from the operating system's CSPRNG.

/// `N` bytes from the operating system's CSPRNG.
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
