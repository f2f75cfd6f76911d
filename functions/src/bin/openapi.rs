//! Lambda for `GET /openapi.json`: the OpenAPI 3.1 description.

#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    umpire_functions::run::<umpire_functions::fns::OpenApi>().await
}
