//! x402's offer-receipt extension (the spec's `extension-offer-and-receipt` v1, npm
//! `@x402/extensions/offer-receipt`): a 402 carries one signed offer per `accepts`
//! entry, proof that the terms came from the seller and not from whoever relayed them;
//! a paid answer's settlement response carries a signed receipt, proof that the seller
//! delivered to that payer.
//!
//! Both are JWS compact serializations (`EdDSA`) signed with the service's Ed25519
//! document key, named in the header's `kid` as a `did:key` — self-describing, so the
//! reference library's `extractPublicKeyFromKid` resolves it with no lookup, and the
//! key document lists the same `did`. The payload is the canonical JSON of the spec's
//! fields (keys sorted, no whitespace) and is not repeated beside the JWS.
//!
//! The paying side reads them here too: [`verified_offer`] is what `umpire` checks
//! before it signs anything, against the key it pinned.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64URL;
use serde_json::Value as Json;
use umpire_core::json::Value;
use umpire_core::signer::{PublicKey, Signer, did_key};

use crate::types::{PaymentRequired, PaymentRequirements};

/// The extension's key in `extensions`.
pub const OFFER_RECEIPT: &str = "offer-receipt";

/// The payload schema version the extension defines.
pub const PAYLOAD_VERSION: u64 = 1;

/// JWS `alg` for Ed25519 (RFC 8037).
const JWS_ALG: &str = "EdDSA";

/// The JWS `kid` naming `public`: its `did:key`, with the key itself as the fragment
/// (the DID URL form verifiers expect of a verification method).
pub fn kid(public: &[u8; 32]) -> String {
    let did = did_key(public);
    let fragment = did.trim_start_matches("did:key:").to_owned();
    format!("{did}#{fragment}")
}

/// `payload` signed as a JWS compact serialization by `signer`.
fn jws(signer: &dyn Signer, payload: &Value) -> String {
    let header = Value::object()
        .with("alg", JWS_ALG)
        .with("kid", kid(&signer.public_key()));
    let input = format!(
        "{}.{}",
        B64URL.encode(header.to_canonical_vec()),
        B64URL.encode(payload.to_canonical_vec())
    );
    let signature = signer.sign(input.as_bytes());
    format!("{input}.{}", B64URL.encode(signature))
}

/// The signed fields of an offer (§4.2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OfferPayload {
    pub resource_url: String,
    pub scheme: String,
    pub network: String,
    pub asset: String,
    pub pay_to: String,
    pub amount: String,
    /// Unix seconds.
    pub valid_until: u64,
}

impl OfferPayload {
    /// The offer of `accepted`, for `resource_url`, good until `valid_until`.
    pub fn of(resource_url: &str, accepted: &PaymentRequirements, valid_until: u64) -> Self {
        OfferPayload {
            resource_url: resource_url.to_owned(),
            scheme: accepted.scheme.as_str().to_owned(),
            network: accepted.network.as_str().to_owned(),
            asset: accepted.asset.to_string(),
            pay_to: accepted.pay_to.to_string(),
            amount: accepted.amount.to_string(),
            valid_until,
        }
    }

    fn to_value(&self) -> Value {
        Value::object()
            .with("version", PAYLOAD_VERSION)
            .with("resourceUrl", self.resource_url.as_str())
            .with("scheme", self.scheme.as_str())
            .with("network", self.network.as_str())
            .with("asset", self.asset.as_str())
            .with("payTo", self.pay_to.as_str())
            .with("amount", self.amount.as_str())
            .with("validUntil", self.valid_until)
    }

    fn from_json(v: &Json) -> Option<Self> {
        let s = |k: &str| v.get(k).and_then(Json::as_str).map(str::to_owned);
        if v.get("version").and_then(Json::as_u64) != Some(PAYLOAD_VERSION) {
            return None;
        }
        Some(OfferPayload {
            resource_url: s("resourceUrl")?,
            scheme: s("scheme")?,
            network: s("network")?,
            asset: s("asset")?,
            pay_to: s("payTo")?,
            amount: s("amount")?,
            valid_until: v.get("validUntil").and_then(Json::as_u64)?,
        })
    }

