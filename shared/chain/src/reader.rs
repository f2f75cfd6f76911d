//! The two proofs behind a feedback row, read from Base (or the devnet) with alloy:
//!
//! 1. **Payment**: the transaction succeeded and carries USDC `Transfer` logs from the
//!    payer to the merchant (the *log's* `from`: x402 transfers are submitted by a
//!    facilitator, so the transaction's sender is not the payer). Every log is decoded;
//!    the attested amount is what the payer sent the merchant in the transaction, but
//!    never more than the merchant kept of it: its payer→merchant transfers, capped at
//!    everything into the merchant minus everything out of it in the same transaction
//!    (funds cycled back to the payer, or on to anyone — a flash loan repaid — attest
//!    nothing), and the floor applies to that.
//!    The block's time comes from its header, the age is measured against the later of
//!    our clock and the chain's latest block, and the block must have the configured
//!    number of confirmations.
//! 2. **Signature**: an EIP-191 `personal_sign` of the exact message by the payer: ecrecover
//!    for a plain account (high-s refused), ERC-1271 `isValidSignature` via `eth_call` for a
//!    contract account, with ecrecover as the fallback for EIP-7702-delegated accounts.
//!
//! Nothing here writes to the chain.

use std::future::IntoFuture;
use std::time::Duration;

use alloy::eips::BlockNumberOrTag;
use alloy::network::TransactionBuilder;
use alloy::primitives::{Address, B256, Bytes, Signature, U256, eip191_hash_message};
use alloy::providers::{DynProvider, Provider, ProviderBuilder};
use alloy::rpc::types::{Log, TransactionReceipt, TransactionRequest};
use alloy::sol;
use alloy::sol_types::SolCall;
use tokio::sync::OnceCell;

use crate::claim::{FeedbackClaim, lower_hex};

sol! {
    interface IErc20 {
        event Transfer(address indexed from, address indexed to, uint256 value);
    }

    interface IErc1271 {
        function isValidSignature(bytes32 hash, bytes signature) external view returns (bytes4 magicValue);
    }
}

/// ERC-1271's "valid" answer.
pub const ERC1271_MAGIC: [u8; 4] = [0x16, 0x26, 0xba, 0x7e];
/// An EIP-7702 delegated account's code: this prefix and the delegate's address.
const EIP7702_PREFIX: [u8; 3] = [0xef, 0x01, 0x00];
/// One RPC call may take this long before the chain counts as unreachable.
const RPC_TIMEOUT: Duration = Duration::from_secs(10);

/// Where and how feedback payments are read.
#[derive(Debug, Clone)]
pub struct ChainConfig {
    pub rpc_url: String,
    /// The chain the RPC must serve (Base: 8453).
    pub chain_id: u64,
    /// The USDC contract whose `Transfer` logs count.
    pub usdc: Address,
    /// Blocks on top of the payment's block, itself included (1 = mined).
    pub confirmations: u64,
    /// The least attested amount, in USDC base units.
    pub floor_units: u64,
    /// How old a payment may be.
    pub max_age_secs: u64,
}

impl ChainConfig {
    /// `UMPIRE_FEEDBACK_RPC_URL` switches feedback on (unset: `receipts_off`);
    /// `UMPIRE_FEEDBACK_CHAIN_ID`, `UMPIRE_FEEDBACK_USDC` and
    /// `UMPIRE_FEEDBACK_CONFIRMATIONS` default to Base mainnet, its USDC and 5 blocks.
    pub fn from_env() -> Result<Option<ChainConfig>, String> {
        Self::from_vars(&|name| std::env::var(name).ok())
    }

