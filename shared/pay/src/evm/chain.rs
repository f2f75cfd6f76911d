//! What only the chain knows about an EIP-3009 payment, and settling it ourselves, on a
//! chain that behaves like Base: blocks every two seconds, a window in which anyone
//! holding the signed authorization may execute it (or its payer cancel it), and RPC
//! answers that can be lost while the call goes through.
//!
//! - **Verification** is one `eth_call`: the very transfer settlement will send,
//!   simulated from the settler. Only when it would revert are the authorization's state
//!   and the payer's balance read (together, one batch) to say why; an authorization
//!   already used is looked up in the token's logs, and if its transfer paid us the
//!   payment is ours, whoever broadcast it ([`OnChain::PaidUs`]).
//! - **Settlement** signs the transfer here (the nonce counted here, a fixed gas limit
//!   for EOA signatures, fees cached for a block) and sends it under one lock, so nonces
//!   reach the node in the order they were given and a lost answer is resent with the
//!   same bytes before any later nonce goes out: no purchase waits behind a gap. The lock
//!   is held for one round trip however many purchases arrive together: its holder signs
//!   every settlement waiting with consecutive nonces and sends them in one JSON-RPC
//!   batch (group commit); a nonce the node refuses below one it took is filled at once
//!   with a no-op.
//! - **Confirmation** is a successful receipt of our transaction, or the token's logs
//!   showing that this authorization's transfer paid us (a bystander's transaction, our
//!   own earlier broadcast, or receipts the RPC has not caught up with). A broadcast with
//!   no proof by the deadline is neither paid nor refused: it is pending, with its hash.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use alloy::consensus::{SignableTransaction, Transaction as _, TxEip1559, TxEnvelope};
use alloy::eips::{BlockNumberOrTag, Encodable2718};
use alloy::network::{TransactionBuilder, TxSignerSync};
use alloy::primitives::{Address, B256, Bytes, TxKind, U64, U256};
use alloy::providers::{DynProvider, Provider, ProviderBuilder};
use alloy::rpc::client::BatchRequest;
use alloy::rpc::types::{Filter, Log, TransactionReceipt, TransactionRequest};
use alloy::signers::local::PrivateKeySigner;
use alloy::sol_types::{SolCall, SolEvent};
use alloy::transports::{RpcError, TransportErrorKind};
use tracing::Instrument as _;

use crate::evm::block_clock::{BlockClock, Poller};
use crate::settler::polls_every;
use umpire_x402::evm::{Eip3009Payment, IEip3009, SETTLEMENT_LOOKBACK_BLOCKS, invalid};
use umpire_x402::reason::{FailureReason, PaymentFailure};

/// Gas for `transferWithAuthorization` with an EOA signature: USDC spends about 85,000
/// (a cold nonce slot and two balances); the rest is margin. Smart-wallet signatures
/// (ERC-1271) cost what the wallet's check costs, so those are estimated.
pub const TRANSFER_GAS_LIMIT: u64 = 150_000;

/// The least priority fee offered (0.001 gwei, what Base's blocks commonly clear at).
const MIN_PRIORITY_FEE: u128 = 1_000_000;

/// How many times a settlement is signed again after the node refuses its nonce or its
/// fees (another sender used the key, the fees moved).
pub(super) const SEND_ATTEMPTS: u32 = 3;

/// How many times the same signed bytes are resent when the node's answer was lost.
const RESENDS: u32 = 3;

/// A broadcast counts as possibly lost to the receipt poller after this many blocks;
/// from then on each poll also asks the token whether the authorization was used.
const RECEIPT_LATE_BLOCKS: u32 = 2;

/// Kept between the last confirmation attempt and the caller's deadline.
const CONFIRM_MARGIN: Duration = Duration::from_millis(150);

/// A settlement not mined after this many blocks, whose fees the next block would not
/// take (a base-fee spike, tips that rose), is replaced at its nonce with higher fees.
pub const REPLACE_AFTER_BLOCKS: u32 = 2;

/// A replacement pays at least this much more, in eighths (12.5%: nodes refuse a
/// replacement that pays less than 10% more), up to the fee cap.
const BUMP_EIGHTHS: u128 = 9;

/// The most a replacement may offer per gas, unless the operator says otherwise
/// (`UMPIRE_EVM_MAX_FEE_GWEI`): 1 gwei, a hundred times Base's usual fees; at the
/// 150,000 gas of one settlement, 0.00015 ETH.
pub const DEFAULT_FEE_CAP_WEI: u128 = 1_000_000_000;

/// The most gas one smart-wallet settlement may use, unless the operator says
/// otherwise (`UMPIRE_EVM_MAX_SETTLEMENT_GAS`): its wallet's signature check is paid by
/// us, so a wallet whose check costs more is refused before any work.
pub const DEFAULT_GAS_CAP: u64 = 300_000;

/// How long a payer whose payment we settled and saw revert on chain (its wallet
/// emptied, its authorization canceled, a smart wallet that passed simulation and
/// failed in execution) is refused before we broadcast for it again: each revert is
/// gas we paid for nothing.
pub const REVERT_COOLING_OFF: Duration = Duration::from_secs(600);

/// A chain reached over JSON-RPC, with an optional settler key for self-settlement.
#[derive(Clone)]
pub struct EvmChain {
    provider: DynProvider,
    settler: Option<Arc<Settler>>,
    chain_id: u64,
    receipt_timeout: Duration,
    /// How often the chain makes a block (`ZERO`: at once, as a local chain does).
    block_time: Duration,
    /// The blocks' phase as the receipt polls observe it, which times them.
    clock: Arc<Mutex<BlockClock>>,
    /// Whether a purchase may be answered on a preconfirmed receipt (a flashblocks RPC's
    /// receipt in the block being built), see [`EvmChain::with_preconfirmations`].
    preconfirmations: bool,
    /// The most a replacement offers per gas (wei).
    fee_cap: u128,
    /// The most gas a smart-wallet settlement may use.
    gas_cap: u64,
    /// Payers whose settlement reverted on chain, and until when they are refused.
    cooling_off: Arc<Mutex<HashMap<Address, Instant>>>,
}

/// What one receipt poll found.
struct Polled {
    success: bool,
    /// In a block the chain has sealed (not a preconfirmation of the one being built).
    sealed: bool,
}

/// Proof that the authorization paid us.
#[derive(Debug, Clone, Copy)]
struct Confirmed {
    tx: B256,
    /// `false`: only preconfirmed so far.
    sealed: bool,
}

impl Confirmed {
    fn sealed(tx: B256) -> Confirmed {
        Confirmed { tx, sealed: true }
    }
}

/// The key that pays gas for settlements, and what it has in flight.
struct Settler {
    signer: PrivateKeySigner,
    address: Address,
    /// Held while transactions are signed and sent: nonces reach the node in order.
    sending: tokio::sync::Mutex<SendState>,
    /// Settlements waiting for `sending`: whoever holds it signs every one waiting with
    /// consecutive nonces and sends them in one JSON-RPC batch (group commit), so the
    /// lock is held for one round trip however many purchases arrive together.
    queue: Mutex<Vec<Queued>>,
    /// Our broadcasts not yet decided, by authorization: a retry of the same purchase
    /// waits for (and resends) the same transaction rather than signing another.
    broadcasts: Mutex<HashMap<String, Broadcast>>,
}

#[derive(Default)]
struct SendState {
    /// The next nonce; `None`: read the chain's pending count first.
    next_nonce: Option<u64>,
    fees: Option<Fees>,
}

#[derive(Debug, Clone, Copy)]
struct Fees {
    max_fee_per_gas: u128,
    max_priority_fee_per_gas: u128,
    read_at: Instant,
}

/// A settlement waiting to be signed and sent, and where its outcome goes.
struct Queued {
    id: String,
    to: Address,
    input: Bytes,
    gas_limit: u64,
    reply: tokio::sync::oneshot::Sender<Outcome>,
}

/// What a batch did with one settlement.
enum Outcome {
    /// Out, or may be (its answer was lost and resending did not tell).
    Sent(Broadcast),
    /// The node refused it, neither for its nonce nor its fees: nothing went out.
    Refused(String),
    /// Nothing went out, for this reason.
    Failed(PaymentFailure),
}

/// One signed settlement transaction, and what it was signed from (a replacement signs
/// the same call at the same nonce with higher fees).
#[derive(Debug, Clone)]
struct Broadcast {
    hash: B256,
    raw: Bytes,
    nonce: u64,
    sent_at: Instant,
    to: Address,
    input: Bytes,
    gas_limit: u64,
    fees: Fees,
}

