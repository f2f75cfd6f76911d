//! Lambda for the status route.

#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    umpire_functions::run::<umpire_functions::fns::Status>().await
}