    /// [`ChainConfig::from_env`] with the variables looked up by `var` (a function reads
    /// its RPC URL from a secret, not its environment).
    pub fn from_vars(var: &dyn Fn(&str) -> Option<String>) -> Result<Option<ChainConfig>, String> {
        use umpire_core::product::{
            BASE_CHAIN_ID, BASE_USDC, FEEDBACK_CONFIRMATIONS, FEEDBACK_WINDOW_DAYS,
            MIN_FEEDBACK_USDC_UNITS,
        };
        // Empty counts as unset: a template parameter left blank.
        let Some(rpc_url) = var("UMPIRE_FEEDBACK_RPC_URL").filter(|u| !u.trim().is_empty()) else {
            return Ok(None);
        };
        let number = |name: &str, default: u64| -> Result<u64, String> {
            match var(name) {
                None => Ok(default),
                Some(v) => v
                    .trim()
                    .parse()
                    .map_err(|_| format!("{name}={v:?} must be a whole number")),
            }
        };
        let usdc = var("UMPIRE_FEEDBACK_USDC").unwrap_or_else(|| BASE_USDC.into());
        Ok(Some(ChainConfig {
            rpc_url,
            chain_id: number("UMPIRE_FEEDBACK_CHAIN_ID", BASE_CHAIN_ID)?,
            usdc: crate::claim::parse_address(&usdc)
                .map_err(|e| format!("UMPIRE_FEEDBACK_USDC: {e}"))?,
            confirmations: number("UMPIRE_FEEDBACK_CONFIRMATIONS", FEEDBACK_CONFIRMATIONS)?.max(1),
            floor_units: MIN_FEEDBACK_USDC_UNITS,
            max_age_secs: FEEDBACK_WINDOW_DAYS * 86_400,
        }))
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProofError {
    /// The RPC could not be reached or failed: retry later.
    #[error("chain unavailable: {0}")]
    Unavailable(String),
    /// The RPC serves another chain than the one configured.
    #[error("misconfigured: {0}")]
    Misconfigured(String),
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    PayerMismatch(String),
    #[error("{0}")]
    AmountTooSmall(String),
    #[error("{0}")]
    TooOld(String),
    #[error("{0}")]
    BadSignature(String),
}

/// What the payment proof established.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PaymentProof {
    /// The sum of the payer→merchant USDC transfers in the transaction, base units.
    pub amount: U256,
    pub block_number: u64,
    /// From the block header, unix seconds.
    pub block_time: u64,
}

/// How the signature was accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signer {
    /// ecrecover of a plain account's signature.
    Eoa,
    /// The contract wallet's `isValidSignature`.
    Erc1271,
    /// An EIP-7702-delegated account whose own key signed.
    Delegated,
}

pub struct FeedbackChain {
    provider: DynProvider,
    config: ChainConfig,
    /// Set once the RPC was seen to serve the configured chain.
    chain_checked: OnceCell<()>,
}

impl std::fmt::Debug for FeedbackChain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FeedbackChain")
            .field("chain_id", &self.config.chain_id)
            .field("usdc", &self.config.usdc)
            .field("confirmations", &self.config.confirmations)
            .finish_non_exhaustive()
    }
}

async fn rpc<T, E: std::fmt::Display>(
    what: &str,
    call: impl IntoFuture<Output = Result<T, E>>,
) -> Result<T, ProofError> {
    match tokio::time::timeout(RPC_TIMEOUT, call.into_future()).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(ProofError::Unavailable(format!("{what}: {e}"))),
        Err(_) => Err(ProofError::Unavailable(format!(
            "{what}: no answer within {RPC_TIMEOUT:?}"
        ))),
    }
}

impl FeedbackChain {
    /// Builds the reader without touching the network: an unreachable RPC at start
    /// makes feedback answer `chain_unavailable`, not the service fail to start.
    pub fn new(config: ChainConfig) -> Result<FeedbackChain, String> {
        let url: reqwest::Url = config
            .rpc_url
            .parse()
            .map_err(|e| format!("feedback RPC URL {:?}: {e}", config.rpc_url))?;
        Ok(FeedbackChain {
            provider: ProviderBuilder::new().connect_http(url).erased(),
            config,
            chain_checked: OnceCell::new(),
        })
    }

    pub fn config(&self) -> &ChainConfig {
        &self.config
    }

    async fn ensure_chain(&self) -> Result<(), ProofError> {
        self.chain_checked
            .get_or_try_init(|| async {
                let served = rpc("eth_chainId", self.provider.get_chain_id()).await?;
                if served == self.config.chain_id {
                    Ok(())
                } else {
                    Err(ProofError::Misconfigured(format!(
                        "the feedback RPC serves chain {served}, not {}",
                        self.config.chain_id
                    )))
                }
            })
            .await
            .map(|_| ())
    }

