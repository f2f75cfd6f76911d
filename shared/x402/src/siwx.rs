//! x402's sign-in-with-x extension (CAIP-122; npm `@x402/extensions/sign-in-with-x`):
//! a wallet proves it is the one that paid by signing a short-lived, single-use
//! message bound to our domain and to the resource it reads. EVM wallets sign an
//! EIP-4361 (SIWE) message with EIP-191 `personal_sign`; Solana wallets a SIWS message
//! with Ed25519. The messages are rebuilt here byte for byte as the reference library
//! builds them (`formatSIWEMessage`, `formatSIWSMessage`), from the fields of the proof.
//!
//! What this module checks: the domain, the URI, the version, the times (issued at
//! most [`MAX_AGE_SECS`] ago, expiring, and within [`MAX_LIFETIME_SECS`] of issue) and
//! the signature. The nonce's single use and what the wallet may read are the caller's.

use alloy::primitives::{Address, Signature, eip191_hash_message};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::svm;
use crate::types::{Account, Namespace, Network};

/// The extension's key in `extensions`, and the request header carrying a proof.
pub const SIGN_IN_WITH_X: &str = "sign-in-with-x";

/// How old a proof's `issuedAt` may be (the reference library's default).
pub const MAX_AGE_SECS: u64 = 300;
/// How long a proof may be valid in all: a proof is for one read, now.
pub const MAX_LIFETIME_SECS: u64 = 600;
/// Clock difference tolerated between the wallet and us.
const SKEW_SECS: u64 = 60;

/// A proof as the client sends it (base64 JSON in the `SIGN-IN-WITH-X` header).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Proof {
    pub domain: String,
    pub address: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub statement: Option<String>,
    pub uri: String,
    pub version: String,
    pub chain_id: String,
    #[serde(rename = "type")]
    pub kind: String,
    pub nonce: String,
    pub issued_at: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expiration_time: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_before: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<Vec<String>>,
    pub signature: String,
}

/// Why a proof is refused: the reference library's code, and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reason}: {message}")]
pub struct Refused {
    pub reason: &'static str,
    pub message: String,
}

fn refused(reason: &'static str, message: impl Into<String>) -> Refused {
    Refused {
        reason,
        message: message.into(),
    }
}

impl Proof {
    /// The proof in a `SIGN-IN-WITH-X` header value.
    pub fn from_header(text: &str) -> Result<Proof, Refused> {
        use crate::codec::{CodecError, MAX_HEADER_BYTES, decode_header};
        decode_header(text).map_err(|e| {
            let why = match e {
                CodecError::TooLarge => {
                    format!("the header is larger than {MAX_HEADER_BYTES} bytes")
                }
                CodecError::NotBase64 => "the header is not base64".into(),
                CodecError::BadJson(e) => format!("the header is not a sign-in-with-x proof: {e}"),
            };
            refused("invalid_siwx_payload", why)
        })
    }

    /// The proof answering `declaration` (the extension's value in a challenge) as
    /// `address` on its first supported chain of `kind` (`eip191`, `ed25519`), not yet
    /// signed (see [`siwe_message`], [`siws_message`]).
    pub fn answering(declaration: &Value, kind: &str, address: &str) -> Result<Proof, String> {
        let info = declaration.get("info").ok_or("the challenge has no info")?;
        let chain = declaration
            .get("supportedChains")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .find(|c| c.get("type").and_then(Value::as_str) == Some(kind))
            .and_then(|c| c.get("chainId"))
            .and_then(Value::as_str)
            .ok_or_else(|| format!("the challenge takes no {kind} signature"))?;
        let mut fields = info.clone();
        let object = fields
            .as_object_mut()
            .ok_or("the challenge's info is not an object")?;
        object.insert("address".into(), address.into());
        object.insert("chainId".into(), chain.into());
        object.insert("type".into(), kind.into());
        object.insert("signature".into(), "".into());
        serde_json::from_value(fields).map_err(|e| format!("the challenge is incomplete: {e}"))
    }

    /// The `SIGN-IN-WITH-X` header value.
    pub fn to_header(&self) -> String {
        crate::codec::encode_header(self)
    }

