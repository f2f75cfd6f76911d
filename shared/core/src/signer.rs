//! Ed25519 signing behind one trait, and the published key document.

use aws_lc_rs::signature::{Ed25519KeyPair, KeyPair as _};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use ed25519_dalek::VerifyingKey;
use zeroize::Zeroizing;

use crate::json::Value;

pub const ALG: &str = "ed25519";

/// Anything that can sign Umpire documents: a local seed today, a KMS-held key later.
pub trait Signer: Send + Sync {
    fn key_id(&self) -> &str;
    fn public_key(&self) -> [u8; 32];
    fn sign(&self, message: &[u8]) -> [u8; 64];
    /// HMAC-SHA256 of `message` under a key derived from this signer's secret for
    /// `purpose` (never the signing key itself): values that must be given again
    /// later without being stored (a verdict's one-time secret). `None` when this
    /// signer holds no secret (the public key only).
    fn derive(&self, _purpose: &str, _message: &[u8]) -> Option<[u8; 32]> {
        None
    }
    /// False only for [`NoKeyYet`]: a deployment whose key has not been made.
    fn keyed(&self) -> bool {
        true
    }
}

fn hmac_sha256(key: &[u8], message: &[u8]) -> [u8; 32] {
    let key = aws_lc_rs::hmac::Key::new(aws_lc_rs::hmac::HMAC_SHA256, key);
    let mut out = [0u8; 32];
    out.copy_from_slice(aws_lc_rs::hmac::sign(&key, message).as_ref());
    out
}

/// The key id documents name: `ed25519-` and 16 hex digits of sha256(public key).
pub fn key_id_for(public_key: &[u8; 32]) -> String {
    format!("{ALG}-{}", &crate::hash::sha256_hex(public_key)[..16])
}

/// The key as a `did:key` (W3C DID method `key`): `did:key:z` and base58btc of the
/// Ed25519 multicodec prefix (0xed 0x01) and the 32 bytes. Self-describing, so the
/// key signing x402 offers and receipts (their JWS `kid`) resolves with no lookup.
pub fn did_key(public_key: &[u8; 32]) -> String {
    let mut bytes = Vec::with_capacity(34);
    bytes.extend_from_slice(&[0xed, 0x01]);
    bytes.extend_from_slice(public_key);
    format!("did:key:z{}", bs58::encode(bytes).into_string())
}

/// The 32 bytes a `did:key` names, if it names an Ed25519 key (a `#fragment` ignored).
pub fn from_did_key(did: &str) -> Option<[u8; 32]> {
    let did = did.split('#').next()?;
    let encoded = did.strip_prefix("did:key:z")?;
    let bytes = bs58::decode(encoded).into_vec().ok()?;
    match bytes.as_slice() {
        [0xed, 0x01, rest @ ..] => rest.try_into().ok(),
        _ => None,
    }
}

/// A signer holding the 32-byte seed in memory.
pub struct LocalSigner {
    seed: Zeroizing<[u8; 32]>,
    key: Ed25519KeyPair,
    public_key: [u8; 32],
    key_id: String,
}

impl LocalSigner {
    pub fn from_seed(seed: [u8; 32]) -> LocalSigner {
        // Every 32 bytes are an Ed25519 seed (RFC 8032 hashes it); AWS-LC refuses only
        // other lengths.
        let key = Ed25519KeyPair::from_seed_unchecked(&seed)
            .expect("AWS-LC accepts every 32-byte Ed25519 seed");
        let mut public_key = [0u8; 32];
        public_key.copy_from_slice(key.public_key().as_ref());
        LocalSigner {
            seed: Zeroizing::new(seed),
            key,
            public_key,
            key_id: key_id_for(&public_key),
        }
    }

    /// From the seed as 64 hex characters (key files, the Lambda environment).
    pub fn from_seed_hex(seed_hex: &str) -> Option<LocalSigner> {
        let seed: [u8; 32] = hex::decode(seed_hex.trim()).ok()?.try_into().ok()?;
        Some(LocalSigner::from_seed(seed))
    }

    pub fn seed(&self) -> [u8; 32] {
        *self.seed
    }
}

impl Signer for LocalSigner {
    fn key_id(&self) -> &str {
        &self.key_id
    }

    fn public_key(&self) -> [u8; 32] {
        self.public_key
    }

    fn sign(&self, message: &[u8]) -> [u8; 64] {
        let mut signature = [0u8; 64];
        signature.copy_from_slice(self.key.sign(message).as_ref());
        signature
    }

    /// A two-step HMAC: the purpose's key from the seed, then the message under it,
    /// so a value derived for one purpose says nothing about another or the seed.
    fn derive(&self, purpose: &str, message: &[u8]) -> Option<[u8; 32]> {
        let key = Zeroizing::new(hmac_sha256(
            self.seed.as_ref(),
            format!("umpire derive v1: {purpose}").as_bytes(),
        ));
        Some(hmac_sha256(key.as_ref(), message))
    }
}

