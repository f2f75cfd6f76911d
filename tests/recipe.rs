//! A document from `umpire judge` verified by the contract's Python recipe verbatim
//! and by `umpire verify`; a one-byte change fails both.

use umpire_blackbox::{Server, TempDir, python_recipe as recipe, run_umpire};
use umpire_core::json::{Value, parse};

const SPEC: &str = r###"{"checks":[
  {"type":"regex","pattern":"## Conclusion","flags":"m"},
  {"type":"length","unit":"words","min":3},
  {"type":"json_path","path":"result.items[0].price","op":"lte","value":100},
  {"type":"json_path","path":"result.big","op":"eq","value":123456789012345678901234567890},
  {"type":"json_schema","schema":{"type":"object","required":["result"]}},
  {"type":"content_hash","sha256":"0000000000000000000000000000000000000000000000000000000000000000"}
]}"###;

const DELIVERABLE: &str = r###"{"text":"Héllo wörld — 🚀 three\n## Conclusion\n\u2028done","json":{"result":{"items":[{"price":99.5}],"big":123456789012345678901234567890,"tiny":1e-7,"huge":1e16,"neg":-0.0}}}"###;

#[test]
fn judged_documents_verify_with_the_python_recipe_and_umpire_verify() {
    let server = Server::start();
    let data = server.data.path().to_str().expect("utf-8 path").to_owned();
    let tmp = TempDir::new("recipe");
    let keys = tmp.write(
        "keys.json",
        &server.get("/.well-known/umpire-key.json").body,
    );
    let spec = tmp.write("spec.json", SPEC.as_bytes());
    let deliverable = tmp.write("deliverable.json", DELIVERABLE.as_bytes());

    let (code, stdout, stderr) = run_umpire(
        &[
            "judge",
            "--tier",
            "basic",
            "--spec",
            spec.to_str().expect("path"),
            "--deliverable",
            deliverable.to_str().expect("path"),
            "--job-ref",
            "erc8183:job/77",
            "--data-dir",
            &data,
        ],
        &[],
    );
    assert_eq!(code, 0, "judge failed: {stderr}");
    let doc_v = parse(stdout.trim().as_bytes()).expect("document JSON");
    assert_eq!(
        doc_v.get("verdict").and_then(Value::as_str),
        Some("fail"),
        "the zero hash fails"
    );
    assert_eq!(
        doc_v.get("job_ref").and_then(Value::as_str),
        Some("erc8183:job/77")
    );
    let results = doc_v
        .get("results")
        .and_then(Value::as_array)
        .expect("results");
    let passed: Vec<bool> = results
        .iter()
        .map(|r| r.get("passed").and_then(Value::as_bool).unwrap_or(false))
        .collect();
    assert_eq!(passed, vec![true, true, true, true, true, false]);
    let doc = tmp.write("doc.json", stdout.trim().as_bytes());

    let (ok, said) = recipe(&doc, &keys, &deliverable);
    assert!(ok, "python recipe refused a genuine document: {said}");
    let (code, out, _) = run_umpire(
        &[
            "verify",
            doc.to_str().expect("p"),
            "--key",
            keys.to_str().expect("p"),
            "--deliverable",
            deliverable.to_str().expect("p"),
        ],
        &[],
    );
    assert_eq!(code, 0, "umpire verify refused a genuine document: {out}");
    assert!(out.contains("verified: verdict fail"));

    // One byte changed inside a reason: both verifiers must refuse.
    let text = stdout.trim();
    let at = text.find("\"reason\":\"").expect("a reason") + 10;
    let mut bytes = text.as_bytes().to_vec();
    bytes[at] = if bytes[at] == b'x' { b'y' } else { b'x' };
    let tampered = tmp.write("tampered.json", &bytes);
    let (ok, said) = recipe(&tampered, &keys, &deliverable);
    assert!(!ok);
    assert!(said.contains("payload_sha256 mismatch"), "{said}");
    let (code, out, _) = run_umpire(
        &[
            "verify",
            tampered.to_str().expect("p"),
            "--key",
            keys.to_str().expect("p"),
        ],
        &[],
    );
    assert_eq!(code, 1);
    assert!(out.contains("FAIL payload_sha256"), "{out}");

    // A signature made by another key fails at the Ed25519 step.
    let other = Server::start();
    let other_keys = tmp.write(
        "other-keys.json",
        &other.get("/.well-known/umpire-key.json").body,
    );
    // Same document, signature relabelled as made by the other server's key.
    let other_id = umpire_core::signer::keys_from_document(
        &parse(&std::fs::read(&other_keys).expect("key file")).expect("key JSON"),
    )[0]
    .key_id
    .clone();
    let mut sig = doc_v.get("signature").cloned().expect("signature");
    sig.insert("key_id", other_id);
    let forged = doc_v.clone().with("signature", sig);
    let forged_path = tmp.write("forged.json", &forged.to_canonical_vec());
    let (ok, said) = recipe(&forged_path, &other_keys, &deliverable);
    assert!(!ok && said.contains("bad Ed25519 signature"), "{said}");
    let (code, out, _) = run_umpire(
        &[
            "verify",
            forged_path.to_str().expect("p"),
            "--key",
            other_keys.to_str().expect("p"),
        ],
        &[],
    );
    assert_eq!(code, 1);
    assert!(out.contains("FAIL ed25519"), "{out}");

    // A different deliverable fails the deliverable_hash step in both.
    let other_d = tmp.write("other.json", br#"{"text":"something else"}"#);
    let (ok, said) = recipe(&doc, &keys, &other_d);
    assert!(!ok && said.contains("deliverable_hash mismatch"), "{said}");
    let (code, _, _) = run_umpire(
        &[
            "verify",
            doc.to_str().expect("p"),
            "--key",
            keys.to_str().expect("p"),
            "--deliverable",
            other_d.to_str().expect("p"),
        ],
        &[],
    );
    assert_eq!(code, 1);
}
