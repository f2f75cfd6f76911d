//! Lambda for `POST /v1/verdicts/{tier}`: the paid verdict. The same binary, run with
//! the worker argument, is the isolated checker it spawns.

fn main() -> Result<(), lambda_http::Error> {
    if std::env::args().nth(1).as_deref() == Some(umpire_checker::WORKER_ARG) {
        // No runtime, no logging: the worker is a plain loop the parent can kill.
        return Ok(umpire_checker::worker_main()?);
    }
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(umpire_functions::run::<umpire_functions::fns::Buy>())
}
