//! Lambda for the validate route.

#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    umpire_functions::run::<umpire_functions::fns::Validate>().await
}
