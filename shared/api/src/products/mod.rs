//! The floor of what is sold, each a [`crate::checkout::Product`] plugged into checkout:
//! verdicts (with their sworn pass 2 and ERC-8004 answers) and the reputation report
//! (with the feedback it is made of), and the price list of both. Products use checkout
//! and plumbing, never the routes.

pub mod quote;
pub mod reputation;
pub mod verdict;
