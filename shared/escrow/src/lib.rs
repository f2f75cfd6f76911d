//! ERC-8183 (Agentic Commerce) job escrow, as an Umpire evaluator sees it:
//!
//! - [`JobRef`]: which job, on which chain and contract, in the one spelling a purchase's
//!   `job_ref` carries (`erc8183:eip155:<chain id>:<contract>:<job id>`), so the signed
//!   verdict names the job it judged.
//! - [`Escrow`]: the job, the provider's `submit` commitment and the evaluator's outcome,
//!   read from the chain (`getJob` and the `JobSubmitted`, `JobCompleted` and
//!   `JobRejected` events the ERC defines). The ERC does not fix `getJob`'s answer, so
//!   deployments differ: the layouts known to be deployed ([`Layout`]) are told apart
//!   once per contract, by which one its answer is the exact encoding of.
//! - [`Escrow::decide`]: `complete` or `reject`, sent with the evaluator's key, waited
//!   for and checked.

mod abi;
mod bytes32;
mod contract;
mod error;
mod escrow;
mod job;
mod job_ref;
pub mod validation;

pub use abi::{IAgenticCommerce, Layout, LegacyEscrow, ReferenceEscrow};
pub use bytes32::{bytes32_hex, bytes32_of};
pub use contract::DEFAULT_LOOKBACK_BLOCKS;
pub use error::EscrowError;
pub use escrow::Escrow;
pub use job::{Decision, Job, Outcome, Status, Submission};
pub use job_ref::{ContractRef, JobRef, JobRefError};
pub use validation::{Registry, RequestStatus, Response, ValidationRef, ValidationRefError};
