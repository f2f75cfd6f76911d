//! The keys a function holds: the signing key (opened with KMS in functions that sign,
//! only the public key in the others), the retired and next keys it publishes, and the
//! worker's validator key.

use std::sync::Arc;

use umpire_aws::{Service, for_service};
use umpire_core::signer::{LocalSigner, NoKeyYet, PublicKey, PublicKeyOnly, Signer};

use crate::role::{Needs, Part};

/// The sealed seed (`umpire keygen --kms-key-id` prints it), base64.
pub const SEED_CIPHERTEXT_ENV: &str = "UMPIRE_SIGNING_SEED_CIPHERTEXT";
/// The active public key, base64: what non-signing functions publish and name, and
/// what a decrypted seed must match.
pub const PUBLIC_KEY_ENV: &str = "UMPIRE_SIGNING_PUBLIC_KEY";
/// Earlier public keys still published (comma-separated base64), for key rotation.
pub const RETIRED_KEYS_ENV: &str = "UMPIRE_RETIRED_PUBLIC_KEYS";
/// The key a rotation's second deploy signs with, published by its first (base64).
pub const NEXT_KEY_ENV: &str = "UMPIRE_NEXT_PUBLIC_KEY";
/// A plain seed in hex: local runs only (`cargo lambda watch`, tests), never in AWS.
pub use umpire_api::plumbing::config::SEED_HEX_ENV;
/// The KMS key the seed is sealed under (its ARN): Decrypt names it.
pub const SIGNING_KEY_ENV: &str = "UMPIRE_SIGNING_KEY_ARN";

/// The next key, if a rotation has begun.
pub fn next_key_from_vars(
    var: &dyn Fn(&str) -> Option<String>,
) -> Result<Option<PublicKey>, lambda_http::Error> {
    match var(NEXT_KEY_ENV).filter(|v| !v.trim().is_empty()) {
        None => Ok(None),
        Some(text) => Ok(Some(PublicKey::from_base64(text.trim()).ok_or_else(
            || {
                format!(
                    "{NEXT_KEY_ENV} must be a base64 Ed25519 public key (umpire keygen prints it)"
                )
            },
        )?)),
    }
}

/// The signing key this function may hold: functions that sign open the sealed seed
/// with KMS once, here, at cold start; the others hold only the public key, so they
/// need (and get) no kms:Decrypt. `aws` is None in functions without AWS clients.
pub async fn signer_from_env<N: Needs>(
    aws: Option<&umpire_aws::SdkConfig>,
) -> Result<(Arc<dyn Signer>, Vec<PublicKey>), lambda_http::Error> {
    signer_from_vars::<N>(aws, &|name| std::env::var(name).ok()).await
}

/// [`signer_from_env`] with the variables looked up by `var`.
pub async fn signer_from_vars<N: Needs>(
    aws: Option<&umpire_aws::SdkConfig>,
    var: &(dyn Fn(&str) -> Option<String> + Sync),
) -> Result<(Arc<dyn Signer>, Vec<PublicKey>), lambda_http::Error> {
    let env_nonempty = |name: &str| var(name).filter(|v| !v.trim().is_empty());
    let retired = PublicKey::list_from_base64(&env_nonempty(RETIRED_KEYS_ENV).unwrap_or_default())
        .map_err(|bad| format!("{RETIRED_KEYS_ENV}: {bad:?} is not a base64 Ed25519 public key"))?;
    let published = match env_nonempty(PUBLIC_KEY_ENV) {
        Some(text) => Some(PublicKey::from_base64(&text).ok_or_else(|| {
            format!(
                "{PUBLIC_KEY_ENV} must be a base64 Ed25519 public key (umpire keygen prints it)"
            )
        })?),
        None => None,
    };
    let local = match env_nonempty(SEED_HEX_ENV) {
        Some(hex) => Some(
            LocalSigner::from_seed_hex(&hex)
                .ok_or_else(|| format!("{SEED_HEX_ENV} must be 64 hex characters"))?,
        ),
        None => None,
    };
    if const { !N::ROLE.signs() } {
        // Before the operator's first `umpire keygen` there is no key at all: the
        // function still starts (the first deploy is healthy), naming none.
        return Ok(
            match published.or_else(|| local.as_ref().map(|s| PublicKey::of(s))) {
                Some(public) => (Arc::new(PublicKeyOnly(public)), retired),
                None => (Arc::new(NoKeyYet), retired),
            },
        );
    }
    let signer = match (env_nonempty(SEED_CIPHERTEXT_ENV), local) {
        (Some(sealed), _) => {
            let key = env_nonempty(SIGNING_KEY_ENV).ok_or_else(|| {
                format!("{SIGNING_KEY_ENV} is not set: name the KMS key the seed is sealed under")
            })?;
            open_sealed_seed::<N>(aws, key, sealed).await?
        }
        (None, Some(local)) => {
            tracing::warn!("signing with a plain seed from {SEED_HEX_ENV}: for local runs only");
            local
        }
        (None, None) => {
            return Err(format!(
                "{SEED_CIPHERTEXT_ENV} is not set: run `umpire keygen --kms-key-id <the stack's SigningKeyId output>` and deploy its ciphertext and public key"
            )
            .into());
        }
    };
    if let Some(expected) = &published {
        umpire_keys::check_matches(&signer, expected)?;
    }
    Ok((Arc::new(signer), retired))
}

