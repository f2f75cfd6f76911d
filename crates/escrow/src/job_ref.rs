//! Naming one ERC-8183 job: `eip155:<chain id>:<contract>:<job id>` on the command line,
//! and `erc8183:` in front of the same in a purchase's `job_ref`, which the signed
//! verdict echoes.

use std::fmt;
use std::str::FromStr;

use alloy::primitives::{Address, U256};

/// The `job_ref` prefix that says the rest names an ERC-8183 job.
pub const JOB_REF_PREFIX: &str = "erc8183:";

/// One job: its chain (EIP-155 id), its escrow contract, its id there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct JobRef {
    pub chain_id: u64,
    pub contract: Address,
    pub job_id: U256,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{given:?} is not a job: {problem} (write eip155:<chain id>:<0x contract>:<job id>, as in eip155:8453:0x1234…abcd:7)"
)]
pub struct JobRefError {
    pub given: String,
    pub problem: &'static str,
}

impl JobRef {
    /// The `job_ref` a purchase carries for this job: `erc8183:eip155:…`, the contract
    /// in its checksum casing and the id in decimal, so one job has one spelling.
    pub fn job_ref(&self) -> String {
        format!("{JOB_REF_PREFIX}{self}")
    }

    /// The Idempotency-Key every evaluation of this job buys under: a second run (or a
    /// run resumed after a lost answer) gets the first purchase back, never a second one.
    pub fn idempotency_key(&self) -> String {
        let digest = umpire_core::hash::sha256_hex(self.job_ref().as_bytes());
        format!("erc8183-{}", &digest[..40])
    }
}

impl FromStr for JobRef {
    type Err = JobRefError;

    /// `eip155:<chain>:<contract>:<id>`, with or without the `erc8183:` prefix; the
    /// contract in any casing.
    fn from_str(s: &str) -> Result<JobRef, JobRefError> {
        let bad = |problem| JobRefError {
            given: s.to_owned(),
            problem,
        };
        let rest = s.strip_prefix(JOB_REF_PREFIX).unwrap_or(s);
        let mut parts = rest.split(':');
        let (Some(ns), Some(chain), Some(contract), Some(id), None) = (
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
        ) else {
            return Err(bad("it needs four parts separated by colons"));
        };
        if ns != "eip155" {
            return Err(bad("ERC-8183 jobs live on EVM chains (eip155)"));
        }
        let digits = |t: &str| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit());
        if !digits(chain) {
            return Err(bad("the chain id is not a decimal number"));
        }
        let chain_id = chain
            .parse()
            .map_err(|_| bad("the chain id is too large"))?;
        let hex = contract.strip_prefix("0x").unwrap_or("");
        if hex.len() != 40 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(bad("the contract is not 0x and 40 hex digits"));
        }
        let contract = contract
            .parse()
            .map_err(|_| bad("the contract is not an address"))?;
        if !digits(id) {
            return Err(bad("the job id is not a decimal number"));
        }
        let job_id =
            U256::from_str_radix(id, 10).map_err(|_| bad("the job id does not fit in 256 bits"))?;
        Ok(JobRef {
            chain_id,
            contract,
            job_id,
        })
    }
}

impl fmt::Display for JobRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "eip155:{}:{}:{}",
            self.chain_id,
            self.contract.to_checksum(None),
            self.job_id
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_job_has_one_spelling_and_one_key() {
        let a: JobRef = "eip155:31337:0x9fe46736679d2d9a65f0992f2272de9f3c7fa6e0:7"
            .parse()
            .expect("job");
        let b: JobRef = "erc8183:eip155:31337:0x9FE46736679D2D9A65F0992F2272DE9F3C7FA6E0:007"
            .parse()
            .expect("job");
        assert_eq!(a, b);
        assert_eq!(
            a.job_ref(),
            "erc8183:eip155:31337:0x9fE46736679d2D9a65F0992F2272dE9f3c7fa6e0:7"
        );
        assert_eq!(a.job_ref().parse::<JobRef>(), Ok(a));
        assert_eq!(a.idempotency_key(), b.idempotency_key());
        assert_eq!(a.idempotency_key().len(), "erc8183-".len() + 40);
        let other = JobRef {
            job_id: U256::from(8),
            ..a
        };
        assert_ne!(a.idempotency_key(), other.idempotency_key());
    }

    #[test]
    fn malformed_references_say_what_is_wrong() {
        for (given, problem) in [
            (
                "eip155:1:0x9fe46736679d2d9a65f0992f2272de9f3c7fa6e0",
                "four parts",
            ),
            (
                "solana:1:0x9fe46736679d2d9a65f0992f2272de9f3c7fa6e0:1",
                "EVM",
            ),
            (
                "eip155:x:0x9fe46736679d2d9a65f0992f2272de9f3c7fa6e0:1",
                "chain id",
            ),
            ("eip155:1:0x9fe4:1", "40 hex"),
            (
                "eip155:1:0x9fe46736679d2d9a65f0992f2272de9f3c7fa6e0:-1",
                "job id",
            ),
            (
                "eip155:1:0x9fe46736679d2d9a65f0992f2272de9f3c7fa6e0:1:2",
                "four parts",
            ),
            ("", "four parts"),
        ] {
            let e = given.parse::<JobRef>().expect_err(given);
            assert!(e.to_string().contains(problem), "{given}: {e}");
        }
    }
}
