use super::*;

/// Anvil's first two accounts, in their EIP-55 casing.
const PAY_TO: &str = "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266";
const WELL_KNOWN: &str = "0x70997970C51812dc3A010C7d01b50e0d17dc79C8";

fn rails(pairs: &[(&str, &str)]) -> umpire_x402::Rails {
    umpire_pay::config::rails_from(|k: &str| {
        pairs
            .iter()
            .find(|(n, _)| *n == k)
            .map(|(_, v)| (*v).to_owned())
    })
    .expect("rails")
}

/// This deployment's rails: Base USDC paid to PAY_TO, and Solana's.
fn evm_and_solana() -> umpire_x402::Rails {
    rails(&[
        ("UMPIRE_EVM_PAY_TO", PAY_TO),
        (
            "UMPIRE_SOLANA_PAY_TO",
            "9WzDXwBbmkg8ZTbNMqUxvQRAyrZzDsGYdLVL9zYtAWWM",
        ),
        (
            "UMPIRE_SOLANA_FEE_PAYER",
            "2wKupLR9q6wXYppw8Gr2NvWxKBUqm4PPJKkQfoxHDBg4",
        ),
    ])
}

/// docs/reputation.md: by default the anchors are this deployment's own EVM
/// `pay_to` addresses, lowercase (a row's merchant is lowercase, and the flag is a
/// string comparison); a Solana `pay_to` is no anchor (feedback is proven on an EVM
/// chain), and a deployment paid on no EVM rail has none. Would catch: the default
/// lost (no anchor unless named), a checksummed entry no lowercase merchant
/// matches, or a Solana address in the list.
#[test]
fn anchors_default_to_the_evm_pay_to() {
    assert_eq!(
        anchors_from(None, &evm_and_solana()).expect("anchors"),
        vec![PAY_TO.to_lowercase()]
    );
    let solana_only = rails(&[
        (
            "UMPIRE_SOLANA_PAY_TO",
            "9WzDXwBbmkg8ZTbNMqUxvQRAyrZzDsGYdLVL9zYtAWWM",
        ),
        (
            "UMPIRE_SOLANA_FEE_PAYER",
            "2wKupLR9q6wXYppw8Gr2NvWxKBUqm4PPJKkQfoxHDBg4",
        ),
    ]);
    assert_eq!(
        anchors_from(None, &solana_only).expect("anchors"),
        Vec::<String>::new()
    );
    assert_eq!(
        anchors_from(None, &rails(&[])).expect("anchors"),
        Vec::<String>::new()
    );
}

/// `UMPIRE_REPUTATION_ANCHORS` names the anchors instead of the default (the
/// `pay_to` stays only if listed): comma separated, spaces around an entry allowed,
/// lowercase or EIP-55, kept lowercase, sorted and each once; `none`, empty or
/// blank is no anchor at all. Would catch: the named list added to the default
/// rather than replacing it, casing kept (no lowercase merchant would match), or a
/// duplicate listed twice in the report.
#[test]
fn named_anchors_replace_the_default() {
    let named = format!(
        "{WELL_KNOWN}, {} ,{}",
        WELL_KNOWN.to_lowercase(),
        PAY_TO.to_lowercase()
    );
    let mut want = vec![WELL_KNOWN.to_lowercase(), PAY_TO.to_lowercase()];
    want.sort();
    assert_eq!(
        anchors_from(Some(named.as_str()), &evm_and_solana()).expect("anchors"),
        want
    );
    assert_eq!(
        anchors_from(Some(WELL_KNOWN), &evm_and_solana()).expect("anchors"),
        vec![WELL_KNOWN.to_lowercase()],
        "named anchors replace the pay_to"
    );
    for none in ["none", "", "  ", " none "] {
        assert_eq!(
            anchors_from(Some(none), &evm_and_solana()).expect("anchors"),
            Vec::<String>::new(),
            "{none:?}"
        );
    }
}

/// A list with one entry that is no address, or a mixed-case address whose EIP-55
/// checksum is wrong, stops the configuration, naming the variable: a typo must not
/// silently leave a merchant out of the anchors. Would catch: bad entries skipped.
#[test]
fn a_bad_anchor_is_refused_by_name() {
    let wrong_case = PAY_TO.replacen("F", "f", 1);
    for bad in [
        format!("{WELL_KNOWN},0x1234"),
        wrong_case,
        format!("{WELL_KNOWN};{PAY_TO}"),
    ] {
        let e = anchors_from(Some(bad.as_str()), &evm_and_solana()).expect_err(&bad);
        assert_eq!(e.name, "UMPIRE_REPUTATION_ANCHORS", "{bad}");
        assert_eq!(e.value, bad);
    }
}
