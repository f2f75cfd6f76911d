//! Stable JSON + Ed25519 signing of a typical verdict against the floor of the same
//! work (sha256 + sign of the same bytes), and judging a 10-check basic spec against a
//! 200 KB deliverable in-process (the worker adds its pipe round trip on top; see the
//! checker's bench).

use criterion::{Criterion, criterion_group, criterion_main};
use umpire_core::document::{CheckResult, VerdictFacts, signature_for, verdict_document};
use umpire_core::eval::evaluate;
use umpire_core::json::parse_str;
use umpire_core::product::Tier;
use umpire_core::signer::{LocalSigner, Signer};
use umpire_core::spec::parse_spec;

#[path = "workload.rs"]
mod workload;
use workload::{TEN_CHECKS, deliverable};

fn bench(c: &mut Criterion) {
    let spec = parse_spec(&parse_str(TEN_CHECKS).expect("json"), Some(Tier::Basic)).expect("spec");
    let d = deliverable();
    let signer = LocalSigner::from_seed([1u8; 32]);
    let results: Vec<CheckResult> = spec
        .checks
        .iter()
        .enumerate()
        .map(|(index, check)| {
            let o = evaluate(check, &d, None);
            CheckResult {
                index,
                check_type: check.type_name(),
                passed: o.passed,
                reason: o.reason,
                observations: None,
            }
        })
        .collect();
    let dh = d.hash();
    let facts = VerdictFacts {
        verdict_id: "vrd_0123456789abcdef0123456789abcdef",
        tier: Tier::Basic,
        spec: &spec,
        deliverable_hash: &dh,
        results: &results,
        job_ref: None,
        issued_at: "2026-12-02T15:04:05Z",
        issuer: "https://umpire.vimabrosta.com",
    };
    let doc = verdict_document(&facts, signer.key_id());
    let bytes = doc.to_canonical_vec();
    eprintln!(
        "typical verdict document: {} bytes of stable JSON",
        bytes.len()
    );
    // The same document for the Python recipe's timing (bench/python_recipe.py).
    if let Ok(dir) = std::env::var("UMPIRE_BENCH_DIR") {
        let _ = std::fs::create_dir_all(&dir);
        let _ = std::fs::write(format!("{dir}/verdict.json"), &bytes);
    }

    c.bench_function("stable_json_and_sign", |b| {
        b.iter(|| signature_for(std::hint::black_box(&doc), &signer))
    });
    // The floor signs with the same signer, so the ratio is what the encoder adds.
    c.bench_function("floor_sha256_and_sign_same_bytes", |b| {
        b.iter(|| {
            let digest = umpire_core::hash::sha256(std::hint::black_box(&bytes));
            (digest, signer.sign(&bytes))
        })
    });
    c.bench_function("stable_json_only", |b| {
        b.iter(|| std::hint::black_box(&doc).to_canonical_vec())
    });
    c.bench_function("clone_document_only", |b| {
        b.iter(|| std::hint::black_box(doc.clone()))
    });
    c.bench_function("judge_10_checks_200kb_in_process", |b| {
        b.iter(|| {
            spec.checks
                .iter()
                .map(|check| evaluate(check, std::hint::black_box(&d), None).passed)
                .collect::<Vec<_>>()
        })
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
