//! Lambda for CodeDeploy's PreTraffic hook: every function's new version answers a
//! request of its own before any traffic moves to it (`umpire_functions::pretraffic`).

use std::sync::Arc;
use std::time::Duration;

use lambda_http::lambda_runtime::{self, LambdaEvent, service_fn};
use umpire_functions::pretraffic::Hook;

fn main() -> Result<(), lambda_http::Error> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(async {
            umpire_functions::init_logging();
            let hook = Arc::new(Hook::new(&umpire_aws::sdk_config_from_env()?));
            lambda_runtime::run(service_fn(move |event: LambdaEvent<serde_json::Value>| {
                let hook = hook.clone();
                async move {
                    // Lambda's deadline for this invocation, in ms since the epoch.
                    let now_ms = std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
                    let left = Duration::from_millis(event.context.deadline.saturating_sub(now_ms));
                    hook.handle(&event.payload, &event.context.invoked_function_arn, left)
                        .await
                        .map_err(lambda_http::Error::from)
                }
            }))
            .await
        })
}
