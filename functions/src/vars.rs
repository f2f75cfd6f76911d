//! The variables a function reads: its environment, the secrets read in from Secrets
//! Manager at cold start, and the local-only switches a function refuses.

use umpire_aws::{Service, for_service};

#[cfg(not(feature = "test-switches"))]
use crate::checker;
use crate::role::{Needs, Part, Role, ready_part};

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
    /// The variable's value; an empty one is absent, as everywhere else (the template
    /// passes an unset parameter as `""`).
    pub fn get(&self, name: &str) -> Option<String> {
        self.secrets
            .get(name)
            .cloned()
            .or_else(|| std::env::var(name).ok())
            .filter(|v| !v.trim().is_empty())
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

/// What a function refuses to start with, naming the variable. In every build:
/// `UMPIRE_RATE_LIMITS` (a switch for a local `umpire serve`; a function tunes its
/// limits with `UMPIRE_RATE_LIMIT_<BUCKET>`). In every build but a test one (feature
/// `test-switches`, which `make test`'s functions and `make watch` have and no deploy
/// does), also what only a local run may hold: a signing seed or a validator key in the
/// clear (readable by anyone with lambda:GetFunctionConfiguration; the deploy carries
/// them sealed under KMS), and, in a function that judges, no `UMPIRE_CHECKER_FUNCTION`
/// (its checks would run in the paying function's own process, beside its secrets and
/// its role). The fetcher's `UMPIRE_TEST_FETCH_*` are not in such a build at all
/// (`umpire_fetch::policy::test_switch`).
pub fn refuse_local_switches(
    role: Role,
    var: &dyn Fn(&str) -> Option<String>,
) -> Result<(), String> {
    const LOCAL_ONLY: &str = "UMPIRE_RATE_LIMITS";
    if let Some(v) = var(LOCAL_ONLY) {
        return Err(format!(
            "{LOCAL_ONLY}={v} is a switch for a local `umpire serve`, not a function: remove it \
             (tune a function's limits with UMPIRE_RATE_LIMIT_<BUCKET>)"
        ));
    }
    refuse_unshipped(role, &|name| var(name).filter(|v| !v.trim().is_empty()))
}

/// A test build's functions take a plain seed, a plain validator key and the local
/// checker (`make watch`, the tests).
#[cfg(feature = "test-switches")]
fn refuse_unshipped(_: Role, _: &dyn Fn(&str) -> Option<String>) -> Result<(), String> {
    Ok(())
}

#[cfg(not(feature = "test-switches"))]
fn refuse_unshipped(role: Role, set: &dyn Fn(&str) -> Option<String>) -> Result<(), String> {
    use crate::keys::{SEED_HEX_ENV, VALIDATOR_CIPHERTEXT_ENV};
    use umpire_api::plumbing::config::KEY_HEX_ENV;
    if set(SEED_HEX_ENV).is_some() {
        return Err(format!(
            "{SEED_HEX_ENV} is a plain signing seed, for local runs only (a build with the \
             test-switches feature): remove it and deploy the sealed seed that `umpire keygen \
             --kms-key-id <the stack's SigningKeyId output>` prints"
        ));
    }
    if set(KEY_HEX_ENV).is_some() {
        return Err(format!(
            "{KEY_HEX_ENV} is a plain validator key, for local runs only (a build with the \
             test-switches feature): remove it and deploy {VALIDATOR_CIPHERTEXT_ENV}, which \
             `umpire keygen --validator` prints"
        ));
    }
    if role.judges() && set(checker::CHECKER_FUNCTION_ENV).is_none() {
        return Err(format!(
            "{} is not set: on AWS this function judges in the isolated checker function, \
             never in its own process; name it (template.yaml passes the stack's \
             CheckerFunction)",
            checker::CHECKER_FUNCTION_ENV
        ));
    }
    Ok(())
}
