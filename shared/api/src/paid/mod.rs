//! The paid path: a purchase's body judged before any price is asked, the 402 and the
//! payment verified, the ledger and idempotency keys that make one payment one purchase,
//! the verdict judged and signed, the settlement and the answer.

pub mod buy;
pub mod checkout;
pub mod discovery;
pub mod idempotency;
pub mod ledger;
pub mod payment;
pub mod purchase;
pub mod secret;
pub mod verdict;
