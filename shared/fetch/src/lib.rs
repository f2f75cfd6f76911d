//! The one way Umpire touches the public internet. This crate starts with the URL
//! policy: the part that needs no network, applied when a spec is validated (so a
//! refused URL is refused before anyone pays) and, by the fetcher, again for every
//! address actually dialed.

pub mod policy;

pub use policy::{PolicyError, check_url, is_public_ip};