    /// Whether this offer states exactly the terms of `accepted` (what
    /// `findAcceptsObjectFromSignedOffer` compares: scheme, network, asset, payTo,
    /// amount).
    pub fn states(&self, accepted: &PaymentRequirements) -> bool {
        let of = OfferPayload::of(&self.resource_url, accepted, self.valid_until);
        *self == of
    }
}

/// The `offer-receipt` declaration of a 402: one offer per entry of
/// `required.accepts`, each good until `valid_until(entry)`.
pub fn offers(
    signer: &dyn Signer,
    required: &PaymentRequired,
    valid_until: impl Fn(&PaymentRequirements) -> u64,
) -> Value {
    let offers: Vec<Value> = required
        .accepts
        .iter()
        .enumerate()
        .map(|(i, accepted)| {
            let payload = OfferPayload::of(&required.resource.url, accepted, valid_until(accepted));
            Value::object()
                .with("format", "jws")
                .with("acceptIndex", i as u64)
                .with("signature", jws(signer, &payload.to_value()))
        })
        .collect();
    Value::object().with("info", Value::object().with("offers", offers))
}

/// The signed fields of a receipt (§5.2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReceiptPayload {
    pub network: String,
    pub resource_url: String,
    pub payer: String,
    /// Unix seconds.
    pub issued_at: u64,
    /// The settling transaction: a neutral party favours verifiability over the
    /// payer's privacy (the transfer is public on chain anyway).
    pub transaction: Option<String>,
}

impl ReceiptPayload {
    fn to_value(&self) -> Value {
        let v = Value::object()
            .with("version", PAYLOAD_VERSION)
            .with("network", self.network.as_str())
            .with("resourceUrl", self.resource_url.as_str())
            .with("payer", self.payer.as_str())
            .with("issuedAt", self.issued_at);
        match &self.transaction {
            Some(t) if !t.is_empty() => v.with("transaction", t.as_str()),
            _ => v,
        }
    }

    fn from_json(v: &Json) -> Option<Self> {
        let s = |k: &str| v.get(k).and_then(Json::as_str).map(str::to_owned);
        if v.get("version").and_then(Json::as_u64) != Some(PAYLOAD_VERSION) {
            return None;
        }
        Some(ReceiptPayload {
            network: s("network")?,
            resource_url: s("resourceUrl")?,
            payer: s("payer")?,
            issued_at: v.get("issuedAt").and_then(Json::as_u64)?,
            transaction: s("transaction"),
        })
    }
}

/// The `offer-receipt` extension of a settlement response: the signed receipt.
pub fn receipt(signer: &dyn Signer, payload: &ReceiptPayload) -> Value {
    Value::object().with(
        "info",
        Value::object().with(
            "receipt",
            Value::object()
                .with("format", "jws")
                .with("signature", jws(signer, &payload.to_value())),
        ),
    )
}

/// Why an offer or a receipt does not hold.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProofError {
    #[error("the 402 carries no signed offers (no `offer-receipt` extension)")]
    NoOffers,
    #[error("no offer in the 402 covers the option paid ({0})")]
    NoOfferFor(String),
    #[error("the offer is not a JWS compact serialization")]
    Malformed,
    #[error("the offer's JWS is signed with {0}, which is not the pinned key")]
    UnknownKey(String),
    #[error("the JWS signature does not verify under the pinned key")]
    BadSignature,
    #[error("the signed offer states other terms than the 402's option: {0}")]
    TermsDiffer(String),
    #[error("the settlement response carries no signed receipt")]
    NoReceipt,
}

/// The payload of a JWS signed by `key` (`EdDSA`, the header's `kid` naming `key`).
pub fn verify_jws(jws: &str, key: &PublicKey) -> Result<Json, ProofError> {
    let mut parts = jws.split('.');
    let (Some(h), Some(p), Some(s), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(ProofError::Malformed);
    };
    let decode = |part: &str| B64URL.decode(part).map_err(|_| ProofError::Malformed);
    let header: Json = serde_json::from_slice(&decode(h)?).map_err(|_| ProofError::Malformed)?;
    if header.get("alg").and_then(Json::as_str) != Some(JWS_ALG) {
        return Err(ProofError::Malformed);
    }
    if let Some(kid) = header.get("kid").and_then(Json::as_str)
        && umpire_core::signer::from_did_key(kid) != Some(key.bytes)
    {
        return Err(ProofError::UnknownKey(kid.to_owned()));
    }
    let signature = decode(s)?;
    if !key.verify(format!("{h}.{p}").as_bytes(), &signature) {
        return Err(ProofError::BadSignature);
    }
    serde_json::from_slice(&decode(p)?).map_err(|_| ProofError::Malformed)
}

