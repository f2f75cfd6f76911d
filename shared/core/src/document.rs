//! Signed documents: the verdict, its signature envelope, and offline verification
//! exactly as the contract's recipe describes it.

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
    let mut step = |name: &'static str, ok: bool, detail: String| {
        steps.push(Step { name, ok, detail });
        ok
    };
    let Some(obj) = doc.as_object() else {
        step(
            "document",
            false,
            "the document is not a JSON object".into(),
        );
        return steps;
    };
    let sig = obj.get("signature");
    let field = |k: &str| sig.and_then(|s| s.get(k)).and_then(Value::as_str);
    let (Some(alg), Some(key_id), Some(payload_sha), Some(sig_b64)) = (
        field("alg"),
        field("key_id"),
        field("payload_sha256"),
        field("sig_base64"),
    ) else {
        step(
            "signature_field",
            false,
            "signature must be an object with alg, key_id, payload_sha256, sig_base64".into(),
        );
        return steps;
    };
    if !step(
        "signature_field",
        alg == ALG,
        format!("alg {alg}, key_id {key_id}"),
    ) {
        return steps;
    }
    let mut rest = obj.clone();
    rest.remove("signature");
    let payload = Value::Object(rest).to_canonical_vec();
    let digest = sha256_hex(&payload);
    if !step(
        "payload_sha256",
        digest == payload_sha,
        if digest == payload_sha {
            format!("sha256 of the {} stable JSON bytes matches", payload.len())
        } else {
            format!(
                "sha256 of the stable JSON is {digest}, the signature says {payload_sha}: the document was changed or serialized differently"
            )
        },
    ) {
        return steps;
    }
    let Some(key) = keys.iter().find(|k| k.key_id == key_id) else {
        step(
            "key",
            false,
            format!("no published key has key_id {key_id}"),
        );
        return steps;
    };
    step("key", true, format!("key {key_id} found"));
    let sig_ok = B64
        .decode(sig_b64)
        .map(|s| key.verify(&payload, &s))
        .unwrap_or(false);
    if !step(
        "ed25519",
        sig_ok,
        if sig_ok {
            "the Ed25519 signature is valid".into()
        } else {
            "the Ed25519 signature does not verify with that key".into()
        },
    ) {
        return steps;
    }
    if let (Some(spec), Some(Value::String(spec_hash))) = (obj.get("spec"), obj.get("spec_hash")) {
        let got = sha256_hex(&spec.to_canonical_vec());
        step(
            "spec_hash",
            &got == spec_hash,
            if &got == spec_hash {
                "spec_hash matches the embedded spec".into()
            } else {
                format!("sha256 of the embedded spec is {got}, not {spec_hash}")
            },
        );
    }
    if let (Some(d), Some(Value::String(dh))) = (deliverable, obj.get("deliverable_hash")) {
        let got = d.hash();
        step(
            "deliverable_hash",
            &got == dh,
            if &got == dh {
                "deliverable_hash matches the given deliverable".into()
            } else {
                format!("the given deliverable hashes to {got}, not {dh}")
            },
        );
    }
    steps
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
