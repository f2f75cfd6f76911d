//! Lambda for `GET /verify`: the self-contained verification page.

#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    umpire_functions::run::<umpire_functions::fns::VerifyPage>().await
}
