//! Umpire's verdict engine. No I/O: everything here is a pure function of its inputs,
//! so the Lambdas, the local server, the isolated checker and `umpire judge` all
//! judge and sign identically.

pub mod check_type;
pub mod document;
pub mod errors;
pub mod eval;
pub mod guard;
pub mod hash;
pub mod json;
pub mod jsonpath;
pub mod patterns;
pub mod platform;
pub mod problem;
pub mod product;
pub mod seal;
pub mod signer;
pub mod spec;
pub mod time;
pub mod urlenc;

pub use errors::{ApiError, ErrorCode};
pub use json::Value;
