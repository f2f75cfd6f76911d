//! A paid request as the checkout's steps read it: its payment, its Idempotency-Key and
//! what identifies it.

use umpire_host::Deadline;
use umpire_pay::settle::payer_named_in;
use umpire_x402::types::Account;

use crate::checkout::idempotency::{self, RequestHash, ScopedKey};
use crate::plumbing::respond;
use crate::plumbing::state::{Request, Response};

use super::header::{AnswerHeader, PaymentHeader, read_payment_header, request_key};
use super::sale::{Refusal, Sale};

/// One paid request, read once.
pub(super) struct Asking<'r> {
    pub(super) req: &'r Request,
    /// The payment, if it came with one.
    pub(super) header: Option<PaymentHeader>,
    /// The header a settlement (or refusal) is answered in.
    pub(super) answer_in: AnswerHeader,
    /// What identifies the request: a key or a payment replays only for it.
    pub(super) request_hash: RequestHash,
    /// The wallet the payment names (a claim until the payment verifies).
    pub(super) wallet: Option<Account>,
    /// The Idempotency-Key it came with, scoped to that wallet.
    pub(super) scoped: Option<ScopedKey>,
    /// The same key as a rerun that has not paid yet presents it (no wallet named).
    pub(super) unpaid: Option<ScopedKey>,
    pub(super) deadline: Deadline,
    /// The URL of what is bought, as a receipt names it.
    pub(super) resource_url: String,
}

impl<'r> Asking<'r> {
    /// Reads the payment header and the key; `Err` is the refusal of a header or a key
    /// that does not parse (nothing charged).
    pub(super) fn read(
        sale: &Sale<'_>,
        req: &'r Request,
        deadline: Deadline,
    ) -> Result<Asking<'r>, Response> {
        let answer_in = AnswerHeader::of(req);
        let header = read_payment_header(req)
            .map_err(|f| sale.refused(answer_in, None, None, &f, Refusal::Refused))?;
        let key = request_key(req, header.as_ref()).map_err(|e| respond::error(&e))?;
        let wallet = header.as_ref().and_then(|h| payer_named_in(&h.payment));
        let target = req
            .uri()
            .path_and_query()
            .map_or_else(|| req.uri().path(), |p| p.as_str());
        Ok(Asking {
            req,
            answer_in,
            request_hash: idempotency::request_hash(req.method(), target, req.body()),
            scoped: key.as_ref().map(|k| k.scoped(wallet.as_ref())),
            unpaid: key.map(|k| k.scoped(None)),
            wallet,
            header,
            deadline,
            resource_url: sale.resource_url(),
        })
    }
}
