//! Lambda for the jobs queue: sworn pass 2 and webhook deliveries, fed by the SQS
//! event source with partial batch failures. Pass 2 judges in the checker function (or,
//! locally, in the checker's binary run as a child process).

use std::sync::Arc;

use lambda_http::lambda_runtime::{self, LambdaEvent, service_fn};
use umpire_functions::aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent};
use umpire_functions::{fns, init_logging, state_from_env, worker::handle_batch};

fn main() -> Result<(), lambda_http::Error> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(async {
            init_logging();
            let state = Arc::new(state_from_env::<fns::Worker>().await?);
            lambda_runtime::run(service_fn(move |event: LambdaEvent<SqsEvent>| {
                let state = state.clone();
                async move {
                    Ok::<SqsBatchResponse, lambda_http::Error>(
                        handle_batch(&state, event.payload).await,
                    )
                }
            }))
            .await
        })
}
