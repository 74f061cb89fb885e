//! The wrapper built the way object_store 0.12 users configured DynamoCommit: a URL and
//! the options they pass to `AmazonS3Builder` (and deltalake's `storage_options`), with
//! `conditional_put=dynamo:TABLE:TIMEOUT_MS`. On s3rver, which ignores conditional
//! headers, with leases in DynamoDB Local: of 8 concurrent creates of one path, exactly one
//! wins. Bad options are refused, naming the option. For object_store 0.14, and 0.13 with
//! the `object-store-013` feature.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::s3::S3Server;
use dynacommit::lease::DynamoLeaseTable;

/// Options for a fresh s3rver bucket, leases in a fresh table of DynamoDB Local.
async fn options() -> (String, Vec<(&'static str, String)>) {
    let bucket = S3Server::S3rver.fresh_bucket().await;
    let table = common::unique_name("from-options");
    DynamoLeaseTable::new(common::dynamodb().await, &table)
        .ensure_table()
        .await
        .unwrap();
    let (key, secret) = S3Server::S3rver.keys();
    let options = vec![
        ("aws_endpoint", S3Server::S3rver.url()),
        ("aws_access_key_id", key),
        ("aws_secret_access_key", secret),
        ("aws_region", "us-east-1".to_owned()),
        ("aws_allow_http", "true".to_owned()),
        ("conditional_put", format!("dynamo:{table}:3000")),
        ("aws_endpoint_url_dynamodb", common::dynamodb_url()),
    ];
    (format!("s3://{bucket}/table"), options)
}

/// The test body for one object_store version: `$os` the crate, `$store` the wrapper.
macro_rules! one_winner {
    ($name:ident, $os:ident, $store:path) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $name() {
            use std::sync::Arc;
            use $os::{ObjectStore, PutMode, path::Path};
            let (url, options) = options().await;
            let url = url::Url::parse(&url).unwrap();
            let (store, root) = <$store>::from_url_opts(&url, options).unwrap();
            assert_eq!(
                root.as_ref(),
                "table",
                "the URL's path comes back, as from parse_url_opts"
            );
            let store = Arc::new(store);
            let path = Path::from("table/_delta_log/00000000000000000000.json");
            let racers = (0..8).map(|i| {
                let (store, path) = (store.clone(), path.clone());
                tokio::spawn(async move {
                    let body = format!("writer {i}");
                    match store
                        .put_opts(&path, body.into(), PutMode::Create.into())
                        .await
                    {
                        Ok(_) => true,
                        Err($os::Error::AlreadyExists { .. }) => false,
                        Err(e) => panic!("{e}"),
                    }
                })
            });
            let wins = futures::future::join_all(racers)
                .await
                .into_iter()
                .filter(|w| *w.as_ref().unwrap())
                .count();
            assert_eq!(
                wins, 1,
                "exactly one create wins on a store that ignores If-None-Match"
            );
            assert!(
                store.to_string().contains("dynamodb table from-options-"),
                "{store}"
            );
        }
    };
}

one_winner!(
    one_create_wins_on_object_store_0_14,
    object_store,
    dynacommit::CommitStore
);
#[cfg(feature = "object-store-013")]
one_winner!(
    one_create_wins_on_object_store_0_13,
    object_store_013,
    dynacommit::v013::CommitStore
);

#[test]
fn options_no_store_knows_are_refused_by_name() {
    let url = url::Url::parse("s3://bucket").unwrap();
    let err = dynacommit::CommitStore::from_url_opts(
        &url,
        [("conditional_put", "dynamo:t"), ("aws_bucket_nam", "x")],
    )
    .unwrap_err();
    assert!(err.to_string().contains("`aws_bucket_nam`"), "{err}");
    let err = dynacommit::CommitStore::from_url_opts(&url, [("conditional_put", "dynamo:t:5s")])
        .unwrap_err();
    assert!(err.to_string().contains("whole milliseconds"), "{err}");
    // `?` works where object_store's errors are returned.
    let as_store_error: object_store::Error = err.into();
    assert!(as_store_error.to_string().contains("whole milliseconds"));
}

/// `dynacommit_conditions` sets the condition mode, and in `auto` mode a store's own
/// copy-if-not-exists setting reaches the S3 builder: on SeaweedFS (which enforces all
/// three conditions once told how to ask for copies) the probe finds every condition
/// enforced, and on s3rver none, so there the store keeps leasing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_condition_mode_comes_from_the_options() {
    use dynacommit::{CommitStore, Conditions, Enforced};
    let (_, mut options) = options().await;
    options.push(("dynacommit_conditions", "auto".to_owned()));
    let bucket = S3Server::SeaweedFs.fresh_bucket().await;
    let (key, secret) = S3Server::SeaweedFs.keys();
    let mut seaweed: Vec<(&str, String)> = options
        .iter()
        .filter(|(k, _)| {
            !matches!(
                *k,
                "aws_endpoint" | "aws_access_key_id" | "aws_secret_access_key"
            )
        })
        .cloned()
        .collect();
    seaweed.extend([
        ("aws_endpoint", S3Server::SeaweedFs.url()),
        ("aws_access_key_id", key),
        ("aws_secret_access_key", secret),
        ("copy_if_not_exists", "header:If-None-Match:*".to_owned()),
    ]);
    let url = url::Url::parse(&format!("s3://{bucket}/table")).unwrap();
    let (store, _) = CommitStore::from_url_opts(&url, seaweed).unwrap();
    assert_eq!(store.conditions(), Conditions::Auto);
    assert_eq!(store.enforced().await.unwrap(), Enforced::ALL);

    let bucket = S3Server::S3rver.fresh_bucket().await;
    let url = url::Url::parse(&format!("s3://{bucket}/table")).unwrap();
    let (store, _) = CommitStore::from_url_opts(&url, options).unwrap();
    assert_eq!(store.conditions(), Conditions::Auto);
    let enforced = store.enforced().await.unwrap();
    assert!(
        !enforced.create && !enforced.copy,
        "s3rver ignores conditions: {enforced}"
    );
}
