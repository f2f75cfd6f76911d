//! Settling EVM payments ourselves: the EIP-3009 transfer submitted from our own gas
//! wallet.

use alloy::primitives::{Address, B256};
use async_trait::async_trait;
use umpire_host::Deadline;

use crate::evm::{Eip3009Payment, EvmChain, Submitted};
use crate::rails::Rail;
use crate::reason::PaymentFailure;
use crate::settle::{ANSWER_MARGIN, PaymentContext, Settler, Verified};
use crate::types::{Account, SettlementResponse};

/// Settles EVM payments ourselves: chain reads and simulation to verify, then
/// `transferWithAuthorization` from the settler key.
#[derive(Debug, Clone)]
pub struct SelfSettler {
    pub chain: EvmChain,
}

pub(super) fn token_of(rail: &Rail) -> Result<Address, PaymentFailure> {
    rail.asset.evm().ok_or_else(|| {
        PaymentFailure::config(format!("asset {} is not a token address", rail.asset))
    })
}

pub(super) fn pay_to_of(rail: &Rail) -> Result<Address, PaymentFailure> {
    rail.pay_to.evm().ok_or_else(|| {
        PaymentFailure::config(format!("payTo {} is not an EVM address", rail.pay_to))
    })
}

/// What a self-settled payment answers: the transaction that moved it.
pub(super) fn settled(ctx: &PaymentContext, p: &Eip3009Payment, hash: B256) -> SettlementResponse {
    SettlementResponse {
        success: true,
        transaction: hash.to_string(),
        network: Some(ctx.rail.network.clone()),
        payer: Some(Account::Evm(p.payer())),
        error_reason: None,
    }
}

pub(super) fn eip3009_or_unsupported(
    ctx: &PaymentContext,
) -> Result<Eip3009Payment, PaymentFailure> {
    ctx.eip3009().unwrap_or_else(|| {
        Err(PaymentFailure::config(format!(
            "self-settlement handles EVM exact payments, not {} on {}",
            ctx.rail.scheme, ctx.rail.network
        )))
    })
}

#[async_trait]
impl Settler for SelfSettler {
    async fn verify(&self, ctx: &PaymentContext) -> Result<Verified, PaymentFailure> {
        let p = eip3009_or_unsupported(ctx)?;
        self.chain.check_onchain(token_of(&ctx.rail)?, &p).await?;
        Ok(Verified {
            payer: Account::Evm(p.payer()),
        })
    }

    async fn settle(
        &self,
        ctx: &PaymentContext,
        deadline: Deadline,
    ) -> Result<SettlementResponse, PaymentFailure> {
        let p = eip3009_or_unsupported(ctx)?;
        // The receipt is waited for until shortly before the deadline; then the
        // broadcast transfer counts as a pending settlement.
        let receipt_wait = deadline.remaining().saturating_sub(ANSWER_MARGIN);
        // Paid only by this call's own broadcast. An authorization whose nonce is found
        // spent here was spent by another transaction (another purchase that held it,
        // or the payer's own cancellation): this purchase is refused, never credited
        // with someone else's transfer. A purchase interrupted after its own broadcast
        // is recovered on the customer's retry (verification fails, the prepared
        // answer is found), not here.
        match self
            .chain
            .submit(token_of(&ctx.rail)?, &p, receipt_wait)
            .await?
        {
            Submitted::Confirmed(h) | Submitted::Pending(h) => Ok(settled(ctx, &p, h)),
        }
    }

    async fn find_settlement(
        &self,
        ctx: &PaymentContext,
    ) -> Result<Option<SettlementResponse>, PaymentFailure> {
        let p = eip3009_or_unsupported(ctx)?;
        let found = self
            .chain
            .find_settlement(token_of(&ctx.rail)?, &p, pay_to_of(&ctx.rail)?)
            .await?;
        Ok(found.map(|hash| settled(ctx, &p, hash)))
    }
}
