//! Where fleets meet, on the real servers: a rolling move from `lease` to `auto` on a store
//! that enforces conditions (SeaweedFS), an object_store 0.12.5 writer beside ours across
//! a record deleted as TTL deletes it (s3rver, DynamoDB Local), a re-create after a
//! delete by another client, and a re-create while a delete lingers. Each runs with its
//! fix taken out too (a planted bug, the opt-in that keeps create leases, or paths not
//! held) and shows the loss or the stall.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bytes::Bytes;
use common::faults::ScriptedStore;
use common::old_protocol;
use common::s3::S3Server;
use common::{Counters, delete_behind_its_back};
use dynacommit::lease::{DynamoLeaseTable, LeaseConfig, LeaseManager, PlantedBug};
use dynacommit::race::{self, LogWriter};
use dynacommit::{CommitStore, Conditions};
use object_store::aws::{S3ConditionalPut, S3CopyIfNotExists};
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutMode};

async fn fresh_table() -> DynamoLeaseTable {
    let table = DynamoLeaseTable::new(common::dynamodb().await, common::unique_name("edges"));
    table.ensure_table().await.unwrap();
    table
}

/// A log writer that, when its create's outcome is unknown (a leased write refused
/// because a native writer got there first, a timeout), reads the version back: won if
/// it holds this writer's bytes.
struct Rereading(CommitStore);

#[async_trait]
impl LogWriter for Rereading {
    async fn create(&self, path: &Path, body: Bytes) -> Result<bool, String> {
        match self
            .0
            .put_opts(path, body.clone().into(), PutMode::Create.into())
            .await
        {
            Ok(_) => Ok(true),
            Err(object_store::Error::AlreadyExists { .. }) => Ok(false),
            Err(e) if dynacommit::may_have_applied(&e) => {
                self.0.leases().settled().await;
                let stored = self.0.get(path).await.map_err(|e| e.to_string())?;
                Ok(stored.bytes().await.map_err(|e| e.to_string())? == body)
            }
            Err(e) => Err(e.to_string()),
        }
    }

    async fn settled(&self) {
        self.0.leases().settled().await;
    }
}