/// How long a process remembers a broadcast it has not seen decided: longer than any
/// authorization it settles stays valid (a payment's window is minutes).
const REMEMBER_BROADCASTS: Duration = Duration::from_secs(3600);

/// Each RPC call made while holding the send lock gets at most this long: one that
/// never answers must not hold every other settlement of the process.
const SEND_CALL_TIMEOUT: Duration = Duration::from_secs(5);

/// Gas for a no-op transaction that fills a nonce a lost broadcast left empty.
const FILLER_GAS: u64 = 21_000;

/// What the chain says of an authorization that would not transfer now, or would.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnChain {
    /// Unused, funded, and the transfer would go through.
    Unspent,
    /// Already executed, by this transaction, as a transfer of the payment to us.
    PaidUs(B256),
}

/// What spent an authorization, as the token's own logs tell it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpentBy {
    /// Its transfer of the payment to us, in this transaction.
    Us(B256),
    /// Its payer canceled it, or it was used in a transaction that paid us nothing
    /// (positive evidence: the logs show it).
    Otherwise,
    /// The logs do not show what spent it (yet): a node that lags, or further back
    /// than the lookback. Neither paid nor refused.
    Unseen,
}

fn used_otherwise() -> PaymentFailure {
    invalid(
        FailureReason::EvmNonceUsed,
        "this authorization was canceled, or spent on a transfer that did not pay us: the payment cannot pay any more, and nothing was taken by us",
    )
}

fn unseen() -> PaymentFailure {
    PaymentFailure::unavailable(
        "the token says this authorization is used, but its logs do not show by what yet",
    )
}

/// Nonce trouble the settler recovers from by re-reading its nonce and signing again.
pub(super) fn is_nonce_error(message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    [
        "nonce too low",
        "nonce too high",
        "replacement transaction underpriced",
    ]
    .iter()
    .any(|needle| m.contains(needle))
}

/// Fees the chain no longer takes: read them again and sign again.
fn is_fee_error(message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    m.contains("fee") && (m.contains("less than") || m.contains("too low"))
        || m.contains("transaction underpriced") && !m.contains("replacement")
}

/// A node's answer that says the transaction was not taken, for a reason we know: its
/// nonce, its fees, our gas money, a malformed transaction. Any other error answer (an
/// internal error, a proxy's timeout after forwarding) leaves it unknown whether the
/// transaction went out.
fn is_definite_refusal(message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    is_nonce_error(&m)
        || is_fee_error(&m)
        || is_settler_unfunded(&m)
        || [
            "intrinsic gas too low",
            "exceeds block gas limit",
            "invalid sender",
            "invalid signature",
            "invalid transaction",
        ]
        .iter()
        .any(|needle| m.contains(needle))
}

/// The settler's own account cannot pay for gas: our configuration, not the payer's.
fn is_settler_unfunded(message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    m.contains("insufficient funds for gas") || m.contains("insufficient funds for transfer")
}

/// The node has this very transaction already (a resend after a lost answer).
fn is_known(message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    m.contains("already known") || m.contains("already imported") || m.contains("known transaction")
}

impl std::fmt::Debug for EvmChain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EvmChain")
            .field("chain_id", &self.chain_id)
            .field("settler", &self.settler())
            .field("block_time", &self.block_time)
            .finish_non_exhaustive()
    }
}

pub(super) fn rpc_error(what: &str, e: impl std::fmt::Display) -> PaymentFailure {
    PaymentFailure::unavailable(format!("{what}: {e}"))
}

/// The key under which a process remembers its broadcast of one authorization.
fn authorization_id(token: Address, payment: &Eip3009Payment) -> String {
    let a = &payment.authorization;
    format!("{token:#x}|{:#x}|{:#x}", a.from, a.nonce)
}

impl EvmChain {
    /// Connects and checks that the RPC serves `chain_id`, so a misconfigured RPC
    /// fails at start instead of rejecting every payment.
    pub async fn connect(
        rpc_url: &str,
        chain_id: u64,
        settler_key: Option<&str>,
        receipt_timeout: Duration,
        block_time: Duration,
    ) -> Result<EvmChain, PaymentFailure> {
        let url: reqwest::Url = rpc_url
            .parse()
            .map_err(|e| PaymentFailure::config(format!("RPC URL {rpc_url:?}: {e}")))?;
        let settler = match settler_key {
            Some(key) => {
                let signer: PrivateKeySigner = key.trim().parse().map_err(|_| {
                    PaymentFailure::config("the settler key must be 32 bytes of hex")
                })?;
                Some(Arc::new(Settler {
                    address: signer.address(),
                    signer,
                    sending: Default::default(),
                    queue: Default::default(),
                    broadcasts: Default::default(),
                }))
            }
            None => None,
        };
        let provider = ProviderBuilder::new()
            .disable_recommended_fillers()
            .connect_http(url)
            .erased();
        let served = provider
            .get_chain_id()
            .await
            .map_err(|e| rpc_error("eth_chainId", e))?;
        if served != chain_id {
            return Err(PaymentFailure::config(format!(
                "the RPC serves chain {served}, the rail is on chain {chain_id}"
            )));
        }
        Ok(EvmChain {
            provider,
            settler,
            chain_id,
            receipt_timeout,
            block_time,
            clock: Arc::new(Mutex::new(BlockClock::new(block_time))),
            preconfirmations: false,
            fee_cap: DEFAULT_FEE_CAP_WEI,
            gas_cap: DEFAULT_GAS_CAP,
            cooling_off: Default::default(),
        })
    }

    /// The most a replaced settlement may offer per gas, in wei.
    pub fn with_fee_cap(mut self, wei: u128) -> EvmChain {
        self.fee_cap = wei;
        self
    }

    /// The most gas a smart-wallet settlement may use.
    pub fn with_gas_cap(mut self, gas: u64) -> EvmChain {
        self.gas_cap = gas;
        self
    }

    /// Whether `payer` is refused for now: a settlement of theirs reverted on chain.
    fn cooling_off_until(&self, payer: Address) -> Option<Instant> {
        let mut map = self.cooling_off.lock().unwrap_or_else(|p| p.into_inner());
        map.retain(|_, until| *until > Instant::now());
        map.get(&payer).copied()
    }

    /// Refuses `payer` for [`REVERT_COOLING_OFF`]: our settlement of their payment
    /// reverted, and we paid its gas.
    fn cool_off(&self, payer: Address) {
        tracing::warn!(%payer, "a settlement reverted on chain; the payer is refused for a while");
        self.cooling_off
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(payer, Instant::now() + REVERT_COOLING_OFF);
    }

    /// Answers purchases on preconfirmed receipts: an RPC that streams Base's
    /// flashblocks gives a receipt ~200 ms after the sequencer ordered the transaction,
    /// before its block is sealed. Receipts are then polled a flashblock after the
    /// broadcast and every half flashblock after that. The risk: a preconfirmation the
    /// sealed block does not include (see docs/paying.md); after such an answer the
    /// process keeps watching the transaction until it is sealed, and sends it again if
    /// it left the pool. Off, a receipt counts only once its block is sealed.
    pub fn with_preconfirmations(mut self, on: bool) -> EvmChain {
        self.preconfirmations = on;
        self
    }

    pub fn chain_id(&self) -> u64 {
        self.chain_id
    }

    pub fn settler(&self) -> Option<Address> {
        self.settler.as_ref().map(|s| s.address)
    }

    fn settler_or_config(&self) -> Result<&Arc<Settler>, PaymentFailure> {
        self.settler
            .as_ref()
            .ok_or_else(|| PaymentFailure::config("no settler key is configured"))
    }

    pub async fn authorization_used(
        &self,
        token: Address,
        authorizer: Address,
        nonce: B256,
    ) -> Result<bool, PaymentFailure> {
        let call = IEip3009::authorizationStateCall { authorizer, nonce };
        let out = self.call(token, call.abi_encode().into()).await?;
        IEip3009::authorizationStateCall::abi_decode_returns(&out)
            .map_err(|e| rpc_error("decoding authorizationState", e))
    }

    /// Whether transaction `hash` is mined and reverted (`Some(true)`), mined and
    /// succeeded (`Some(false)`), or not mined (`None`), as its receipt says.
    pub async fn reverted(&self, hash: B256) -> Result<Option<bool>, PaymentFailure> {
        let receipt = self
            .provider
            .get_transaction_receipt(hash)
            .await
            .map_err(|e| rpc_error("eth_getTransactionReceipt", e))?;
        Ok(receipt.map(|r| !r.status()))
    }

