//! Held paths (`CommitStore::hold_paths`): every write and delete of a path takes the
//! path's one lease and releases it only once `timeout x skew` has passed since its last
//! write, so the next writer of the path, in another process, waits that out, and a path
//! left alone longer is taken at once. On Tokio's paused clock over the in-process table,
//! so the waits show as virtual time. (Lingering deletes and duplicated writes, what the
//! wait is for: the simulator, and `tests/fleet_edges.rs` on the real servers.)

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::faults::FaultyTable;
use dynacommit::CommitStore;
use dynacommit::lease::{LeaseManager, LeaseTable};
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, UpdateVersion};
use tokio::time::Instant;

/// The lease timeout x skew rate of the default settings.
const QUIET: Duration = Duration::from_secs(60);

/// Two processes (a lease manager each) holding paths, on one table and one store.
fn two_processes() -> (CommitStore, CommitStore) {
    let inner: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let table = FaultyTable::new();
    let process = || {
        let leases = LeaseManager::new(
            table.clone() as Arc<dyn LeaseTable>,
            common::test_lease_config("memory"),
        )
        .unwrap();
        CommitStore::new(inner.clone(), leases).hold_paths()
    };
    (process(), process())
}

/// Creates `path` through `store`; how long it took.
async fn create(store: &CommitStore, path: &Path, body: &'static str) -> Duration {
    let (created, took) = timed(store.put_opts(path, body.into(), PutMode::Create.into())).await;
    created.unwrap();
    took
}

/// How long `op` took.
async fn timed<T>(op: impl std::future::Future<Output = T>) -> (T, Duration) {
    let started = Instant::now();
    let out = op.await;
    (out, started.elapsed())
}

#[tokio::test(start_paused = true)]
async fn the_next_writer_of_a_held_path_waits_out_the_last_write_and_no_longer() {
    let (first, second) = two_processes();
    let path = Path::from("lock/leader");
    let took = create(&first, &path, "first").await;
    assert!(
        took < Duration::from_secs(1),
        "a first create took {took:?}"
    );

    // Another process's delete waits until the create's lease has gone quiet.
    let ((), took) = timed(async { second.delete(&path).await.unwrap() }).await;
    assert!(
        took >= QUIET - Duration::from_secs(1) && took < QUIET + Duration::from_secs(2),
        "the delete went after {took:?}"
    );

    // Left alone past that, the path is taken at once: its holder released it when quiet.
    tokio::time::sleep(Duration::from_secs(600)).await;
    let took = create(&first, &path, "again").await;
    assert!(
        took < Duration::from_secs(1),
        "a create of a path left alone for 10 minutes took {took:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn an_update_of_a_held_path_waits_out_a_create_of_it() {
    let (first, second) = two_processes();
    let path = Path::from("pointer");
    let created = first
        .put_opts(&path, "v1".into(), PutMode::Create.into())
        .await
        .unwrap();
    let update = PutMode::Update(UpdateVersion {
        e_tag: created.e_tag,
        version: None,
    });
    let (updated, took) = timed(second.put_opts(&path, "v2".into(), update.into())).await;
    updated.unwrap();
    assert!(
        took >= QUIET - Duration::from_secs(1),
        "the update of another version's lease went after {took:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_held_rename_holds_its_source_too() {
    let (first, second) = two_processes();
    let (from, to) = (Path::from("staging/a"), Path::from("final/a"));
    first.put(&from, "body".into()).await.unwrap();
    first.rename_if_not_exists(&from, &to).await.unwrap();
    assert!(matches!(
        first.head(&from).await,
        Err(object_store::Error::NotFound { .. })
    ));
    assert_eq!(first.get(&to).await.unwrap().bytes().await.unwrap(), "body");
    // A create of the source, by another process, waits out the rename's delete of it.
    let took = create(&second, &from, "new").await;
    assert!(
        took >= QUIET - Duration::from_secs(1),
        "the source was created again after {took:?}"
    );
    // The target is held too: a create of it fails on its object, after the wait.
    let (refused, _) = timed(second.put_opts(&to, "x".into(), PutMode::Create.into())).await;
    assert!(
        matches!(refused, Err(object_store::Error::AlreadyExists { .. })),
        "{refused:?}"
    );
}
