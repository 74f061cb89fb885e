//! The wire client's tests' own pieces: commit-lease keys and tables, and DynamoDB's
//! throttling answer.

use dynacommit::dynamo::{AttributeValue, DynamoClient, Item};

/// DynamoDB's answer to a throttled request (HTTP 400), as a fake server sends it.
pub const THROTTLED: &str = r#"{"__type":"com.amazonaws.dynamodb.v20120810#ThrottlingException","message":"Rate of requests exceeds the allowed throughput."}"#;

/// The key of the commit-lease record (`path`, `*`).
pub fn key(path: &str) -> Item {
    key_at(path, "*")
}

/// The key of the commit-lease record (`path`, `etag`).
pub fn key_at(path: &str, etag: &str) -> Item {
    [
        ("path".to_owned(), AttributeValue::from(path)),
        ("etag".to_owned(), AttributeValue::from(etag)),
    ]
    .into()
}

/// A fresh commit-lease table on DynamoDB Local, named after `what`, through `client`.
pub async fn lease_table_of(client: &DynamoClient, what: &str) -> String {
    let name = super::unique_name(what);
    client
        .ensure_table(&dynacommit::schema::commit_lease_table(&name))
        .await
        .unwrap();
    name
}

/// [`lease_table_of`] through the shared test client.
pub async fn lease_table(what: &str) -> String {
    lease_table_of(&super::dynamodb().await, what).await
}
