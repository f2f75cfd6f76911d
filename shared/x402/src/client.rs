//! The paying side of x402 `exact`: what `umpire buy` and `umpire reputation` sign. On
//! EVM one EIP-3009 `TransferWithAuthorization` per purchase, shaped as the reference
//! client shapes it (validAfter = now - 600, validBefore = now + maxTimeoutSeconds, a
//! random 32-byte nonce); on Solana one transaction (see [`sign_exact_svm`]).

use alloy::primitives::{Address, B256, U256};
use alloy::signers::SignerSync as _;
use alloy::signers::local::PrivateKeySigner;
use alloy::sol_types::SolStruct as _;
use serde_json::json;
use umpire_core::signer::{LocalSigner, Signer as _};

use crate::evm::{TransferWithAuthorization, token_domain};
use crate::svm;
use crate::types::{Asset, Namespace, PaymentRequired, PaymentRequirements, Scheme};

/// How far back `validAfter` is set, as the reference client does (clock skew).
const VALID_AFTER_SLACK_SECS: u64 = 600;

/// The first `exact` EVM option we can pay, in the server's order of preference.
pub fn pick_evm(required: &PaymentRequired) -> Option<&PaymentRequirements> {
    required.accepts.iter().find(|r| {
        r.scheme == Scheme::Exact
            && r.network.chain_id().is_some()
            && r.extra.get("name").and_then(|v| v.as_str()).is_some()
            && r.extra.get("version").and_then(|v| v.as_str()).is_some()
    })
}

/// The `PAYMENT-SIGNATURE` header value (x402 v2) paying `accepted` from `signer`.
pub fn sign_exact_evm(
    signer: &PrivateKeySigner,
    required: &PaymentRequired,
    accepted: &PaymentRequirements,
    now: u64,
    nonce: [u8; 32],
) -> Result<String, String> {
    let domain = token_domain(&accepted.network, &accepted.asset, &accepted.extra)
        .map_err(|e| format!("cannot pay these requirements: {e}"))?;
    let pay_to: Address = accepted
        .pay_to
        .evm()
        .ok_or_else(|| format!("payTo {} is not an EVM address", accepted.pay_to))?;
    let value = accepted.amount.0;
    let valid_after = now.saturating_sub(VALID_AFTER_SLACK_SECS);
    let valid_before = now + accepted.max_timeout_seconds;
    let authorization = TransferWithAuthorization {
        from: signer.address(),
        to: pay_to,
        value,
        validAfter: U256::from(valid_after),
        validBefore: U256::from(valid_before),
        nonce: B256::from(nonce),
    };
    let signature = signer
        .sign_hash_sync(&authorization.eip712_signing_hash(&domain))
        .map_err(|e| format!("signing failed: {e}"))?;
    let payload = json!({
        "x402Version": 2,
        "resource": required.resource,
        "accepted": accepted,
        "payload": {
            "signature": alloy::primitives::hex::encode_prefixed(signature.as_bytes()),
            "authorization": {
                "from": signer.address().to_checksum(None),
                "to": pay_to.to_checksum(None),
                "value": value.to_string(),
                "validAfter": valid_after.to_string(),
                "validBefore": valid_before.to_string(),
                "nonce": alloy::primitives::hex::encode_prefixed(nonce),
            }
        }
    });
    Ok(crate::encode_header(&payload))
}

/// Which rail a client pays on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RailChoice {
    /// An EVM `exact` option (USDC on Base).
    Evm,
    /// USDC (an SPL token) on Solana, through the facilitator.
    SolanaUsdc,
    /// Native SOL, at the 402's quote.
    NativeSol,
}

/// The first option of `choice` in the server's order of preference.
pub fn pick(required: &PaymentRequired, choice: RailChoice) -> Option<&PaymentRequirements> {
    match choice {
        RailChoice::Evm => pick_evm(required),
        RailChoice::SolanaUsdc => required.accepts.iter().find(|r| {
            r.scheme == Scheme::Exact
                && r.network.namespace() == Namespace::Solana
                && r.asset != Asset::NativeSol
                && r.extra.get("feePayer").and_then(|v| v.as_str()).is_some()
        }),
        RailChoice::NativeSol => required.accepts.iter().find(|r| {
            r.scheme == Scheme::Exact
                && r.network.namespace() == Namespace::Solana
                && r.asset == Asset::NativeSol
        }),
    }
}

