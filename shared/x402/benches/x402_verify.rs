//! x402 `exact` EVM verification without a chain: decode the payment header, parse the
//! EIP-3009 authorization, check it against our requirements and recover the signer
//! (EIP-712 hash + secp256k1 recovery). The same payloads are written to
//! `$UMPIRE_BENCH_DIR/x402_payloads.json` for the reference TypeScript verifier
//! (bench/x402_verify.mjs), so `make bench` reports the two as a ratio.

use alloy::signers::local::PrivateKeySigner;
use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::{Map, Value, json};
use umpire_x402::client::sign_exact_evm;
use umpire_x402::evm::Eip3009Payment;
use umpire_x402::types::{EvmExactPayload, Scheme};
use umpire_x402::{PaymentPayload, PaymentRequired, Rail, RailPricing, decode_header};

const NOW: u64 = 1_800_000_000;

fn rail() -> Rail {
    let mut extra = Map::new();
    extra.insert("name".into(), json!("USD Coin"));
    extra.insert("version".into(), json!("2"));
    Rail {
        scheme: Scheme::Exact,
        network: "eip155:8453".parse().expect("valid fixture"),
        v1_network: Some("base".into()),
        asset: umpire_core::product::BASE_USDC
            .parse()
            .expect("valid fixture"),
        pay_to: "0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC"
            .parse()
            .expect("valid fixture"),
        extra,
        pricing: RailPricing::Stablecoin { decimals: 6 },
    }
}

fn bench(c: &mut Criterion) {
    let rail = rail();
    let required: PaymentRequired = serde_json::from_value(json!({
        "x402Version": 2,
        "error": "payment required",
        "resource": {"url": "https://umpire.vimabrosta.com/v1/verdicts/basic", "description": "Umpire: a basic verdict", "mimeType": "application/json"},
        "accepts": [{"scheme": "exact", "network": rail.network, "amount": "1000000", "asset": rail.asset, "payTo": rail.pay_to, "maxTimeoutSeconds": 60, "extra": rail.extra}],
        "extensions": {}
    }))
    .expect("requirements");
    let accepted = required.accepts[0].clone();
    let headers: Vec<String> = (0..64u8)
        .map(|i| {
            sign_exact_evm(
                &PrivateKeySigner::random(),
                &required,
                &accepted,
                NOW,
                [i; 32],
            )
            .expect("signed")
        })
        .collect();

    // The TypeScript side verifies the same typed data.
    let dir = std::env::var("UMPIRE_BENCH_DIR")
        .unwrap_or_else(|_| std::env::temp_dir().display().to_string());
    let decoded: Vec<Value> = headers
        .iter()
        .map(|h| decode_header::<Value>(h).expect("json"))
        .collect();
    let _ = std::fs::create_dir_all(&dir);
    let _ = std::fs::write(
        format!("{dir}/x402_payloads.json"),
        serde_json::to_vec(&json!({"requirements": accepted, "payloads": decoded}))
            .unwrap_or_default(),
    );

    let mut i = 0usize;
    c.bench_function("x402_verify_eip3009_offline", |b| {
        b.iter(|| {
            i = (i + 1) % headers.len();
            let raw: Value = decode_header(std::hint::black_box(&headers[i])).expect("decode");
            let PaymentPayload::V2 { payload, .. } =
                PaymentPayload::from_json(raw).expect("payload")
            else {
                unreachable!("v2 payloads only")
            };
            let evm: EvmExactPayload = serde_json::from_value(payload).expect("evm payload");
            let payment = Eip3009Payment::parse(&evm).expect("parse");
            payment.check_offline(&rail, &accepted, NOW).expect("valid")
        })
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