    /// The nonce, if it is one a SIWE message may carry (8 to 64 letters and digits).
    pub fn nonce(&self) -> Option<&str> {
        let n = &self.nonce;
        ((8..=64).contains(&n.len()) && n.bytes().all(|b| b.is_ascii_alphanumeric()))
            .then_some(n.as_str())
    }

    /// When the proof stops being valid (unix seconds), once it has verified.
    pub fn expires_at(&self) -> u64 {
        self.expiration_time
            .as_deref()
            .and_then(umpire_core::time::parse_rfc3339)
            .unwrap_or_default()
    }
}

/// The domain a sign-in message names for a service at `base`: its host, and its port
/// when the URL spells one.
pub fn domain_of(base: &str) -> Option<String> {
    let u = reqwest::Url::parse(base).ok()?;
    let host = u.host_str()?;
    Some(match u.port() {
        Some(p) => format!("{host}:{p}"),
        None => host.to_owned(),
    })
}

/// What a proof must be bound to.
pub struct Expected<'a> {
    /// Our host (and port, if any), as in the issuer URL.
    pub domain: &'a str,
    /// The exact URI read.
    pub uri: &'a str,
    /// Unix seconds.
    pub now: u64,
}

/// The wallet a proof is from, once its binding, times and signature hold.
pub fn verify(proof: &Proof, expected: &Expected<'_>) -> Result<Account, Refused> {
    // Each field is one line of the signed message: a line break inside one would let
    // a proof's fields say one thing and its message another.
    let one_line = [
        &proof.domain,
        &proof.address,
        &proof.uri,
        &proof.version,
        &proof.chain_id,
    ]
    .into_iter()
    .chain([&proof.nonce, &proof.issued_at])
    .chain(proof.statement.iter())
    .chain(proof.expiration_time.iter())
    .chain(proof.not_before.iter())
    .chain(proof.request_id.iter())
    .chain(proof.resources.iter().flatten())
    .all(|f| !f.contains(['\n', '\r']));
    if !one_line {
        return Err(refused(
            "invalid_siwx_payload",
            "a field holds a line break",
        ));
    }
    if proof.domain != expected.domain {
        return Err(refused(
            "invalid_siwx_domain_mismatch",
            format!("signed for {}, this is {}", proof.domain, expected.domain),
        ));
    }
    if proof.uri != expected.uri {
        return Err(refused(
            "invalid_siwx_uri_mismatch",
            format!("signed for {}, this is {}", proof.uri, expected.uri),
        ));
    }
    if proof.version != "1" {
        return Err(refused("invalid_siwx_payload", "version must be \"1\""));
    }
    if proof.nonce().is_none() {
        return Err(refused(
            "invalid_siwx_nonce",
            "the nonce must be 8 to 64 letters and digits",
        ));
    }
    check_times(proof, expected.now)?;
    let network: Network = proof
        .chain_id
        .parse()
        .map_err(|_| refused("invalid_siwx_chain_id", "chainId is not CAIP-2"))?;
    match network.namespace() {
        Namespace::Eip155 => verify_evm(proof, &network),
        Namespace::Solana => verify_solana(proof),
        Namespace::Other => Err(refused(
            "invalid_siwx_unsupported_chain",
            format!("{} is neither eip155 nor solana", proof.chain_id),
        )),
    }
}

fn check_times(proof: &Proof, now: u64) -> Result<(), Refused> {
    let time = |text: &str, reason: &'static str| {
        umpire_core::time::parse_rfc3339(text)
            .ok_or_else(|| refused(reason, format!("{text} is not an RFC 3339 time")))
    };
    let issued = time(&proof.issued_at, "invalid_siwx_issued_at")?;
    if issued > now + SKEW_SECS {
        return Err(refused(
            "invalid_siwx_issued_at_in_future",
            "issuedAt is in the future",
        ));
    }
    if now.saturating_sub(issued) > MAX_AGE_SECS {
        return Err(refused(
            "invalid_siwx_issued_at_too_old",
            format!("issued more than {MAX_AGE_SECS} s ago"),
        ));
    }
    let Some(expiration) = proof.expiration_time.as_deref() else {
        return Err(refused(
            "invalid_siwx_expiration_time",
            "a proof must expire (expirationTime)",
        ));
    };
    let expires = time(expiration, "invalid_siwx_expiration_time")?;
    if expires <= now {
        return Err(refused("invalid_siwx_expired", "the proof has expired"));
    }
    if expires > issued + MAX_LIFETIME_SECS {
        return Err(refused(
            "invalid_siwx_expiration_time",
            format!("a proof may be valid at most {MAX_LIFETIME_SECS} s"),
        ));
    }
    if let Some(nb) = proof.not_before.as_deref()
        && time(nb, "invalid_siwx_not_before")? > now + SKEW_SECS
    {
        return Err(refused(
            "invalid_siwx_not_yet_valid",
            "notBefore is in the future",
        ));
    }
    Ok(())
}

