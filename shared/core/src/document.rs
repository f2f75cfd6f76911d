//! Signed documents: the verdict, its signature envelope, and offline verification
//! exactly as the contract's recipe describes it.

use std::collections::BTreeMap;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;

use crate::hash::sha256_hex;
use crate::json::Value;
use crate::product::Tier;
use crate::signer::{ALG, PublicKey, Signer};
use crate::spec::{Deliverable, Spec};

pub const VERDICT_DOCUMENT: &str = "umpire.verdict.v1";

/// The `hashing` field: how spec_hash and deliverable_hash were computed, in words a
/// verifier can follow without reading our code.
pub fn hashing_field() -> Value {
    Value::object()
        .with("algorithm", "sha256")
        .with(
            "stable_json",
            "json.dumps(value, sort_keys=True, separators=(\",\", \":\"), ensure_ascii=False).encode(\"utf-8\")",
        )
        .with("spec_hash", "sha256(stable_json(spec))")
        .with(
            "deliverable_hash",
            "sha256(stable_json({\"json\": deliverable.json or null, \"text\": deliverable.text or null}))",
        )
}

/// One judged check as the document records it.
#[derive(Debug, Clone, PartialEq)]
pub struct CheckResult {
    pub index: usize,
    pub check_type: &'static str,
    pub passed: bool,
    pub reason: String,
    /// For checks that fetched a URL: one observation per pass.
    pub observations: Option<Vec<Value>>,
}

impl CheckResult {
    pub fn to_value(&self) -> Value {
        let mut v = Value::object()
            .with("check", self.index)
            .with("type", self.check_type)
            .with("passed", self.passed)
            .with("reason", self.reason.as_str());
        if let Some(obs) = &self.observations {
            v.insert("observations", Value::Array(obs.clone()));
        }
        v
    }
}

/// Everything a verdict document states, before it is signed.
pub struct VerdictFacts<'a> {
    pub verdict_id: &'a str,
    pub tier: Tier,
    pub spec: &'a Spec,
    pub deliverable_hash: &'a str,
    pub results: &'a [CheckResult],
    pub job_ref: Option<&'a Value>,
    pub issued_at: &'a str,
    pub issuer: &'a str,
}

pub fn verdict_passed(results: &[CheckResult]) -> bool {
    !results.is_empty() && results.iter().all(|r| r.passed)
}

/// The unsigned verdict document.
pub fn verdict_document(f: &VerdictFacts<'_>, key_id: &str) -> Value {
    let passed = f.results.iter().filter(|r| r.passed).count();
    Value::object()
        .with("document", VERDICT_DOCUMENT)
        .with("verdict_id", f.verdict_id)
        .with("tier", f.tier.as_str())
        .with(
            "verdict",
            if verdict_passed(f.results) {
                "pass"
            } else {
                "fail"
            },
        )
        .with("issued_at", f.issued_at)
        .with("issuer", f.issuer)
        .with("key_id", key_id)
        .with("job_ref", f.job_ref.cloned())
        .with("spec", f.spec.normalized.clone())
        .with("spec_hash", f.spec.hash.as_str())
        .with("deliverable_hash", f.deliverable_hash)
        .with("hashing", hashing_field())
        .with(
            "results",
            Value::Array(f.results.iter().map(CheckResult::to_value).collect()),
        )
        .with(
            "summary",
            Value::object()
                .with("checks", f.results.len())
                .with("passed", passed)
                .with("failed", f.results.len() - passed),
        )
}

/// The `signature` object {alg, key_id, payload_sha256, sig_base64} for a document
/// that has no `signature` field yet: Ed25519 over its stable JSON.
pub fn signature_for(doc: &Value, signer: &dyn Signer) -> Value {
    let payload = doc.to_canonical_vec();
    let sig = signer.sign(&payload);
    Value::object()
        .with("alg", ALG)
        .with("key_id", signer.key_id())
        .with("payload_sha256", sha256_hex(&payload))
        .with("sig_base64", B64.encode(sig))
}

/// Adds `signature` over the stable JSON of everything else (replacing any old one).
pub fn sign(mut doc: Value, signer: &dyn Signer) -> Value {
    if let Value::Object(m) = &mut doc {
        m.remove("signature");
    }
    let signature = signature_for(&doc, signer);
    doc.with("signature", signature)
}