/// The offer `key` signed for `required.accepts[index]`: found by its `acceptIndex`
/// (or, as the reference client does, by its terms), verified, and stating exactly
/// that option's terms. What it says of the resource and its validity is left to the
/// caller, which knows what it asked for and when.
pub fn verified_offer(
    required: &PaymentRequired,
    index: usize,
    key: &PublicKey,
) -> Result<OfferPayload, ProofError> {
    let accepted = required
        .accepts
        .get(index)
        .ok_or_else(|| ProofError::NoOfferFor(format!("accepts[{index}]")))?;
    let offers = required
        .extensions
        .get(OFFER_RECEIPT)
        .and_then(|e| e.pointer("/info/offers"))
        .and_then(Json::as_array)
        .ok_or(ProofError::NoOffers)?;
    let describe = || {
        format!(
            "{} {} {}",
            accepted.scheme, accepted.network, accepted.asset
        )
    };
    // The hinted entry first, then every other: a reordered list is no reason to
    // refuse, and an offer for other terms never passes `states` below.
    let hinted = offers
        .iter()
        .filter(|o| o.get("acceptIndex").and_then(Json::as_u64) == Some(index as u64));
    let mut last = ProofError::NoOfferFor(describe());
    for jws in hinted.chain(offers.iter()).filter_map(jws_of) {
        match verify_jws(jws, key) {
            Ok(payload) => match OfferPayload::from_json(&payload) {
                Some(offer) if offer.states(accepted) => return Ok(offer),
                Some(offer) => {
                    last = ProofError::TermsDiffer(format!(
                        "signed {} {} to {} on {}, asked {} {} to {} on {}",
                        offer.amount,
                        offer.asset,
                        offer.pay_to,
                        offer.network,
                        accepted.amount,
                        accepted.asset,
                        accepted.pay_to,
                        accepted.network
                    ))
                }
                None => last = ProofError::Malformed,
            },
            Err(e) => {
                // A verified offer for other terms says more than a bad signature.
                if !matches!(last, ProofError::TermsDiffer(_)) {
                    last = e;
                }
            }
        }
    }
    Err(last)
}

/// The JWS of a signed offer in JWS format.
fn jws_of(offer: &Json) -> Option<&str> {
    if offer.get("format").and_then(Json::as_str) != Some("jws") {
        return None;
    }
    offer.get("signature").and_then(Json::as_str)
}