/// The public half only, for functions that publish or name the key but never sign
/// (health, the key document): they are not allowed to decrypt the seed.
pub struct PublicKeyOnly(pub PublicKey);

impl Signer for PublicKeyOnly {
    fn key_id(&self) -> &str {
        &self.0.key_id
    }

    fn public_key(&self) -> [u8; 32] {
        self.0.bytes
    }

    fn sign(&self, _message: &[u8]) -> [u8; 64] {
        // Only routes that never sign are built with this signer (see functions'
        // Role::signs); reaching here is a wiring bug, and a panic becomes a 500 rather
        // than a document with a bogus signature.
        panic!("this function holds only the public key and cannot sign")
    }
}

/// No key at all: a stack deployed before its operator ran `umpire keygen`. Functions
/// that never sign start with it, so the free routes answer from the first deploy on;
/// it names no key (health says so, the key document refuses with the missing step).
pub struct NoKeyYet;

impl Signer for NoKeyYet {
    fn key_id(&self) -> &str {
        ""
    }

    fn public_key(&self) -> [u8; 32] {
        [0; 32]
    }

    fn sign(&self, _message: &[u8]) -> [u8; 64] {
        // Signing functions without a key refuse every request before anything is
        // signed (functions' `run`); reaching here is a wiring bug, a 500, never a
        // document with a bogus signature.
        panic!("this deployment has no signing key yet")
    }

    fn keyed(&self) -> bool {
        false
    }
}

/// One published key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublicKey {
    pub key_id: String,
    pub bytes: [u8; 32],
}

impl PublicKey {
    /// From 32 bytes in standard base64 (as the key document and `umpire keygen` show it).
    pub fn from_base64(text: &str) -> Option<PublicKey> {
        let bytes: [u8; 32] = B64.decode(text.trim()).ok()?.try_into().ok()?;
        VerifyingKey::from_bytes(&bytes).ok()?;
        Some(PublicKey {
            key_id: key_id_for(&bytes),
            bytes,
        })
    }

    /// A comma-separated list of base64 keys (retired keys a deployment still
    /// publishes); None names the first entry that is not a key.
    pub fn list_from_base64(text: &str) -> Result<Vec<PublicKey>, String> {
        text.split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(|s| PublicKey::from_base64(s).ok_or_else(|| s.to_owned()))
            .collect()
    }

    pub fn of(signer: &dyn Signer) -> PublicKey {
        PublicKey {
            key_id: signer.key_id().to_owned(),
            bytes: signer.public_key(),
        }
    }

    pub fn verify(&self, message: &[u8], sig: &[u8]) -> bool {
        let Ok(vk) = VerifyingKey::from_bytes(&self.bytes) else {
            return false;
        };
        let Ok(sig) = ed25519_dalek::Signature::from_slice(sig) else {
            return false;
        };
        vk.verify_strict(message, &sig).is_ok()
    }

    pub fn to_value(&self, status: &str) -> Value {
        Value::object()
            .with("key_id", self.key_id.as_str())
            .with("alg", ALG)
            .with("public_key_base64", B64.encode(self.bytes))
            .with("public_key_hex", hex::encode(self.bytes))
            .with("did", did_key(&self.bytes))
            .with("status", status)
    }

    /// Reads one key entry of a key document.
    pub fn from_value(v: &Value) -> Option<PublicKey> {
        let key_id = v.get("key_id")?.as_str()?.to_owned();
        let bytes = if let Some(b) = v.get("public_key_base64").and_then(Value::as_str) {
            B64.decode(b).ok()?
        } else {
            hex::decode(v.get("public_key_hex")?.as_str()?).ok()?
        };
        Some(PublicKey {
            key_id,
            bytes: bytes.try_into().ok()?,
        })
    }
}

pub const RECIPE: &[&str] = &[
    "Remove the signature field from the document.",
    "Serialize the rest as JSON with object keys sorted at every depth, no whitespace, UTF-8, non-ASCII left unescaped: Python json.dumps(doc, sort_keys=True, separators=(\",\", \":\"), ensure_ascii=False).encode(\"utf-8\").",
    "Check that sha256 of those bytes equals signature.payload_sha256 (a mismatch means your serialization differs, not that the document is forged).",
    "Find the key whose key_id equals signature.key_id in this document and verify the Ed25519 signature signature.sig_base64 (standard base64) over those bytes.",
    "For verdicts: spec_hash is sha256 of the stable JSON of the embedded spec; deliverable_hash is sha256 of the stable JSON of {\"json\": <json or null>, \"text\": <text or null>}.",
];

