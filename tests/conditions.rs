//! The condition modes of `CommitStore`: the probe of what a store enforces, `auto` going
//! native where the store enforces every condition (no lease written) and leasing
//! otherwise, `native` passing conditions through (and so losing commits on a store that
//! ignores them), and the condition carried by a create under an `auto` lease.

mod common;

use std::sync::{Arc, Mutex};

use bytes::Bytes;
use common::faults::{FaultyTable, ScriptedStore};
use common::s3::S3Server;
use dynacommit::lease::{DynamoLeaseTable, LeaseManager, LeaseTable};
use dynacommit::race::{self, LogWriter, StoreWriter};
use dynacommit::{CommitStore, Conditions, Enforced};
use futures::TryStreamExt;
use object_store::aws::{S3ConditionalPut, S3CopyIfNotExists};
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutMode};

const NONE: Enforced = Enforced {
    create: false,
    update: false,
    copy: false,
};

/// A store over `inner` with leases on a fresh DynamoDB Local table whose writes are
/// logged.
async fn over(
    inner: Arc<dyn ObjectStore>,
    conditions: Conditions,
) -> (CommitStore, Arc<FaultyTable>) {
    let name = common::unique_name("conditions");
    let dynamo = DynamoLeaseTable::new(common::dynamodb().await, &name);
    dynamo.ensure_table().await.unwrap();
    let table = FaultyTable::over(Arc::new(dynamo));
    let leases = LeaseManager::new(
        table.clone() as Arc<dyn LeaseTable>,
        common::test_lease_config(&name),
    )
    .unwrap();
    (
        CommitStore::new(inner, leases).with_conditions(conditions),
        table,
    )
}

/// SeaweedFS configured to send `If-None-Match`, `If-Match` and copy-if-not-exists.
async fn seaweedfs_with_conditions() -> Arc<dyn ObjectStore> {
    let bucket = S3Server::SeaweedFs.fresh_bucket().await;
    Arc::new(S3Server::SeaweedFs.store_with(
        &bucket,
        S3ConditionalPut::ETagMatch,
        Some(S3CopyIfNotExists::Header(
            "If-None-Match".into(),
            "*".into(),
        )),
    ))
}

async fn probe_leftovers(store: &dyn ObjectStore) -> usize {
    let listed: Vec<_> = store
        .list(Some(&Path::from(".dynacommit-probe")))
        .try_collect()
        .await
        .unwrap();
    listed.len()
}

#[tokio::test]
async fn the_probe_finds_what_each_store_enforces_and_leaves_nothing() {
    let seaweed = seaweedfs_with_conditions().await;
    let s3rver = s3rver().await;
    let disabled: Arc<dyn ObjectStore> = Arc::new(
        S3Server::SeaweedFs
            .fresh_store(S3ConditionalPut::Disabled)
            .await,
    );
    let cases: [(&str, Arc<dyn ObjectStore>, Enforced); 5] = [
        ("InMemory", Arc::new(InMemory::new()), Enforced::ALL),
        ("SeaweedFS with conditions", seaweed, Enforced::ALL),
        // s3rver answers If-None-Match and If-Match with a plain write.
        ("s3rver", s3rver, NONE),
        // object_store refuses conditions itself when they are disabled.
        ("SeaweedFS, conditions disabled", disabled, NONE),
        // Refusing an update on its own ETag is not enforcing: `auto` would fail them all.
        (
            "refusing every If-Match",
            Arc::new(ScriptedStore::refusing_every_update(Arc::new(
                InMemory::new(),
            ))),
            Enforced {
                update: false,
                ..Enforced::ALL
            },
        ),
    ];
    for (name, inner, expected) in cases {
        let (store, table) = over(inner.clone(), Conditions::Auto).await;
        let found = store.enforced().await.unwrap();
        assert_eq!(found, expected, "{name}");
        assert_eq!(store.enforced().await.unwrap(), found, "{name}: remembered");
        assert_eq!(
            probe_leftovers(&*inner).await,
            0,
            "{name}: probe objects left"
        );
        assert!(table.writes().is_empty(), "{name}: the probe wrote leases");
    }
}

/// The log race, 8 writers x 5 commits, through a store over `inner` in `conditions`
/// mode; with the lease table it wrote to.
async fn race_over(
    inner: Arc<dyn ObjectStore>,
    conditions: Conditions,
) -> (race::RaceReport, Arc<FaultyTable>) {
    let (store, table) = over(inner.clone(), conditions).await;
    let store: Arc<dyn ObjectStore> = Arc::new(store);
    let writers: Vec<Arc<dyn LogWriter>> = (0..8)
        .map(|_| Arc::new(StoreWriter(store.clone())) as Arc<dyn LogWriter>)
        .collect();
    let report = race::run(writers, inner, &Path::from("_log"), 5, None)
        .await
        .unwrap();
    (report, table)
}

