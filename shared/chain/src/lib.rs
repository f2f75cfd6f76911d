//! Reading the chain for feedback: the strict feedback body and the message a payer
//! signs (`claim`), and the two on-chain proofs (`reader`). Kept apart from payments:
//! it reads Base for what a payer paid a *merchant*, not what Umpire is paid.

pub mod claim;
pub mod reader;

pub use claim::{FeedbackClaim, Outcome};
pub use reader::{ChainConfig, FeedbackChain, PaymentProof, ProofError, Signer};
