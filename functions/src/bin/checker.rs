//! Lambda for the isolated checker: judges one pass (or one check) of a verdict with
//! no permissions, no secrets and a short timeout that is the hard limit. Invoked only
//! by the verdict and worker functions (see `umpire_functions::checker`).

use lambda_http::lambda_runtime::{self, LambdaEvent, service_fn};

fn main() -> Result<(), lambda_http::Error> {
    // Run with the worker argument, this binary is the local checker the verdicts and
    // worker functions start as a child process when no checker function is configured
    // (`cargo lambda watch`, tests). No runtime, no logging: a plain loop the parent kills.
    if std::env::args().nth(1).as_deref() == Some(umpire_checker::WORKER_ARG) {
        return Ok(umpire_checker::worker_main()?);
    }
    // One invocation at a time per sandbox, and the work is plain CPU: no thread pool.
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(async {
            umpire_functions::init_logging();
            lambda_runtime::run(service_fn(
                |event: LambdaEvent<serde_json::Value>| async move {
                    Ok::<_, lambda_http::Error>(umpire_functions::checker::handle_event(
                        &event.payload,
                    ))
                },
            ))
            .await
        })
}
