//! The facilitator (`UMPIRE_FACILITATOR_URL`, `UMPIRE_FACILITATOR_AUTH`) and the chains
//! read beside it to decide the settlements it leaves unknown.

use std::sync::Arc;
use std::time::Duration;

use super::{PayConfigError, block_time, chain_id_of, err};
use crate::evm::EvmChain;
use crate::settle::FacilitatorClient;
use umpire_x402::rails::Rails;

/// The facilitator, when `UMPIRE_FACILITATOR_URL` names one, with its chain readers.
pub(super) async fn facilitator_from(
    rails: &Rails,
    get: &impl Fn(&str) -> Option<String>,
) -> Result<Option<Arc<FacilitatorClient>>, PayConfigError> {
    let Some(url) = get("UMPIRE_FACILITATOR_URL") else {
        return Ok(None);
    };
    let f = FacilitatorClient::new(&url, get("UMPIRE_FACILITATOR_AUTH"))
        .map_err(|e| err("UMPIRE_FACILITATOR_URL", e.message))?;
    Ok(Some(Arc::new(with_readers(f, rails, get).await?)))
}

/// The facilitator with the chains it settles on read beside it (`UMPIRE_EVM_RPC_URL`,
/// `UMPIRE_SOLANA_RPC_URL`, when set): a settlement its answer leaves unknown is
/// decided there. Without them such a settlement is decided only by asking the
/// facilitator again, and a purchase can stay pending past its payment's window (the
/// `PendingOverdue` alarm says so).
async fn with_readers(
    f: FacilitatorClient,
    rails: &Rails,
    get: &impl Fn(&str) -> Option<String>,
) -> Result<FacilitatorClient, PayConfigError> {
    let mut f = f;
    if let (Some(rail), Some(rpc)) = (
        rails.rails.iter().find(|r| r.is_evm()),
        get("UMPIRE_EVM_RPC_URL"),
    ) {
        let chain_id = chain_id_of(rail)?;
        let block_time = block_time(get, chain_id)?;
        match EvmChain::connect(&rpc, chain_id, None, Duration::from_secs(30), block_time).await {
            Ok(chain) => f = f.with_evm_reader(chain),
            // Unreachable now: the facilitator still settles; only unknown outcomes wait
            // for the facilitator to be asked again (a cold start must not fail on it).
            Err(e) if e.kind == umpire_x402::FailureKind::Unavailable => tracing::error!(
                error = %e,
                "the EVM RPC could not be reached: settlements the facilitator leaves unknown are not read on the chain by this process"
            ),
            Err(e) => return Err(err("UMPIRE_EVM_RPC_URL", e.message)),
        }
    }
    if rails.rails.iter().any(|r| !r.is_evm())
        && let Some(url) = get("UMPIRE_SOLANA_RPC_URL")
    {
        let rpc = crate::solana::SolanaRpc::new(&url)
            .map_err(|e| err("UMPIRE_SOLANA_RPC_URL", e.message))?;
        f = f.with_svm_reader(rpc);
    }
    Ok(f)
}
