//! Table provisioning against DynamoDB Local.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use common::fake_server::{FakeServer, Reply};
use dynacommit::dynamo::{DynamoError, KeyAttribute, KeyType, TableSpec};

#[tokio::test]
async fn ensure_table_creates_a_missing_table_with_ttl_on() {
    let client = common::dynamodb().await;
    let name = common::unique_name("ensure");
    let report = client
        .ensure_table(&dynacommit::schema::commit_lease_table(&name))
        .await
        .unwrap();
    assert!(report.created && report.ttl_enabled, "{report:?}");
    assert_eq!(report.table.status, "ACTIVE");
    assert_eq!(
        report.table.key_schema.to_string(),
        "[hash path (S), range etag (S)]"
    );

    let described = client.describe_table(&name).await.unwrap();
    assert_eq!(described.key_schema, report.table.key_schema);
    assert_eq!(described.billing_mode.as_deref(), Some("PAY_PER_REQUEST"));
    let ttl = client.describe_time_to_live(&name).await.unwrap();
    assert_eq!(ttl.status, "ENABLED");
    assert_eq!(ttl.attribute.as_deref(), Some("ttl"));
}

#[tokio::test]
async fn ensure_table_is_idempotent() {
    let client = common::dynamodb().await;
    let spec = dynacommit::schema::commit_lease_table(common::unique_name("idem"));
    let first = client.ensure_table(&spec).await.unwrap();
    let second = client.ensure_table(&spec).await.unwrap();
    assert!(first.created);
    assert!(!second.created && !second.ttl_enabled, "{second:?}");
    assert_eq!(first.table.key_schema, second.table.key_schema);
}

#[tokio::test]
async fn concurrent_ensure_table_calls_all_succeed() {
    let client = common::dynamodb().await;
    let spec = dynacommit::schema::commit_lease_table(common::unique_name("racing"));
    let reports = futures::future::join_all((0..4).map(|_| client.ensure_table(&spec))).await;
    let created = reports
        .into_iter()
        .map(|r| r.unwrap())
        .filter(|r| r.created)
        .count();
    assert_eq!(created, 1, "exactly one caller creates the table");
}

#[tokio::test]
async fn ensure_table_turns_ttl_on_for_an_existing_table_without_it() {
    let client = common::dynamodb().await;
    let spec = dynacommit::schema::commit_lease_table(common::unique_name("nottl"));
    let mut without_ttl = spec.clone();
    without_ttl.ttl_attribute = None;
    client.ensure_table(&without_ttl).await.unwrap();
    assert_eq!(
        client
            .describe_time_to_live(&spec.name)
            .await
            .unwrap()
            .status,
        "DISABLED"
    );
    let report = client.ensure_table(&spec).await.unwrap();
    assert!(!report.created && report.ttl_enabled, "{report:?}");
}

#[tokio::test]
async fn ensure_table_refuses_a_table_with_the_wrong_key_schema() {
    let client = common::dynamodb().await;
    let name = common::unique_name("wrong");
    let hash_only = TableSpec::new(&name, KeyAttribute::new("path", KeyType::S));
    client.ensure_table(&hash_only).await.unwrap();

    let error = client
        .ensure_table(&dynacommit::schema::commit_lease_table(&name))
        .await
        .unwrap_err();
    assert!(
        matches!(error, DynamoError::TableSchemaMismatch { .. }),
        "{error:?}"
    );
    let text = error.to_string();
    assert!(text.contains("[hash path (S)]"), "{text}");
    assert!(text.contains("[hash path (S), range etag (S)]"), "{text}");

    let wrong_type = TableSpec::new(&name, KeyAttribute::new("path", KeyType::N));
    assert!(matches!(
        client.ensure_table(&wrong_type).await.unwrap_err(),
        DynamoError::TableSchemaMismatch { .. }
    ));
}

#[tokio::test]
async fn ensure_table_refuses_ttl_on_another_attribute() {
    let client = common::dynamodb().await;
    let spec = dynacommit::schema::commit_lease_table(common::unique_name("ttlattr"));
    client
        .ensure_table(&spec.clone().with_ttl("expires_at"))
        .await
        .unwrap();
    let error = client.ensure_table(&spec).await.unwrap_err();
    assert!(
        matches!(error, DynamoError::TtlMismatch { .. }),
        "{error:?}"
    );
    assert!(error.to_string().contains("expires_at"), "{error}");
}

#[tokio::test]
async fn describing_a_missing_table_says_so() {
    let client = common::dynamodb().await;
    let error = client
        .describe_table("dynacommit-never-created")
        .await
        .unwrap_err();
    assert_eq!(error.code(), Some("ResourceNotFoundException"), "{error}");
}

#[tokio::test]
async fn an_s3_stores_credential_provider_signs_dynamodb_requests() {
    // The same identity for S3 and DynamoDB: AmazonS3::credentials() as the provider.
    common::dynamodb().await;
    let s3 = object_store::aws::AmazonS3Builder::new()
        .with_bucket_name("any")
        .with_region("us-east-1")
        .with_access_key_id("fromsthree")
        .with_secret_access_key("s3secret")
        .build()
        .unwrap();
    let client = dynacommit::dynamo::DynamoClient::builder()
        .with_endpoint(common::dynamodb_url())
        .with_region("us-east-1")
        .with_credential_provider(s3.credentials().clone())
        .build()
        .unwrap();
    let name = common::unique_name("provider");
    let report = client
        .ensure_table(&dynacommit::schema::commit_lease_table(&name))
        .await
        .unwrap();
    assert!(report.created);
}