/// The lines after the address, shared by both formats (`chain` as each spells it).
/// The lines after the statement. SIWE (`siwe`) writes a `Request ID` and `Resources`
/// whenever they are present, even empty; SIWS only when they say something.
fn fields(proof: &Proof, chain: &str, siwe: bool) -> Vec<String> {
    let mut lines = vec![
        format!("URI: {}", proof.uri),
        format!("Version: {}", proof.version),
        format!("Chain ID: {chain}"),
        format!("Nonce: {}", proof.nonce),
        format!("Issued At: {}", proof.issued_at),
    ];
    if let Some(t) = &proof.expiration_time {
        lines.push(format!("Expiration Time: {t}"));
    }
    if let Some(t) = &proof.not_before {
        lines.push(format!("Not Before: {t}"));
    }
    if let Some(r) = proof.request_id.as_ref().filter(|r| siwe || !r.is_empty()) {
        lines.push(format!("Request ID: {r}"));
    }
    match &proof.resources {
        Some(r) if !r.is_empty() || siwe => {
            lines.push("Resources:".into());
            lines.extend(r.iter().map(|x| format!("- {x}")));
        }
        _ => {}
    }
    lines
}

/// The EIP-4361 message, as `@signinwithethereum/siwe`'s `prepareMessage` writes it
/// (an address sent in one case is written EIP-55 checksummed, as it does).
pub fn siwe_message(proof: &Proof, chain_id: u64) -> String {
    let address = proof
        .address
        .parse::<Address>()
        .map_or_else(|_| proof.address.clone(), |a| a.to_checksum(None));
    let head = format!(
        "{} wants you to sign in with your Ethereum account:\n{address}",
        proof.domain
    );
    let head = match &proof.statement {
        None => format!("{head}\n\n"),
        Some(s) => format!("{head}\n\n{s}\n"),
    };
    format!(
        "{head}\n{}",
        fields(proof, &chain_id.to_string(), true).join("\n")
    )
}

/// The SIWS message, as the reference library's `formatSIWSMessage` writes it.
pub fn siws_message(proof: &Proof) -> String {
    let reference = proof.chain_id.split(':').nth(1).unwrap_or_default();
    let mut lines = vec![
        format!(
            "{} wants you to sign in with your Solana account:",
            proof.domain
        ),
        proof.address.clone(),
        String::new(),
    ];
    if let Some(s) = proof.statement.as_ref().filter(|s| !s.is_empty()) {
        lines.push(s.clone());
        lines.push(String::new());
    }
    lines.extend(fields(proof, reference, false));
    lines.join("\n")
}

fn verify_evm(proof: &Proof, network: &Network) -> Result<Account, Refused> {
    let address: Address = proof
        .address
        .parse()
        .map_err(|_| refused("invalid_siwx_payload", "address is not an EVM address"))?;
    let chain_id = network
        .chain_id()
        .ok_or_else(|| refused("invalid_siwx_chain_id", "no chain id"))?;
    let bytes = alloy::primitives::hex::decode(&proof.signature)
        .map_err(|_| refused("invalid_siwx_malformed_signature", "not hex"))?;
    let signature = Signature::from_raw(&bytes).map_err(|_| {
        refused(
            "invalid_siwx_malformed_signature",
            "not a 65-byte signature",
        )
    })?;
    let hash = eip191_hash_message(siwe_message(proof, chain_id));
    match signature.recover_address_from_prehash(&hash) {
        Ok(signer) if signer == address => Ok(Account::Evm(address)),
        _ => Err(refused(
            "invalid_siwx_signature",
            "the signature is not the address's (only wallets that sign with their own key, EOAs, are supported)",
        )),
    }
}

