//! The one way Umpire touches the public internet: the URL policy (applied when a spec
//! is validated, so a refused URL is refused before anyone pays, and again by the
//! fetcher for every URL requested and every address dialed) and the fetcher itself.

pub mod fetcher;
pub mod policy;
pub mod resolve;

pub use fetcher::{FetchConfig, Fetched, Fetcher, Observation};
pub use policy::{Policy, PolicyError, check_url, is_public_ip};
pub use resolve::{
    LOOKUP_TIMEOUT, MAX_LOOKUPS_AT_ONCE, NameResolver, StaticResolver, SystemResolver,
};
