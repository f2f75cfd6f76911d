//! ERC-8004 (Trustless Agents) validation, as Umpire the validator sees it:
//!
//! - [`ValidationRef`]: which request, on which chain and registry, in the one spelling
//!   a purchase's `job_ref` carries (`erc8004:eip155:<chain id>:<registry>:<requestHash>`).
//! - [`Registry`]: the request's status (`getValidationStatus`), where its file is
//!   (`requestURI`, only in the `ValidationRequest` event) and every answer given
//!   (`ValidationResponse` events); with the validator's key, `validationResponse`.
//! - The tags Umpire answers with: `umpire:<tier>` for a final answer, and
//!   [`PROVISIONAL_TAG`] for a sworn verdict's pass 1. The registry keeps only the
//!   latest answer and has no notion of a final one; the tags are ours.

use std::fmt;
use std::str::FromStr;

use alloy::primitives::{Address, B256, U256};
use alloy::rpc::types::Filter;
use alloy::signers::local::PrivateKeySigner;
use alloy::sol;
use alloy::sol_types::{SolCall, SolEvent};

use crate::contract::{Contract, decode};
use crate::{ContractRef, EscrowError};

/// The `job_ref` prefix that says the rest names an ERC-8004 validation request.
pub const VALIDATION_REF_PREFIX: &str = "erc8004:";
/// The tag of the answer posted after a sworn verdict's pass 1 (the final one follows).
pub const PROVISIONAL_TAG: &str = "umpire:sworn:provisional";
/// What every tag of ours starts with.
pub const TAG_PREFIX: &str = "umpire:";
/// The answer for a verdict that passed, and for one that failed.
pub const PASSED: u8 = 100;
pub const FAILED: u8 = 0;

/// The tag of a final answer for a verdict of `tier` (`umpire:basic`, `umpire:sworn`).
pub fn final_tag(tier: &str) -> String {
    format!("{TAG_PREFIX}{tier}")
}

/// Whether `tag` is one of our final answers (`umpire:<tier>` for a tier we sell).
pub fn is_final_tag(tag: &str) -> bool {
    tag.strip_prefix(TAG_PREFIX)
        .and_then(umpire_core::product::Tier::parse)
        .is_some()
}

sol! {
    /// ERC-8004's Validation Registry, as its text and reference implementation define it.
    interface IValidationRegistry {
        function validationRequest(address validatorAddress, uint256 agentId, string requestURI, bytes32 requestHash) external;
        function validationResponse(bytes32 requestHash, uint8 response, string responseURI, bytes32 responseHash, string tag) external;
        function getValidationStatus(bytes32 requestHash) external view returns (address validatorAddress, uint256 agentId, uint8 response, bytes32 responseHash, string tag, uint256 lastUpdate);

        event ValidationRequest(address indexed validatorAddress, uint256 indexed agentId, string requestURI, bytes32 indexed requestHash);
        event ValidationResponse(address indexed validatorAddress, uint256 indexed agentId, bytes32 indexed requestHash, uint8 response, string responseURI, bytes32 responseHash, string tag);
    }
}

/// One validation request: its registry (chain and contract) and its hash there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ValidationRef {
    pub registry: ContractRef,
    pub request_hash: B256,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{given:?} is not a validation request: {problem} (write erc8004:eip155:<chain id>:<0x registry>:<0x requestHash>)"
)]
pub struct ValidationRefError {
    pub given: String,
    pub problem: String,
}

impl fmt::Display for ValidationRef {
    /// `erc8004:eip155:<chain>:<registry, checksummed>:<requestHash, lowercase>`: one
    /// request has one spelling.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{VALIDATION_REF_PREFIX}{}:{}",
            self.registry,
            crate::bytes32_hex(&self.request_hash)
        )
    }
}

impl FromStr for ValidationRef {
    type Err = ValidationRefError;

    /// With or without the `erc8004:` prefix.
    fn from_str(s: &str) -> Result<ValidationRef, ValidationRefError> {
        let bad = |problem: &str| ValidationRefError {
            given: s.to_owned(),
            problem: problem.to_owned(),
        };
        let rest = s.strip_prefix(VALIDATION_REF_PREFIX).unwrap_or(s);
        let Some((registry, hash)) = rest.rsplit_once(':') else {
            return Err(bad("it has no requestHash"));
        };
        let registry: ContractRef = registry
            .parse()
            .map_err(|e: crate::JobRefError| bad(&format!("the registry: {}", e.problem)))?;
        let hex = hash.strip_prefix("0x").unwrap_or("");
        let request_hash = crate::bytes32_of(hex)
            .ok_or_else(|| bad("the requestHash is not 0x and 64 hex digits"))?;
        Ok(ValidationRef {
            registry,
            request_hash,
        })
    }
}

/// A request as `getValidationStatus` shows it: who validates it, for which agent, and
/// the latest answer (response 0, no tag and `lastUpdate` the request's time before any).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestStatus {
    pub validator: Address,
    pub agent_id: U256,
    pub response: u8,
    pub response_hash: B256,
    pub tag: String,
    pub last_update: U256,
}

impl RequestStatus {
    /// Whether its latest answer is one of our final ones.
    pub fn answered_finally(&self) -> bool {
        is_final_tag(&self.tag)
    }
}

/// One answer given (a `ValidationResponse` event).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    pub validator: Address,
    pub response: u8,
    pub response_uri: String,
    pub response_hash: B256,
    pub tag: String,
    pub transaction: Option<B256>,
    pub block: Option<u64>,
}

