//! The ERC-8004 Validation Registry this deployment answers on: its connection, held in
//! the state beside the store and the queue (what is asked of it lives with the
//! verdicts, in `products::verdict::erc8004`).

use alloy::signers::local::PrivateKeySigner;
use umpire_escrow::validation::Registry;
use umpire_escrow::{ContractRef, EscrowError};

use crate::plumbing::config::Config;

/// The registry this deployment answers on, with the validator's key where answers are
/// posted. Connected on first use and kept: a node that is down when the process
/// starts fails only what needs it (a purchase naming a request: 502, nothing charged;
/// a posting job: retried), and is tried again next time.
pub struct Validation {
    rpc_url: String,
    on: ContractRef,
    lookback_blocks: u64,
    key: Option<PrivateKeySigner>,
    registry: tokio::sync::OnceCell<Registry>,
}

impl Validation {
    /// None when this deployment answers no validation request.
    pub fn from_config(
        config: &Config,
        key: Option<PrivateKeySigner>,
    ) -> Result<Option<Validation>, String> {
        let Some(v) = &config.validator else {
            return Ok(None);
        };
        let rpc_url = v.rpc_url.clone().ok_or(
            "UMPIRE_VALIDATION_RPC_URL is required where validation requests are checked or answered",
        )?;
        if let Some(k) = &key
            && k.address() != v.validator
        {
            return Err(format!(
                "the validator key is {}'s, but this deployment publishes {} as its validator",
                k.address(),
                v.validator
            ));
        }
        Ok(Some(Validation {
            rpc_url,
            on: v.registry,
            lookback_blocks: v.lookback_blocks,
            key,
            registry: tokio::sync::OnceCell::new(),
        }))
    }

    /// Whether this process holds the validator's key (it posts answers).
    pub fn posts(&self) -> bool {
        self.key.is_some()
    }

    /// The registry, connected (once: its chain and code checked).
    pub async fn registry(&self) -> Result<&Registry, EscrowError> {
        self.registry
            .get_or_try_init(|| async {
                Registry::connect(&self.rpc_url, &self.on, self.key.clone())
                    .await
                    .map(|r| r.with_lookback(self.lookback_blocks))
            })
            .await
    }
}
