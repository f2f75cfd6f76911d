//! The variables a function reads: its environment, the secrets read in from Secrets
//! Manager at cold start, and the local-only switches a function refuses.

use umpire_aws::{Service, for_service};

use crate::role::{Needs, Part, ready_part};

/// Variables whose values are secrets. A function is given the secret's ARN in
/// `<NAME>_SECRET` and reads the value from Secrets Manager once, at cold start, so the
/// value never sits in its configuration (readable with lambda:GetFunctionConfiguration).
pub const SECRET_VARS: [&str; 5] = [
    "UMPIRE_EVM_RPC_URL",
    "UMPIRE_FACILITATOR_AUTH",
    "UMPIRE_FEEDBACK_RPC_URL",
    "UMPIRE_SOLANA_RPC_URL",
    "UMPIRE_VALIDATION_RPC_URL",
];

/// The function's variables as its configuration reads them: its environment, with the
/// secrets it was given read in.
#[derive(Default)]
pub struct Vars {
    secrets: std::collections::BTreeMap<String, String>,
}

impl Vars {
    pub fn get(&self, name: &str) -> Option<String> {
        self.secrets
            .get(name)
            .cloned()
            .or_else(|| std::env::var(name).ok())
    }
}

/// Reads every secret this function was given, once; only functions that take payments
/// or read the chain have any, and link the Secrets Manager client.
pub(crate) fn secrets_for<'a, N: Needs>(aws: Option<&'a umpire_aws::SdkConfig>) -> Part<'a, Vars> {
    if const { !(N::ROLE.settles() || N::ROLE.reads_chain() || N::ROLE.validates()) } {
        return ready_part(Vars::default());
    }
    Box::pin(async move {
        let mut vars = Vars::default();
        for name in SECRET_VARS {
            let Some(arn) = std::env::var(format!("{name}_SECRET"))
                .ok()
                .filter(|a| !a.trim().is_empty())
            else {
                continue;
            };
            let aws = aws.ok_or_else(|| {
                format!("{name}_SECRET is set, but this function has no AWS client")
            })?;
            let answer =
                aws_sdk_secretsmanager::Client::new(&for_service(aws, Service::SecretsManager))
                    .get_secret_value()
                    .secret_id(&arn)
                    .send()
                    .await
                    .map_err(|e| {
                        format!(
                            "{name}_SECRET: could not read {arn}: {}",
                            aws_sdk_secretsmanager::error::DisplayErrorContext(e)
                        )
                    })?;
            let value = answer
                .secret_string()
                .ok_or_else(|| format!("{name}_SECRET: {arn} holds no text"))?;
            vars.secrets.insert(name.to_owned(), value.to_owned());
        }
        Ok(vars)
    })
}

/// Switches that only a local process may take: `UMPIRE_RATE_LIMITS` turns per-IP
/// limits off for `umpire serve` (benchmarks, tests not about limits); a function
/// tunes its limits with `UMPIRE_RATE_LIMIT_<BUCKET>` instead. Set on a function, it
/// stops the cold start with its name. (The fetcher's `UMPIRE_TEST_FETCH_*` are not in
/// a release build at all: `umpire_fetch::policy::test_switch`.)
pub fn refuse_local_switches(var: &dyn Fn(&str) -> Option<String>) -> Result<(), String> {
    const LOCAL_ONLY: &str = "UMPIRE_RATE_LIMITS";
    match var(LOCAL_ONLY) {
        Some(v) => Err(format!(
            "{LOCAL_ONLY}={v} is a switch for a local `umpire serve`, not a function: remove it \
             (tune a function's limits with UMPIRE_RATE_LIMIT_<BUCKET>)"
        )),
        None => Ok(()),
    }
}
