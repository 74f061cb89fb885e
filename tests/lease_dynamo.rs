//! The lease protocol against DynamoDB Local, with a scripted server in front where an
//! answer must go missing.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::fake_server::{FakeServer, Reply};
use common::s3::S3Server;
use dynacommit::lease::{
    DynamoLeaseTable, Expect, LeaseConfig, LeaseManager, LeaseRecord, LeaseTable, PutOutcome,
};

const INTERNAL_ERROR: &str =
    r#"{"__type":"com.amazonaws.dynamodb.v20120810#InternalServerError","message":"lost"}"#;

async fn lease_table_name() -> String {
    let name = common::unique_name("lease");
    DynamoLeaseTable::new(common::dynamodb().await, &name)
        .ensure_table()
        .await
        .unwrap();
    name
}

/// A server that applies the first request but loses its answer, then passes through.
async fn losing_first_answer() -> FakeServer {
    let real = format!("{}/", common::dynamodb_url());
    FakeServer::start(move |n, _| {
        if n == 0 {
            Reply::ForwardThenAnswer(real.clone(), 500, INTERNAL_ERROR.into())
        } else {
            Reply::Forward(real.clone())
        }
    })
    .await
}

type Never = std::convert::Infallible;

#[tokio::test]
async fn a_lease_put_whose_answer_was_lost_is_recognised_as_ours_at_once() {
    let name = lease_table_name().await;
    let server = losing_first_answer().await;
    let client = common::client_for(&server.url, common::quick_retries());
    let leases = LeaseManager::new(
        Arc::new(DynamoLeaseTable::new(client, &name)),
        LeaseConfig::new(&name),
    )
    .unwrap();
    let started = Instant::now();
    let lease = leases
        .acquire("lost/answer", "*", || async { Ok::<(), Never>(()) })
        .await
        .unwrap();
    // Without the owner nonce this would wait timeout x skew = 60 s for itself.
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    assert!(
        lease.generation() > 0,
        "a first lease starts at the wall clock's microseconds"
    );
    assert_eq!(
        server.targets()[..2],
        ["DynamoDB_20120810.PutItem", "DynamoDB_20120810.PutItem"],
        "the client's own retry met our record"
    );
    let stored = DynamoLeaseTable::new(common::dynamodb().await, &name)
        .get("lost/answer", "*")
        .await
        .unwrap()
        .unwrap();
    assert!(stored.is_written_by(lease.owner(), lease.generation()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn object_store_0_12_5_waits_for_itself_after_the_same_lost_answer() {
    // The same fault under the old protocol, with a 500 ms lease: it cannot tell its own
    // record from a rival's, and waits timeout x skew (1.5 s here; 60 s by default).
    let name = lease_table_name().await;
    let server = losing_first_answer().await;
    let bucket = S3Server::S3rver.fresh_bucket().await;
    let old = common::old_protocol::store_via(
        S3Server::S3rver,
        &bucket,
        &name,
        500,
        &server.url,
        Arc::default(),
        None,
    );
    let started = Instant::now();
    object_store_012::ObjectStore::put_opts(
        &old,
        &object_store_012::path::Path::from("stalls"),
        "x".into(),
        object_store_012::PutMode::Create.into(),
    )
    .await
    .unwrap();
    assert!(
        started.elapsed() >= Duration::from_millis(1_500),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn a_conflict_answer_without_the_old_item_falls_back_to_a_consistent_read() {
    let name = lease_table_name().await;
    let direct = DynamoLeaseTable::new(common::dynamodb().await, &name);
    let held = LeaseRecord {
        path: "no/item".into(),
        etag: "*".into(),
        generation: 3,
        timeout: Duration::from_secs(20),
        ttl: Some(1_900_000_000),
        owner: Some("holder".into()),
        value: None,
        released: false,
        holder: None,
    };
    assert_eq!(
        direct.put(&held, &Expect::Absent).await.unwrap(),
        PutOutcome::Written
    );

    let real = format!("{}/", common::dynamodb_url());
    let server = FakeServer::start(move |_, _| Reply::ForwardWithoutItem(real.clone())).await;
    let stripped = DynamoLeaseTable::new(
        common::client_for(&server.url, common::quick_retries()),
        &name,
    );
    let rival = LeaseRecord {
        owner: Some("rival".into()),
        generation: 0,
        ..held.clone()
    };
    let outcome = stripped.put(&rival, &Expect::Absent).await.unwrap();
    assert_eq!(outcome, PutOutcome::Conflict(Some(held)));
    assert_eq!(
        server.targets(),
        ["DynamoDB_20120810.PutItem", "DynamoDB_20120810.GetItem"]
    );
}

#[tokio::test]
async fn every_condition_behaves_on_the_real_server() {
    let name = lease_table_name().await;
    let table = DynamoLeaseTable::new(common::dynamodb().await, &name);
    let at = |generation: u64, owner: &str| LeaseRecord {
        path: "conds".into(),
        etag: "\"abc\"".into(),
        generation,
        timeout: Duration::from_secs(20),
        ttl: Some(1_900_000_000),
        owner: Some(owner.into()),
        value: None,
        released: false,
        holder: None,
    };
    let written = |o: PutOutcome| o == PutOutcome::Written;
    assert!(written(
        table.put(&at(0, "a"), &Expect::Absent).await.unwrap()
    ));
    assert!(!written(
        table.put(&at(0, "b"), &Expect::Absent).await.unwrap()
    ));
    assert!(!written(
        table
            .put(&at(1, "b"), &Expect::Generation(5))
            .await
            .unwrap()
    ));
    let owned_by = |generation, owner: &str| Expect::Owned {
        generation,
        owner: owner.into(),
    };
    assert!(!written(
        table.put(&at(1, "b"), &owned_by(0, "b")).await.unwrap()
    ));
    assert!(written(
        table.put(&at(1, "a"), &owned_by(0, "a")).await.unwrap()
    ));
    assert!(written(
        table
            .put(&at(2, "b"), &Expect::Generation(1))
            .await
            .unwrap()
    ));
    let stored = table.get("conds", "\"abc\"").await.unwrap().unwrap();
    assert!(stored.is_written_by("b", 2));
    assert_eq!(table.get("conds", "other").await.unwrap(), None);
}

#[tokio::test]
async fn records_say_which_process_holds_them_and_since_when() {
    let leases = common::dynamo_leases().await;
    let before = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let mut lease = leases
        .acquire("held/by", "*", || async { Ok::<(), Never>(()) })
        .await
        .unwrap();
    let first = leases.table().get("held/by", "*").await.unwrap().unwrap();
    let holder = first.holder.expect("our records name their holder");
    assert!(
        holder
            .process
            .ends_with(&format!(" pid {}", std::process::id())),
        "{holder:?}"
    );
    assert!(holder.since_ms >= before && holder.written_ms >= holder.since_ms);
    leases.renew(&mut lease).await.unwrap();
    let renewed = leases.table().get("held/by", "*").await.unwrap().unwrap();
    let again = renewed.holder.unwrap();
    assert_eq!(
        again.since_ms, holder.since_ms,
        "held since the acquisition"
    );
    assert!(
        again.written_ms >= holder.written_ms,
        "last written at the renewal"
    );
}
