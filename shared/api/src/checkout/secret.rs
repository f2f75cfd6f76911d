//! A verdict's one-time secret, derived and never stored. The secret is an HMAC of the
//! verdict id under a key derived from the signing seed (sealed with KMS on AWS, in the
//! data directory locally), so a replay can hand it back without anyone keeping it.
//! The store keeps only a check: sha256 of the webhook key, where the webhook key is
//! the contract's sha256 hex of the secret. The check verifies a presented secret, and
//! opens no status link and signs no webhook. Records written before this (their
//! `secret_hash` is sha256(secret) itself, without the `v2:` prefix) keep working.

use umpire_core::hash::{constant_time_eq, sha256_hex};
use umpire_core::signer::Signer;
use umpire_store::VerdictRecord;

const PURPOSE: &str = "verdict secret";
/// Checks of derived secrets start with this; older records hold sha256(secret).
const CHECK_PREFIX: &str = "v2:";

/// The secret of `verdict_id`; `None` where the signer holds no seed (functions that
/// never sell a verdict).
pub fn mint(signer: &dyn Signer, verdict_id: &str) -> Option<String> {
    signer
        .derive(PURPOSE, verdict_id.as_bytes())
        .map(|mac| format!("sec_{}", hex::encode(mac)))
}

/// The contract's webhook HMAC key: the 64-character hex of sha256(secret).
pub fn webhook_key_of(secret: &str) -> String {
    sha256_hex(secret.as_bytes())
}

/// What the store keeps for `secret`.
pub fn check_of(secret: &str) -> String {
    format!(
        "{CHECK_PREFIX}{}",
        sha256_hex(webhook_key_of(secret).as_bytes())
    )
}

/// Whether `presented` is the secret `stored` checks (in constant time).
pub fn matches(stored: &str, presented: &str) -> bool {
    let computed = if stored.starts_with(CHECK_PREFIX) {
        check_of(presented)
    } else {
        webhook_key_of(presented)
    };
    constant_time_eq(computed.as_bytes(), stored.as_bytes())
}

/// The webhook key of a stored verdict: derived again and checked against the record
/// (a rotated seed derives other secrets: `None`, and the webhook is not signed with a
/// key the customer does not hold).
pub fn webhook_key(signer: &dyn Signer, record: &VerdictRecord) -> Option<String> {
    if !record.secret_hash.starts_with(CHECK_PREFIX) {
        return Some(record.secret_hash.clone());
    }
    let secret = mint(signer, &record.verdict_id)?;
    matches(&record.secret_hash, &secret).then(|| webhook_key_of(&secret))
}

/// `body` with its `secret` given: derived from its `verdict_id`, for an answer whose
/// verdict is stored. Bodies without both fields are returned as they are.
pub fn reveal(signer: &dyn Signer, body: umpire_core::Value) -> umpire_core::Value {
    let Some(id) = body
        .get("verdict_id")
        .and_then(umpire_core::Value::as_str)
        .map(str::to_owned)
    else {
        return body;
    };
    if body.get("secret").is_none() {
        return body;
    }
    match mint(signer, &id) {
        Some(secret) => body.with("secret", secret),
        None => body,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use umpire_core::signer::{LocalSigner, PublicKey, PublicKeyOnly};

    #[test]
    fn a_secret_is_derived_again_and_its_check_opens_nothing() {
        let signer = LocalSigner::from_seed([7; 32]);
        let a = mint(&signer, "vrd_a").expect("a seed");
        assert_eq!(mint(&signer, "vrd_a").as_deref(), Some(a.as_str()));
        assert_ne!(mint(&signer, "vrd_b").as_deref(), Some(a.as_str()));
        assert_ne!(
            mint(&LocalSigner::from_seed([8; 32]), "vrd_a").as_deref(),
            Some(a.as_str()),
            "another seed, another secret"
        );
        assert!(a.starts_with("sec_") && a.len() == 4 + 64);

        let check = check_of(&a);
        assert!(matches(&check, &a));
        assert!(!matches(&check, "sec_wrong"));
        assert!(
            !check.contains(&webhook_key_of(&a)),
            "the webhook key is not stored"
        );
        assert!(!check.contains(&a[4..]));
        // Records from before keep sha256(secret).
        assert!(matches(&webhook_key_of("sec_old"), "sec_old"));

        let record = VerdictRecord {
            verdict_id: "vrd_a".into(),
            tier: umpire_core::product::Tier::Sworn,
            status: umpire_store::VerdictStatus::Final,
            document: None,
            preview: None,
            secret_hash: check,
            spec_hash: String::new(),
            webhook_url: None,
            created_at: 0,
            expires_at: 0,
            webhook_outcome: None,
            job_key: None,
            payer: None,
        };
        assert_eq!(webhook_key(&signer, &record), Some(webhook_key_of(&a)));
        let rotated = LocalSigner::from_seed([9; 32]);
        assert_eq!(webhook_key(&rotated, &record), None);
        let public = PublicKeyOnly(PublicKey::of(&signer));
        assert_eq!(mint(&public, "vrd_a"), None, "no seed, no secret");
    }
}
