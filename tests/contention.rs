//! What contention costs a writer: one that finds another's commit in progress, after its
//! own checks have been failing, waits for it without a refused DynamoDB write; and a
//! waiter looks for a commit's outcome once, after about one hold, instead of early and
//! often. On Tokio's paused clock: every delay is exact.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::faults::{FaultyTable, ScriptedStore};
use dynacommit::CommitStore;
use dynacommit::lease::{LeaseConfig, LeaseManager, LeaseTable};
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutMode};
use tokio::time::Instant;

/// A writer process of its own: a lease manager of its own over the shared table.
fn writer(
    inner: Arc<dyn ObjectStore>,
    table: &Arc<FaultyTable>,
    config: &LeaseConfig,
) -> CommitStore {
    let leases = LeaseManager::new(table.clone() as Arc<dyn LeaseTable>, config.clone()).unwrap();
    CommitStore::new(inner, leases)
}

/// Creates `path`: `Ok(true)` if this call wrote it, `Ok(false)` if it already existed.
async fn create(store: &CommitStore, path: &str) -> bool {
    match store
        .put_opts(&Path::from(path), "commit".into(), PutMode::Create.into())
        .await
    {
        Ok(_) => true,
        Err(object_store::Error::AlreadyExists { .. }) => false,
        Err(e) => panic!("creating {path}: {e}"),
    }
}

/// Starts `holder`'s create of `path` (its write slow) and returns once its lease is
/// written, with the write still on its way.
async fn commit_in_progress(
    holder: CommitStore,
    table: &FaultyTable,
    path: &'static str,
) -> tokio::task::JoinHandle<bool> {
    let before = table.writes().len();
    let handle = tokio::spawn(async move { create(&holder, path).await });
    while !table.writes()[before..]
        .iter()
        .any(|(_, r)| r.path.ends_with(path))
    {
        tokio::task::yield_now().await;
    }
    handle
}

#[tokio::test(start_paused = true)]
async fn under_contention_a_commit_in_progress_costs_a_read_not_a_refused_write() {
    let objects = Arc::new(InMemory::new());
    let slow: Arc<dyn ObjectStore> = Arc::new(ScriptedStore::slow(
        objects.clone(),
        Duration::from_millis(5),
    ));
    let table = FaultyTable::new();
    let config = common::test_lease_config("memory");

    // A writer whose last create found its version taken (as a loser of a log race
    // does): its check failed, so it is in the contended mode.
    let contended = writer(slow.clone(), &table, &config);
    objects
        .put(&Path::from("log/0.json"), "taken".into())
        .await
        .unwrap();
    assert!(!create(&contended, "log/0.json").await);
    contended.leases().settled().await;

    // It arrives while another writer's commit of the next version is in progress.
    let holder =
        commit_in_progress(writer(slow.clone(), &table, &config), &table, "log/1.json").await;
    let refused = table.refused();
    assert!(
        !create(&contended, "log/1.json").await,
        "the holder's commit landed first"
    );
    assert!(holder.await.unwrap());
    assert_eq!(
        table.refused(),
        refused,
        "the contended writer read the holder's record and waited, without a PutItem"
    );

    // The same arrival by a writer whose checks have been passing: it sends its PutItem
    // beside the check (one round trip less when uncontended), and it is refused. This is
    // what the contended mode spares, and shows the count above can fail.
    let fresh = writer(slow.clone(), &table, &config);
    let holder = commit_in_progress(writer(slow, &table, &config), &table, "log/2.json").await;
    let refused = table.refused();
    assert!(!create(&fresh, "log/2.json").await);
    assert!(holder.await.unwrap());
    assert_eq!(table.refused(), refused + 1);
}

#[tokio::test(start_paused = true)]
async fn a_waiter_looks_for_a_commits_outcome_after_about_one_hold() {
    let objects = Arc::new(InMemory::new());
    let table = FaultyTable::new();
    // The default poll interval: before this, a waiter looked first after 1/16 of it
    // (6.25 ms), then at doubling steps.
    let config = LeaseConfig::new("memory");
    let holder_store: Arc<dyn ObjectStore> = Arc::new(ScriptedStore::slow(
        objects.clone(),
        Duration::from_millis(2),
    ));
    let waiter_store: Arc<dyn ObjectStore> = Arc::new(ScriptedStore::slow(
        objects.clone(),
        Duration::from_millis(3),
    ));
    let waiter = writer(waiter_store, &table, &config);
    // The waiter's own commits hold their lease 3 ms: its estimate of a hold.
    for i in 0..3 {
        assert!(create(&waiter, &format!("warm/{i}")).await);
    }

    let holder =
        commit_in_progress(writer(holder_store, &table, &config), &table, "log/1.json").await;
    let started = Instant::now();
    assert!(!create(&waiter, "log/1.json").await);
    let waited = started.elapsed();
    assert!(holder.await.unwrap());
    // The holder's write lands 2 ms in; the waiter looks once, at 3 ms.
    assert!(
        waited >= Duration::from_millis(2) && waited < Duration::from_millis(5),
        "learned the outcome after {waited:?}"
    );
}
