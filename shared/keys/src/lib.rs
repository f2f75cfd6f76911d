//! The signing key in AWS, as an envelope: the 32-byte Ed25519 seed is encrypted once
//! under a KMS key (`umpire keygen --kms-key-id`), the ciphertext is deployed as a
//! parameter, and each signing function decrypts it once per cold start
//! (`kms:Decrypt`, allowed only with our encryption context) and signs locally with
//! ed25519-dalek. The seed never sits in plain text in AWS: not in the template, the
//! environment, or the logs.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use umpire_core::signer::{LocalSigner, PublicKey, Signer as _, key_id_for};

/// Bound into every ciphertext: a blob sealed for another purpose does not open here,
/// and the IAM policy allows Decrypt only with this context.
pub const ENCRYPTION_CONTEXT_KEY: &str = "purpose";
pub const ENCRYPTION_CONTEXT_VALUE: &str = "umpire-signing-seed";

/// What a sealed secret is for: each opens only under its own encryption context, and
/// the key policy names who may open which.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purpose {
    /// The Ed25519 signing seed (every signing function).
    SigningSeed,
    /// The ERC-8004 validator's secp256k1 key (the worker alone).
    ValidatorKey,
    /// The batch-settlement receiver authorizer's secp256k1 key: it signs claims and
    /// refunds of our channels (the one function that claims).
    ReceiverAuthorizer,
}

impl Purpose {
    /// The `purpose` encryption context value.
    pub const fn context(self) -> &'static str {
        match self {
            Purpose::SigningSeed => ENCRYPTION_CONTEXT_VALUE,
            Purpose::ValidatorKey => "umpire-validator-key",
            Purpose::ReceiverAuthorizer => "umpire-receiver-authorizer",
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("the sealed signing seed is not base64: {0}")]
    NotBase64(String),
    #[error("KMS refused to {action}: {message}")]
    Kms {
        action: &'static str,
        message: String,
    },
    #[error("the decrypted secret has {0} bytes; a sealed seed or key has 32")]
    WrongLength(usize),
    #[error(
        "the sealed seed opens to key {opened}, but UMPIRE_SIGNING_PUBLIC_KEY names {expected}: deploy the ciphertext and public key that `umpire keygen` printed together"
    )]
    Mismatch { opened: String, expected: String },
}

/// What `umpire keygen --kms-key-id` prints.
pub struct Sealed {
    pub ciphertext_base64: String,
    pub public_key: PublicKey,
}

/// Encrypts `seed` under the KMS key `kms_key_id` (id, ARN or alias).
pub async fn seal(
    kms: &aws_sdk_kms::Client,
    kms_key_id: &str,
    seed: [u8; 32],
) -> Result<Sealed, KeyError> {
    Ok(Sealed {
        ciphertext_base64: seal_secret(kms, kms_key_id, seed, Purpose::SigningSeed).await?,
        public_key: PublicKey::of(&LocalSigner::from_seed(seed)),
    })
}

/// Encrypts a 32-byte secret under the KMS key for `purpose`: its ciphertext, base64.
pub async fn seal_secret(
    kms: &aws_sdk_kms::Client,
    kms_key_id: &str,
    secret: [u8; 32],
    purpose: Purpose,
) -> Result<String, KeyError> {
    let out = kms
        .encrypt()
        .key_id(kms_key_id)
        .plaintext(aws_sdk_kms::primitives::Blob::new(secret.to_vec()))
        .encryption_context(ENCRYPTION_CONTEXT_KEY, purpose.context())
        .send()
        .await
        .map_err(|e| KeyError::Kms {
            action: "encrypt the secret",
            message: aws_sdk_kms::error::DisplayErrorContext(e).to_string(),
        })?;
    let blob = out.ciphertext_blob().ok_or(KeyError::Kms {
        action: "encrypt the secret",
        message: "no ciphertext in the answer".into(),
    })?;
    Ok(B64.encode(blob.as_ref()))
}

/// Decrypts a sealed seed into a signer, with the key it was sealed under named
/// (`key_id`: KMS then refuses a ciphertext sealed under any other key, and the caller's
/// permission is checked against that key alone).
pub async fn open(
    kms: &aws_sdk_kms::Client,
    key_id: &str,
    ciphertext_base64: &str,
) -> Result<LocalSigner, KeyError> {
    open_secret(kms, key_id, ciphertext_base64, Purpose::SigningSeed)
        .await
        .map(LocalSigner::from_seed)
}

/// Decrypts a 32-byte secret sealed for `purpose` under the KMS key `key_id`.
pub async fn open_secret(
    kms: &aws_sdk_kms::Client,
    key_id: &str,
    ciphertext_base64: &str,
    purpose: Purpose,
) -> Result<[u8; 32], KeyError> {
    let blob = B64
        .decode(ciphertext_base64.trim())
        .map_err(|e| KeyError::NotBase64(e.to_string()))?;
    let out = kms
        .decrypt()
        .key_id(key_id)
        .ciphertext_blob(aws_sdk_kms::primitives::Blob::new(blob))
        .encryption_context(ENCRYPTION_CONTEXT_KEY, purpose.context())
        .send()
        .await
        .map_err(|e| KeyError::Kms {
            action: "decrypt the sealed secret",
            message: aws_sdk_kms::error::DisplayErrorContext(e).to_string(),
        })?;
    let plain = out.plaintext().map(|b| b.as_ref()).unwrap_or_default();
    plain
        .try_into()
        .map_err(|_| KeyError::WrongLength(plain.len()))
}

/// Refuses a signer whose public key differs from the one deployed beside it.
pub fn check_matches(signer: &LocalSigner, expected: &PublicKey) -> Result<(), KeyError> {
    if signer.public_key() == expected.bytes {
        Ok(())
    } else {
        Err(KeyError::Mismatch {
            opened: signer.key_id().to_owned(),
            expected: key_id_for(&expected.bytes),
        })
    }
}
