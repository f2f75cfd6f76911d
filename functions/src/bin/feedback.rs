//! Lambda for `POST /v1/feedback`: free, proven on chain (payment and payer signature).

#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    umpire_functions::run::<umpire_functions::fns::Feedback>().await
}