    /// Proof 1: the payment. `now` is our clock, unix seconds.
    pub async fn prove_payment(
        &self,
        claim: &FeedbackClaim,
        now: u64,
    ) -> Result<PaymentProof, ProofError> {
        self.ensure_chain().await?;
        let tx = lower_hex(claim.tx_hash.as_slice());
        let receipt = self.successful_receipt(claim, &tx).await?;
        let block_number = receipt
            .block_number
            .ok_or_else(|| ProofError::NotFound(format!("transaction {tx} is not mined yet")))?;
        let flows = UsdcFlows::tally(receipt.inner.logs(), self.config.usdc, claim);
        let amount = self.attested_amount(claim, &tx, &flows)?;
        let block_time = self.confirmed_block_time(&tx, block_number, now).await?;
        Ok(PaymentProof {
            amount,
            block_number,
            block_time,
        })
    }

    /// The receipt of `claim`'s transaction, which must exist and have succeeded.
    async fn successful_receipt(
        &self,
        claim: &FeedbackClaim,
        tx: &str,
    ) -> Result<TransactionReceipt, ProofError> {
        let chain = self.config.chain_id;
        let receipt = rpc(
            "eth_getTransactionReceipt",
            self.provider.get_transaction_receipt(claim.tx_hash),
        )
        .await?
        .ok_or_else(|| {
            ProofError::NotFound(format!("no mined transaction {tx} on chain {chain}"))
        })?;
        if !receipt.status() {
            return Err(ProofError::NotFound(format!(
                "transaction {tx} reverted: it moved no funds"
            )));
        }
        Ok(receipt)
    }

    /// What the payer paid the merchant, capped at what the merchant kept; refused when
    /// there is no payer→merchant transfer or the result is below the floor.
    fn attested_amount(
        &self,
        claim: &FeedbackClaim,
        tx: &str,
        flows: &UsdcFlows,
    ) -> Result<U256, ProofError> {
        if flows.paid.is_zero() {
            return Err(no_payment_error(claim, tx, flows));
        }
        let paid = flows.paid;
        let out_of_merchant = flows.out_of_merchant;
        let kept = flows.into_merchant.saturating_sub(out_of_merchant);
        let amount = paid.min(kept);
        if amount < U256::from(self.config.floor_units) {
            let net = if out_of_merchant.is_zero() {
                format!("the transfer paid {amount} USDC base units")
            } else {
                format!(
                    "the payer sent the merchant {paid} USDC base units, but the merchant sent {out_of_merchant} out again in the same transaction, so {amount} is attested"
                )
            };
            return Err(ProofError::AmountTooSmall(format!(
                "{net}; feedback needs at least {}",
                self.config.floor_units
            )));
        }
        Ok(amount)
    }

    /// The time of block `block_number`, once it has the configured confirmations and
    /// is no older than the configured age (measured against the later of `now` and the
    /// chain's latest block).
    async fn confirmed_block_time(
        &self,
        tx: &str,
        block_number: u64,
        now: u64,
    ) -> Result<u64, ProofError> {
        let latest = rpc(
            "eth_getBlockByNumber(latest)",
            self.provider.get_block_by_number(BlockNumberOrTag::Latest),
        )
        .await?
        .ok_or_else(|| ProofError::Unavailable("the RPC has no latest block".into()))?;
        let have = latest
            .header
            .number
            .saturating_sub(block_number)
            .saturating_add(1);
        if have < self.config.confirmations {
            return Err(ProofError::NotFound(format!(
                "transaction {tx} has {have} of the {} confirmations feedback needs; retry in a few seconds",
                self.config.confirmations
            )));
        }
        let block = rpc(
            "eth_getBlockByNumber",
            self.provider
                .get_block_by_number(BlockNumberOrTag::Number(block_number)),
        )
        .await?
        .ok_or_else(|| {
            ProofError::Unavailable(format!("the RPC does not return block {block_number}"))
        })?;
        let block_time = block.header.timestamp;
        let age = now.max(latest.header.timestamp).saturating_sub(block_time);
        if age > self.config.max_age_secs {
            return Err(ProofError::TooOld(format!(
                "the payment is {} days old; feedback is accepted for {} days",
                age / 86_400,
                self.config.max_age_secs / 86_400
            )));
        }
        Ok(block_time)
    }

