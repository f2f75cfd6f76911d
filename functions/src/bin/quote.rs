//! Lambda for the quote route.

#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    umpire_functions::run::<umpire_functions::fns::Quote>().await
}