/// One step of the recipe and how it went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    pub name: &'static str,
    pub ok: bool,
    pub detail: String,
}

/// Runs the contract's recipe. Steps stop at the first failure of the signature
/// chain; spec/deliverable hashes are checked when the document carries them.
pub fn verify(doc: &Value, keys: &[PublicKey], deliverable: Option<&Deliverable>) -> Vec<Step> {
    let mut steps = Vec::new();
    let Some(obj) = doc.as_object() else {
        record(
            &mut steps,
            "document",
            false,
            "the document is not a JSON object".into(),
        );
        return steps;
    };
    if !verify_signature_chain(obj, keys, &mut steps) {
        return steps;
    }
    check_spec_hash(obj, &mut steps);
    check_deliverable_hash(obj, deliverable, &mut steps);
    steps
}

/// Appends one step and returns whether it passed, so a failed link of the signature
/// chain can end the recipe.
fn record(steps: &mut Vec<Step>, name: &'static str, ok: bool, detail: String) -> bool {
    steps.push(Step { name, ok, detail });
    ok
}

/// The four string fields of a document's `signature` object.
struct SignatureFields<'a> {
    alg: &'a str,
    key_id: &'a str,
    payload_sha256: &'a str,
    sig_base64: &'a str,
}

/// The `signature` object's fields, or None when it is missing or any of alg, key_id,
/// payload_sha256, sig_base64 is absent or not a string.
fn signature_fields(obj: &BTreeMap<String, Value>) -> Option<SignatureFields<'_>> {
    let sig = obj.get("signature");
    let field = |k: &str| sig.and_then(|s| s.get(k)).and_then(Value::as_str);
    Some(SignatureFields {
        alg: field("alg")?,
        key_id: field("key_id")?,
        payload_sha256: field("payload_sha256")?,
        sig_base64: field("sig_base64")?,
    })
}

/// The signature chain, in order: the `signature` field's shape and algorithm, the
/// payload digest, the published key, the Ed25519 signature. Records a step for each
/// link reached and stops at the first that fails; true only when all of them pass.
fn verify_signature_chain(
    obj: &BTreeMap<String, Value>,
    keys: &[PublicKey],
    steps: &mut Vec<Step>,
) -> bool {
    let Some(SignatureFields {
        alg,
        key_id,
        payload_sha256: payload_sha,
        sig_base64: sig_b64,
    }) = signature_fields(obj)
    else {
        record(
            steps,
            "signature_field",
            false,
            "signature must be an object with alg, key_id, payload_sha256, sig_base64".into(),
        );
        return false;
    };
    if !record(
        steps,
        "signature_field",
        alg == ALG,
        format!("alg {alg}, key_id {key_id}"),
    ) {
        return false;
    }
    let Some(payload) = signed_payload(obj, payload_sha, steps) else {
        return false;
    };
    let Some(key) = published_key(keys, key_id, steps) else {
        return false;
    };
    check_ed25519(key, &payload, sig_b64, steps)
}

/// The stable JSON bytes the signature covers (the document without `signature`),
/// when their sha256 is the `payload_sha256` the signature states; records the
/// `payload_sha256` step either way.
fn signed_payload(
    obj: &BTreeMap<String, Value>,
    payload_sha: &str,
    steps: &mut Vec<Step>,
) -> Option<Vec<u8>> {
    let mut rest = obj.clone();
    rest.remove("signature");
    let payload = Value::Object(rest).to_canonical_vec();
    let digest = sha256_hex(&payload);
    let ok = record(
        steps,
        "payload_sha256",
        digest == payload_sha,
        if digest == payload_sha {
            format!("sha256 of the {} stable JSON bytes matches", payload.len())
        } else {
            format!(
                "sha256 of the stable JSON is {digest}, the signature says {payload_sha}: the document was changed or serialized differently"
            )
        },
    );
    ok.then_some(payload)
}

/// The published key named by the signature's `key_id`; records the `key` step.
fn published_key<'k>(
    keys: &'k [PublicKey],
    key_id: &str,
    steps: &mut Vec<Step>,
) -> Option<&'k PublicKey> {
    let Some(key) = keys.iter().find(|k| k.key_id == key_id) else {
        record(
            steps,
            "key",
            false,
            format!("no published key has key_id {key_id}"),
        );
        return None;
    };
    record(steps, "key", true, format!("key {key_id} found"));
    Some(key)
}

