//! Crypto-shredding: what must carry a deliverable for a while (a sworn verdict's
//! pass-2 job, its retries, a dead-letter copy) carries it sealed under a data key of its
//! own, kept only with the pending verdict. Deleting that key when the verdict is final
//! (or its purchase voided) makes every copy of the ciphertext unreadable at once,
//! wherever it sits. AES-256-GCM with a random 96-bit nonce; the associated data binds
//! a ciphertext to its verdict.

use aws_lc_rs::aead::{AES_256_GCM, Aad, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};
use base64::Engine as _;

/// A 256-bit data key.
#[derive(Clone, PartialEq, Eq)]
pub struct DataKey([u8; 32]);

impl std::fmt::Debug for DataKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DataKey(…)")
    }
}

impl DataKey {
    /// A key from 32 random bytes (the caller draws them: core reads no randomness).
    pub fn from_bytes(bytes: [u8; 32]) -> DataKey {
        DataKey(bytes)
    }

    /// The key as stored with its verdict (64 lowercase hex characters).
    pub fn to_hex(&self) -> String {
        hex::encode(self.0)
    }

    pub fn from_hex(text: &str) -> Option<DataKey> {
        let bytes = hex::decode(text).ok()?;
        Some(DataKey(bytes.try_into().ok()?))
    }

    fn aead(&self) -> Option<LessSafeKey> {
        UnboundKey::new(&AES_256_GCM, &self.0)
            .ok()
            .map(LessSafeKey::new)
    }
}

/// Bytes of the nonce [`seal`] takes: 96 random bits, never used twice under one key.
pub const SEAL_NONCE_BYTES: usize = NONCE_LEN;

/// `plaintext` sealed under `key`, bound to `context`: base64 of nonce ‖ ciphertext ‖ tag.
/// `nonce_bytes` must be random (a data key seals few messages, so random nonces are
/// safe under it).
pub fn seal(
    key: &DataKey,
    context: &[u8],
    plaintext: &[u8],
    nonce_bytes: [u8; SEAL_NONCE_BYTES],
) -> Option<String> {
    let mut in_out = plaintext.to_vec();
    key.aead()?
        .seal_in_place_append_tag(
            Nonce::assume_unique_for_key(nonce_bytes),
            Aad::from(context),
            &mut in_out,
        )
        .ok()?;
    let mut out = nonce_bytes.to_vec();
    out.extend_from_slice(&in_out);
    Some(base64::engine::general_purpose::STANDARD.encode(out))
}

/// The plaintext of `sealed`, if it was sealed under `key` for `context` and is intact.
pub fn open(key: &DataKey, context: &[u8], sealed: &str) -> Option<Vec<u8>> {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(sealed)
        .ok()?;
    if bytes.len() < NONCE_LEN {
        return None;
    }
    let (nonce, rest) = bytes.split_at(NONCE_LEN);
    let nonce = Nonce::try_assume_unique_for_key(nonce).ok()?;
    let mut in_out = rest.to_vec();
    let plain = key
        .aead()?
        .open_in_place(nonce, Aad::from(context), &mut in_out)
        .ok()?;
    Some(plain.to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sealed_opens_only_with_its_key_and_context() {
        let nonce = umpire_host::random_bytes;
        let key = DataKey::from_bytes(umpire_host::random_bytes());
        let sealed = seal(&key, b"vrd_1", b"the deliverable", nonce()).expect("sealed");
        assert!(!sealed.contains("deliverable"));
        assert_eq!(
            open(&key, b"vrd_1", &sealed).as_deref(),
            Some(&b"the deliverable"[..])
        );
        assert_eq!(open(&key, b"vrd_2", &sealed), None, "bound to its verdict");
        let other = DataKey::from_bytes(umpire_host::random_bytes());
        assert_eq!(open(&other, b"vrd_1", &sealed), None);
        let mut tampered = base64::engine::general_purpose::STANDARD
            .decode(&sealed)
            .expect("b64");
        tampered[NONCE_LEN] ^= 1;
        let tampered = base64::engine::general_purpose::STANDARD.encode(tampered);
        assert_eq!(open(&key, b"vrd_1", &tampered), None);
        assert_eq!(open(&key, b"vrd_1", "AAAA"), None);
        assert_eq!(open(&key, b"vrd_1", "not base64!"), None);
        // Two seals of one plaintext differ (fresh nonces).
        assert_ne!(
            seal(&key, b"vrd_1", b"x", nonce()),
            seal(&key, b"vrd_1", b"x", nonce())
        );
        assert_eq!(
            DataKey::from_hex(&key.to_hex()).map(|k| k == key),
            Some(true)
        );
        assert_eq!(DataKey::from_hex("abcd"), None);
    }
}
