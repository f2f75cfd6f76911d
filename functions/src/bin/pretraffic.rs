//! Lambda for CodeDeploy's PreTraffic hook: every function's new version answers a
//! request of its own before any traffic moves to it (`umpire_functions::pretraffic`).

use std::sync::Arc;

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
                    hook.handle(&event.payload, &event.context.invoked_function_arn)
                        .await
                        .map_err(lambda_http::Error::from)
                }
            }))
            .await
        })
}
