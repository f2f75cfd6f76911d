//! Watching a settlement until the chain decides: receipts polled on the block clock
//! (or every flashblock), the token's logs read for this authorization's transfer, and
//! a stuck transaction replaced or refilled.
use std::collections::HashMap;
use std::time::{Duration, Instant};

use alloy::primitives::{Address, B256, Bytes, U64};
use alloy::providers::Provider;
use alloy::rpc::client::BatchRequest;
use alloy::rpc::types::{Log, TransactionReceipt};

use crate::evm::block_clock::Poller;
use crate::settler::polls_every;
use umpire_x402::evm::{Eip3009Payment, IEip3009};
use umpire_x402::reason::PaymentFailure;

use super::{
    Broadcast, CONFIRM_MARGIN, Confirmed, EvmChain, FILLER_GAS, Polled, RECEIPT_LATE_BLOCKS,
    REPLACE_AFTER_BLOCKS, SEND_CALL_TIMEOUT, SpentBy, payer_made_it_revert, rpc_error,
    used_otherwise,
};

impl EvmChain {
    /// Waits for proof that the authorization paid us, until `until`: our transaction's
    /// receipt, or (once receipts are late) the token's logs. A reverted transaction is
    /// explained by the chain; a silent one is pending at the end.
    pub(super) async fn confirm(
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
            let receipt;
            (receipt, last) = self.ask_receipt(hash, until, late_after).await;
            match receipt {
                Ok(Some(r)) if r.success && (r.sealed || preconfirmed_ok) => {
                    return Ok(Confirmed {
                        tx: hash,
                        sealed: r.sealed,
                    });
                }
                Ok(Some(r)) if !r.success && r.sealed => {
                    return self.after_revert(token, payment, pay_to, hash).await;
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
                    self.refill_within(hash, until).await;
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

    /// [`EvmChain::refill`] as best effort inside this request's time: the send lock
    /// may be held by a slow broadcast, and each fill is a round trip.
    async fn refill_within(&self, hash: B256, until: Instant) {
        let left = until
            .saturating_duration_since(Instant::now())
            .saturating_sub(CONFIRM_MARGIN);
        let _ = tokio::time::timeout(left, self.refill(hash)).await;
    }

    /// One receipt poll given a bounded share of the wait (`late_after` at most): one
    /// slow answer must not take the whole wait, the logs are asked instead. The
    /// receipt (none when the poll ran out of time) and the latest block it answered.
    async fn ask_receipt(
        &self,
        hash: B256,
        until: Instant,
        late_after: Duration,
    ) -> (Result<Option<Polled>, PaymentFailure>, Option<u64>) {
        let ask = until
            .saturating_duration_since(Instant::now())
            .min(late_after);
        match tokio::time::timeout(ask, self.poll_receipt(hash)).await {
            Ok(Ok((receipt, latest))) => (Ok(receipt), latest),
            Ok(Err(e)) => (Err(e), None),
            Err(_) => (Ok(None), None),
        }
    }

    /// Our transfer `hash` reverted: most likely the authorization was executed first
    /// by another transaction, or canceled; the chain says which. Unless it paid us
    /// after all, the payer cost us the gas: refused a while.
    async fn after_revert(
        &self,
        token: Address,
        payment: &Eip3009Payment,
        pay_to: Address,
        hash: B256,
    ) -> Result<Confirmed, PaymentFailure> {
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
        why.map(Confirmed::sealed)
    }

    /// One receipt poll: the receipt and, in the same round trip (one JSON-RPC batch),
    /// the latest sealed block, which tells a sealed receipt from a preconfirmed one and
    /// times the polls (see [`BlockClock`]). Also returns that block number.
    pub(super) async fn poll_receipt(
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
    pub(super) async fn decided_by_logs(
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
    pub(super) async fn refill(&self, hash: B256) {
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

    /// The pauses between receipt polls. With preconfirmations, a flashblock apart
    /// ([`polls_every`]); on an instant chain: at once, then doubling from 5 ms to
    /// 500 ms; on a chain with blocks, timed to them by the [`BlockClock`].
    pub(super) fn polls(&self, preconfirmed: bool) -> Polls {
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
pub(super) enum Polls {
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
pub(super) struct Sending<'a> {
    pub(super) id: &'a str,
    pub(super) hash: B256,
    pub(super) nonce: Option<u64>,
}

impl<'a> Sending<'a> {
    pub(super) fn of(id: &'a str, b: &Broadcast) -> Sending<'a> {
        Sending {
            id,
            hash: b.hash,
            nonce: Some(b.nonce),
        }
    }
}

/// The transaction among `logs` in which this authorization moved its amount from its
/// payer to `pay_to`: the token's `AuthorizationUsed(from, nonce)` immediately followed
/// by its `Transfer(from, pay_to, value)`, as one `transferWithAuthorization` emits
/// them. Adjacency is what ties the two: a transaction may use several authorizations
/// of one payer (one of them paying us, another, on the presented nonce, paying
/// someone else), and a transfer to us beside an unrelated use is not this payment.
pub(super) fn settlement_in(
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
    use alloy::primitives::U256;
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
