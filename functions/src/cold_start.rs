//! What a function builds once, at its cold start: the state its role needs (AWS
//! clients, storage, payments, the checker, the chain, the registry) and nothing more.

use std::future::Future;
use std::sync::Arc;

use umpire_api::{AppState, Config, Published, Route};
use umpire_aws::{Service, for_service};
use umpire_checker::{CheckerPool, Judge, PoolConfig};
use umpire_store::dynamo::{DynamoStore, TableNames};
use umpire_store::sqs::SqsQueue;
use umpire_store::{JobQueue, Store};

use crate::keys::{next_key_from_vars, signer_from_env, validator_key};
use crate::role::{Needs, Part, Role, ready_part};
use crate::vars::{Vars, refuse_local_switches, secrets_for};
use crate::{checker, paid};

/// A function's state, built once per cold start for the role `N`.
pub trait ColdStart: Sized + Send + Sync + 'static {
    fn cold_start<N: Needs>() -> impl Future<Output = Result<Self, lambda_http::Error>> + Send;
}

impl ColdStart for AppState {
    fn cold_start<N: Needs>() -> impl Future<Output = Result<AppState, lambda_http::Error>> + Send {
        state_from_env::<N>()
    }
}

impl ColdStart for Published {
    fn cold_start<N: Needs>() -> impl Future<Output = Result<Published, lambda_http::Error>> + Send
    {
        published_from_env::<N>()
    }
}

/// The checker function's binary, which judging functions start as their local checker
/// when no checker function is configured.
pub const CHECKER_BIN: &str = "checker";

/// One AWS configuration (region, credentials, endpoint) for every client; None in
/// functions that use no AWS service.
/// Read from the function's environment (region, the role's credentials), not through
/// aws-config's provider chain: see `umpire_aws`.
fn aws_config_for<N: Needs>() -> Result<Option<umpire_aws::SdkConfig>, lambda_http::Error> {
    if const { N::ROLE.stores() } {
        Ok(Some(umpire_aws::sdk_config_from_env()?))
    } else {
        Ok(None)
    }
}

/// The isolated checker, for functions that judge.
fn checker_for<'a, N: Needs>(
    aws: Option<&'a umpire_aws::SdkConfig>,
    config: &'a Config,
) -> Part<'a, Option<Arc<dyn Judge>>> {
    if const { !N::ROLE.judges() } {
        return ready_part(None);
    }
    Box::pin(async move {
        let judge: Arc<dyn Judge> = match (std::env::var(checker::CHECKER_FUNCTION_ENV), aws) {
            // In AWS: the checker function, whose timeout is the check limit.
            (Ok(function), Some(aws)) => Arc::new(checker::LambdaChecker::new(
                aws_sdk_lambda::Client::new(&for_service(aws, Service::Lambda)),
                function,
                config.check_limit,
            )),
            // Without one (cargo lambda watch, tests): the checker function's own
            // binary, built beside this one, run as a child process killed at the check
            // limit. So the judging code lives in the checker's bootstrap alone.
            _ => {
                let pool = CheckerPool::new(PoolConfig::sibling(CHECKER_BIN, config.check_limit)?);
                pool.prewarm(1).await?;
                Arc::new(pool)
            }
        };
        Ok(Some(judge))
    })
}

/// Payments and the SOL price feed, for functions that sell (and the worker, which
/// settles pending purchases).
fn payments_for<'a, N: Needs>(
    config: &'a Config,
    vars: &'a Vars,
) -> Part<
    'a,
    (
        umpire_pay::Payments,
        Option<Arc<umpire_pay::price::SolPriceFeed>>,
    ),
> {
    if const { !N::ROLE.settles() } {
        return ready_part((umpire_pay::Payments::default(), None));
    }
    Box::pin(async move {
        Ok((
            umpire_pay::config::payments_from(&config.rails, |name| vars.get(name)).await?,
            umpire_pay::config::sol_price_from_env(&config.rails)?,
        ))
    })
}

/// The state of a function whose route stores nothing: the configuration and the
/// published keys, no AWS client at all.
pub async fn published_from_env<N: Needs>() -> Result<Published, lambda_http::Error> {
    refuse_local_switches(N::ROLE, &|name| std::env::var(name).ok())?;
    let config = Config::from_env()?;
    let (signer, retired_keys) = signer_from_env::<N>(None).await?;
    Ok(Published {
        config,
        signer,
        retired_keys,
        next_key: next_key_from_vars(&|name| std::env::var(name).ok())?,
    })
}

