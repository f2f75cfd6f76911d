use super::*;
use crate::svm::{self, Pubkey, Transaction};
use serde_json::json;
use umpire_core::product::Tier;
use umpire_core::signer::LocalSigner;

const PAY_TO: &str = "0x1111111111111111111111111111111111111111";
const USDC: &str = "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913";
const SOLANA: &str = "solana:5eykt4UsFv8P8NJdTREpY1vzqKqZKvdp";
const SOL_USDC: &str = "EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1v";
const PATH: &str = "/v1/verdicts/sworn";

fn solana_key(seed: u8) -> (LocalSigner, Pubkey) {
    let s = LocalSigner::from_seed([seed; 32]);
    let p = Pubkey(s.public_key());
    (s, p)
}

fn sol_pay_to() -> Pubkey {
    solana_key(200).1
}

fn rails() -> Rails {
    let mut evm_extra = Map::new();
    evm_extra.insert("name".into(), json!("USD Coin"));
    evm_extra.insert("version".into(), json!("2"));
    let mut svm_extra = Map::new();
    svm_extra.insert("feePayer".into(), json!(solana_key(201).1.to_base58()));
    Rails {
        rails: vec![
            Rail {
                scheme: Scheme::Exact,
                network: "eip155:8453".parse().expect("valid fixture"),
                v1_network: Some("base".into()),
                asset: USDC.parse().expect("valid fixture"),
                pay_to: PAY_TO.parse().expect("valid fixture"),
                extra: evm_extra,
                pricing: RailPricing::Stablecoin { decimals: 6 },
            },
            Rail {
                scheme: Scheme::Exact,
                network: SOLANA.parse().expect("valid fixture"),
                v1_network: Some("solana".into()),
                asset: SOL_USDC.parse().expect("valid fixture"),
                pay_to: Account::Solana(sol_pay_to()),
                extra: svm_extra,
                pricing: RailPricing::Stablecoin { decimals: 6 },
            },
            Rail {
                scheme: Scheme::Exact,
                network: SOLANA.parse().expect("valid fixture"),
                v1_network: None,
                asset: svm::NATIVE_SOL_ASSET.parse().expect("valid fixture"),
                pay_to: Account::Solana(sol_pay_to()),
                extra: Map::new(),
                pricing: RailPricing::SolSpot,
            },
        ],
        max_timeout_seconds: 60,
    }
}

const RATE: SolRate = SolRate {
    micro_usd_per_sol: 150_000_000,
    fetched_at: 0,
};

fn offer<'a>(price: Price, sol: Option<SolRate>, now: u64, key: &'a LocalSigner) -> Offer<'a> {
    Offer {
        price,
        resource: PATH,
        sol,
        now,
        quote_key: Some(key),
    }
}

#[test]
fn accepts_lists_rails_in_order_and_drops_sol_without_a_rate_or_key() {
    let r = rails();
    let key = LocalSigner::from_seed([9; 32]);
    let without = r.accepts(&offer(Tier::Basic.price(), None, 1000, &key));
    assert_eq!(without.len(), 2);
    assert_eq!(without[0].1.network, "eip155:8453");
    assert_eq!(without[0].1.amount, "1000000");
    let unsealed = Offer {
        quote_key: None,
        ..offer(Tier::Sworn.price(), Some(RATE), 1000, &key)
    };
    assert_eq!(r.accepts(&unsealed).len(), 2, "no key, no SOL quote");
    let with = r.accepts(&offer(Tier::Sworn.price(), Some(RATE), 1000, &key));
    assert_eq!(with.len(), 3);
    // $5 at $150/SOL = 0.0333… SOL; +1.5% = 33_833_334 lamports (rounded up).
    assert_eq!(with[2].1.amount, "33833334");
    let quote = &with[2].1.extra["quote"];
    assert_eq!(quote["expiresAt"], 1060, "quoted for maxTimeoutSeconds");
    assert_eq!(quote["mac"].as_str().map(str::len), Some(64));
}

#[test]
fn sol_quotes_round_up() {
    let rate = SolRate {
        micro_usd_per_sol: 3,
        fetched_at: 0,
    };
    // $0.01 at $0.000003/SOL: 3333.33… SOL × 1.015 → rounded up to the lamport.
    assert_eq!(
        sol_lamports(Price::usdc_units(10_000), rate),
        Some(3_383_333_333_334)
    );
    assert_eq!(
        sol_lamports(
            Price::usdc_units(10_000),
            SolRate {
                micro_usd_per_sol: 0,
                fetched_at: 0
            }
        ),
        None
    );
}

fn v2_payment(amount: &str, pay_to: &str, value: &str, to: &str) -> PaymentPayload {
    PaymentPayload::from_json(json!({
        "x402Version": 2,
        "accepted": {"scheme": "exact", "network": "eip155:8453", "amount": amount, "asset": USDC.to_lowercase(),
            "payTo": pay_to, "maxTimeoutSeconds": 60, "extra": {"name": "USD Coin", "version": "2"}},
        "payload": {"signature": "0x00", "authorization": {"from": "0x2222222222222222222222222222222222222222",
            "to": to, "value": value, "validAfter": "0", "validBefore": "1", "nonce": "0x00"}}
    }))
    .expect("payload")
}