    /// An `eth_call` against the latest block: what is mined, never the pool (alloy's
    /// default, `pending`, would count our own unconfirmed broadcast as done, or a
    /// stranger's as spent, before the chain does).
    async fn call(&self, to: Address, input: Bytes) -> Result<Bytes, PaymentFailure> {
        let tx = TransactionRequest::default().with_to(to).with_input(input);
        self.provider
            .call(tx)
            .block(BlockNumberOrTag::Latest.into())
            .await
            .map_err(|e| rpc_error("eth_call", e))
    }

    /// Whether the transfer would go through now (one `eth_call`, from the settler when
    /// there is one), or, when the authorization was already executed as a transfer to
    /// `pay_to`, by which transaction. Anything else is the refusal, named as precisely
    /// as the chain allows.
    pub async fn check_onchain(
        &self,
        token: Address,
        payment: &Eip3009Payment,
        pay_to: Address,
    ) -> Result<OnChain, PaymentFailure> {
        if let Some(until) = self.cooling_off_until(payment.payer()) {
            return Err(invalid(
                FailureReason::EvmPayerCoolingOff,
                format!(
                    "the last payment from this wallet that we settled reverted on chain (its funds moved, its authorization canceled, or its wallet's check failed), and we paid the gas: payments from it are refused for {} more seconds",
                    until
                        .saturating_duration_since(Instant::now())
                        .as_secs()
                        .max(1)
                ),
            ));
        }
        let mut tx = TransactionRequest::default()
            .with_to(token)
            .with_input(payment.transfer_calldata()?);
        if let Some(settler) = self.settler() {
            tx = tx.with_from(settler);
        }
        match self
            .provider
            .call(tx)
            .block(BlockNumberOrTag::Latest.into())
            .await
        {
            Ok(_) if payment.is_eoa_signature() => Ok(OnChain::Unspent),
            // A smart wallet's signature check runs on our gas: one that needs more
            // than we pay for a settlement is refused before any work.
            Ok(_) => match self.settler() {
                Some(from) => self
                    .smart_wallet_gas(from, token, &payment.transfer_calldata()?)
                    .await
                    .map(|_| OnChain::Unspent),
                None => Ok(OnChain::Unspent),
            },
            // A revert is the payment's fault; anything else (a rate limit, a node
            // behind, an internal error) is the RPC's.
            Err(e)
                if e.as_error_resp().is_some_and(|r| {
                    r.code == 3 || r.message.to_ascii_lowercase().contains("revert")
                }) =>
            {
                self.why_not(token, payment, pay_to, &e.to_string())
                    .await
                    .map(OnChain::PaidUs)
            }
            Err(e) => Err(rpc_error("simulating the transfer", e)),
        }
    }

    /// Why the transfer would not (or did not) go through: the authorization's state and
    /// the payer's balance, read together. A used authorization whose transfer paid us
    /// is the payment made (`Ok`, its transaction); used otherwise, it is spent (or
    /// canceled) for good; unused and funded, `revert` is the reason (`EvmSimulation`).
    async fn why_not(
        &self,
        token: Address,
        payment: &Eip3009Payment,
        pay_to: Address,
        revert: &str,
    ) -> Result<B256, PaymentFailure> {
        let a = &payment.authorization;
        let state = IEip3009::authorizationStateCall {
            authorizer: a.from,
            nonce: a.nonce,
        };
        let balance = IEip3009::balanceOfCall { account: a.from };
        let (used, held) = self
            .batch_calls(
                token,
                [state.abi_encode().into(), balance.abi_encode().into()],
            )
            .await?;
        let used = IEip3009::authorizationStateCall::abi_decode_returns(&used)
            .map_err(|e| rpc_error("decoding authorizationState", e))?;
        let held = IEip3009::balanceOfCall::abi_decode_returns(&held)
            .map_err(|e| rpc_error("decoding balanceOf", e))?;
        if used {
            return match self.spent_by(token, payment, pay_to).await? {
                SpentBy::Us(tx) => Ok(tx),
                SpentBy::Otherwise => Err(used_otherwise()),
                SpentBy::Unseen => Err(unseen()),
            };
        }
        if held < a.value {
            return Err(invalid(
                FailureReason::InsufficientFunds,
                format!(
                    "{} holds {held} base units, the payment needs {}",
                    a.from, a.value
                ),
            ));
        }
        Err(invalid(
            FailureReason::EvmSimulation,
            format!("the transfer would revert: {revert}"),
        ))
    }

    /// Two `eth_call`s to `to` in one JSON-RPC batch: one round trip.
    async fn batch_calls(
        &self,
        to: Address,
        inputs: [Bytes; 2],
    ) -> Result<(Bytes, Bytes), PaymentFailure> {
        let mut batch = BatchRequest::new(self.provider.client());
        let [a, b] = inputs.map(|input| {
            let tx = TransactionRequest::default().with_to(to).with_input(input);
            batch.add_call::<_, Bytes>("eth_call", &(tx, BlockNumberOrTag::Latest))
        });
        let (a, b) = (
            a.map_err(|e| rpc_error("eth_call", e))?,
            b.map_err(|e| rpc_error("eth_call", e))?,
        );
        batch.send().await.map_err(|e| rpc_error("eth_call", e))?;
        Ok((
            a.await.map_err(|e| rpc_error("eth_call", e))?,
            b.await.map_err(|e| rpc_error("eth_call", e))?,
        ))
    }

    /// What spent this (used) authorization, from the token's logs alone, one call for
    /// the three events that can: `AuthorizationUsed(from, nonce)` with a `Transfer(from,
    /// pay_to, value)` in the same transaction (paid us, whoever sent it; no receipt
    /// needed, a reverted transaction leaves no logs), `AuthorizationCanceled(from,
    /// nonce)`, or `AuthorizationUsed` in a transaction that paid us nothing. A payment
    /// whose signature is not an EOA's (a smart wallet's) counts as ours only if the
    /// transaction that moved it carried that very signature: the offline check could
    /// not tie the presented header to its payer.
    pub async fn spent_by(
        &self,
        token: Address,
        payment: &Eip3009Payment,
        pay_to: Address,
    ) -> Result<SpentBy, PaymentFailure> {
        let a = &payment.authorization;
        let latest = self
            .provider
            .get_block_number()
            .await
            .map_err(|e| rpc_error("eth_blockNumber", e))?;
        let filter = Filter::new()
            .address(token)
            .event_signature(vec![
                IEip3009::AuthorizationUsed::SIGNATURE_HASH,
                IEip3009::AuthorizationCanceled::SIGNATURE_HASH,
                IEip3009::Transfer::SIGNATURE_HASH,
            ])
            .topic1(a.from.into_word())
            .topic2(vec![a.nonce, pay_to.into_word()])
            // The lookback counts the latest block: providers cap a range's length.
            .from_block(latest.saturating_sub(SETTLEMENT_LOOKBACK_BLOCKS - 1))
            .to_block(latest);
        let logs = self
            .provider
            .get_logs(&filter)
            .await
            .map_err(|e| rpc_error("eth_getLogs", e))?;
        if let Some(tx) = settlement_in(&logs, token, payment, pay_to) {
            if payment.is_eoa_signature() || self.carries_signature(tx, payment).await? {
                return Ok(SpentBy::Us(tx));
            }
            return Ok(SpentBy::Otherwise);
        }
        let spent = logs
            .iter()
            .filter(|l| l.address() == token && !l.removed)
            .any(|l| {
                let by =
                    |authorizer: Address, nonce: B256| authorizer == a.from && nonce == a.nonce;
                l.log_decode::<IEip3009::AuthorizationCanceled>()
                    .is_ok_and(|c| by(c.inner.data.authorizer, c.inner.data.nonce))
                    || l.log_decode::<IEip3009::AuthorizationUsed>()
                        .is_ok_and(|u| by(u.inner.data.authorizer, u.inner.data.nonce))
            });
        Ok(if spent {
            SpentBy::Otherwise
        } else {
            SpentBy::Unseen
        })
    }

    /// Whether transaction `tx` carried this payment's signature bytes.
    async fn carries_signature(
        &self,
        tx: B256,
        payment: &Eip3009Payment,
    ) -> Result<bool, PaymentFailure> {
        let found = self
            .provider
            .get_transaction_by_hash(tx)
            .await
            .map_err(|e| rpc_error("eth_getTransactionByHash", e))?;
        let input = found.map(|t| t.inner.input().clone()).unwrap_or_default();
        let sig = payment.signature.as_ref();
        Ok(!sig.is_empty() && input.windows(sig.len()).any(|w| w == sig))
    }