/// A Solana keypair as `solana-keygen` writes it: a JSON array of 64 bytes, the 32-byte
/// seed then the public key (checked against the seed).
pub fn solana_keypair(text: &str) -> Result<(LocalSigner, svm::Pubkey), String> {
    let bytes: Vec<u8> = serde_json::from_str(text).map_err(|_| {
        "not a Solana keypair file (a JSON array of 64 numbers, as solana-keygen writes)".to_owned()
    })?;
    if bytes.len() != 64 {
        return Err(format!(
            "a Solana keypair has 64 bytes, this one {}",
            bytes.len()
        ));
    }
    let mut seed = [0u8; 32];
    seed.copy_from_slice(&bytes[..32]);
    let signer = LocalSigner::from_seed(seed);
    let public = svm::Pubkey(signer.public_key());
    if public.0[..] != bytes[32..] {
        return Err("the keypair's public half does not belong to its secret half".into());
    }
    Ok((signer, public))
}

/// The token a Solana USDC option is paid in, as read from its mint account.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mint {
    /// Token or Token-2022: the program owning the mint.
    pub program: svm::Pubkey,
    pub decimals: u8,
}

impl Mint {
    /// From the mint account's owner and data (an SPL mint: decimals at byte 44).
    pub fn from_account(owner: &str, data: &[u8]) -> Result<Mint, String> {
        let program = svm::Pubkey::from_base58(owner)
            .filter(|p| {
                [svm::TOKEN_PROGRAM, svm::TOKEN_2022_PROGRAM].contains(&p.to_base58().as_str())
            })
            .ok_or_else(|| format!("the asset is not an SPL token mint (owned by {owner})"))?;
        let decimals = *data.get(44).ok_or("the mint account is too short")?;
        Ok(Mint { program, decimals })
    }
}

/// Compute units asked for: the reference client's 20,000 for a token transfer (and
/// plenty for a system transfer and a memo), at its price of 1 micro-lamport per unit.
const COMPUTE_UNITS: u32 = 20_000;
const COMPUTE_UNIT_PRICE: u64 = 1;

/// The `PAYMENT-SIGNATURE` header value (x402 v2) paying a Solana option from `payer`:
/// USDC as the reference client pays it (the facilitator's fee payer first, the
/// transfer signed by the payer alone, a memo with a random nonce), or native SOL as
/// our extension wants it (the payer pays the fee and signs the whole transaction).
pub fn sign_exact_svm(
    payer: &LocalSigner,
    required: &PaymentRequired,
    accepted: &PaymentRequirements,
    blockhash: [u8; 32],
    mint: Option<Mint>,
    nonce: [u8; 16],
) -> Result<String, String> {
    let owner = svm::Pubkey(payer.public_key());
    let pay_to = accepted
        .pay_to
        .solana()
        .ok_or_else(|| format!("payTo {} is not a Solana address", accepted.pay_to))?;
    let amount: u64 = accepted
        .amount
        .to_u64()
        .ok_or_else(|| format!("amount {} does not fit in 64 bits", accepted.amount))?;
    let memo: String = nonce.iter().map(|b| format!("{b:02x}")).collect();
    let budget = [
        svm::set_compute_unit_limit(COMPUTE_UNITS),
        svm::set_compute_unit_price(COMPUTE_UNIT_PRICE),
    ];
    let message = if accepted.asset == Asset::NativeSol {
        let mut ixs = budget.to_vec();
        ixs.push(svm::system_transfer(owner, pay_to, amount));
        ixs.push(svm::memo(memo.as_bytes()));
        svm::compile(owner, &ixs, blockhash)
    } else {
        let mint_key = accepted
            .asset
            .spl_mint()
            .ok_or_else(|| format!("asset {} is not a Solana mint", accepted.asset))?;
        let mint = mint.ok_or("paying a token needs its mint (program and decimals)")?;
        let fee_payer = accepted
            .extra
            .get("feePayer")
            .and_then(|v| v.as_str())
            .and_then(svm::Pubkey::from_base58)
            .ok_or("the option names no extra.feePayer")?;
        let ata = |o: &svm::Pubkey| {
            svm::Pubkey::associated_token_account(o, &mint_key, &mint.program)
                .ok_or("no associated token account address")
        };
        let mut ixs = budget.to_vec();
        ixs.push(svm::transfer_checked(
            mint.program,
            ata(&owner)?,
            mint_key,
            ata(&pay_to)?,
            owner,
            amount,
            mint.decimals,
        ));
        ixs.push(svm::memo(memo.as_bytes()));
        svm::compile(fee_payer, &ixs, blockhash)
    };
    let mut tx = svm::Transaction::unsigned(message);
    let signature = payer.sign(&tx.message_bytes);
    tx.sign_with(&owner, signature)?;
    let payload = json!({
        "x402Version": 2,
        "resource": required.resource,
        "accepted": accepted,
        "payload": {"transaction": tx.to_base64()}
    });
    Ok(crate::encode_header(&payload))
}
