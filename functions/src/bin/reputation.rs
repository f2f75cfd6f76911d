//! Lambda for `GET /v1/reputation`: the paid, signed reputation report (x402, $0.01).

#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    umpire_functions::run::<umpire_functions::fns::Reputation>().await
}
