//! Reading rails and settlement from a map of variables: the defaults, the order the
//! rails are offered in, each bad value named, and settlement covering every rail.

use std::collections::HashMap;

use super::*;
use umpire_x402::rails::Rails;

fn rails(pairs: &[(&str, &str)]) -> Result<Rails, PayConfigError> {
    let m: HashMap<String, String> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    rails_from(|k| m.get(k).cloned())
}

#[test]
fn nothing_configured_means_no_rails() {
    assert!(rails(&[]).expect("ok").rails.is_empty());
}

#[test]
fn base_defaults_follow_the_contract() {
    let r = rails(&[(
        "UMPIRE_EVM_PAY_TO",
        "0x1111111111111111111111111111111111111111",
    )])
    .expect("ok");
    let base = &r.rails[0];
    assert_eq!(base.network, BASE_MAINNET);
    assert_eq!(base.asset, BASE_USDC);
    assert_eq!(base.extra["name"], "USD Coin");
    assert_eq!(base.extra["version"], "2");
    assert_eq!(base.v1_network.as_deref(), Some("base"));
    assert_eq!(r.max_timeout_seconds, 60);
    let sepolia = rails(&[
        (
            "UMPIRE_EVM_PAY_TO",
            "0x1111111111111111111111111111111111111111",
        ),
        ("UMPIRE_EVM_NETWORK", BASE_SEPOLIA),
    ])
    .expect("ok");
    assert_eq!(sepolia.rails[0].asset, BASE_SEPOLIA_USDC);
    assert_eq!(sepolia.rails[0].extra["name"], "USDC");
    assert_eq!(sepolia.rails[0].v1_network.as_deref(), Some("base-sepolia"));
}

#[test]
fn solana_rails_in_preference_order() {
    let r = rails(&[
        (
            "UMPIRE_EVM_PAY_TO",
            "0x1111111111111111111111111111111111111111",
        ),
        (
            "UMPIRE_SOLANA_PAY_TO",
            "9WzDXwBbmkg8ZTbNMqUxvQRAyrZzDsGYdLVL9zYtAWWM",
        ),
        (
            "UMPIRE_SOLANA_FEE_PAYER",
            "2wKupLR9q6wXYppw8Gr2NvWxKBUqm4PPJKkQfoxHDBg4",
        ),
        ("UMPIRE_SOL_NATIVE", "on"),
    ])
    .expect("ok");
    let assets: Vec<String> = r.rails.iter().map(|x| x.asset.to_string()).collect();
    let order: Vec<(&str, &str)> = r
        .rails
        .iter()
        .zip(&assets)
        .map(|(x, asset)| (x.network.as_str(), asset.as_str()))
        .collect();
    assert_eq!(
        order,
        vec![
            (BASE_MAINNET, BASE_USDC),
            (SOLANA_MAINNET, SOLANA_USDC),
            (SOLANA_MAINNET, "native")
        ]
    );
    assert_eq!(
        r.rails[1].extra["feePayer"],
        "2wKupLR9q6wXYppw8Gr2NvWxKBUqm4PPJKkQfoxHDBg4"
    );
}

#[test]
fn bad_values_are_named() {
    for (pairs, name) in [
        (vec![("UMPIRE_EVM_PAY_TO", "0x123")], "UMPIRE_EVM_PAY_TO"),
        (
            vec![
                (
                    "UMPIRE_EVM_PAY_TO",
                    "0x1111111111111111111111111111111111111111",
                ),
                ("UMPIRE_EVM_NETWORK", "base"),
            ],
            "UMPIRE_EVM_NETWORK",
        ),
        (
            vec![(
                "UMPIRE_SOLANA_PAY_TO",
                "9WzDXwBbmkg8ZTbNMqUxvQRAyrZzDsGYdLVL9zYtAWWM",
            )],
            "UMPIRE_SOLANA_PAY_TO",
        ),
        (
            vec![("UMPIRE_PAYMENT_TIMEOUT_SECONDS", "1")],
            "UMPIRE_PAYMENT_TIMEOUT_SECONDS",
        ),
    ] {
        assert_eq!(rails(&pairs).map_err(|e| e.name), Err(name));
    }
}

