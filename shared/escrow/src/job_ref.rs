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

/// An escrow contract on a chain: `eip155:<chain id>:<contract>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ContractRef {
    pub chain_id: u64,
    pub contract: Address,
}

impl ContractRef {
    pub fn job(&self, job_id: U256) -> JobRef {
        JobRef {
            chain_id: self.chain_id,
            contract: self.contract,
            job_id,
        }
    }
}

impl FromStr for ContractRef {
    type Err = JobRefError;

    fn from_str(s: &str) -> Result<ContractRef, JobRefError> {
        let parts: Vec<&str> = s.split(':').collect();
        let [ns, chain, contract] = parts[..] else {
            return Err(JobRefError {
                given: s.to_owned(),
                problem: "a contract is three parts separated by colons: eip155:<chain id>:<0x contract>",
            });
        };
        contract_parts(s, ns, chain, contract)
    }
}

impl fmt::Display for ContractRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "eip155:{}:{}",
            self.chain_id,
            self.contract.to_checksum(None)
        )
    }
}

fn contract_parts(
    given: &str,
    ns: &str,
    chain: &str,
    contract: &str,
) -> Result<ContractRef, JobRefError> {
    let bad = |problem| JobRefError {
        given: given.to_owned(),
        problem,
    };
    if ns != "eip155" {
        return Err(bad("ERC-8183 jobs live on EVM chains (eip155)"));
    }
    if !is_decimal(chain) {
        return Err(bad("the chain id is not a decimal number"));
    }
    let chain_id = chain
        .parse()
        .map_err(|_| bad("the chain id is too large"))?;
    let hex = contract.strip_prefix("0x").unwrap_or("");
    if hex.len() != 40 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(bad("the contract is not 0x and 40 hex digits"));
    }
    // A mixed-case spelling claims to be the EIP-55 checksum: a typo must not pass.
    let mixed =
        hex.bytes().any(|b| b.is_ascii_uppercase()) && hex.bytes().any(|b| b.is_ascii_lowercase());
    let contract = if mixed {
        Address::parse_checksummed(contract, None)
            .map_err(|_| bad("the contract's mixed-case spelling is not its EIP-55 checksum"))?
    } else {
        contract
            .parse()
            .map_err(|_| bad("the contract is not an address"))?
    };
    Ok(ContractRef { chain_id, contract })
}

fn is_decimal(t: &str) -> bool {
    !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit())
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
        let parts: Vec<&str> = rest.split(':').collect();
        let [ns, chain, contract, id] = parts[..] else {
            return Err(bad("it needs four parts separated by colons"));
        };
        let on = contract_parts(s, ns, chain, contract)?;
        if !is_decimal(id) {
            return Err(bad("the job id is not a decimal number"));
        }
        let job_id =
            U256::from_str_radix(id, 10).map_err(|_| bad("the job id does not fit in 256 bits"))?;
        Ok(on.job(job_id))
    }
}

impl JobRef {
    pub fn contract_ref(&self) -> ContractRef {
        ContractRef {
            chain_id: self.chain_id,
            contract: self.contract,
        }
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
        let on: ContractRef = "eip155:31337:0x9fe46736679d2d9a65f0992f2272de9f3c7fa6e0"
            .parse()
            .expect("contract");
        assert_eq!(on, a.contract_ref());
        assert_eq!(on.job(U256::from(7)), a);
        assert!(
            "eip155:31337:0x9fe46736679d2d9a65f0992f2272de9f3c7fa6e0:7"
                .parse::<ContractRef>()
                .is_err()
        );
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
                "eip155:1:0x9fE46736679d2D9a65F0992F2272dE9f3c7fa6E0:1",
                "EIP-55",
            ),
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