/// One ERC-8004 Validation Registry on one chain, read (and, with the validator's key,
/// answered).
pub struct Registry {
    contract: Contract,
    lookback_blocks: u64,
}

impl Registry {
    /// Connects to `rpc_url` and checks that it serves the registry's chain.
    pub async fn connect(
        rpc_url: &str,
        on: &ContractRef,
        validator: Option<PrivateKeySigner>,
    ) -> Result<Registry, EscrowError> {
        Ok(Registry {
            contract: Contract::connect(rpc_url, on, validator).await?,
            lookback_blocks: crate::DEFAULT_LOOKBACK_BLOCKS,
        })
    }

    /// Looks for events this many blocks back (default [`crate::DEFAULT_LOOKBACK_BLOCKS`]).
    pub fn with_lookback(mut self, blocks: u64) -> Registry {
        self.lookback_blocks = blocks.max(1);
        self
    }

    /// The validator's address, when connected with its key.
    pub fn validator(&self) -> Option<Address> {
        self.contract.sender()
    }

    /// The request's status, or None when the registry has no such request (it
    /// reverts for one).
    pub async fn status(&self, request_hash: B256) -> Result<Option<RequestStatus>, EscrowError> {
        let call = IValidationRegistry::getValidationStatusCall {
            requestHash: request_hash,
        };
        match self
            .contract
            .call("getValidationStatus", &call, None)
            .await?
        {
            Ok(s) if s.validatorAddress == Address::ZERO => Ok(None),
            Ok(s) => Ok(Some(RequestStatus {
                validator: s.validatorAddress,
                agent_id: s.agentId,
                response: s.response,
                response_hash: s.responseHash,
                tag: s.tag,
                last_update: s.lastUpdate,
            })),
            Err(_) => Ok(None),
        }
    }

    /// The request's `requestURI` (only its `ValidationRequest` event holds it), if the
    /// event is within the lookback.
    pub async fn request_uri(&self, request_hash: B256) -> Result<Option<String>, EscrowError> {
        use IValidationRegistry::ValidationRequest;
        let filter = Filter::new()
            .event_signature(ValidationRequest::SIGNATURE_HASH)
            .topic3(request_hash);
        let logs = self
            .contract
            .logs_back(filter, self.lookback_blocks, true)
            .await?;
        match logs.first() {
            Some(log) => Ok(Some(decode::<ValidationRequest>(log)?.requestURI)),
            None => Ok(None),
        }
    }

    /// Every answer given to the request within the lookback, oldest first.
    pub async fn responses(&self, request_hash: B256) -> Result<Vec<Response>, EscrowError> {
        use IValidationRegistry::ValidationResponse;
        let filter = Filter::new()
            .event_signature(ValidationResponse::SIGNATURE_HASH)
            .topic3(request_hash);
        self.contract
            .logs_back(filter, self.lookback_blocks, false)
            .await?
            .iter()
            .map(|log| {
                let e = decode::<ValidationResponse>(log)?;
                Ok(Response {
                    validator: e.validatorAddress,
                    response: e.response,
                    response_uri: e.responseURI,
                    response_hash: e.responseHash,
                    tag: e.tag,
                    transaction: log.transaction_hash,
                    block: log.block_number,
                })
            })
            .collect()
    }

    /// Sends `validationResponse` from the validator's key (simulated first, only when
    /// nothing of ours is pending) and waits for it to be mined.
    pub async fn respond(
        &self,
        request_hash: B256,
        response: u8,
        response_uri: &str,
        response_hash: B256,
        tag: &str,
    ) -> Result<B256, EscrowError> {
        let input = IValidationRegistry::validationResponseCall {
            requestHash: request_hash,
            response,
            responseURI: response_uri.to_owned(),
            responseHash: response_hash,
            tag: tag.to_owned(),
        }
        .abi_encode();
        self.contract.send("validationResponse", input).await
    }

    /// The validator's balance in wei (what its answers pay gas with).
    pub async fn validator_balance(&self) -> Result<Option<U256>, EscrowError> {
        match self.validator() {
            Some(v) => self.contract.balance(v).await.map(Some),
            None => Ok(None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reference_has_one_spelling() {
        let hash = format!("0x{}", "ab".repeat(32));
        let registry = "0x5fbdb2315678afecb367f032d93f642f64180aa3";
        let r: ValidationRef = format!("erc8004:eip155:31337:{registry}:{hash}")
            .parse()
            .expect("parses");
        assert_eq!(
            r.to_string(),
            format!("erc8004:eip155:31337:0x5FbDB2315678afecb367f032d93F642f64180aa3:{hash}")
        );
        assert_eq!(r.to_string().parse::<ValidationRef>(), Ok(r));
        for bad in [
            format!("erc8004:eip155:31337:{registry}"),
            format!("erc8004:eip155:31337:{registry}:0x1234"),
            format!("erc8004:solana:1:{registry}:{hash}"),
            format!("erc8004:eip155:x:{registry}:{hash}"),
            format!("erc8004:eip155:31337:0x5FbDB2315678afecb367f032d93F642f64180aA3:{hash}"),
        ] {
            assert!(bad.parse::<ValidationRef>().is_err(), "{bad}");
        }
    }

    #[test]
    fn final_tags_are_ours_and_name_a_tier() {
        assert!(is_final_tag(&final_tag("basic")));
        assert!(is_final_tag("umpire:sworn"));
        assert!(!is_final_tag(PROVISIONAL_TAG));
        assert!(!is_final_tag("umpire:gold"));
        assert!(!is_final_tag("basic"));
        assert!(!is_final_tag(""));
    }
}
