//! Verifying and settling a matched payment, two ways behind one trait: a facilitator
//! over HTTP (`/verify`, `/settle`, `/supported`; also the only way Solana payments are
//! verified and settled), or self-settlement of EVM payments on an RPC with our own
//! settler key. Offline EIP-3009 checks run first in both modes, so a bad signature
//! never costs a network round trip.

mod facilitator;
mod own;

pub use facilitator::{FacilitatorClient, SupportedKind};
pub use own::SelfSettler;

pub use crate::settler::{
    PaymentContext, Settler, Verified, VerifyTimes, payer_named_in, polls_every,
};

use std::sync::Arc;

use umpire_host::Deadline;

use umpire_x402::evm::Eip3009Payment;
use umpire_x402::rails::Rail;
use umpire_x402::reason::{FailureReason, PaymentFailure};
use umpire_x402::types::{Account, SettlementResponse, X402Version};

/// How payments are verified and settled on this deployment.
#[derive(Clone, Default)]
pub struct Payments {
    /// Settles the EVM rail itself (a [`SelfSettler`], or a test's scripted one);
    /// when None, EVM payments go to the facilitator.
    pub evm: Option<Arc<dyn Settler>>,
    /// Verifies and settles native SOL ([`crate::solana::NativeSolSettler`]): no
    /// facilitator speaks our extension.
    pub native_sol: Option<Arc<dyn Settler>>,
    pub facilitator: Option<Arc<FacilitatorClient>>,
}

impl std::fmt::Debug for Payments {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Payments")
            .field("self_settlement", &self.evm.is_some())
            .field("native_sol", &self.native_sol.is_some())
            .field("facilitator", &self.facilitator.as_ref().map(|c| &c.base))
            .finish()
    }
}

impl Payments {
    fn settler_for(&self, rail: &Rail) -> Result<&dyn Settler, PaymentFailure> {
        let none = || {
            PaymentFailure::config(format!(
                "no settlement is configured for {} on {}",
                rail.asset, rail.network
            ))
        };
        if rail.is_native_sol() {
            return self.native_sol.as_deref().ok_or_else(none);
        }
        match (&self.evm, &self.facilitator) {
            (Some(s), _) if rail.is_evm() => Ok(s.as_ref()),
            (_, Some(f)) => Ok(f.as_ref()),
            _ => Err(none()),
        }
    }

    /// Whether anything can take money for `rail`.
    pub fn can_settle(&self, rail: &Rail) -> bool {
        self.settler_for(rail).is_ok()
    }

    /// Offline checks (including that the authorization outlasts `times.settles_by`,
    /// the last moment this request may settle it), then the settler's own
    /// verification, which must answer by `times.answer_by`.
    pub async fn verify(
        &self,
        ctx: &PaymentContext,
        times: &VerifyTimes,
    ) -> Result<Verified, PaymentFailure> {
        if let Some(p) = ctx.eip3009() {
            let p = p?;
            let offline = p
                .check_offline(&ctx.rail, &ctx.requirements, times.now)
                .and_then(|()| p.check_lasts_until(times.settles_by.unix()));
            if let Err(f) = offline {
                return self.paid_anyway(ctx, &p, times, f).await;
            }
        }
        // A Solana transfer nobody authorized never costs a round trip.
        if ctx.svm_transaction().is_some() && !ctx.signed_by_payer() {
            return Err(PaymentFailure::invalid(
                FailureReason::SvmSignature,
                "the transaction is not signed by the owner of the funds it moves",
            ));
        }
        let settler = self.settler_for(&ctx.rail)?;
        tokio::time::timeout_at(times.answer_by.instant().into(), settler.verify(ctx))
            .await
            .unwrap_or_else(|_| {
                Err(PaymentFailure::unavailable(
                    "the payment could not be verified within this request's time budget",
                ))
            })
    }