    /// Settles the payment: signs and sends the transfer (or resends the one this
    /// process already sent for it), then waits up to `wait` (and the configured receipt
    /// timeout) for proof that the authorization's transfer paid us, whoever's
    /// transaction made it. Without proof by then the outcome is unknown:
    /// [`PaymentFailure::pending`] with our transaction's hash.
    pub async fn settle(
        &self,
        token: Address,
        payment: &Eip3009Payment,
        pay_to: Address,
        wait: Duration,
    ) -> Result<B256, PaymentFailure> {
        let settler = self.settler_or_config()?;
        let until = Instant::now() + self.receipt_timeout.min(wait);
        let id = authorization_id(token, payment);
        let sent = match settler.remembered(&id) {
            Some(b) if !self.stale(&b).await => b,
            _ => match self.broadcast(settler, token, payment, pay_to).await? {
                Sent::Broadcast(b) => b,
                Sent::PaidBy(tx) => return Ok(tx),
            },
        };
        let decided = self
            .confirm(
                token,
                payment,
                pay_to,
                Sending::of(&id, &sent),
                until,
                self.preconfirmations,
            )
            .await;
        match decided {
            Ok(c) if !c.sealed => self.follow(token, payment, pay_to, c.tx, id),
            Err(ref f) if f.transaction.is_some() => {}
            // Only this broadcast (or its replacement at its nonce): a later settlement
            // may have signed anew.
            _ => settler.forget_nonce(&id, sent.nonce),
        }
        decided.map(|c| c.tx)
    }

    /// Watches a transaction answered on its preconfirmation until its block is sealed
    /// (resending it if it left the pool, as a late broadcast is), for as long as its
    /// authorization is valid. In `umpire serve` this runs to the end; on Lambda only
    /// while the instance runs (a frozen instance resumes it on its next event).
    fn follow(
        &self,
        token: Address,
        payment: &Eip3009Payment,
        pay_to: Address,
        tx: B256,
        id: String,
    ) {
        let chain = self.clone();
        let payment = payment.clone();
        let valid_before = u64::try_from(payment.authorization.validBefore).unwrap_or(u64::MAX);
        let now = umpire_host::Clock::system().now();
        let until =
            Instant::now() + Duration::from_secs(valid_before.saturating_sub(now).min(3600));
        tokio::spawn(async move {
            let sending = Sending {
                id: &id,
                hash: tx,
                nonce: None,
            };
            match chain
                .confirm(token, &payment, pay_to, sending, until, false)
                .await
            {
                Ok(c) => tracing::info!(tx = %c.tx, "a preconfirmed settlement is sealed"),
                Err(e) => tracing::error!(
                    %tx,
                    reason = %e.message,
                    "a purchase answered on a preconfirmation was not included: the transfer did not land"
                ),
            }
            if let Some(settler) = &chain.settler {
                // Only this broadcast: a later settlement may have signed anew.
                settler.forget(&id, tx);
            }
        }
        // Its lines belong to the purchase it answered.
        .in_current_span()
        );
    }

    /// Resends a broadcast this process made earlier (harmless if it arrived, the
    /// broadcast if not); `true` when it can never land: its nonce went to another
    /// transaction and it has no receipt, so it is forgotten and signed anew.
    async fn stale(&self, b: &Broadcast) -> bool {
        match tokio::time::timeout(SEND_CALL_TIMEOUT, self.send_raw(&b.raw)).await {
            Ok(Err(e)) if e.to_string().to_ascii_lowercase().contains("nonce too low") => {
                let receipt = tokio::time::timeout(
                    SEND_CALL_TIMEOUT,
                    self.provider.get_transaction_receipt(b.hash),
                )
                .await;
                let stale = matches!(receipt, Ok(Ok(None)));
                if stale {
                    tracing::warn!(hash = %b.hash, nonce = b.nonce, "a remembered settlement lost its nonce to another transaction; signing it again");
                }
                stale
            }
            Ok(Err(e)) => {
                tracing::debug!(error = %e, hash = %b.hash, "resending a settlement");
                false
            }
            _ => false,
        }
    }

    /// Signs the transfer and sends it, in nonce order, with whatever other settlements
    /// wait for the send lock ([`EvmChain::send_queued`]). A node that refuses it for its
    /// nonce or its fees gets a new signing; one that refuses it otherwise took nothing,
    /// and the chain says why (or that the authorization already paid us).
    async fn broadcast(
        &self,
        settler: &Arc<Settler>,
        token: Address,
        payment: &Eip3009Payment,
        pay_to: Address,
    ) -> Result<Sent, PaymentFailure> {
        let id = authorization_id(token, payment);
        let input = payment.transfer_calldata()?;
        let gas_limit = self.gas_limit(settler, token, payment, &input).await?;
        let (reply, outcome) = tokio::sync::oneshot::channel();
        settler
            .queue
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(Queued {
                id: id.clone(),
                to: token,
                input,
                gas_limit,
                reply,
            });
        // Sent from a task of its own: a request dropped at its deadline must not drop a
        // batch it leads halfway (the other purchases' transactions may be out).
        let chain = self.clone();
        let leader = settler.clone();
        tokio::spawn(async move { chain.send_queued(&leader).await });
        let refusal = match outcome.await {
            Ok(Outcome::Sent(b)) => return Ok(Sent::Broadcast(b)),
            Ok(Outcome::Failed(f)) => return Err(f),
            Ok(Outcome::Refused(text)) => text,
            // The batch ended without a word (its task panicked): what it signed is
            // remembered, and may be out.
            Err(_) => {
                return match settler.remembered(&id) {
                    Some(b) => Ok(Sent::Broadcast(b)),
                    None => Err(PaymentFailure::unavailable(
                        "the settlement was never signed; nothing moved",
                    )),
                };
            }
        };
        match self.why_not(token, payment, pay_to, &refusal).await {
            Ok(tx) => Ok(Sent::PaidBy(tx)),
            // The payer's side is sound (unused, funded): the node refused our own
            // transaction (its nonce, its fees, our key). Nothing moved and nothing is
            // the payer's fault: the purchase stays open for the retry to settle.
            Err(f) if f.reason == FailureReason::EvmSimulation => Err(PaymentFailure::unavailable(
                format!("the node refused our settlement transaction: {refusal}"),
            )),
            Err(f) => Err(f),
        }
    }

    /// Takes the send lock and sends every settlement waiting for it, in batches, until
    /// none is left to sign again. Finds nothing to do when an earlier holder took them.
    async fn send_queued(&self, settler: &Arc<Settler>) {
        let mut state = settler.sending.lock().await;
        let mut todo =
            std::mem::take(&mut *settler.queue.lock().unwrap_or_else(|p| p.into_inner()));
        for attempt in 1..=SEND_ATTEMPTS {
            if todo.is_empty() {
                return;
            }
            todo = self
                .send_batch(settler, &mut state, todo, attempt == SEND_ATTEMPTS)
                .await;
        }
    }

