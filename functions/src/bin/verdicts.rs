//! Lambda for `POST /v1/verdicts/{tier}`: the paid verdict. It judges in the checker
//! function (or, locally, in the checker's binary run as a child process).

fn main() -> Result<(), lambda_http::Error> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(umpire_functions::run::<umpire_functions::fns::Buy>())
}