/// The receipt in a settlement response (its JSON), verified under `key`.
pub fn verified_receipt(settlement: &Json, key: &PublicKey) -> Result<ReceiptPayload, ProofError> {
    let receipt = settlement
        .pointer("/extensions/offer-receipt/info/receipt")
        .ok_or(ProofError::NoReceipt)?;
    if receipt.get("format").and_then(Json::as_str) != Some("jws") {
        return Err(ProofError::Malformed);
    }
    let jws = receipt
        .get("signature")
        .and_then(Json::as_str)
        .ok_or(ProofError::Malformed)?;
    ReceiptPayload::from_json(&verify_jws(jws, key)?).ok_or(ProofError::Malformed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use umpire_core::signer::LocalSigner;

    fn required() -> PaymentRequired {
        serde_json::from_value(json!({
            "x402Version": 2,
            "error": "payment required",
            "resource": {"url": "https://umpire.example/v1/verdicts/basic", "description": "", "mimeType": "application/json"},
            "accepts": [
                {"scheme": "exact", "network": "eip155:8453", "amount": "1000000",
                 "asset": "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913",
                 "payTo": "0x1111111111111111111111111111111111111111",
                 "maxTimeoutSeconds": 60, "extra": {"name": "USD Coin", "version": "2"}},
                {"scheme": "exact", "network": "solana:5eykt4UsFv8P8NJdTREpY1vzqKqZKvdp", "amount": "1000000",
                 "asset": "EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1v",
                 "payTo": "9xQeWvG816bUx9EPjHmaT23yvVM2ZWbrrpZb9PusVFin",
                 "maxTimeoutSeconds": 60, "extra": {"feePayer": "9xQeWvG816bUx9EPjHmaT23yvVM2ZWbrrpZb9PusVFin"}}
            ]
        }))
        .expect("requirements")
    }

    fn signed(signer: &LocalSigner) -> PaymentRequired {
        let mut r = required();
        let ext = offers(signer, &r, |a| 1_790_000_000 + a.max_timeout_seconds);
        r.extensions.insert(OFFER_RECEIPT.into(), ext.to_serde());
        r
    }

    #[test]
    fn every_option_has_an_offer_that_verifies_and_states_its_terms() {
        let signer = LocalSigner::from_seed([7; 32]);
        let key = PublicKey::of(&signer);
        let r = signed(&signer);
        for i in 0..r.accepts.len() {
            let offer = verified_offer(&r, i, &key).expect("verifies");
            assert!(offer.states(&r.accepts[i]));
            assert_eq!(
                offer.resource_url,
                "https://umpire.example/v1/verdicts/basic"
            );
            assert_eq!(offer.valid_until, 1_790_000_060);
        }
    }

    #[test]
    fn an_inflated_option_a_stranger_and_another_key_are_refused() {
        let signer = LocalSigner::from_seed([7; 32]);
        let key = PublicKey::of(&signer);
        let mut r = signed(&signer);
        r.accepts[0].amount = "5000000000".parse().expect("amount");
        assert!(matches!(
            verified_offer(&r, 0, &key),
            Err(ProofError::TermsDiffer(_))
        ));
        let mut r = signed(&signer);
        r.accepts[0].pay_to = "0x2222222222222222222222222222222222222222"
            .parse()
            .expect("address");
        assert!(matches!(
            verified_offer(&r, 0, &key),
            Err(ProofError::TermsDiffer(_))
        ));
        // Signed by someone else: that key is named, and it is not ours.
        let stranger = signed(&LocalSigner::from_seed([8; 32]));
        assert!(matches!(
            verified_offer(&stranger, 0, &key),
            Err(ProofError::UnknownKey(_))
        ));
        let mut none = required();
        none.extensions.clear();
        assert_eq!(verified_offer(&none, 0, &key), Err(ProofError::NoOffers));
    }

    #[test]
    fn a_tampered_payload_or_signature_fails() {
        let signer = LocalSigner::from_seed([7; 32]);
        let key = PublicKey::of(&signer);
        let payload = Value::object().with("version", 1u64).with("x", "y");
        let good = jws(&signer, &payload);
        assert!(verify_jws(&good, &key).is_ok());
        let parts: Vec<&str> = good.split('.').collect();
        let other = B64URL.encode(br#"{"version":1,"x":"z"}"#);
        assert_eq!(
            verify_jws(&format!("{}.{other}.{}", parts[0], parts[2]), &key),
            Err(ProofError::BadSignature)
        );
        assert_eq!(verify_jws("a.b", &key), Err(ProofError::Malformed));
    }

    #[test]
    fn a_receipt_verifies_and_names_the_payer_and_transaction() {
        let signer = LocalSigner::from_seed([7; 32]);
        let key = PublicKey::of(&signer);
        let payload = ReceiptPayload {
            network: "eip155:8453".into(),
            resource_url: "https://umpire.example/v1/verdicts/basic".into(),
            payer: "0x3333333333333333333333333333333333333333".into(),
            issued_at: 1_790_000_000,
            transaction: Some(format!("0x{}", "ab".repeat(32))),
        };
        let settlement = json!({"success": true, "extensions": {OFFER_RECEIPT: receipt(&signer, &payload).to_serde()}});
        assert_eq!(verified_receipt(&settlement, &key), Ok(payload));
        assert_eq!(
            verified_receipt(&json!({"success": true}), &key),
            Err(ProofError::NoReceipt)
        );
    }
}