/// The `/.well-known/umpire-key.json` document: active key first, then retired ones.
/// The key document: the active key, the next one (published before it signs: the first
/// deploy of a rotation), then the retired ones.
pub fn key_document(
    issuer: &str,
    active: Option<&PublicKey>,
    next: Option<&PublicKey>,
    retired: &[PublicKey],
) -> Value {
    let mut keys: Vec<Value> = active.map(|k| k.to_value("active")).into_iter().collect();
    keys.extend(next.map(|k| k.to_value("next")));
    keys.extend(retired.iter().map(|k| k.to_value("retired")));
    Value::object()
        .with("issuer", issuer)
        .with("operator", crate::product::OPERATOR)
        .with("keys", Value::Array(keys))
        .with(
            "verification",
            Value::object()
                .with("alg", ALG)
                .with("steps", RECIPE.iter().map(|s| Value::from(*s)).collect::<Vec<_>>())
                .with(
                    "python",
                    "json.dumps(doc, sort_keys=True, separators=(\",\", \":\"), ensure_ascii=False).encode(\"utf-8\")",
                ),
        )
}

/// The keys a key document says sign now (`"status": "active"`, or no status, as a bare
/// entry has): what may sign offers. Retired keys still verify old documents, never a
/// new price.
pub fn active_keys_from_document(v: &Value) -> Vec<PublicKey> {
    let active = |k: &&Value| {
        k.get("status")
            .and_then(Value::as_str)
            .is_none_or(|s| s == "active")
    };
    match v.get("keys").and_then(Value::as_array) {
        Some(keys) => keys
            .iter()
            .filter(active)
            .filter_map(PublicKey::from_value)
            .collect(),
        None => PublicKey::from_value(v).into_iter().collect(),
    }
}

/// Keys from a key document (or a bare key entry).
pub fn keys_from_document(v: &Value) -> Vec<PublicKey> {
    match v.get("keys").and_then(Value::as_array) {
        Some(keys) => keys.iter().filter_map(PublicKey::from_value).collect(),
        None => PublicKey::from_value(v).into_iter().collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ed25519_dalek::Signer as _;

    fn unhex<const N: usize>(text: &str) -> [u8; N] {
        hex::decode(text).expect("hex").try_into().expect("length")
    }

    #[test]
    fn only_active_keys_sign_now() {
        let active = PublicKey {
            key_id: "k2".into(),
            bytes: [2; 32],
        };
        let retired = PublicKey {
            key_id: "k1".into(),
            bytes: [1; 32],
        };
        let next = PublicKey {
            key_id: "k3".into(),
            bytes: [3; 32],
        };
        let doc = key_document(
            "https://u.example",
            Some(&active),
            Some(&next),
            std::slice::from_ref(&retired),
        );
        // A next key verifies (it is published before it signs) but signs no offer yet.
        assert_eq!(
            keys_from_document(&doc),
            vec![active.clone(), next, retired]
        );
        assert_eq!(active_keys_from_document(&doc), vec![active.clone()]);
        assert_eq!(
            active_keys_from_document(&active.to_value("active")),
            vec![active]
        );
    }

    #[test]
    fn did_key_round_trips_and_reads_as_an_ed25519_did() {
        let public: [u8; 32] =
            unhex("d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a");
        let did = did_key(&public);
        // Every Ed25519 did:key starts so (multicodec 0xed01 in base58btc).
        assert!(did.starts_with("did:key:z6Mk"), "{did}");
        assert_eq!(from_did_key(&did), Some(public));
        assert_eq!(from_did_key(&format!("{did}#{}", &did[8..])), Some(public));
        assert_eq!(from_did_key("did:key:z6Mk"), None);
        assert_eq!(from_did_key(&did.replace("did:key:", "did:web:")), None);
    }

    #[test]
    fn signs_rfc8032_test_1() {
        let signer = LocalSigner::from_seed(unhex(
            "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60",
        ));
        assert_eq!(
            signer.public_key(),
            unhex::<32>("d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a")
        );
        assert_eq!(
            hex::encode(signer.sign(b"")),
            "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e06522490155\
             5fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b"
        );
        assert_eq!(signer.seed()[0], 0x9d);
    }

    #[test]
    fn signatures_match_ed25519_dalek_and_verify_strictly() {
        for (seed_byte, len) in [(1u8, 0usize), (7, 1), (42, 2762), (255, 70_000)] {
            let seed = [seed_byte; 32];
            let message: Vec<u8> = (0..len).map(|i| (i * 31 % 251) as u8).collect();
            let ours = LocalSigner::from_seed(seed);
            let dalek = ed25519_dalek::SigningKey::from_bytes(&seed);
            assert_eq!(ours.public_key(), dalek.verifying_key().to_bytes());
            let signature = ours.sign(&message);
            assert_eq!(signature, dalek.sign(&message).to_bytes());
            assert!(PublicKey::of(&ours).verify(&message, &signature));
        }
    }
}