/// Builds the state this function needs, once per cold start. Only the purchase
/// route takes payments, and only it and the worker start the checker.
pub async fn state_from_env<N: Needs>() -> Result<AppState, lambda_http::Error> {
    refuse_local_switches(N::ROLE, &|name| std::env::var(name).ok())?;
    let mut config = Config::from_env()?;
    let aws = aws_config_for::<N>()?;
    let (signer, retired_keys) = signer_from_env::<N>(aws.as_ref()).await?;
    let checker = checker_for::<N>(aws.as_ref(), &config).await?;
    let vars = secrets_for::<N>(aws.as_ref()).await?;
    let (payments, sol_price) = payments_for::<N>(&config, &vars).await?;
    let fetcher = if const { N::ROLE.reaches_out() } {
        Some(Arc::new(umpire_fetch::Fetcher::from_env()?))
    } else {
        None
    };
    // Feedback reads the chain for payments to merchants; reports name that chain.
    let feedback_chain = if const { N::ROLE.reads_chain() } {
        umpire_chain::ChainConfig::from_vars(&|name| vars.get(name))?
            .map(umpire_chain::FeedbackChain::new)
            .transpose()?
            .map(Arc::new)
    } else {
        None
    };
    let (store, queue): (Arc<dyn Store>, Option<Arc<dyn JobQueue>>) = match &aws {
        Some(aws) => (
            Arc::new(DynamoStore::from_config(
                &for_service(aws, Service::DynamoDb),
                TableNames::from_env(),
            )),
            match std::env::var("UMPIRE_JOBS_QUEUE_URL") {
                Ok(url) => Some(Arc::new(SqsQueue::from_config(
                    &for_service(aws, Service::Sqs),
                    url,
                ))),
                Err(_) => None,
            },
        ),
        // Functions whose route stores nothing hold a `Published`, not an AppState.
        None => {
            return Err(format!(
                "{:?} stores nothing: its function holds the published keys, not a store",
                N::ROLE
            )
            .into());
        }
    };
    // The registry's RPC is a secret (it may carry an API key).
    if let Some(v) = config.validator.as_mut()
        && let Some(url) = vars.get("UMPIRE_VALIDATION_RPC_URL")
    {
        v.rpc_url = Some(url);
    }
    let validation = validation_for::<N>(aws.as_ref(), &config).await?;
    // The MCP function's paid tools invoke the paid routes' own functions.
    let paid_routes: Option<Arc<dyn umpire_api::plumbing::state::PaidRoutes>> = match &aws {
        Some(aws) if const { matches!(N::ROLE, Role::Api(Route::Mcp)) } => {
            paid::LambdaRoutes::from_env(aws).map(|r| Arc::new(r) as _)
        }
        _ => None,
    };
    Ok(AppState::new(config, signer, store)
        .with_retired_keys(retired_keys)
        .with_next_key(next_key_from_vars(&|name| std::env::var(name).ok())?)
        .with_checker(checker)
        .with_queue(queue)
        .with_payments(payments)
        .with_sol_price(sol_price)
        .with_fetcher(fetcher)
        .with_feedback_chain(feedback_chain)
        .with_paid_routes(paid_routes)
        .with_validation(validation))
}

/// The ERC-8004 registry this function reads (purchases) or answers on (the worker,
/// with the validator's key opened by KMS), when the deployment answers one. Connected
/// on first use, so a node that is down at a cold start fails only what needs it.
fn validation_for<'a, N: Needs>(
    aws: Option<&'a umpire_aws::SdkConfig>,
    config: &'a Config,
) -> Part<'a, Option<Arc<umpire_api::plumbing::validation::Validation>>> {
    if const { !N::ROLE.validates() } {
        return ready_part(None);
    }
    if config.validator.is_none() {
        return ready_part(None);
    }
    Box::pin(async move {
        let key = if matches!(N::ROLE, Role::Worker) {
            validator_key(aws).await?
        } else {
            None
        };
        Ok(umpire_api::plumbing::validation::Validation::from_config(config, key)?.map(Arc::new))
    })
}