    /// Signs `todo` with consecutive nonces and sends them in one round trip. Each gets
    /// its outcome, except those the node refused for their nonce or their fees, which
    /// are returned to be signed again (unless `last`). A refusal below a transaction
    /// that went out leaves a gap nothing behind it passes: filled at once with a no-op.
    async fn send_batch(
        &self,
        settler: &Settler,
        state: &mut SendState,
        todo: Vec<Queued>,
        last: bool,
    ) -> Vec<Queued> {
        let fail_all = |todo: Vec<Queued>, f: PaymentFailure| {
            for q in todo {
                let _ = q.reply.send(Outcome::Failed(f.clone()));
            }
            Vec::new()
        };
        let first = match state.next_nonce {
            Some(n) => n,
            None => match self.pending_nonce(settler.address).await {
                Ok(n) => n,
                Err(f) => return fail_all(todo, f),
            },
        };
        let fees = match self.fees(state).await {
            Ok(f) => f,
            Err(f) => return fail_all(todo, f),
        };
        let signed: Result<Vec<Broadcast>, PaymentFailure> = todo
            .iter()
            .zip(first..)
            .map(|(q, nonce)| self.sign(settler, q.to, &q.input, nonce, q.gas_limit, fees))
            .collect();
        let signed = match signed {
            Ok(s) => s,
            Err(f) => return fail_all(todo, f),
        };
        // Written down before they leave: a retry finds its broadcast, and the nonces
        // count as used (a gap one leaves is filled with these very bytes).
        for (q, b) in todo.iter().zip(&signed) {
            settler.remember(&q.id, b);
        }
        state.next_nonce = Some(first + signed.len() as u64);
        let mut answers = self.send_raws(&signed).await;
        let mut resent = false;
        // The whole answer lost: the same bytes again, before any later nonce goes out.
        for _ in 0..RESENDS {
            if !answers
                .iter()
                .all(|a| a.as_ref().is_err_and(|e| e.as_error_resp().is_none()))
            {
                break;
            }
            tracing::warn!(
                first,
                count = signed.len(),
                "a settlement batch's answer was lost; resending it"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
            answers = self.send_raws(&signed).await;
            resent = true;
        }
        // A resent transaction the node calls "nonce too low" may be these very bytes,
        // mined since the lost answer (a block can seal between the two sends): the
        // node knows it by its hash. Signed again, it would spend a nonce on a revert.
        // Not found (or not answered) is no proof it never landed (another node of a
        // load-balanced RPC may not have it yet): its outcome is unknown, as a lost
        // answer's is, and a later settlement's check of it re-signs one that never
        // will ([`EvmChain::stale`]).
        if resent {
            for (b, a) in signed.iter().zip(answers.iter_mut()) {
                let too_low = a.as_ref().is_err_and(|e| {
                    e.as_error_resp().is_some()
                        && e.to_string().to_ascii_lowercase().contains("nonce too low")
                });
                if too_low {
                    *a = if self.arrived(b).await {
                        Ok(())
                    } else {
                        Err(TransportErrorKind::custom_str(
                            "resent after a lost answer; its nonce is used and the node does not find it by hash",
                        ))
                    };
                }
            }
        }
        let mut again = Vec::new();
        let mut refused_nonces = Vec::new();
        let mut out_up_to: Option<u64> = None;
        let mut unknown_count = false;
        for ((q, b), sent) in todo.into_iter().zip(signed).zip(answers) {
            match sent {
                Ok(()) => {
                    out_up_to = Some(b.nonce);
                    let _ = q.reply.send(Outcome::Sent(b));
                }
                Err(e) if e.as_error_resp().is_some() && is_definite_refusal(&e.to_string()) => {
                    // Refused: it never went out.
                    settler.forget(&q.id, b.hash);
                    let text = e.to_string();
                    if is_nonce_error(&text) {
                        // Not a gap: the node counts the nonce used, or us out of step.
                        unknown_count = true;
                        if last {
                            let _ = q.reply.send(Outcome::Refused(text));
                        } else {
                            tracing::warn!(nonce = b.nonce, error = %text, "settler nonce out of step; re-reading it");
                            again.push(q);
                        }
                        continue;
                    }
                    refused_nonces.push(b.nonce);
                    if is_fee_error(&text) && !last {
                        tracing::warn!(error = %text, "settlement fees out of date; reading them again");
                        state.fees = None;
                        again.push(q);
                    } else if is_settler_unfunded(&text) {
                        let _ = q.reply.send(Outcome::Failed(PaymentFailure::config(format!(
                            "the settler key cannot pay for gas: {text}"
                        ))));
                    } else {
                        let _ = q.reply.send(Outcome::Refused(text));
                    }
                }
                Err(e) => {
                    // Sent or not, nobody knows: the same bytes again.
                    tracing::warn!(nonce = b.nonce, hash = %b.hash, error = %e, "a settlement's answer was lost; resending it");
                    if !self.resend(&b).await {
                        // Still unknown: the chain's pending count decides next time.
                        unknown_count = true;
                    }
                    out_up_to = Some(b.nonce);
                    let _ = q.reply.send(Outcome::Sent(b));
                }
            }
        }
        // Refused nonces above everything that went out are ours again; below it, gaps.
        let (gaps, tail): (Vec<u64>, Vec<u64>) = refused_nonces
            .into_iter()
            .partition(|n| out_up_to.is_some_and(|top| *n < top));
        if unknown_count {
            state.next_nonce = None;
        } else if let Some(lowest) = tail.iter().min() {
            state.next_nonce = Some(*lowest);
        }
        if !gaps.is_empty() {
            self.fill(settler, state, &gaps).await;
        }
        again
    }

    /// Sends a no-op to itself at each of `nonces` (left empty by a refusal between
    /// transactions that went out), in one round trip. One that fails stays a gap for
    /// the late-receipt refill ([`EvmChain::refill`]).
    async fn fill(&self, settler: &Settler, state: &mut SendState, nonces: &[u64]) {
        let Ok(fees) = self.fees(state).await else {
            return;
        };
        let fillers: Vec<Broadcast> = nonces
            .iter()
            .filter_map(|n| {
                self.sign(
                    settler,
                    settler.address,
                    &Bytes::new(),
                    *n,
                    FILLER_GAS,
                    fees,
                )
                .ok()
            })
            .collect();
        for (b, sent) in fillers.iter().zip(self.send_raws(&fillers).await) {
            match sent {
                Ok(()) => {
                    tracing::warn!(nonce = b.nonce, hash = %b.hash, "filled a settler nonce a refusal left empty")
                }
                Err(e) => {
                    tracing::error!(nonce = b.nonce, error = %e, "a settler nonce left empty could not be filled yet")
                }
            }
        }
    }

    /// Sends signed transactions: one alone as a plain call, several in one JSON-RPC
    /// batch (one round trip); an answer per transaction, in order.
    async fn send_raws(&self, bs: &[Broadcast]) -> Vec<Result<(), RpcError<TransportErrorKind>>> {
        let lost = || TransportErrorKind::custom_str("no answer in time");
        if let [b] = bs {
            return vec![
                tokio::time::timeout(SEND_CALL_TIMEOUT, self.send_raw(&b.raw))
                    .await
                    .unwrap_or_else(|_| Err(lost())),
            ];
        }
        let mut batch = BatchRequest::new(self.provider.client());
        let waiters: Vec<_> = bs
            .iter()
            .map(|b| batch.add_call::<_, B256>("eth_sendRawTransaction", &(b.raw.clone(),)))
            .collect();
        let sent = tokio::time::timeout(SEND_CALL_TIMEOUT, batch.send()).await;
        if !matches!(sent, Ok(Ok(()))) {
            return bs.iter().map(|_| Err(lost())).collect();
        }
        let mut out = Vec::with_capacity(bs.len());
        for w in waiters {
            let answer = match w {
                Err(e) => Err(e),
                Ok(w) => tokio::time::timeout(SEND_CALL_TIMEOUT, w)
                    .await
                    .unwrap_or_else(|_| Err(lost())),
            };
            out.push(match answer {
                Ok(_) => Ok(()),
                Err(e) if e.as_error_resp().is_some_and(|r| is_known(&r.message)) => Ok(()),
                Err(e) => Err(e),
            });
        }
        out
    }

    /// The account's next nonce as the node counts its pending transactions.
    async fn pending_nonce(&self, account: Address) -> Result<u64, PaymentFailure> {
        tokio::time::timeout(
            SEND_CALL_TIMEOUT,
            self.provider.get_transaction_count(account).pending(),
        )
        .await
        .map_err(|_| rpc_error("eth_getTransactionCount", "no answer in time"))?
        .map_err(|e| rpc_error("eth_getTransactionCount", e))
    }

    /// Sends `b` again after a lost answer; `true` once the node has it.
    async fn resend(&self, b: &Broadcast) -> bool {
        for _ in 0..RESENDS {
            tokio::time::sleep(Duration::from_millis(100)).await;
            let sent = tokio::time::timeout(SEND_CALL_TIMEOUT, self.send_raw(&b.raw)).await;
            let Ok(sent) = sent else { continue };
            match sent {
                Ok(()) => return true,
                Err(e) if e.as_error_resp().is_some() => {
                    let text = e.to_string();
                    if is_known(&text) {
                        return true;
                    }
                    // Its nonce is used: by these very bytes (they arrived), or by
                    // another transaction (they never will). The node knows which.
                    if text.to_ascii_lowercase().contains("nonce too low") {
                        return self.arrived(b).await;
                    }
                    return false;
                }
                Err(_) => {}
            }
        }
        false
    }

    /// Whether the node has the transaction `b` (pending or mined), by its hash.
    async fn arrived(&self, b: &Broadcast) -> bool {
        let found = tokio::time::timeout(
            SEND_CALL_TIMEOUT,
            self.provider.get_transaction_by_hash(b.hash),
        )
        .await;
        matches!(found, Ok(Ok(Some(_))))
    }

    async fn send_raw(&self, raw: &Bytes) -> Result<(), RpcError<TransportErrorKind>> {
        match self.provider.send_raw_transaction(raw).await {
            Ok(_) => Ok(()),
            Err(e) if e.as_error_resp().is_some_and(|r| is_known(&r.message)) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// The gas limit: fixed for an EOA signature, estimated for a smart wallet's.
    async fn gas_limit(
        &self,
        settler: &Settler,
        token: Address,
        payment: &Eip3009Payment,
        input: &Bytes,
    ) -> Result<u64, PaymentFailure> {
        if payment.is_eoa_signature() {
            return Ok(TRANSFER_GAS_LIMIT);
        }
        self.smart_wallet_gas(settler.address, token, input).await
    }

    /// The gas limit of a smart-wallet settlement: the estimate and a quarter, refused
    /// past the cap (its wallet's check is paid by us).
    async fn smart_wallet_gas(
        &self,
        from: Address,
        token: Address,
        input: &Bytes,
    ) -> Result<u64, PaymentFailure> {
        let tx = TransactionRequest::default()
            .with_from(from)
            .with_to(token)
            .with_input(input.clone());
        let gas = self
            .provider
            .estimate_gas(tx)
            .await
            .map_err(|e| rpc_error("eth_estimateGas", e))?
            .saturating_mul(5)
            / 4;
        if gas > self.gas_cap {
            return Err(invalid(
                FailureReason::EvmGasCap,
                format!(
                    "settling this wallet's payment needs {gas} gas (its signature check), more than the {} we pay for one settlement",
                    self.gas_cap
                ),
            ));
        }
        Ok(gas)
    }

    /// Fees for the next block: read once a block (a fee history of one block: the
    /// next base fee and what the last block's transactions tipped), then reused.
    async fn fees(&self, state: &mut SendState) -> Result<Fees, PaymentFailure> {
        let fresh_for = self.block_time.max(Duration::from_millis(500));
        if let Some(f) = state.fees.filter(|f| f.read_at.elapsed() < fresh_for) {
            return Ok(f);
        }
        let history = tokio::time::timeout(
            SEND_CALL_TIMEOUT,
            self.provider
                .get_fee_history(1, BlockNumberOrTag::Latest, &[50.0]),
        )
        .await
        .map_err(|_| rpc_error("eth_feeHistory", "no answer in time"))?
        .map_err(|e| rpc_error("eth_feeHistory", e))?;
        let base = history.base_fee_per_gas.last().copied().unwrap_or_default();
        let tip = history
            .reward
            .as_ref()
            .and_then(|r| r.first())
            .and_then(|r| r.first())
            .copied()
            .unwrap_or_default()
            .max(MIN_PRIORITY_FEE);
        // Twice the next base fee: room for six full blocks of rises.
        let fees = Fees {
            max_fee_per_gas: base.saturating_mul(2).saturating_add(tip),
            max_priority_fee_per_gas: tip,
            read_at: Instant::now(),
        };
        state.fees = Some(fees);
        Ok(fees)
    }

    fn sign(
        &self,
        settler: &Settler,
        to: Address,
        input: &Bytes,
        nonce: u64,
        gas_limit: u64,
        fees: Fees,
    ) -> Result<Broadcast, PaymentFailure> {
        let mut tx = TxEip1559 {
            chain_id: self.chain_id,
            nonce,
            gas_limit,
            max_fee_per_gas: fees.max_fee_per_gas,
            max_priority_fee_per_gas: fees.max_priority_fee_per_gas,
            to: TxKind::Call(to),
            value: U256::ZERO,
            access_list: Default::default(),
            input: input.clone(),
        };
        let signature = settler
            .signer
            .sign_transaction_sync(&mut tx)
            .map_err(|e| PaymentFailure::config(format!("signing the settlement: {e}")))?;
        let signed = tx.into_signed(signature);
        let hash = *signed.hash();
        let raw = TxEnvelope::from(signed).encoded_2718().into();
        Ok(Broadcast {
            hash,
            raw,
            nonce,
            sent_at: Instant::now(),
            to,
            input: input.clone(),
            gas_limit,
            fees,
        })
    }

    /// Waits for proof that the authorization paid us, until `until`: our transaction's
    /// receipt, or (once receipts are late) the token's logs. A reverted transaction is
    /// explained by the chain; a silent one is pending at the end.
    async fn confirm(
        &self,
        token: Address,
        payment: &Eip3009Payment,
        pay_to: Address,
        sending: Sending<'_>,
        until: Instant,
        preconfirmed_ok: bool,
    ) -> Result<Confirmed, PaymentFailure> {
        let started = Instant::now();
        let late_after = (self.block_time * RECEIPT_LATE_BLOCKS).max(Duration::from_secs(1));
        // A block's time (a second on a chain that mines at once) between looks at the
        // fees of a settlement that waits.
        let block = self.block_time.max(Duration::from_secs(1));
        let mut fees_looked_at = started + block * (REPLACE_AFTER_BLOCKS - 1);
        let mut hash = sending.hash;
        let mut polls = self.polls(preconfirmed_ok);
        let mut refilled = false;
        // The latest block our previous poll answered.
        let mut last: Option<u64> = None;
        loop {
            let left = until.saturating_duration_since(Instant::now());
            if left <= CONFIRM_MARGIN {
                break;
            }
            let pause = polls.pause(self, last);
            tokio::time::sleep(pause.min(left - CONFIRM_MARGIN)).await;
            // One slow answer must not take the whole wait: a receipt call is given a
            // bounded share of it, then the logs are asked instead.
            let ask = until
                .saturating_duration_since(Instant::now())
                .min(late_after);
            let receipt = match tokio::time::timeout(ask, self.poll_receipt(hash)).await {
                Ok(Ok((receipt, latest))) => {
                    last = latest;
                    Ok(receipt)
                }
                Ok(Err(e)) => {
                    last = None;
                    Err(e)
                }
                Err(_) => {
                    last = None;
                    Ok(None)
                }
            };
            match receipt {
                Ok(Some(r)) if r.success && (r.sealed || preconfirmed_ok) => {
                    return Ok(Confirmed {
                        tx: hash,
                        sealed: r.sealed,
                    });
                }
                Ok(Some(r)) if !r.success && r.sealed => {
                    // Reverted: most likely the authorization was executed first by
                    // another transaction, or canceled; the chain says which. Unless
                    // it paid us after all, the payer cost us the gas: refused a while.
                    let why = self
                        .why_not(
                            token,
                            payment,
                            pay_to,
                            &format!("the transfer {hash} reverted on chain"),
                        )
                        .await;
                    if why
                        .as_ref()
                        .is_err_and(|f| payer_made_it_revert(payment, f))
                    {
                        self.cool_off(payment.payer());
                    }
                    return why.map(Confirmed::sealed);
                }
                // Preconfirmed only: the sealed block decides.
                Ok(_) => {}
                Err(e) => tracing::debug!(%hash, error = %e, "receipt poll failed; polling again"),
            }
            if started.elapsed() >= late_after {
                if let Some(decided) = self.decided_by_logs(token, payment, pay_to, until).await {
                    return decided.map(Confirmed::sealed);
                }
                // Late, unused, and priced below what the chain takes now (a base-fee
                // spike): replaced at its nonce with higher fees, once a block.
                if let Some(nonce) = sending.nonce
                    && Instant::now() >= fees_looked_at
                {
                    fees_looked_at = Instant::now() + block;
                    if let Some(b) = self.replace_if_underpriced(sending.id, nonce).await {
                        hash = b.hash;
                    }
                }
                // Late, and unused: our transaction may have been dropped, or wait
                // behind a nonce a lost broadcast left empty. Both are put right.
                if !refilled {
                    refilled = true;
                    // Best effort, inside this request's time: the send lock may be
                    // held by a slow broadcast, and each fill is a round trip.
                    let left = until
                        .saturating_duration_since(Instant::now())
                        .saturating_sub(CONFIRM_MARGIN);
                    let _ = tokio::time::timeout(left, self.refill(hash)).await;
                }
            }
        }
        // The last word: the token itself.
        if let Some(decided) = self
            .decided_by_logs(token, payment, pay_to, until + CONFIRM_MARGIN)
            .await
        {
            return decided.map(Confirmed::sealed);
        }
        tracing::warn!(%hash, "no proof of settlement before the deadline");
        Err(PaymentFailure::pending(
            hash.to_string(),
            "the transfer was broadcast and is not confirmed yet",
        ))
    }

    /// One receipt poll: the receipt and, in the same round trip (one JSON-RPC batch),
    /// the latest sealed block, which tells a sealed receipt from a preconfirmed one and
    /// times the polls (see [`BlockClock`]). Also returns that block number.
    async fn poll_receipt(
        &self,
        hash: B256,
    ) -> Result<(Option<Polled>, Option<u64>), PaymentFailure> {
        const METHOD: &str = "eth_getTransactionReceipt";
        let mut batch = BatchRequest::new(self.provider.client());
        let receipt = batch
            .add_call::<_, Option<TransactionReceipt>>(METHOD, &(hash,))
            .map_err(|e| rpc_error(METHOD, e))?;
        let latest = batch
            .add_call::<_, U64>("eth_blockNumber", &[(); 0])
            .map_err(|e| rpc_error("eth_blockNumber", e))?;
        let sent = Instant::now();
        batch.send().await.map_err(|e| rpc_error(METHOD, e))?;
        // Each call of the batch answers on its own: a refused block number does not
        // throw away a receipt (the last block seen stands in for it).
        let latest = latest.await.ok().map(|n| n.to::<u64>());
        let known = {
            let mut clock = self.clock.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(n) = latest {
                clock.observe(sent, n);
            }
            latest.or_else(|| clock.latest())
        };
        let Some(r) = receipt.await.map_err(|e| rpc_error(METHOD, e))? else {
            return Ok((None, latest));
        };
        Ok((
            Some(Polled {
                success: r.status(),
                sealed: r.block_number.zip(known).is_some_and(|(n, l)| n <= l),
            }),
            latest,
        ))
    }

    /// The outcome if the token already knows it: the authorization used by a transfer
    /// to us (paid), or by something else (refused). `None` while unused or unreadable.
    async fn decided_by_logs(
        &self,
        token: Address,
        payment: &Eip3009Payment,
        pay_to: Address,
        until: Instant,
    ) -> Option<Result<B256, PaymentFailure>> {
        let a = &payment.authorization;
        let ask = async {
            if !self.authorization_used(token, a.from, a.nonce).await.ok()? {
                return None;
            }
            match self.spent_by(token, payment, pay_to).await {
                Ok(SpentBy::Us(tx)) => Some(Ok(tx)),
                Ok(SpentBy::Otherwise) => Some(Err(used_otherwise())),
                Ok(SpentBy::Unseen) | Err(_) => None,
            }
        };
        let left = until.saturating_duration_since(Instant::now());
        tokio::time::timeout(left, ask).await.ok().flatten()
    }

    /// Puts a late broadcast right: sends it again (a node that dropped it takes it
    /// back), and fills every nonce below it that the chain has not seen used (a lost
    /// broadcast of ours, or one this process no longer remembers) with what this
    /// process sent at that nonce, or else a no-op to itself, so nothing waits behind a
    /// gap.
    async fn refill(&self, hash: B256) {
        let Some(settler) = &self.settler else { return };
        let (mine, below) = {
            let remembered = settler.broadcasts.lock().unwrap_or_else(|p| p.into_inner());
            let mine = remembered.values().find(|b| b.hash == hash).cloned();
            let below: HashMap<u64, Broadcast> =
                remembered.values().map(|b| (b.nonce, b.clone())).collect();
            (mine, below)
        };
        let Some(mine) = mine else { return };
        // The node's pending count stops at the first nonce it has nothing for: from
        // there up to ours is the gap (a nonce the node holds a transaction for is never
        // filled over, so nobody's pending transfer is replaced).
        // Read under the send lock: a settlement sent meanwhile takes the nonce the read
        // would have called a gap.
        let state = settler.sending.lock().await;
        if let Ok(pending) = self.pending_nonce(settler.address).await {
            for nonce in pending..mine.nonce {
                let fill = match below.get(&nonce) {
                    Some(b) => Some(b.clone()),
                    None => state.fees.and_then(|fees| {
                        self.sign(
                            settler,
                            settler.address,
                            &Bytes::new(),
                            nonce,
                            FILLER_GAS,
                            fees,
                        )
                        .ok()
                    }),
                };
                if let Some(b) = fill {
                    tracing::warn!(nonce, hash = %b.hash, "filling a settler nonce a later settlement waits behind");
                    let _ = tokio::time::timeout(SEND_CALL_TIMEOUT, self.send_raw(&b.raw)).await;
                }
            }
        }
        drop(state);
        // An earlier settlement of ours priced out of the chain holds every later one
        // back: replaced here too, whoever is waiting for it.
        let stuck: Vec<(String, u64)> = settler
            .broadcasts
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .filter(|(_, b)| b.nonce < mine.nonce)
            .map(|(id, b)| (id.clone(), b.nonce))
            .collect();
        for (id, nonce) in stuck {
            self.replace_if_underpriced(&id, nonce).await;
        }
        let _ = tokio::time::timeout(SEND_CALL_TIMEOUT, self.send_raw(&mine.raw)).await;
    }

    /// The fees the next block takes: its base fee, and what the last block tipped.
    async fn next_fees(&self) -> Result<(u128, u128), PaymentFailure> {
        let history = tokio::time::timeout(
            SEND_CALL_TIMEOUT,
            self.provider
                .get_fee_history(1, BlockNumberOrTag::Latest, &[50.0]),
        )
        .await
        .map_err(|_| rpc_error("eth_feeHistory", "no answer in time"))?
        .map_err(|e| rpc_error("eth_feeHistory", e))?;
        let base = history.base_fee_per_gas.last().copied().unwrap_or_default();
        let tip = history
            .reward
            .as_ref()
            .and_then(|r| r.first())
            .and_then(|r| r.first())
            .copied()
            .unwrap_or_default()
            .max(MIN_PRIORITY_FEE);
        Ok((base, tip))
    }

    /// Replaces the settlement this process sent for authorization `id` at `nonce`
    /// when the next block would not take it (its fee cap below the base fee, or its tip
    /// below what blocks tip now): the same call at the same nonce, never another
    /// nonce, with fees at least 12.5% higher and what the chain asks now, up to the
    /// fee cap. The replacement is remembered in its place (a resend sends it); the
    /// one it replaces can still be mined instead, which the token's logs show as the
    /// same payment. `None` when nothing was replaced.
    async fn replace_if_underpriced(&self, id: &str, nonce: u64) -> Option<Broadcast> {
        let settler = self.settler.as_ref()?;
        let current = settler.remembered(id).filter(|b| b.nonce == nonce)?;
        let (base, tip) = self.next_fees().await.ok()?;
        let fees = current.fees;
        if fees.max_fee_per_gas >= base.saturating_add(fees.max_priority_fee_per_gas)
            && fees.max_priority_fee_per_gas >= tip
        {
            return None;
        }
        let bump = |x: u128| (x.saturating_mul(BUMP_EIGHTHS)).div_ceil(8).max(x + 1);
        let tip = bump(fees.max_priority_fee_per_gas).max(tip);
        let wanted = bump(fees.max_fee_per_gas).max(base.saturating_mul(2).saturating_add(tip));
        let max_fee = wanted.min(self.fee_cap);
        if max_fee < bump(fees.max_fee_per_gas) {
            tracing::error!(
                nonce,
                hash = %current.hash,
                base_fee = base,
                cap = self.fee_cap,
                "a settlement priced out of the chain cannot be replaced within the fee cap (UMPIRE_EVM_MAX_FEE_GWEI); it waits for fees to fall"
            );
            return None;
        }
        let bumped = Fees {
            max_fee_per_gas: max_fee,
            max_priority_fee_per_gas: tip.min(max_fee),
            read_at: Instant::now(),
        };
        let replacement = self
            .sign(
                settler,
                current.to,
                &current.input,
                nonce,
                current.gas_limit,
                bumped,
            )
            .ok()?;
        match tokio::time::timeout(SEND_CALL_TIMEOUT, self.send_raw(&replacement.raw)).await {
            Ok(Ok(())) => {
                tracing::warn!(
                    nonce,
                    old = %current.hash,
                    new = %replacement.hash,
                    max_fee_per_gas = max_fee,
                    base_fee = base,
                    "replaced a settlement the chain would not take at its fees"
                );
                settler.remember(id, &replacement);
                Some(replacement)
            }
            // Mined meanwhile ("nonce too low"), or another replacement got there:
            // the receipt or the logs tell.
            Ok(Err(e)) => {
                tracing::info!(nonce, error = %e, "a replacement was not taken");
                None
            }
            Err(_) => None,
        }
    }

    /// The pauses between receipt polls. With preconfirmations, a flashblock apart
    /// ([`polls_every`]); on an instant chain: at once, then doubling from 5 ms to
    /// 500 ms; on a chain with blocks, timed to them by the [`BlockClock`].
    fn polls(&self, preconfirmed: bool) -> Polls {
        if preconfirmed {
            // A flashblock orders what arrived during it.
            return Polls::Every(Box::new(polls_every(FLASHBLOCK)));
        }
        if self.block_time.is_zero() {
            return Polls::Every(Box::new(polls_every(Duration::ZERO)));
        }
        Polls::Blocks(Poller::default())
    }
}

/// The schedule of one transaction's receipt polls, see [`EvmChain::polls`].
enum Polls {
    Every(Box<dyn Iterator<Item = Duration> + Send>),
    Blocks(Poller),
}

impl Polls {
    /// The pause before the next poll; `last`: the latest block the previous poll
    /// answered.
    fn pause(&mut self, chain: &EvmChain, last: Option<u64>) -> Duration {
        match self {
            Polls::Every(pauses) => pauses.next().unwrap_or_default(),
            Polls::Blocks(poller) => {
                let clock = chain.clock.lock().unwrap_or_else(|p| p.into_inner());
                poller.pause(&clock, Instant::now(), last)
            }
        }
    }
}

/// A settlement being confirmed: the authorization it is for, its transaction, and
/// its nonce when it is ours to replace (a watch of a preconfirmed one replaces nothing).
struct Sending<'a> {
    id: &'a str,
    hash: B256,
    nonce: Option<u64>,
}

impl<'a> Sending<'a> {
    fn of(id: &'a str, b: &Broadcast) -> Sending<'a> {
        Sending {
            id,
            hash: b.hash,
            nonce: Some(b.nonce),
        }
    }
}

impl Settler {
    /// Forgets the broadcast of authorization `id` at `nonce` (the first one or its
    /// replacement; not one signed anew at another nonce since).
    fn forget_nonce(&self, id: &str, nonce: u64) {
        let mut remembered = self.broadcasts.lock().unwrap_or_else(|p| p.into_inner());
        if remembered.get(id).is_some_and(|b| b.nonce == nonce) {
            remembered.remove(id);
        }
    }

    /// Forgets broadcast `hash` of authorization `id` (not one signed anew since).
    fn forget(&self, id: &str, hash: B256) {
        let mut remembered = self.broadcasts.lock().unwrap_or_else(|p| p.into_inner());
        if remembered.get(id).is_some_and(|b| b.hash == hash) {
            remembered.remove(id);
        }
    }

    /// The broadcast this process made for authorization `id`, if it still holds one.
    fn remembered(&self, id: &str) -> Option<Broadcast> {
        self.broadcasts
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(id)
            .cloned()
    }

    fn remember(&self, id: &str, b: &Broadcast) {
        let mut remembered = self.broadcasts.lock().unwrap_or_else(|p| p.into_inner());
        remembered.retain(|_, old| old.sent_at.elapsed() < REMEMBER_BROADCASTS);
        remembered.insert(id.to_owned(), b.clone());
    }
}

/// Whether the payer made our settlement revert, as `why` (the chain's reason) tells
/// it: the funds moved away between verification and the block, or a smart wallet that
/// passed simulation failed in execution, while the authorization was still valid (a
/// settlement of ours mined late, after `validBefore`, is our doing; one spent by
/// someone else, a cancellation included, may be a front-run, not the payer's).
fn payer_made_it_revert(payment: &Eip3009Payment, why: &PaymentFailure) -> bool {
    let now = umpire_host::Clock::system().now();
    let valid_before = u64::try_from(payment.authorization.validBefore).unwrap_or(u64::MAX);
    let still_valid = now.saturating_add(umpire_x402::evm::VALID_BEFORE_MARGIN_SECS) < valid_before;
    still_valid
        && match why.reason {
            FailureReason::InsufficientFunds => true,
            FailureReason::EvmSimulation => !payment.is_eoa_signature(),
            _ => false,
        }
}

/// What [`EvmChain::broadcast`] did.
enum Sent {
    /// Our transaction is out (or may be).
    Broadcast(Broadcast),
    /// No need: the authorization already paid us in this transaction.
    PaidBy(B256),
}

/// The transaction among `logs` in which this authorization moved its amount from its
/// payer to `pay_to`: the token's `AuthorizationUsed(from, nonce)` immediately followed
/// by its `Transfer(from, pay_to, value)`, as one `transferWithAuthorization` emits
/// them. Adjacency is what ties the two: a transaction may use several authorizations
/// of one payer (one of them paying us, another, on the presented nonce, paying
/// someone else), and a transfer to us beside an unrelated use is not this payment.
fn settlement_in(
    logs: &[Log],
    token: Address,
    payment: &Eip3009Payment,
    pay_to: Address,
) -> Option<B256> {
    let a = &payment.authorization;
    let ours = |l: &&Log| l.address() == token && !l.removed;
    logs.iter().filter(ours).find_map(|used| {
        let u = used
            .log_decode::<IEip3009::AuthorizationUsed>()
            .ok()?
            .inner
            .data;
        if u.authorizer != a.from || u.nonce != a.nonce {
            return None;
        }
        let (tx, index) = (used.transaction_hash?, used.log_index?);
        let next = logs.iter().filter(ours).find(|l| {
            l.transaction_hash == Some(tx)
                && l.block_hash == used.block_hash
                && l.log_index == Some(index + 1)
        })?;
        let t = next.log_decode::<IEip3009::Transfer>().ok()?.inner.data;
        (t.from == a.from && t.to == pay_to && t.value == a.value).then_some(tx)
    })
}

/// How often Base's sequencer streams a flashblock (a preconfirmed part of the block
/// being built).
const FLASHBLOCK: Duration = Duration::from_millis(200);

#[cfg(test)]
mod tests {
    use super::*;
    use alloy::sol_types::SolEvent;

    use umpire_x402::evm::TransferWithAuthorization;

    const TOKEN: Address = Address::repeat_byte(0x70);
    const PAYER: Address = Address::repeat_byte(0x01);
    const US: Address = Address::repeat_byte(0x02);
    const ELSEWHERE: Address = Address::repeat_byte(0x03);

    fn payment(nonce: u8, value: u64) -> Eip3009Payment {
        Eip3009Payment {
            authorization: TransferWithAuthorization {
                from: PAYER,
                to: US,
                value: U256::from(value),
                validAfter: U256::ZERO,
                validBefore: U256::from(u64::MAX),
                nonce: B256::repeat_byte(nonce),
            },
            signature: Bytes::from(vec![1; 65]),
        }
    }

    fn log(tx: u8, index: u64, data: alloy::primitives::LogData) -> Log {
        Log {
            inner: alloy::primitives::Log {
                address: TOKEN,
                data,
            },
            block_hash: Some(B256::repeat_byte(0xbb)),
            block_number: Some(7),
            transaction_hash: Some(B256::repeat_byte(tx)),
            log_index: Some(index),
            ..Default::default()
        }
    }

    fn used(tx: u8, index: u64, nonce: u8) -> Log {
        let e = IEip3009::AuthorizationUsed {
            authorizer: PAYER,
            nonce: B256::repeat_byte(nonce),
        };
        log(tx, index, e.encode_log_data())
    }

    fn transfer(tx: u8, index: u64, to: Address, value: u64) -> Log {
        let e = IEip3009::Transfer {
            from: PAYER,
            to,
            value: U256::from(value),
        };
        log(tx, index, e.encode_log_data())
    }

    #[test]
    fn the_transfer_right_after_the_use_is_the_payment() {
        let logs = [used(0xa1, 4, 1), transfer(0xa1, 5, US, 1_000_000)];
        assert_eq!(
            settlement_in(&logs, TOKEN, &payment(1, 1_000_000), US),
            Some(B256::repeat_byte(0xa1))
        );
        // Another amount, another payee, another token: not this payment.
        assert_eq!(settlement_in(&logs, TOKEN, &payment(1, 999_999), US), None);
        assert_eq!(
            settlement_in(&logs, TOKEN, &payment(1, 1_000_000), ELSEWHERE),
            None
        );
        assert_eq!(
            settlement_in(
                &logs,
                Address::repeat_byte(0x71),
                &payment(1, 1_000_000),
                US
            ),
            None
        );
    }

    /// One transaction that uses the presented nonce to pay someone else and another
    /// nonce to pay us: the transfer to us belongs to the other authorization, and must
    /// not buy the presented one too (nor any number of others riding on it).
    #[test]
    fn a_transfer_to_us_beside_another_use_of_the_nonce_is_not_this_payment() {
        let logs = [
            used(0xa1, 0, 1),
            transfer(0xa1, 1, ELSEWHERE, 0),
            used(0xa1, 2, 2),
            transfer(0xa1, 3, US, 1_000_000),
        ];
        assert_eq!(
            settlement_in(&logs, TOKEN, &payment(1, 1_000_000), US),
            None
        );
        assert_eq!(
            settlement_in(&logs, TOKEN, &payment(2, 1_000_000), US),
            Some(B256::repeat_byte(0xa1))
        );
        // The use alone, its transfer in another transaction: not tied either.
        let apart = [used(0xa1, 0, 1), transfer(0xa2, 1, US, 1_000_000)];
        assert_eq!(
            settlement_in(&apart, TOKEN, &payment(1, 1_000_000), US),
            None
        );
    }
}