/// The sealed seed opened with KMS; only signing functions link the KMS client.
fn open_sealed_seed<'a, N: Needs>(
    aws: Option<&'a umpire_aws::SdkConfig>,
    key: String,
    sealed: String,
) -> Part<'a, LocalSigner> {
    match aws {
        Some(aws) if const { N::ROLE.signs() } => Box::pin(async move {
            Ok(umpire_keys::open(
                &aws_sdk_kms::Client::new(&for_service(aws, Service::Kms)),
                &key,
                &sealed,
            )
            .await?)
        }),
        _ => Box::pin(std::future::ready(Err(format!(
            "{SEED_CIPHERTEXT_ENV} is set, but this function has no KMS client"
        )
        .into()))),
    }
}

/// True when this function signs and the stack was deployed before its key was made
/// (no sealed seed, no local seed): it then answers every request with
/// [`umpire_api::routes::free::not_keyed`] rather than failing to start, so a paid
/// route on a first deploy says what step is missing, and charges nothing.
pub fn keygen_pending<N: Needs>(var: &dyn Fn(&str) -> Option<String>) -> bool {
    let set = |name: &str| var(name).is_some_and(|v| !v.trim().is_empty());
    N::ROLE.signs() && !set(SEED_CIPHERTEXT_ENV) && !set(SEED_HEX_ENV)
}

/// The sealed validator key (`umpire keygen --validator` prints it), base64.
pub const VALIDATOR_CIPHERTEXT_ENV: &str = "UMPIRE_VALIDATOR_KEY_CIPHERTEXT";

/// The worker's validator key: sealed (`UMPIRE_VALIDATOR_KEY_CIPHERTEXT`, opened with
/// the signing key's KMS key under its own encryption context), or plain for local
/// runs (`UMPIRE_VALIDATOR_KEY_HEX`).
pub(crate) async fn validator_key(
    aws: Option<&umpire_aws::SdkConfig>,
) -> Result<Option<alloy::signers::local::PrivateKeySigner>, lambda_http::Error> {
    let var = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
    match (var(VALIDATOR_CIPHERTEXT_ENV), aws) {
        (Some(sealed), Some(aws)) => {
            let key_id = var(SIGNING_KEY_ENV).ok_or_else(|| {
                format!("{SIGNING_KEY_ENV} is not set: name the KMS key the validator key is sealed under")
            })?;
            let bytes = umpire_keys::open_secret(
                &aws_sdk_kms::Client::new(&for_service(aws, Service::Kms)),
                &key_id,
                &sealed,
                umpire_keys::Purpose::ValidatorKey,
            )
            .await?;
            let key = alloy::signers::local::PrivateKeySigner::from_bytes(&bytes.into())
                .map_err(|e| format!("the sealed validator key is not a secp256k1 key: {e}"))?;
            Ok(Some(key))
        }
        (Some(_), None) => Err(format!(
            "{VALIDATOR_CIPHERTEXT_ENV} is set, but this function has no KMS client"
        )
        .into()),
        (None, _) => Ok(umpire_api::products::verdict::erc8004::key_from_env()?),
    }
}
