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

use alloy::primitives::{Address, B256, Bytes};
use alloy::providers::{DynProvider, Provider, ProviderBuilder};
use alloy::signers::local::PrivateKeySigner;

mod channels;
mod fees;
mod send;
mod verify;
mod watch;

use crate::evm::block_clock::BlockClock;
use umpire_x402::evm::{Eip3009Payment, invalid};
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
    cooling_off: Arc<Mutex<CoolingOff>>,
}

/// Payers refused until a moment: each a payer whose settlement reverted on chain,
/// for [`REVERT_COOLING_OFF`] from then. Kept per process. Times are given, so the
/// rule is tested without waiting ten minutes.
#[derive(Default)]
struct CoolingOff(HashMap<Address, Instant>);

impl CoolingOff {
    /// Until when `payer` is refused, as of `now` (forgetting every refusal ended).
    fn until(&mut self, payer: Address, now: Instant) -> Option<Instant> {
        self.0.retain(|_, until| *until > now);
        self.0.get(&payer).copied()
    }

    /// Refuses `payer` from `now` for [`REVERT_COOLING_OFF`].
    fn refuse(&mut self, payer: Address, now: Instant) {
        self.0.insert(payer, now + REVERT_COOLING_OFF);
    }
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
        self.cooling_off
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .until(payer, Instant::now())
    }

    /// Refuses `payer` for [`REVERT_COOLING_OFF`]: our settlement of their payment
    /// reverted, and we paid its gas.
    fn cool_off(&self, payer: Address) {
        tracing::warn!(%payer, "a settlement reverted on chain; the payer is refused for a while");
        self.cooling_off
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .refuse(payer, Instant::now());
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

#[cfg(test)]
mod cooling_off_tests {
    use super::*;

    /// docs/paying.md: a payer whose settlement reverted is refused for 10 minutes,
    /// then taken again; another payer is never held up by it. Would catch: the period
    /// changed, a refusal never lifted (a payer shut out for good), or one payer's
    /// revert refusing everyone.
    #[test]
    fn a_reverted_payer_is_refused_ten_minutes_then_taken_again() {
        assert_eq!(REVERT_COOLING_OFF, Duration::from_secs(600));
        let (payer, other) = (Address::repeat_byte(1), Address::repeat_byte(2));
        let t0 = Instant::now();
        let mut list = CoolingOff::default();
        list.refuse(payer, t0);
        assert_eq!(list.until(payer, t0), Some(t0 + REVERT_COOLING_OFF));
        assert!(list.until(payer, t0 + Duration::from_secs(599)).is_some());
        assert_eq!(list.until(other, t0 + Duration::from_secs(1)), None);
        assert_eq!(list.until(payer, t0 + REVERT_COOLING_OFF), None, "lifted");
        assert!(list.0.is_empty(), "an ended refusal is forgotten");
    }
}
