//! Lambda for `POST /mcp`: the Model Context Protocol (streamable HTTP, stateless).

#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    umpire_functions::run::<umpire_functions::fns::Mcp>().await
}