#[test]
fn matching_checks_every_field_against_our_requirements() {
    let r = rails();
    let price = Tier::Basic.price();
    let o = Offer::fixed(price, "/v1/verdicts/basic");
    assert!(
        r.match_payment(&v2_payment("1000000", PAY_TO, "1000000", PAY_TO), &o)
            .is_ok()
    );
    let upper = PAY_TO.to_uppercase().replace("0X", "0x");
    assert!(
        r.match_payment(&v2_payment("1000000", &upper, "1000000", PAY_TO), &o)
            .is_ok()
    );
    assert!(matches!(
        r.match_payment(&v2_payment("250000", PAY_TO, "250000", PAY_TO), &o),
        Err(MatchError::WrongAmount { .. })
    ));
    let other = "0x9999999999999999999999999999999999999999";
    assert!(matches!(
        r.match_payment(&v2_payment("1000000", other, "1000000", other), &o),
        Err(MatchError::WrongPayTo { .. })
    ));
    // The client's copy says the right thing, the signed authorization does not.
    assert!(matches!(
        r.match_payment(&v2_payment("1000000", PAY_TO, "1000000", other), &o),
        Err(MatchError::WrongPayTo { .. })
    ));
    let e = r
        .match_payment(&v2_payment("1000000", PAY_TO, "999999", PAY_TO), &o)
        .expect_err("short");
    assert_eq!(e.reason(), "invalid_exact_evm_payload_authorization_value");
    let wrong_net = PaymentPayload::from_json(json!({"x402Version": 2, "accepted": {"scheme": "exact",
        "network": "eip155:1", "amount": "1000000", "asset": USDC, "payTo": PAY_TO, "maxTimeoutSeconds": 60},
        "payload": {}})).expect("payload");
    assert!(matches!(
        r.match_payment(&wrong_net, &o),
        Err(MatchError::UnknownRail { .. })
    ));
    let v1 = PaymentPayload::from_json(json!({"x402Version": 1, "scheme": "exact", "network": "base",
        "payload": {"signature": "0x00", "authorization": {"from": "0x2222222222222222222222222222222222222222",
        "to": PAY_TO, "value": "1000000", "validAfter": "0", "validBefore": "1", "nonce": "0x00"}}})).expect("v1");
    assert_eq!(
        r.match_payment(&v1, &o).map(|(_, q)| q.amount.to_string()),
        Ok("1000000".into())
    );
}

/// A v2 Solana payment: `accepted` as given, paying with `tx`.
fn svm_payment(accepted: &PaymentRequirements, tx: &Transaction) -> PaymentPayload {
    PaymentPayload::from_json(json!({
        "x402Version": 2,
        "accepted": accepted,
        "payload": {"transaction": tx.to_base64()}
    }))
    .expect("payload")
}

fn native_tx(payer: &LocalSigner, to: Pubkey, lamports: u64) -> Transaction {
    let from = Pubkey(payer.public_key());
    let m = svm::compile(
        from,
        &[svm::system_transfer(from, to, lamports), svm::memo(b"n1")],
        [3; 32],
    );
    let mut tx = Transaction::unsigned(m);
    let sig = payer.sign(&tx.message_bytes);
    tx.sign_with(&from, sig).expect("payer signs");
    tx
}

#[test]
fn a_sol_quote_is_honored_by_any_key_holder_until_it_expires() {
    let r = rails();
    let key = LocalSigner::from_seed([9; 32]);
    let price = Tier::Sworn.price();
    let quoted = r.accepts(&offer(price, Some(RATE), 1000, &key));
    let sol = &quoted[2].1;
    let (payer, _) = solana_key(1);
    let pay = svm_payment(sol, &native_tx(&payer, sol_pay_to(), 33_833_334));
    // Another instance, 50 s later, its rate moved (or gone): the quote holds.
    let other_instance = LocalSigner::from_seed([9; 32]);
    let moved = SolRate {
        micro_usd_per_sol: 90_000_000,
        fetched_at: 1050,
    };
    for rate in [Some(moved), None] {
        let (rail, req) = r
            .match_payment(&pay, &offer(price, rate, 1050, &other_instance))
            .expect("quote honored");
        assert!(rail.is_native_sol());
        assert_eq!(req.amount, "33833334");
    }
    // Past its window; under another key; for another resource; altered.
    let late = r.match_payment(&pay, &offer(price, Some(moved), 1061, &key));
    assert_eq!(
        late.map_err(|e| e.reason()),
        Err(FailureReason::SolQuoteExpired)
    );
    let stranger = LocalSigner::from_seed([8; 32]);
    let forged = r.match_payment(&pay, &offer(price, Some(RATE), 1000, &stranger));
    assert_eq!(
        forged.map_err(|e| e.reason()),
        Err(FailureReason::SolQuoteInvalid)
    );
    let elsewhere = Offer {
        resource: "/v1/verdicts/basic",
        ..offer(price, Some(RATE), 1000, &key)
    };
    assert_eq!(
        r.match_payment(&pay, &elsewhere).map_err(|e| e.reason()),
        Err(FailureReason::SolQuoteInvalid)
    );
    let mut cheaper = sol.clone();
    cheaper.amount = TokenAmount::from(1u64);
    let pay_less = svm_payment(&cheaper, &native_tx(&payer, sol_pay_to(), 1));
    assert_eq!(
        r.match_payment(&pay_less, &offer(price, Some(RATE), 1000, &key))
            .map_err(|e| e.reason()),
        Err(FailureReason::SolQuoteInvalid)
    );
    let mut later = sol.clone();
    later.extra["quote"]["expiresAt"] = json!(99_999);
    let pay_later = svm_payment(&later, &native_tx(&payer, sol_pay_to(), 33_833_334));
    assert_eq!(
        r.match_payment(&pay_later, &offer(price, Some(RATE), 2000, &key))
            .map_err(|e| e.reason()),
        Err(FailureReason::SolQuoteInvalid)
    );
}