/// A fresh s3rver bucket (which ignores conditions), the client sending them.
async fn s3rver() -> Arc<dyn ObjectStore> {
    Arc::new(
        S3Server::S3rver
            .fresh_store(S3ConditionalPut::ETagMatch)
            .await,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_goes_native_where_the_store_enforces_and_leases_where_it_does_not() {
    // SeaweedFS enforces every condition: the race runs on them alone, no lease written.
    let (report, table) = race_over(seaweedfs_with_conditions().await, Conditions::Auto).await;
    assert!(report.is_clean(), "{report:?}");
    assert_eq!(report.versions, 40);
    assert!(report.conflicts > 0, "8 writers never collided: {report:?}");
    assert!(table.writes().is_empty(), "auto wrote leases on SeaweedFS");

    // s3rver enforces nothing: auto falls back to leases, and the race stays clean.
    let (report, table) = race_over(s3rver().await, Conditions::Auto).await;
    assert!(report.is_clean(), "{report:?}");
    assert_eq!(report.versions, 40);
    assert!(table.writes().len() >= 40, "auto took no leases on s3rver");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn native_on_a_store_that_ignores_conditions_loses_commits() {
    // The protection off, by configuration: `native` trusts s3rver, which ignores
    // If-None-Match, so writers of one version all "win" it.
    let (report, table) = race_over(s3rver().await, Conditions::Native).await;
    assert!(!report.is_clean(), "{report:?}");
    assert!(table.writes().is_empty());
}

/// A store in `conditions` mode over a local directory whose next put is preceded by a
/// plain write of `armed`'s body. The local file system enforces create-if-absent but not
/// update-if-ETag, so `auto` takes leases there, and its creates under them carry
/// `If-None-Match`.
async fn with_a_write_before_the_put(
    armed: Arc<Mutex<Option<Bytes>>>,
    conditions: Conditions,
) -> (CommitStore, Arc<dyn ObjectStore>, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let local: Arc<dyn ObjectStore> =
        Arc::new(object_store::local::LocalFileSystem::new_with_prefix(dir.path()).unwrap());
    let inner = Arc::new(ScriptedStore::writing_before_next_put(local.clone(), armed));
    let (store, table) = over(inner, conditions).await;
    if conditions == Conditions::Auto {
        let enforced = store.enforced().await.unwrap();
        assert!(enforced.create && !enforced.update, "{enforced}");
        assert!(table.writes().is_empty());
    }
    (store, local, dir)
}

#[tokio::test]
async fn a_create_under_a_lease_carries_its_condition() {
    // A writer outside the protocol slips in between the check and the write: on a store
    // that enforces the condition, the write under the lease is refused, not laid over it,
    // and the refusal is not an `AlreadyExists` (which a caller would take for a rival's
    // version and commit the same change again under another).
    an_outsider_between_check_and_write_is_refused(Conditions::Auto).await;
}

/// In `conditions` mode, a plain write by an outsider lands between a leased create's
/// check and its write: the leased write is refused with a Generic error marked as
/// possibly applied, and the outsider's object stands.
async fn an_outsider_between_check_and_write_is_refused(conditions: Conditions) {
    let armed = Arc::new(Mutex::new(None));
    let (store, local, _dir) = with_a_write_before_the_put(armed.clone(), conditions).await;
    let path = Path::from("log/0.json");
    *armed.lock().unwrap() = Some(Bytes::from_static(b"outsider"));
    let refused = store
        .put_opts(&path, "ours".into(), PutMode::Create.into())
        .await
        .unwrap_err();
    assert!(
        matches!(refused, object_store::Error::Generic { .. }),
        "{refused:?}"
    );
    assert!(dynacommit::may_have_applied(&refused));
    let stored = local.get(&path).await.unwrap().bytes().await.unwrap();
    assert_eq!(stored.as_ref(), b"outsider");
}

#[tokio::test]
async fn a_refusal_of_our_own_earlier_attempt_is_a_success() {
    // An earlier attempt of this very write landed (its answer lost, the client retried):
    // the retry's refusal finds our bytes in place, and the write succeeds. (Bytes equal
    // to ours from a writer outside the protocol would pass as ours too:
    // docs/protocol.md says so.)
    let armed = Arc::new(Mutex::new(None));
    let (store, local, _dir) = with_a_write_before_the_put(armed.clone(), Conditions::Auto).await;
    let path = Path::from("log/0.json");
    *armed.lock().unwrap() = Some(Bytes::from_static(b"ours"));
    let written = store
        .put_opts(&path, "ours".into(), PutMode::Create.into())
        .await
        .unwrap();
    let stored = local.get(&path).await.unwrap();
    assert_eq!(written.e_tag, stored.meta.e_tag);
    assert_eq!(stored.bytes().await.unwrap().as_ref(), b"ours");
}

#[tokio::test]
async fn in_lease_mode_too_the_write_under_the_lease_carries_its_condition() {
    // Lease mode runs no probe, yet its leased write carries `If-None-Match` as `auto`'s
    // does: a writer without a lease (a native-mode writer of a rolling migration, a
    // plain client) that slips in between the check and the write is refused, not
    // overwritten. (Written plain, as object_store 0.12.5 writes, the outsider's commit
    // would be lost: the simulator's `catches_a_plain_write_under_a_lease_beside_native_writers`.)
    an_outsider_between_check_and_write_is_refused(Conditions::Lease).await;
}

#[tokio::test]
async fn a_store_that_refuses_a_header_gets_the_write_plain_under_the_lease() {
    // The local file system answers `PutMode::Update` with NotImplemented: the leased
    // update is sent again without its condition (nothing was written), and the next
    // goes plain at once, for a while.
    let dir = tempfile::tempdir().unwrap();
    let local: Arc<dyn ObjectStore> =
        Arc::new(object_store::local::LocalFileSystem::new_with_prefix(dir.path()).unwrap());
    let store = CommitStore::new(local.clone(), common::memory_leases());
    swaps_with_a_stale_one_refused(&store, &*local).await;
}

/// Through `store`: a pointer created, swapped twice (v1 -> v2 -> v3), and a swap naming
/// the replaced v2 refused; `inner` holds v3 at the end.
async fn swaps_with_a_stale_one_refused(store: &CommitStore, inner: &dyn ObjectStore) {
    let path = Path::from("pointer");
    let first = store
        .put_opts(&path, "v1".into(), PutMode::Create.into())
        .await
        .unwrap();
    let second = store
        .put_opts(&path, "v2".into(), PutMode::Update(first.into()).into())
        .await
        .unwrap();
    store
        .put_opts(
            &path,
            "v3".into(),
            PutMode::Update(second.clone().into()).into(),
        )
        .await
        .unwrap();
    let stale = store
        .put_opts(&path, "v4".into(), PutMode::Update(second.into()).into())
        .await
        .unwrap_err();
    assert!(
        matches!(stale, object_store::Error::Precondition { .. }),
        "{stale:?}"
    );
    let stored = inner.get(&path).await.unwrap().bytes().await.unwrap();
    assert_eq!(stored.as_ref(), b"v3");
}

#[tokio::test]
async fn a_store_refusing_every_if_match_still_takes_leased_updates() {
    // A store that answers every `If-Match` with 412 (whatever the ETag, quoted or not):
    // the leased update is refused while the object still has the ETag named, so a probe
    // on a fresh key settles that the store refuses the header, and the write goes plain
    // under the lease, as before leased writes carried conditions. A stale update is
    // still refused, by the lease's check.
    let memory: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let refusing: Arc<dyn ObjectStore> =
        Arc::new(ScriptedStore::refusing_every_update(memory.clone()));
    let store = CommitStore::new(refusing, common::memory_leases());
    swaps_with_a_stale_one_refused(&store, &*memory).await;
    let left: Vec<_> = memory
        .list(Some(&Path::from(".dynacommit-probe")))
        .try_collect()
        .await
        .unwrap();
    assert!(left.is_empty(), "the probe left {left:?}");
}

#[tokio::test]
async fn a_create_refused_while_its_object_is_absent_is_sent_again_conditionally() {
    // AWS answers a create racing a delete of its key with 409, nothing written: the
    // object is absent afterwards, so the leased create goes once more, still carrying
    // `If-None-Match`, and succeeds; no probe runs and nothing goes plain.
    let memory: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let armed = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let inner: Arc<dyn ObjectStore> = Arc::new(ScriptedStore::refusing_next_create(
        memory.clone(),
        armed.clone(),
    ));
    let store = CommitStore::new(inner, common::memory_leases());
    let path = Path::from("lock/leader");
    store
        .put_opts(&path, "ours".into(), PutMode::Create.into())
        .await
        .unwrap();
    assert!(
        !armed.load(std::sync::atomic::Ordering::SeqCst),
        "the refusal never came"
    );
    let stored = memory.get(&path).await.unwrap().bytes().await.unwrap();
    assert_eq!(stored.as_ref(), b"ours");
    let probed: Vec<_> = memory
        .list(Some(&Path::from(".dynacommit-probe")))
        .try_collect()
        .await
        .unwrap();
    assert!(probed.is_empty() && store.enforced().await.is_ok());
}

/// Credentials that may write under one prefix only (an IAM policy for one table): the
/// probe at the store's root is refused, and names the path; under the probe path it
/// runs, and leaves nothing behind.
#[tokio::test]
async fn the_probe_runs_under_the_probe_path() {
    let memory: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let table = Path::from("tables/events");
    let restricted = || -> Arc<dyn ObjectStore> {
        Arc::new(ScriptedStore::writing_only_under(
            memory.clone(),
            table.clone(),
        ))
    };
    let at_root =
        CommitStore::new(restricted(), common::memory_leases()).with_conditions(Conditions::Auto);
    let refused = at_root.enforced().await.unwrap_err().to_string();
    assert!(refused.contains(".dynacommit-probe"), "{refused}");

    let under = CommitStore::new(restricted(), common::memory_leases())
        .with_conditions(Conditions::Auto)
        .with_probe_path(table.clone());
    assert!(under.enforced().await.unwrap().create);
    let left: Vec<_> = memory.list(None).try_collect().await.unwrap();
    assert!(left.is_empty(), "the probe left {left:?}");
}