    /// An authorization too late to settle now may have been settled in time by whoever
    /// held it (a bystander, our own broadcast whose answer was lost): if the chain
    /// shows its transfer paid us, the payment is made and owed its purchase; otherwise
    /// `refused` stands. Only for the payer's own signature, and at the cost of one
    /// lookup on a refusal.
    async fn paid_anyway(
        &self,
        ctx: &PaymentContext,
        p: &Eip3009Payment,
        times: &VerifyTimes,
        refused: PaymentFailure,
    ) -> Result<Verified, PaymentFailure> {
        if refused.reason != FailureReason::EvmValidBefore || !p.signed_by_payer(&ctx.rail) {
            return Err(refused);
        }
        let settler = self.settler_for(&ctx.rail)?;
        let found = tokio::time::timeout_at(
            times.answer_by.instant().into(),
            settler.find_settlement(ctx),
        )
        .await;
        match found {
            Ok(Ok(Some(settled))) => Ok(Verified {
                payer: Account::Evm(p.payer()),
                settled: Some(settled),
            }),
            _ => Err(refused),
        }
    }

    /// Settles by `deadline`. Past it, with the transfer possibly under way, the
    /// outcome is unknown (`Unavailable`): the customer's retry finds out.
    pub async fn settle(
        &self,
        ctx: &PaymentContext,
        deadline: Deadline,
    ) -> Result<SettlementResponse, PaymentFailure> {
        let settler = self.settler_for(&ctx.rail)?;
        tokio::time::timeout_at(deadline.instant().into(), settler.settle(ctx, deadline))
            .await
            .unwrap_or_else(|_| {
                Err(PaymentFailure::unavailable(
                    "the settlement did not answer within this request's time budget",
                ))
            })
    }

    pub async fn find_settlement(
        &self,
        ctx: &PaymentContext,
    ) -> Result<Option<SettlementResponse>, PaymentFailure> {
        self.settler_for(&ctx.rail)?.find_settlement(ctx).await
    }

    /// Whether `ctx`'s settlement can be looked up on the chain here (self-settlement,
    /// native SOL; a facilitator with a reader for its chain, and on Solana the
    /// transaction it named): without it, only asking the facilitator again tells.
    pub fn reads_chain(&self, ctx: &PaymentContext) -> bool {
        match self.settler_for(&ctx.rail) {
            Ok(s) => match &self.facilitator {
                Some(f) if std::ptr::addr_eq(s, f.as_ref() as &dyn Settler) => {
                    f.reads_chain_of(ctx) && (ctx.rail.is_evm() || ctx.transaction.is_some())
                }
                _ => true,
            },
            Err(_) => false,
        }
    }

    /// What the facilitator's `/supported` contradicts in our configuration: rails it
    /// does not settle, or a Solana fee payer other than the one we advertise. Empty
    /// when all is well (or when no rail goes to a facilitator).
    pub async fn facilitator_mismatches(
        &self,
        rails: &[Rail],
    ) -> Result<Vec<String>, PaymentFailure> {
        let Some(f) = &self.facilitator else {
            return Ok(Vec::new());
        };
        let ours: Vec<&Rail> = rails
            .iter()
            // Native SOL is ours, and a self-settled EVM rail too.
            .filter(|r| {
                self.settler_for(r)
                    .is_ok_and(|s| std::ptr::addr_eq(s, f.as_ref() as &dyn Settler))
            })
            .collect();
        if ours.is_empty() {
            return Ok(Vec::new());
        }
        let kinds = f.supported().await?;
        let mut problems = Vec::new();
        for rail in ours {
            let kind = kinds.iter().find(|k| {
                k.x402_version == X402Version::V2.number()
                    && k.scheme == rail.scheme.as_str()
                    && k.network == rail.network.as_str()
            });
            match kind {
                None => problems.push(format!(
                    "the facilitator does not list {} on {} (x402 v2) in /supported",
                    rail.scheme, rail.network
                )),
                Some(k) => {
                    let pinned = rail.extra.get("feePayer");
                    let theirs = k.extra.as_ref().and_then(|e| e.get("feePayer"));
                    if pinned.is_some() && pinned != theirs {
                        problems.push(format!(
                            "the facilitator's fee payer on {} is {}, we advertise {}",
                            rail.network,
                            theirs.map_or("none".into(), ToString::to_string),
                            pinned.map_or("none".into(), ToString::to_string)
                        ));
                    }
                }
            }
        }
        Ok(problems)
    }
}