    /// Proof 2: the payer signed this exact feedback.
    pub async fn verify_signature(&self, claim: &FeedbackClaim) -> Result<Signer, ProofError> {
        self.ensure_chain().await?;
        let hash = eip191_hash_message(claim.message());
        let code = rpc("eth_getCode", self.provider.get_code_at(claim.payer)).await?;
        if code.is_empty() {
            return ecrecover(&claim.signature, &hash, claim.payer).map(|()| Signer::Eoa);
        }
        if self
            .erc1271_accepts(claim.payer, hash, &claim.signature)
            .await?
        {
            return Ok(Signer::Erc1271);
        }
        let delegated = code.len() == 23 && code.starts_with(&EIP7702_PREFIX);
        if delegated && ecrecover(&claim.signature, &hash, claim.payer).is_ok() {
            return Ok(Signer::Delegated);
        }
        Err(ProofError::BadSignature(format!(
            "the payer {} is a contract wallet and its isValidSignature does not accept this signature of the feedback message",
            lower_hex(claim.payer.as_slice())
        )))
    }

    async fn erc1271_accepts(
        &self,
        wallet: Address,
        hash: B256,
        signature: &Bytes,
    ) -> Result<bool, ProofError> {
        let call = IErc1271::isValidSignatureCall {
            hash,
            signature: signature.clone(),
        };
        let tx = TransactionRequest::default()
            .with_to(wallet)
            .with_input(call.abi_encode());
        match tokio::time::timeout(RPC_TIMEOUT, self.provider.call(tx)).await {
            Err(_) => Err(ProofError::Unavailable(
                "eth_call isValidSignature: no answer".into(),
            )),
            // A revert (or a wallet without the function) is a refusal.
            Ok(Err(e)) if e.as_error_resp().is_some() => Ok(false),
            Ok(Err(e)) => Err(ProofError::Unavailable(format!(
                "eth_call isValidSignature: {e}"
            ))),
            Ok(Ok(out)) => Ok(IErc1271::isValidSignatureCall::abi_decode_returns(&out)
                .map(|magic| magic.0 == ERC1271_MAGIC)
                .unwrap_or(false)),
        }
    }
}

/// The USDC `Transfer`s of one transaction, as they bear on a claim.
#[derive(Debug, Default)]
struct UsdcFlows {
    /// The sum of the payer→merchant transfers.
    paid: U256,
    /// Everything transferred to the merchant.
    into_merchant: U256,
    /// Everything transferred from the merchant.
    out_of_merchant: U256,
    /// Senders other than the payer of transfers to the merchant, in log order.
    paid_by_others: Vec<Address>,
    /// Receivers other than the merchant of the payer's transfers, in log order.
    paid_to_others: Vec<Address>,
}

impl UsdcFlows {
    /// Decodes every `Transfer` log of the `usdc` contract among `logs`.
    fn tally(logs: &[Log], usdc: Address, claim: &FeedbackClaim) -> UsdcFlows {
        let mut flows = UsdcFlows::default();
        for log in logs {
            if log.address() != usdc {
                continue;
            }
            // Logs of other events (Approval, AuthorizationUsed) do not decode as Transfer.
            let Ok(t) = log.log_decode::<IErc20::Transfer>() else {
                continue;
            };
            let t = t.inner.data;
            if t.to == claim.merchant {
                flows.into_merchant = flows.into_merchant.saturating_add(t.value);
            }
            if t.from == claim.merchant {
                flows.out_of_merchant = flows.out_of_merchant.saturating_add(t.value);
                continue;
            }
            match (t.from == claim.payer, t.to == claim.merchant) {
                (true, true) => flows.paid = flows.paid.saturating_add(t.value),
                (false, true) => flows.paid_by_others.push(t.from),
                (true, false) => flows.paid_to_others.push(t.to),
                (false, false) => {}
            }
        }
        flows
    }
}

/// Why a transaction without a payer→merchant transfer proves nothing: someone else
/// paid the merchant, the payer paid someone else, or no such transfer at all.
fn no_payment_error(claim: &FeedbackClaim, tx: &str, flows: &UsdcFlows) -> ProofError {
    let merchant = lower_hex(claim.merchant.as_slice());
    let payer = lower_hex(claim.payer.as_slice());
    match (flows.paid_by_others.first(), flows.paid_to_others.first()) {
        (Some(from), _) => ProofError::PayerMismatch(format!(
            "the USDC transfer to {merchant} in {tx} came from {}, not from the payer {payer}",
            lower_hex(from.as_slice())
        )),
        (None, Some(to)) => ProofError::NotFound(format!(
            "the payer's USDC transfer in {tx} went to {}, not to the merchant {merchant}",
            lower_hex(to.as_slice())
        )),
        (None, None) => ProofError::NotFound(format!(
            "transaction {tx} carries no USDC transfer from {payer} to {merchant}"
        )),
    }
}