/// Rounds of 3 `lease` and 3 `auto` writers x 15 commits on one log of SeaweedFS (which
/// enforces every condition, so `auto` goes native and takes no lease), a lease manager
/// per writer: every round's report, stopping at the first unclean one.
async fn rolling_move(planted: Option<PlantedBug>, rounds: usize) -> Vec<race::RaceReport> {
    let bucket = S3Server::SeaweedFs.fresh_bucket().await;
    let inner: Arc<dyn ObjectStore> = Arc::new(S3Server::SeaweedFs.store_with(
        &bucket,
        S3ConditionalPut::ETagMatch,
        Some(S3CopyIfNotExists::Header(
            "If-None-Match".into(),
            "*".into(),
        )),
    ));
    let table = fresh_table().await;
    let mut reports = vec![];
    for round in 0..rounds {
        let writers: Vec<Arc<dyn LogWriter>> = [Conditions::Lease, Conditions::Auto]
            .into_iter()
            .cycle()
            .take(6)
            .map(|mode| {
                let mut leases = LeaseManager::new(
                    Arc::new(table.clone()),
                    common::test_lease_config(table.table_name()),
                )
                .unwrap();
                if let Some(bug) = planted {
                    leases = leases.with_planted_bug(bug);
                }
                let store = CommitStore::new(inner.clone(), leases).with_conditions(mode);
                Arc::new(Rereading(store)) as Arc<dyn LogWriter>
            })
            .collect();
        let prefix = Path::from(format!("round{round}/_delta_log"));
        let report = race::run(writers, inner.clone(), &prefix, 15, None)
            .await
            .unwrap();
        let clean = report.is_clean();
        reports.push(report);
        if !clean {
            break;
        }
    }
    reports
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_move_from_lease_to_auto_keeps_every_acknowledged_commit() {
    let reports = rolling_move(None, 5).await;
    for report in &reports {
        assert!(report.is_clean(), "{report:?}");
        assert_eq!(report.versions, 90);
    }
    let conflicts: u64 = reports.iter().map(|r| r.conflicts).sum();
    assert!(conflicts > 0, "the writers never met: {reports:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_plain_writes_under_the_lease_the_rolling_move_loses_commits() {
    // As `lease` mode wrote before, and object_store 0.12.5 does: a native writer's commit
    // landing between a leased writer's check and its write is overwritten.
    let reports = rolling_move(Some(PlantedBug::PlainWriteUnderLease), 10).await;
    let last = reports.last().unwrap();
    assert!(
        !last.is_clean(),
        "10 rounds of plain writes beside native ones lost nothing: {reports:?}"
    );
    println!(
        "planted: round {} lost {:?}, versions won twice {:?}",
        reports.len(),
        last.lost,
        last.duplicates
    );
}

/// One trial of an object_store 0.12.5 writer O waiting on a dead holder's record of ours
/// (D1, a 500 ms lease) that is then deleted, as TTL deletes it, and written afresh by D2
/// (a 3 s lease, so not yet renewed when O's wait ends), whose write is still in flight
/// then. Returns whether O was told it created the object, and what the object holds at
/// the end.
async fn old_writer_across_a_deleted_record(planted: Option<PlantedBug>) -> (bool, String) {
    let bucket = S3Server::S3rver.fresh_bucket().await;
    let s3: Arc<dyn ObjectStore> =
        Arc::new(S3Server::S3rver.store(&bucket, S3ConditionalPut::ETagMatch));
    let table = fresh_table().await;
    let manager = |timeout: Duration| {
        let leases = LeaseManager::new(
            Arc::new(table.clone()),
            LeaseConfig::new(table.table_name())
                .with_timeout(timeout)
                .with_poll_interval(Duration::from_millis(20)),
        )
        .unwrap();
        match planted {
            Some(bug) => leases.with_planted_bug(bug),
            None => leases,
        }
    };
    let path = Path::from("log/0.json");
    let started = Instant::now();
    // D1 takes the create's lease and dies holding it.
    drop(
        manager(Duration::from_millis(500))
            .acquire(path.as_ref(), "*", || async {
                Ok::<(), std::convert::Infallible>(())
            })
            .await
            .unwrap(),
    );
    // O meets D1's record and waits it out: its timeout x skew, 1.5 s, polling HEAD.
    let old = old_protocol::store(S3Server::S3rver, &bucket, table.table_name(), 500);
    let old_create = tokio::spawn(async move {
        use object_store_012::ObjectStore as _;
        let path = object_store_012::path::Path::from("log/0.json");
        old.put_opts(&path, "O".into(), object_store_012::PutMode::Create.into())
            .await
    });
    tokio::time::sleep(Duration::from_millis(1_200).saturating_sub(started.elapsed())).await;
    // TTL deletes D1's record; D2 takes the path afresh, its PUT 1.5 s on its way, so
    // that O's wait ends while D2 holds the lease and its object is not there yet.
    delete_behind_its_back(&table, path.as_ref(), "*").await;
    let in_flight = Arc::new(Counters::default());
    let slow: Arc<dyn ObjectStore> = Arc::new(ScriptedStore::slow_in_flight(
        s3.clone(),
        1_500..1_501,
        in_flight.clone(),
    ));
    let d2 = CommitStore::new(slow, manager(Duration::from_secs(3)));
    let d2_create = d2
        .put_opts(&path, "D2".into(), PutMode::Create.into())
        .await;
    let old_create = old_create.await.unwrap();
    in_flight.settled().await;
    let stored = s3.get(&path).await.unwrap().bytes().await.unwrap();
    let stored = String::from_utf8_lossy(&stored).into_owned();
    println!(
        "planted {planted:?}: O {:?}, D2 {:?}, stored {stored:?}",
        old_create.as_ref().map(|_| ()),
        d2_create.as_ref().map(|_| ())
    );
    (old_create.is_ok(), stored)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_object_store_0_12_5_writer_cannot_reclaim_a_record_written_afresh() {
    // D2's fresh record starts at the wall clock's microseconds: O's reclaim, on the
    // generation of D1's record alone, fails; O waits on, and finds D2's object.
    let (old_acknowledged, stored) = old_writer_across_a_deleted_record(None).await;
    assert!(
        !old_acknowledged || stored == "O",
        "the 0.12.5 writer's acknowledged create was overwritten by {stored:?}"
    );
    assert_eq!(stored, "D2");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_commit_leases_from_zero_the_0_12_5_writer_takes_a_live_lease() {
    let (old_acknowledged, stored) =
        old_writer_across_a_deleted_record(Some(PlantedBug::CommitLeasesFromZero)).await;
    assert!(
        old_acknowledged && stored != "O",
        "with generations from 0 the 0.12.5 writer's reclaim should have taken D2's live \
         lease and lost its commit to D2's write (acknowledged {old_acknowledged}, stored \
         {stored:?})"
    );
}

/// A fresh process's lease manager on `table`: a 1 s lease (expiry after 3 s), polled
/// every 20 ms.
fn one_second_leases(table: &DynamoLeaseTable) -> LeaseManager {
    LeaseManager::new(
        Arc::new(table.clone()),
        LeaseConfig::new(table.table_name())
            .with_timeout(Duration::from_secs(1))
            .with_poll_interval(Duration::from_millis(20)),
    )
    .unwrap()
}

/// P1 creates, another client deletes the object with a plain signed DELETE, and a fresh
/// process P2 creates it again: how long P2's create took. `keep`: P1 keeps its create's
/// lease (the opt-in for create-only logs). A 1 s lease, so a wait for expiry is 3 s.
async fn re_create_after_a_foreign_delete(keep: bool) -> Duration {
    let s3: Arc<dyn ObjectStore> = Arc::new(
        S3Server::S3rver
            .fresh_store(S3ConditionalPut::ETagMatch)
            .await,
    );
    let table = fresh_table().await;
    let process = || {
        let leases = one_second_leases(&table);
        let leases = if keep {
            leases.keep_create_leases()
        } else {
            leases
        };
        CommitStore::new(s3.clone(), leases)
    };
    let path = Path::from("lock/leader");
    process()
        .put_opts(&path, "P1".into(), PutMode::Create.into())
        .await
        .unwrap();
    s3.delete(&path).await.unwrap();
    let started = Instant::now();
    process()
        .put_opts(&path, "P2".into(), PutMode::Create.into())
        .await
        .unwrap();
    started.elapsed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_re_create_after_a_delete_by_another_client_takes_well_under_a_second() {
    let took = re_create_after_a_foreign_delete(false).await;
    assert!(took < Duration::from_secs(1), "the re-create took {took:?}");
}

/// P1 creates a lock object on SeaweedFS (which enforces conditions) and deletes it; the
/// client's first attempt of the delete lingers and lands 1.5 s after the answer (to its
/// retry). A fresh process P2 creates the object again meanwhile. Whether P2's
/// acknowledged object stands once the lingering attempt has landed, and how long P2's
/// create took. `hold`: both processes hold paths. A 1 s lease: expiry after 3 s.
async fn re_create_under_a_lingering_delete(hold: bool) -> (bool, Duration) {
    let s3 = Arc::new(ScriptedStore::lingering_deletes(
        Arc::new(
            S3Server::SeaweedFs
                .fresh_store(S3ConditionalPut::ETagMatch)
                .await,
        ),
        Duration::from_millis(1500),
    ));
    let table = fresh_table().await;
    let process = || {
        let leases = one_second_leases(&table);
        let store = CommitStore::new(s3.clone() as Arc<dyn ObjectStore>, leases);
        if hold { store.hold_paths() } else { store }
    };
    let path = Path::from("lock/leader");
    let p1 = process();
    p1.put_opts(&path, "P1".into(), PutMode::Create.into())
        .await
        .unwrap();
    p1.delete(&path).await.unwrap();
    let started = Instant::now();
    process()
        .put_opts(&path, "P2".into(), PutMode::Create.into())
        .await
        .unwrap();
    let took = started.elapsed();
    s3.lingering_landed().await;
    let stands = match s3.inner.get(&path).await {
        Ok(found) => found.bytes().await.unwrap() == "P2",
        Err(object_store::Error::NotFound { .. }) => false,
        Err(e) => panic!("reading the lock object: {e}"),
    };
    (stands, took)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_paths_held_a_lingering_delete_never_removes_a_re_create() {
    let (stands, took) = re_create_under_a_lingering_delete(true).await;
    assert!(
        stands,
        "the lingering delete removed P2's acknowledged object"
    );
    assert!(
        took >= Duration::from_millis(1500),
        "P2 created in {took:?}, before the lingering attempt could land"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_held_paths_a_lingering_delete_removes_a_re_create() {
    let (stands, took) = re_create_under_a_lingering_delete(false).await;
    assert!(
        !stands,
        "P2's object stood (created in {took:?}): the gap this shows has closed by default"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_create_leases_kept_the_re_create_waits_for_expiry() {
    let took = re_create_after_a_foreign_delete(true).await;
    assert!(
        took >= Duration::from_secs(3),
        "the re-create took only {took:?}"
    );
}
