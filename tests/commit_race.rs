//! The Delta-style commit race on real servers: s3rver (which ignores conditional
//! headers) with DynamoDB Local, through CommitStore alone and in a mixed fleet with
//! object_store 0.12.5's DynamoCommit; and on bare s3rver, to show what the race catches.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::old_protocol::{self, OldWriter};
use common::s3::S3Server;
use dynacommit::CommitStore;
use dynacommit::lease::{DynamoLeaseTable, LeaseManager, LeaseTable};
use dynacommit::race::{self, LogWriter, RaceReport, StoreWriter};
use object_store::aws::S3ConditionalPut;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutMode};

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
    // Four processes of four writers each: races within a process meet in its manager's
    // queue, races between processes in the table.
    let processes = common::processes(&inner, &common::dynamo_leases().await, 4);
    let writers: Vec<Arc<dyn LogWriter>> = (0..16)
        .map(|i| Arc::new(StoreWriter(processes[i % 4].clone())) as Arc<dyn LogWriter>)
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
    // Each of ours a process of its own (a lease manager each, on the one table): tasks
    // sharing a manager settle their races in its queue, without meeting 0.12.5's.
    let ours = common::processes(&inner, &leases, 8);
    let theirs = Arc::new(old_protocol::store(
        S3Server::S3rver,
        &bucket,
        &table,
        leases_timeout_ms(),
    ));
    // Even writers are ours, odd ones 0.12.5's. Many short races rather than one long
    // one: a writer that loses backs off (ours at random, 0.12.5's for 100 ms) and lets
    // the winner commit on alone, so in one long race each side mostly meets the other
    // where one hands over; every short race starts with all sixteen at version 0.
    let writers: Vec<Arc<dyn LogWriter>> = (0..16)
        .map(|i| {
            if i % 2 == 0 {
                Arc::new(StoreWriter(ours[i / 2].clone())) as Arc<dyn LogWriter>
            } else {
                Arc::new(OldWriter(theirs.clone())) as Arc<dyn LogWriter>
            }
        })
        .collect();
    let mut switches = 0;
    let mut conflicts = 0;
    for round in 0..10 {
        let prefix = Path::from(format!("_log{round}"));
        let report = race::run(writers.clone(), inner.clone(), &prefix, 2, None)
            .await
            .unwrap();
        assert_clean(&report);
        assert_eq!(report.versions, 32);
        conflicts += report.conflicts;

        // The fleet is only mixed if old and new writers raced for the same versions:
        // read who won each version, and count how often the winners switch between old
        // and new along the log.
        let mut winners = Vec::new();
        for version in 0..report.versions {
            let body = inner
                .get(&race::version_path(&prefix, version))
                .await
                .unwrap()
                .bytes()
                .await
                .unwrap();
            let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
            let writer = body["writer"].as_u64().unwrap();
            winners.push(writer.is_multiple_of(2));
        }
        let ours_won = winners.iter().filter(|ours| **ours).count();
        assert_eq!(ours_won, 16, "each of our 8 writers won its 2 versions");
        switches += winners.windows(2).filter(|w| w[0] != w[1]).count();
    }
    assert!(conflicts > 0, "no writer ever collided");
    eprintln!("winners switched between old and new writers {switches} times in 320 versions");
    assert!(
        switches >= 20,
        "old and new writers barely interleaved ({switches} switches in 10 races)"
    );
}

fn leases_timeout_ms() -> u64 {
    20_000
}

/// Each protocol takes over the other's lease record: 0.12.5's record parses as ours and
/// our writer reclaims it; ours parses as theirs and their writer reclaims it and creates
/// through it. Short lease timeouts (each side waits out the other's before reclaiming)
/// keep it quick.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn old_and_new_writers_read_each_others_lease_records() {
    const TIMEOUT_MS: u64 = 300;
    let bucket = S3Server::S3rver.fresh_bucket().await;
    let inner: Arc<dyn ObjectStore> =
        Arc::new(S3Server::S3rver.store(&bucket, S3ConditionalPut::ETagMatch));
    let table_name = common::unique_name("mixed");
    let table = Arc::new(DynamoLeaseTable::new(common::dynamodb().await, &table_name));
    table.ensure_table().await.unwrap();
    let config = common::test_lease_config(&table_name)
        .with_timeout(Duration::from_millis(TIMEOUT_MS))
        .with_renew_interval(Duration::from_millis(TIMEOUT_MS / 3));
    let ours = CommitStore::new(
        inner.clone(),
        LeaseManager::new(table.clone(), config).unwrap(),
    );
    let theirs = old_protocol::store(S3Server::S3rver, &bucket, &table_name, TIMEOUT_MS);
    let create_theirs = |path: &'static str, body: &'static str| {
        let theirs = &theirs;
        async move {
            object_store_012::ObjectStore::put_opts(
                theirs,
                &object_store_012::path::Path::from(path),
                body.into(),
                object_store_012::PutMode::Create.into(),
            )
            .await
        }
    };

    // Theirs as ours: 0.12.5 creates, leaving its lease record ...
    create_theirs("old/created", "old").await.unwrap();
    let record = table
        .get("old/created", "*")
        .await
        .unwrap()
        .expect("0.12.5 wrote a lease record");
    assert_eq!(record.generation, 0);
    assert_eq!(record.owner, None);
    assert_eq!(record.timeout.as_millis(), u128::from(TIMEOUT_MS));
    // ... and the object goes (a plain delete, which takes no lease); our writer
    // parses their record, waits it out, reclaims it and creates.
    let path = Path::from("old/created");
    inner.delete(&path).await.unwrap();
    tokio::time::timeout(
        Duration::from_secs(30),
        ours.put_opts(&path, "new".into(), PutMode::Create.into()),
    )
    .await
    .expect("our writer took over 0.12.5's record within 30 s")
    .unwrap();
    let body = inner.get(&path).await.unwrap().bytes().await.unwrap();
    assert_eq!(body.as_ref(), b"new", "our create landed");
    let after = table.get("old/created", "*").await.unwrap().unwrap();
    assert!(
        after.generation > 0 && after.owner.is_some(),
        "our writer reclaimed 0.12.5's record: {after:?}"
    );

    // Ours as theirs: we create and release, and the object goes (a plain delete, which
    // takes no lease) ...
    let path = Path::from("new/created");
    ours.put_opts(&path, "new".into(), PutMode::Create.into())
        .await
        .unwrap();
    let ours_record = table.get("new/created", "*").await.unwrap().unwrap();
    assert!(ours_record.owner.is_some(), "{ours_record:?}");
    inner.delete(&path).await.unwrap();
    // ... and 0.12.5 parses our record, waits it out, reclaims it and creates.
    tokio::time::timeout(Duration::from_secs(30), create_theirs("new/created", "old"))
        .await
        .expect("0.12.5 took over our record within 30 s")
        .unwrap();
    let body = inner.get(&path).await.unwrap().bytes().await.unwrap();
    assert_eq!(body.as_ref(), b"old", "0.12.5's create landed");
    let theirs_record = table.get("new/created", "*").await.unwrap().unwrap();
    assert_ne!(
        theirs_record, ours_record,
        "0.12.5 rewrote our record when it reclaimed it"
    );
    assert!(
        theirs_record.generation > ours_record.generation,
        "{ours_record:?} then {theirs_record:?}"
    );
}
