//! By default a successful create's lease is released in the background (two DynamoDB
//! writes per commit, one on the critical path), so a re-create after a delete by anyone
//! is immediate. With `keep_create_leases` it is kept unreleased (one write per commit)
//! and released when the object is deleted through the store; a delete elsewhere then
//! leaves the re-create to wait for expiry, as with object_store 0.12.5. On Tokio's paused
//! clock, so a wait for expiry shows as a minute of virtual time, not as a slow test.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::faults::FaultyTable;
use dynacommit::CommitStore;
use dynacommit::lease::{LeaseManager, LeaseTable};
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutMode};
use tokio::time::Instant;

/// The lease timeout x skew rate of the default settings: what a waiter sits out.
const EXPIRY: Duration = Duration::from_secs(60);

fn store(inner: Arc<dyn ObjectStore>, table: Arc<FaultyTable>, keep: bool) -> CommitStore {
    let mut leases = LeaseManager::new(
        table as Arc<dyn LeaseTable>,
        common::test_lease_config("memory"),
    )
    .unwrap();
    if keep {
        leases = leases.keep_create_leases();
    }
    CommitStore::new(inner, leases)
}

/// Two processes (a lease manager each) on one table and one store.
fn two_processes(keep: bool) -> (CommitStore, CommitStore, Arc<FaultyTable>) {
    let inner: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let table = FaultyTable::new();
    let first = store(inner.clone(), table.clone(), keep);
    let second = store(inner, table.clone(), keep);
    (first, second, table)
}

/// Creates `path` and waits for the store's background work; returns how long it took.
async fn create(store: &CommitStore, path: &Path) -> Duration {
    let started = Instant::now();
    store
        .put_opts(path, "commit".into(), PutMode::Create.into())
        .await
        .unwrap();
    store.leases().settled().await;
    started.elapsed()
}

#[tokio::test(start_paused = true)]
async fn a_kept_create_writes_one_lease_and_a_delete_through_the_store_frees_the_path() {
    let inner: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let table = FaultyTable::new();
    let store = store(inner, table.clone(), true);
    let path = Path::from("lock/leader");

    create(&store, &path).await;
    let writes = table.writes();
    assert_eq!(writes.len(), 1, "one DynamoDB write per create: {writes:?}");
    assert!(!writes[0].1.released);

    store.delete(&path).await.unwrap();
    store.leases().settled().await;
    let writes = table.writes();
    assert_eq!(writes.len(), 2, "{writes:?}");
    assert!(
        writes[1].1.released,
        "the delete released the create's lease"
    );

    let took = create(&store, &path).await;
    assert!(
        took < Duration::from_secs(1),
        "the re-create waited {took:?}"
    );
    assert_eq!(table.writes().len(), 3);
}

#[tokio::test(start_paused = true)]
async fn with_kept_leases_a_delete_elsewhere_leaves_the_re_create_to_wait_for_expiry() {
    // Two processes on one table and store: the first creates, the second deletes and
    // creates again. The first's kept lease is not the second's to release, so the second
    // waits it out, as object_store 0.12.5 always did.
    let (first, second, _) = two_processes(true);
    let path = Path::from("lock/leader");

    create(&first, &path).await;
    second.delete(&path).await.unwrap();
    let took = create(&second, &path).await;
    assert!(took >= EXPIRY, "{took:?}");
}

#[tokio::test(start_paused = true)]
async fn by_default_a_create_is_released_and_a_delete_elsewhere_stalls_nobody() {
    // The planted bug for this default is `keep_create_leases` itself: the test above.
    let (first, second, table) = two_processes(false);
    let path = Path::from("lock/leader");

    create(&first, &path).await;
    assert_eq!(table.writes().len(), 2, "acquire and release");
    second.delete(&path).await.unwrap();
    let took = create(&second, &path).await;
    assert!(took < Duration::from_secs(1), "{took:?}");
}

#[tokio::test(start_paused = true)]
async fn a_re_create_by_the_creator_after_a_delete_elsewhere_is_immediate() {
    // The first process still keeps its create's lease when the second deletes the
    // object; when the first creates the path again, it releases its own kept lease
    // instead of waiting it out as a stranger's.
    let (first, second, table) = two_processes(true);
    let path = Path::from("lock/leader");

    create(&first, &path).await;
    // While the object is there, a create of it by the keeper checks first: it fails
    // with nothing written, and the lease stays kept.
    let again = first
        .put_opts(&path, "again".into(), PutMode::Create.into())
        .await
        .unwrap_err();
    assert!(
        matches!(again, object_store::Error::AlreadyExists { .. }),
        "{again:?}"
    );
    first.leases().settled().await;
    assert_eq!(
        table.writes().len(),
        1,
        "the kept lease was released for nothing"
    );
    second.delete(&path).await.unwrap();
    let took = create(&first, &path).await;
    assert!(
        took < Duration::from_secs(1),
        "the re-create waited {took:?}"
    );
}