#[test]
fn the_transaction_must_pay_what_the_quote_says_named_for_solana() {
    let r = rails();
    let key = LocalSigner::from_seed([9; 32]);
    let price = Tier::Sworn.price();
    let o = offer(price, Some(RATE), 1000, &key);
    let sol = r.accepts(&o)[2].1.clone();
    let (payer, _) = solana_key(1);
    let (_, stranger) = solana_key(2);
    let short = svm_payment(&sol, &native_tx(&payer, sol_pay_to(), 33_833_333));
    assert_eq!(
        r.match_payment(&short, &o).map_err(|e| e.reason()),
        Err(FailureReason::SvmAmount)
    );
    let elsewhere = svm_payment(&sol, &native_tx(&payer, stranger, 33_833_334));
    assert_eq!(
        r.match_payment(&elsewhere, &o).map_err(|e| e.reason()),
        Err(FailureReason::SvmRecipient)
    );
    // A native SOL payment is matched to the SOL rail, not the first Solana one.
    let mut wrong_asset = sol.clone();
    wrong_asset.asset = "So11111111111111111111111111111111111111112"
        .parse()
        .expect("valid fixture");
    let e = r
        .match_payment(
            &svm_payment(&wrong_asset, &native_tx(&payer, sol_pay_to(), 1)),
            &o,
        )
        .expect_err("unknown asset");
    assert_eq!(e.reason(), FailureReason::SvmMint);
    assert!(e.to_string().contains("native"), "{e}");
}

#[test]
fn an_spl_payment_must_pay_our_token_account() {
    let r = rails();
    let o = Offer::fixed(Tier::Basic.price(), "/v1/verdicts/basic");
    let usdc = r.accepts(&o)[1].1.clone();
    let (owner_key, owner) = solana_key(1);
    let fee_payer = solana_key(201).1;
    let mint = Pubkey::from_base58(SOL_USDC).expect("mint");
    let token = Pubkey::from_base58(svm::TOKEN_PROGRAM).expect("program");
    let ata = |o: &Pubkey| Pubkey::associated_token_account(o, &mint, &token).expect("ata");
    let pay = |to: Pubkey, amount: u64| {
        let m = svm::compile(
            fee_payer,
            &[svm::transfer_checked(
                token,
                ata(&owner),
                mint,
                to,
                owner,
                amount,
                6,
            )],
            [3; 32],
        );
        let mut tx = Transaction::unsigned(m);
        let sig = owner_key.sign(&tx.message_bytes);
        tx.sign_with(&owner, sig).expect("owner signs");
        svm_payment(&usdc, &tx)
    };
    assert!(
        r.match_payment(&pay(ata(&sol_pay_to()), 1_000_000), &o)
            .is_ok()
    );
    assert_eq!(
        r.match_payment(&pay(ata(&owner), 1_000_000), &o)
            .map_err(|e| e.reason()),
        Err(FailureReason::SvmRecipient)
    );
    assert_eq!(
        r.match_payment(&pay(ata(&sol_pay_to()), 999_999), &o)
            .map_err(|e| e.reason()),
        Err(FailureReason::SvmAmount)
    );
}

#[test]
fn v1_requirements_use_plain_network_names() {
    let resource = ResourceInfo {
        url: "https://umpire.example/v1/verdicts/basic".into(),
        description: "basic".into(),
        mime_type: "application/json".into(),
        ..ResourceInfo::default()
    };
    let key = LocalSigner::from_seed([9; 32]);
    let v1 = rails().accepts_v1(&offer(Tier::Basic.price(), Some(RATE), 0, &key), &resource);
    assert_eq!(v1.len(), 2, "native SOL has no v1 form");
    assert_eq!(v1[0].network, "base");
    assert_eq!(v1[0].max_amount_required, "1000000");
    assert_eq!(v1[0].resource, resource.url);
    assert_eq!(v1[1].network, "solana");
}