const INTERNAL_ERROR: &str = r#"{"__type":"com.amazonaws.dynamodb.v20120810#InternalServerError","message":"Internal server error"}"#;

fn not_found(table: &str) -> String {
    serde_json::json!({
        "__type": "com.amazonaws.dynamodb.v20120810#ResourceNotFoundException",
        "message": format!("Requested resource not found: Table: {table} not found"),
    })
    .to_string()
}

/// A server in front of DynamoDB Local that answers request `k` of operation `op` (both
/// from 0) as `script(op, k)` says, or forwards it.
async fn per_operation(
    script: impl Fn(&str, usize) -> Option<Reply> + Send + Sync + 'static,
) -> FakeServer {
    let real = format!("{}/", common::dynamodb_url());
    let seen: Arc<std::sync::Mutex<std::collections::HashMap<String, Arc<AtomicUsize>>>> =
        Arc::default();
    FakeServer::start(move |_, target| {
        let op = target.trim_start_matches("DynamoDB_20120810.").to_owned();
        let counter = seen.lock().unwrap().entry(op.clone()).or_default().clone();
        let k = counter.fetch_add(1, Ordering::SeqCst);
        script(&op, k).unwrap_or_else(|| Reply::Forward(real.clone()))
    })
    .await
}

#[tokio::test]
async fn a_table_created_by_a_lost_first_attempt_is_reported_as_created() {
    common::dynamodb().await;
    let name = common::unique_name("lost-create");
    let real = format!("{}/", common::dynamodb_url());
    // CreateTable applies, its answer is lost (500); the retry hears ResourceInUse.
    let server = per_operation(move |op, k| {
        (op == "CreateTable" && k == 0)
            .then(|| Reply::ForwardThenAnswer(real.clone(), 500, INTERNAL_ERROR.into()))
    })
    .await;
    let client = common::client_for(&server.url, common::quick_retries());
    let report = client
        .ensure_table(&dynacommit::schema::commit_lease_table(&name))
        .await
        .unwrap();
    assert!(
        report.created,
        "our own first attempt created it: {report:?}"
    );
    assert_eq!(report.table.status, "ACTIVE");
    let creates = server
        .targets()
        .iter()
        .filter(|t| t.ends_with("CreateTable"))
        .count();
    assert_eq!(creates, 2, "{:?}", server.targets());
}

#[tokio::test]
async fn a_table_created_by_another_process_is_not_reported_as_created() {
    let direct = common::dynamodb().await;
    let name = common::unique_name("theirs");
    let spec = dynacommit::schema::commit_lease_table(&name);
    let rival = spec.clone();
    let server = per_operation(move |op, k| {
        // Our first DescribeTable says missing; the table appears before our CreateTable.
        (op == "DescribeTable" && k == 0).then(|| Reply::With(400, not_found(&rival.name)))
    })
    .await;
    direct.create_table(&spec).await.unwrap();
    let client = common::client_for(&server.url, common::quick_retries());
    let report = client.ensure_table(&spec).await.unwrap();
    assert!(!report.created, "{report:?}");
}

#[tokio::test]
async fn ensure_table_waits_through_not_found_just_after_create_table() {
    common::dynamodb().await;
    let name = common::unique_name("eventual");
    let real = format!("{}/", common::dynamodb_url());
    let creating = serde_json::json!({
        "TableDescription": {
            "TableName": name,
            "TableStatus": "CREATING",
            "KeySchema": [
                {"AttributeName": "path", "KeyType": "HASH"},
                {"AttributeName": "etag", "KeyType": "RANGE"},
            ],
            "AttributeDefinitions": [
                {"AttributeName": "path", "AttributeType": "S"},
                {"AttributeName": "etag", "AttributeType": "S"},
            ],
        }
    })
    .to_string();
    let missing = not_found(&name);
    // As AWS may: CreateTable says CREATING, then DescribeTable does not find the table
    // twice before it does.
    let server = per_operation(move |op, k| match (op, k) {
        ("CreateTable", 0) => Some(Reply::ForwardThenAnswer(
            real.clone(),
            200,
            creating.clone(),
        )),
        ("DescribeTable", 1 | 2) => Some(Reply::With(400, missing.clone())),
        _ => None,
    })
    .await;
    let client = common::client_for(&server.url, common::quick_retries());
    let report = client
        .ensure_table(&dynacommit::schema::commit_lease_table(&name))
        .await
        .unwrap();
    assert!(report.created && report.ttl_enabled, "{report:?}");
    assert_eq!(report.table.status, "ACTIVE");
    let describes = server
        .targets()
        .iter()
        .filter(|t| t.ends_with("DescribeTable"))
        .count();
    assert_eq!(describes, 4, "{:?}", server.targets());
}

#[tokio::test]
async fn a_table_that_never_appears_is_reported_within_the_wait_bound() {
    let server = FakeServer::start(|_, _| Reply::With(400, not_found("t"))).await;
    let client = common::client_for(&server.url, common::quick_retries());
    let started = std::time::Instant::now();
    let error = client
        .wait_until_active("t", std::time::Duration::from_millis(500))
        .await
        .unwrap_err();
    assert!(started.elapsed() < std::time::Duration::from_secs(3));
    assert!(
        matches!(&error, DynamoError::TableNotReady { status, .. } if status == "NOT_FOUND"),
        "{error:?}"
    );
}