fn verify_solana(proof: &Proof) -> Result<Account, Refused> {
    let key = svm::Pubkey::from_base58(&proof.address)
        .ok_or_else(|| refused("invalid_siwx_payload", "address is not a Solana address"))?;
    let signature = bs58::decode(&proof.signature)
        .into_vec()
        .map_err(|_| refused("invalid_siwx_malformed_signature", "not base58"))?;
    let public = umpire_core::signer::PublicKey {
        key_id: String::new(),
        bytes: key.0,
    };
    if public.verify(siws_message(proof).as_bytes(), &signature) {
        Ok(Account::Solana(key))
    } else {
        Err(refused(
            "invalid_siwx_signature",
            "the signature is not the address's",
        ))
    }
}

/// What a 401 (or a request without credentials) declares: a challenge for `uri`,
/// signable on `networks`, with a fresh `nonce`.
pub fn declaration(domain: &str, uri: &str, networks: &[Network], nonce: &str, now: u64) -> Value {
    let chains: Vec<Value> = networks
        .iter()
        .map(|n| {
            let kind = match n.namespace() {
                Namespace::Solana => "ed25519",
                _ => "eip191",
            };
            json!({"chainId": n.as_str(), "type": kind})
        })
        .collect();
    json!({
        "info": {
            "domain": domain,
            "uri": uri,
            "statement": "Read the verdict this wallet paid for.",
            "version": "1",
            "nonce": nonce,
            "issuedAt": umpire_core::time::rfc3339(now),
            "expirationTime": umpire_core::time::rfc3339(now + MAX_AGE_SECS),
            "resources": [uri],
        },
        "supportedChains": chains,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloy::signers::SignerSync as _;
    use alloy::signers::local::PrivateKeySigner;
    use umpire_core::signer::{LocalSigner, Signer as _};

    const NOW: u64 = 1_796_223_845;

    fn proof(address: &str, chain: &str) -> Proof {
        Proof {
            domain: "umpire.example".into(),
            address: address.into(),
            statement: Some("Read the verdict this wallet paid for.".into()),
            uri: "https://umpire.example/v1/verdicts/vrd_1".into(),
            version: "1".into(),
            chain_id: chain.into(),
            kind: "eip191".into(),
            nonce: "a1b2c3d4e5f6a7b8".into(),
            issued_at: umpire_core::time::rfc3339(NOW - 10),
            expiration_time: Some(umpire_core::time::rfc3339(NOW + 200)),
            not_before: None,
            request_id: None,
            resources: Some(vec!["https://umpire.example/v1/verdicts/vrd_1".into()]),
            signature: String::new(),
        }
    }

    fn expected() -> Expected<'static> {
        Expected {
            domain: "umpire.example",
            uri: "https://umpire.example/v1/verdicts/vrd_1",
            now: NOW,
        }
    }

    #[test]
    fn the_siwe_message_is_spelled_as_the_reference_library_spells_it() {
        let p = proof("0x70997970C51812dc3A010C7d01b50e0d17dc79C8", "eip155:8453");
        assert_eq!(
            siwe_message(&p, 8453),
            "umpire.example wants you to sign in with your Ethereum account:\n0x70997970C51812dc3A010C7d01b50e0d17dc79C8\n\nRead the verdict this wallet paid for.\n\nURI: https://umpire.example/v1/verdicts/vrd_1\nVersion: 1\nChain ID: 8453\nNonce: a1b2c3d4e5f6a7b8\nIssued At: 2026-12-02T15:03:55Z\nExpiration Time: 2026-12-02T15:07:25Z\nResources:\n- https://umpire.example/v1/verdicts/vrd_1"
        );
        let bare = Proof {
            statement: None,
            resources: None,
            ..p
        };
        assert!(
            siwe_message(&bare, 8453)
                .contains("0x70997970C51812dc3A010C7d01b50e0d17dc79C8\n\n\nURI:")
        );
    }

    #[test]
    fn an_evm_wallet_proves_itself_and_nothing_else_passes() {
        let wallet = PrivateKeySigner::random();
        let mut p = proof(&wallet.address().to_checksum(None), "eip155:8453");
        let sig = wallet
            .sign_message_sync(siwe_message(&p, 8453).as_bytes())
            .expect("sign");
        p.signature = alloy::primitives::hex::encode_prefixed(sig.as_bytes());
        assert_eq!(verify(&p, &expected()), Ok(Account::Evm(wallet.address())));

        let other = PrivateKeySigner::random();
        let claimed = Proof {
            address: other.address().to_checksum(None),
            ..p.clone()
        };
        assert_eq!(
            verify(&claimed, &expected()).map_err(|e| e.reason),
            Err("invalid_siwx_signature")
        );
        let elsewhere = Expected {
            domain: "mirror.example",
            ..expected()
        };
        assert_eq!(
            verify(&p, &elsewhere).map_err(|e| e.reason),
            Err("invalid_siwx_domain_mismatch")
        );
        let later = Expected {
            now: NOW + 250,
            ..expected()
        };
        assert_eq!(
            verify(&p, &later).map_err(|e| e.reason),
            Err("invalid_siwx_expired")
        );
        let forever = Proof {
            expiration_time: None,
            ..p.clone()
        };
        assert_eq!(
            verify(&forever, &expected()).map_err(|e| e.reason),
            Err("invalid_siwx_expiration_time")
        );
    }

    /// As the reference library signs it: a lowercase address is written checksummed in
    /// the message; a line break inside a field is refused; SIWS leaves out an empty
    /// statement and request id.
    #[test]
    fn messages_follow_the_reference_librarys_edges() {
        let wallet = PrivateKeySigner::random();
        let checksummed = wallet.address().to_checksum(None);
        let mut p = proof(&checksummed.to_lowercase(), "eip155:8453");
        assert!(siwe_message(&p, 8453).contains(&format!("account:\n{checksummed}\n")));
        let sig = wallet
            .sign_message_sync(siwe_message(&p, 8453).as_bytes())
            .expect("sign");
        p.signature = alloy::primitives::hex::encode_prefixed(sig.as_bytes());
        assert_eq!(verify(&p, &expected()), Ok(Account::Evm(wallet.address())));

        let injected = Proof {
            statement: Some("Read it.\nURI: https://elsewhere.example/".into()),
            ..p.clone()
        };
        assert_eq!(
            verify(&injected, &expected()).map_err(|e| e.reason),
            Err("invalid_siwx_payload")
        );

        let sol = Proof {
            statement: Some(String::new()),
            request_id: Some(String::new()),
            ..proof(
                "11111111111111111111111111111111",
                "solana:5eykt4UsFv8P8NJdTREpY1vzqKqZKvdp",
            )
        };
        let message = siws_message(&sol);
        assert!(
            message.contains("account:\n11111111111111111111111111111111\n\nURI:"),
            "{message}"
        );
        assert!(!message.contains("Request ID"), "{message}");
    }

    #[test]
    fn a_solana_wallet_proves_itself() {
        let key = LocalSigner::from_seed([5; 32]);
        let address = svm::Pubkey(key.public_key()).to_base58();
        let mut p = proof(&address, "solana:5eykt4UsFv8P8NJdTREpY1vzqKqZKvdp");
        p.kind = "ed25519".into();
        let message = siws_message(&p);
        assert!(message.starts_with(&format!(
            "umpire.example wants you to sign in with your Solana account:\n{address}\n\nRead the verdict"
        )));
        assert!(message.contains("\nChain ID: 5eykt4UsFv8P8NJdTREpY1vzqKqZKvdp\n"));
        p.signature = bs58::encode(key.sign(message.as_bytes())).into_string();
        assert!(matches!(verify(&p, &expected()), Ok(Account::Solana(_))));
        p.nonce = "othernonce1".into();
        assert_eq!(
            verify(&p, &expected()).map_err(|e| e.reason),
            Err("invalid_siwx_signature")
        );
    }
}
