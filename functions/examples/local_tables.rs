//! Creates the DynamoDB tables (names from `UMPIRE_*_TABLE`, else `umpire-*`) on the
//! server `AWS_ENDPOINT_URL` names: the local stack `make watch` runs the functions
//! against (a fresh server each time: existing tables are an error).

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let aws = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
    let names = umpire_store::dynamo::TableNames::from_env();
    umpire_store::dynamo::DynamoStore::from_config(&aws, names.clone())
        .create_tables()
        .await?;
    eprintln!("tables ready: {names:?}");
    Ok(())
}