/// A plain account's signature: 65 bytes, low s, recovering to `expected`.
fn ecrecover(signature: &Bytes, hash: &B256, expected: Address) -> Result<(), ProofError> {
    let bad = |m: String| Err(ProofError::BadSignature(m));
    if signature.len() != 65 {
        return bad(format!(
            "a wallet without code signs with 65 bytes; this signature has {}",
            signature.len()
        ));
    }
    let sig = match Signature::from_raw(signature) {
        Ok(s) => s,
        Err(e) => return bad(format!("the signature does not parse: {e}")),
    };
    if sig.normalize_s().is_some() {
        return bad("the signature has a high s value (the malleable twin of a valid one)".into());
    }
    match sig.recover_address_from_prehash(hash) {
        Ok(signer) if signer == expected => Ok(()),
        Ok(signer) => bad(format!(
            "the feedback message was signed by {}, not by the payer {}",
            lower_hex(signer.as_slice()),
            lower_hex(expected.as_slice())
        )),
        Err(e) => bad(format!("no signer recovers from the signature: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloy::signers::SignerSync;
    use alloy::signers::local::PrivateKeySigner;

    /// docs/reputation.md: an RPC that hangs is given up after 10 s a call (the route
    /// then answers `502 chain_unavailable`). The RPC here takes the connection and
    /// never answers. Would catch: a call with no deadline (feedback requests held until
    /// API Gateway's 30 s, or forever on `umpire serve`), or the deadline changed.
    #[tokio::test]
    async fn an_rpc_that_never_answers_is_given_up_after_ten_seconds() {
        assert_eq!(RPC_TIMEOUT, Duration::from_secs(10));
        // Connections are queued by the kernel and never read: no answer, ever.
        let silent = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let url = format!("http://{}", silent.local_addr().expect("addr"));
        let config =
            ChainConfig::from_vars(&|n| (n == "UMPIRE_FEEDBACK_RPC_URL").then(|| url.clone()))
                .expect("config")
                .expect("an RPC named");
        let chain = FeedbackChain::new(config).expect("reader");
        let started = std::time::Instant::now();
        let r = chain.ensure_chain().await;
        let took = started.elapsed();
        assert!(
            matches!(&r, Err(ProofError::Unavailable(m)) if m.contains("no answer within")),
            "{r:?}"
        );
        // At the deadline, not much later (slack for a loaded machine).
        assert!(took >= RPC_TIMEOUT, "gave up after {took:?}");
        assert!(took < RPC_TIMEOUT * 2, "still waiting after {took:?}");
    }

    #[test]
    fn ecrecover_accepts_the_signer_and_refuses_others_and_high_s() {
        let key = PrivateKeySigner::random();
        let message = "umpire-feedback-v1\ntx:0x00\nmerchant:0x00\noutcome:fulfilled\nwould_repeat:\nlatency_ms:";
        let sig = key.sign_message_sync(message.as_bytes()).expect("sign");
        let hash = eip191_hash_message(message);
        let raw = Bytes::from(sig.as_bytes().to_vec());
        assert_eq!(ecrecover(&raw, &hash, key.address()), Ok(()));
        let other = PrivateKeySigner::random().address();
        assert!(matches!(
            ecrecover(&raw, &hash, other),
            Err(ProofError::BadSignature(_))
        ));
        // The high-s twin: s' = n - s, parity flipped. It recovers the same signer.
        let n = U256::from_str_radix(
            "fffffffffffffffffffffffffffffffebaaedce6af48a03bbfd25e8cd0364141",
            16,
        )
        .expect("n");
        let twin = Signature::new(sig.r(), n - sig.s(), !sig.v());
        assert_eq!(
            twin.recover_address_from_prehash(&hash).ok(),
            Some(key.address())
        );
        let twin = Bytes::from(twin.as_bytes().to_vec());
        match ecrecover(&twin, &hash, key.address()) {
            Err(ProofError::BadSignature(m)) => assert!(m.contains("high s"), "{m}"),
            other => panic!("high-s accepted: {other:?}"),
        }
    }
}