/// A lookup answering from `pairs`.
fn lookup(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
    move |k: &str| {
        pairs
            .iter()
            .find(|(n, _)| *n == k)
            .map(|(_, v)| (*v).to_owned())
    }
}

/// The Solana rails, with native SOL when `native` says so.
fn solana_rails(native: bool) -> Rails {
    let mut pairs = vec![
        (
            "UMPIRE_SOLANA_PAY_TO",
            "9WzDXwBbmkg8ZTbNMqUxvQRAyrZzDsGYdLVL9zYtAWWM",
        ),
        (
            "UMPIRE_SOLANA_FEE_PAYER",
            "2wKupLR9q6wXYppw8Gr2NvWxKBUqm4PPJKkQfoxHDBg4",
        ),
    ];
    if native {
        pairs.push(("UMPIRE_SOL_NATIVE", "on"));
    }
    rails(&pairs).expect("rails")
}

#[tokio::test]
async fn settlement_must_cover_the_evm_rail() {
    let evm_only = rails(&[(
        "UMPIRE_EVM_PAY_TO",
        "0x1111111111111111111111111111111111111111",
    )])
    .expect("rails");
    let e = payments_from(&evm_only, lookup(&[]))
        .await
        .expect_err("no RPC");
    assert_eq!(e.name, "UMPIRE_EVM_RPC_URL");
    let e = payments_from(&evm_only, lookup(&[("UMPIRE_SETTLEMENT", "facilitator")]))
        .await
        .expect_err("no facilitator");
    assert_eq!(e.name, "UMPIRE_FACILITATOR_URL");
    let e = payments_from(&evm_only, lookup(&[("UMPIRE_SETTLEMENT", "both")]))
        .await
        .expect_err("unknown mode");
    assert_eq!(e.name, "UMPIRE_SETTLEMENT");
}

/// The template sets `UMPIRE_SETTLEMENT=facilitator` on every paying function; a stack
/// deployed before its payment parameters has no rail and no facilitator URL. Would
/// catch: that stack's paying functions failing at cold start (API Gateway's bare 500)
/// instead of selling nothing (503).
#[tokio::test]
async fn facilitator_mode_without_rails_needs_no_facilitator() {
    let none = rails(&[]).expect("rails");
    let p = payments_from(&none, lookup(&[("UMPIRE_SETTLEMENT", "facilitator")]))
        .await
        .expect("nothing to settle, nothing missing");
    assert!(p.evm.is_none() && p.facilitator.is_none());
}

#[tokio::test]
async fn settlement_must_cover_the_solana_usdc_rail() {
    let with_solana = solana_rails(false);
    let e = payments_from(&with_solana, lookup(&[]))
        .await
        .expect_err("Solana needs a facilitator");
    assert_eq!(e.name, "UMPIRE_FACILITATOR_URL");
    let p = payments_from(
        &with_solana,
        lookup(&[("UMPIRE_FACILITATOR_URL", "https://facilitator.example")]),
    )
    .await
    .expect("facilitator settles Solana");
    assert!(p.can_settle(&with_solana.rails[0]));
    assert!(p.evm.is_none());
}

#[tokio::test]
async fn settlement_must_cover_the_native_sol_rail() {
    // Native SOL is ours to verify and broadcast: it needs a Solana node.
    let with_sol = solana_rails(true);
    assert_eq!(with_sol.rails[1].extra["transfer"], "system");
    assert!(
        with_sol.rails[1].extra.get("feePayer").is_none(),
        "the payer pays its own fee"
    );
    let e = payments_from(
        &with_sol,
        lookup(&[("UMPIRE_FACILITATOR_URL", "https://facilitator.example")]),
    )
    .await
    .expect_err("no Solana node");
    assert_eq!(e.name, "UMPIRE_SOLANA_RPC_URL");
    let p = payments_from(
        &with_sol,
        lookup(&[
            ("UMPIRE_FACILITATOR_URL", "https://facilitator.example"),
            ("UMPIRE_SOLANA_RPC_URL", "http://127.0.0.1:8899"),
        ]),
    )
    .await
    .expect("both Solana rails settle");
    assert!(with_sol.rails.iter().all(|r| p.can_settle(r)));
    assert!(p.native_sol.is_some());
}
