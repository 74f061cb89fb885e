//! The Delta-style commit race on real servers: s3rver (which ignores conditional
//! headers) with DynamoDB Local, through CommitStore alone and in a mixed fleet with
//! object_store 0.12.5's DynamoCommit; and on bare s3rver, to show what the race catches.

mod common;

use std::sync::Arc;

use common::old_protocol::{self, OldWriter};
use common::s3::S3Server;
use dynacommit::CommitStore;
use dynacommit::lease::{DynamoLeaseTable, LeaseManager};
use dynacommit::race::{self, LogWriter, RaceReport, StoreWriter};
use object_store::ObjectStore;
use object_store::aws::S3ConditionalPut;
use object_store::path::Path;

fn assert_clean(report: &RaceReport) {
    let expected = (report.writers * report.commits_per_writer) as u64;
    assert!(report.duplicates.is_empty(), "duplicates: {report:?}");
    assert!(report.lost.is_empty(), "lost commits: {report:?}");
    assert!(report.gaps.is_empty(), "gaps: {report:?}");
    assert_eq!(report.versions, expected, "{report:?}");
    assert!(report.is_clean());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixteen_writers_twenty_commits_each_on_s3rver_every_version_exactly_once() {
    let inner: Arc<dyn ObjectStore> = Arc::new(
        S3Server::S3rver
            .fresh_store(S3ConditionalPut::ETagMatch)
            .await,
    );
    let leases = common::dynamo_leases().await;
    let store: Arc<dyn ObjectStore> = Arc::new(CommitStore::new(inner.clone(), leases));
    let writers: Vec<Arc<dyn LogWriter>> = (0..16)
        .map(|_| Arc::new(StoreWriter(store.clone())) as Arc<dyn LogWriter>)
        .collect();
    let report = race::run(writers, inner, &Path::from("_log"), 20, None)
        .await
        .unwrap();
    assert_clean(&report);
    assert_eq!(report.versions, 320);
    assert!(
        report.conflicts > 0,
        "16 writers never collided: {report:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bare_s3rver_loses_commits_in_the_same_race() {
    // The protection off: the same race straight on s3rver. It ignores If-None-Match,
    // so writers that try the same version all "win" it.
    let inner: Arc<dyn ObjectStore> = Arc::new(
        S3Server::S3rver
            .fresh_store(S3ConditionalPut::ETagMatch)
            .await,
    );
    let writers: Vec<Arc<dyn LogWriter>> = (0..8)
        .map(|_| Arc::new(StoreWriter(inner.clone())) as Arc<dyn LogWriter>)
        .collect();
    let report = race::run(writers, inner, &Path::from("_log"), 5, None)
        .await
        .unwrap();
    assert!(!report.duplicates.is_empty(), "{report:?}");
    assert!(!report.is_clean());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mixed_fleet_with_object_store_0_12_5_still_commits_every_version_once() {
    let bucket = S3Server::S3rver.fresh_bucket().await;
    let inner: Arc<dyn ObjectStore> =
        Arc::new(S3Server::S3rver.store(&bucket, S3ConditionalPut::ETagMatch));
    let leases = common::dynamo_leases().await;
    let table = leases.config().table.clone();
    let ours: Arc<dyn ObjectStore> = Arc::new(CommitStore::new(inner.clone(), leases));
    let theirs = Arc::new(old_protocol::store(
        S3Server::S3rver,
        &bucket,
        &table,
        leases_timeout_ms(),
    ));
    let writers: Vec<Arc<dyn LogWriter>> = (0..16)
        .map(|i| {
            if i % 2 == 0 {
                Arc::new(StoreWriter(ours.clone())) as Arc<dyn LogWriter>
            } else {
                Arc::new(OldWriter(theirs.clone())) as Arc<dyn LogWriter>
            }
        })
        .collect();
    let report = race::run(writers, inner, &Path::from("_log"), 20, None)
        .await
        .unwrap();
    assert_clean(&report);
}

fn leases_timeout_ms() -> u64 {
    20_000
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn old_and_new_writers_read_each_others_lease_records() {
    // An 0.12.5 writer's lease record parses as ours, and ours as theirs (they create
    // through it without error after we hold and release it).
    let bucket = S3Server::S3rver.fresh_bucket().await;
    let leases = common::dynamo_leases().await;
    let table_name = leases.config().table.clone();
    let theirs = old_protocol::store(S3Server::S3rver, &bucket, &table_name, 20_000);
    let path = object_store_012::path::Path::from("old/created");
    object_store_012::ObjectStore::put_opts(
        &theirs,
        &path,
        "old".into(),
        object_store_012::PutMode::Create.into(),
    )
    .await
    .unwrap();
    let table = DynamoLeaseTable::new(common::dynamodb().await, &table_name);
    let record = dynacommit::lease::LeaseTable::get(&table, "old/created", "*")
        .await
        .unwrap()
        .expect("0.12.5 wrote a lease record");
    assert_eq!(record.generation, 0);
    assert_eq!(record.owner, None);
    assert_eq!(record.timeout.as_millis(), 20_000);
    let _ = LeaseManager::new(Arc::new(table), leases.config().clone()).unwrap();
}