/// Whether `sig_b64` is valid base64 of an Ed25519 signature by `key` over `payload`
/// (undecodable base64 counts as a bad signature); records the `ed25519` step.
fn check_ed25519(key: &PublicKey, payload: &[u8], sig_b64: &str, steps: &mut Vec<Step>) -> bool {
    let sig_ok = B64
        .decode(sig_b64)
        .map(|s| key.verify(payload, &s))
        .unwrap_or(false);
    record(
        steps,
        "ed25519",
        sig_ok,
        if sig_ok {
            "the Ed25519 signature is valid".into()
        } else {
            "the Ed25519 signature does not verify with that key".into()
        },
    )
}

/// When the document embeds its spec and a string `spec_hash`, records whether the
/// hash is the sha256 of that spec's stable JSON; otherwise records nothing.
fn check_spec_hash(obj: &BTreeMap<String, Value>, steps: &mut Vec<Step>) {
    if let (Some(spec), Some(Value::String(spec_hash))) = (obj.get("spec"), obj.get("spec_hash")) {
        let got = sha256_hex(&spec.to_canonical_vec());
        record(
            steps,
            "spec_hash",
            &got == spec_hash,
            if &got == spec_hash {
                "spec_hash matches the embedded spec".into()
            } else {
                format!("sha256 of the embedded spec is {got}, not {spec_hash}")
            },
        );
    }
}

/// When the caller gives a deliverable and the document carries a string
/// `deliverable_hash`, records whether they match; otherwise records nothing.
fn check_deliverable_hash(
    obj: &BTreeMap<String, Value>,
    deliverable: Option<&Deliverable>,
    steps: &mut Vec<Step>,
) {
    if let (Some(d), Some(Value::String(dh))) = (deliverable, obj.get("deliverable_hash")) {
        let got = d.hash();
        record(
            steps,
            "deliverable_hash",
            &got == dh,
            if &got == dh {
                "deliverable_hash matches the given deliverable".into()
            } else {
                format!("the given deliverable hashes to {got}, not {dh}")
            },
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::json::parse_str;
    use crate::signer::LocalSigner;
    use crate::spec::parse_spec;

    #[test]
    fn sign_then_verify_and_detect_tampering() {
        let signer = LocalSigner::from_seed([7u8; 32]);
        let spec = parse_spec(
            &parse_str(r#"{"checks":[{"type":"length","min":1}]}"#).expect("json"),
            Some(Tier::Basic),
        )
        .expect("spec");
        let d = Deliverable {
            text: Some("é".into()),
            json: None,
        };
        let results = vec![CheckResult {
            index: 0,
            check_type: "length",
            passed: true,
            reason: "ok".into(),
            observations: None,
        }];
        let facts = VerdictFacts {
            verdict_id: "vrd_test",
            tier: Tier::Basic,
            spec: &spec,
            deliverable_hash: &d.hash(),
            results: &results,
            job_ref: None,
            issued_at: "2026-12-02T00:00:00Z",
            issuer: "https://umpire.test",
        };
        let doc = sign(verdict_document(&facts, signer.key_id()), &signer);
        let keys = vec![PublicKey::of(&signer)];
        let steps = verify(&doc, &keys, Some(&d));
        assert!(steps.iter().all(|s| s.ok), "{steps:?}");
        assert_eq!(steps.len(), 6);
        assert_eq!(doc.get("verdict").and_then(Value::as_str), Some("pass"));

        let mut tampered = doc.clone();
        tampered.insert("verdict", "fail");
        let steps = verify(&tampered, &keys, None);
        assert_eq!(
            steps.last().map(|s| (s.name, s.ok)),
            Some(("payload_sha256", false))
        );

        let other = LocalSigner::from_seed([8u8; 32]);
        let steps = verify(
            &doc,
            &[PublicKey {
                key_id: signer.key_id().into(),
                bytes: other.public_key(),
            }],
            None,
        );
        assert_eq!(
            steps.last().map(|s| (s.name, s.ok)),
            Some(("ed25519", false))
        );
    }
}
