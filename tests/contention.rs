//! What contention costs a writer: one that finds another's commit in progress, after its
//! own checks have been failing, waits for it without a refused DynamoDB write; and a
//! waiter looks for a commit's outcome once, after about one hold, instead of early and
//! often; a writer that has just committed goes straight at the next version; and
//! contention met on one log changes nothing for commits to another table. On
//! Tokio's paused clock: every delay is exact.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::faults::{FaultyTable, LatentStore, ScriptedStore};
use dynacommit::CommitStore;
use dynacommit::bench::CountingTable;
use dynacommit::lease::{Clock, LeaseConfig, LeaseManager, LeaseTable, SystemClock};
use futures::future::BoxFuture;
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

/// Puts `path` into `objects` behind the writer's back, then has `store` try to create it:
/// its check fails, so that directory is contended for it (as for a loser of a log race).
async fn find_taken(store: &CommitStore, objects: &InMemory, path: &str) {
    objects
        .put(&Path::from(path), "taken".into())
        .await
        .unwrap();
    assert!(!create(store, path).await, "{path} was taken");
}

/// A lease manager over `table` whose requests are counted.
fn counted_leases(
    table: &Arc<FaultyTable>,
    config: LeaseConfig,
) -> (LeaseManager, Arc<CountingTable>) {
    let counted = Arc::new(CountingTable::new(table.clone() as Arc<dyn LeaseTable>));
    let leases = LeaseManager::new(counted.clone() as Arc<dyn LeaseTable>, config).unwrap();
    (leases, counted)
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
    find_taken(&contended, &objects, "log/0.json").await;
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

#[tokio::test(start_paused = true)]
async fn a_writer_that_committed_goes_straight_at_the_next_version() {
    let objects = Arc::new(InMemory::new());
    let (leases, counted) =
        counted_leases(&FaultyTable::new(), common::test_lease_config("memory"));
    let store = CommitStore::new(objects.clone() as Arc<dyn ObjectStore>, leases);

    // It finds version 0 taken: the log is contended for it.
    find_taken(&store, &objects, "log/0.json").await;
    // Version 1 it wins, checking first and reading the record before its PutItem.
    let reads = counted.counts().reads;
    assert!(create(&store, "log/1.json").await);
    assert_eq!(
        counted.counts().reads,
        reads + 1,
        "version 1 was not approached as contended"
    );
    // Having committed, it is at the head of the log: version 2 goes out as uncontended
    // ones do, the check beside the PutItem, no read.
    let reads = counted.counts().reads;
    assert!(create(&store, "log/2.json").await);
    assert_eq!(
        counted.counts().reads,
        reads,
        "the writer at the head of the log read a record"
    );
}

/// Tokio's clock, with every random pause the longest allowed: a back-off owed shows in
/// the time an operation takes.
#[derive(Debug)]
struct LongestPauses;

impl Clock for LongestPauses {
    fn now(&self) -> Instant {
        Instant::now()
    }

    fn sleep_until(&self, deadline: Instant) -> BoxFuture<'static, ()> {
        Box::pin(tokio::time::sleep_until(deadline))
    }

    fn unix_time(&self) -> Duration {
        SystemClock.unix_time()
    }

    fn random_pause(&self, bound: Duration) -> Duration {
        bound
    }
}

#[tokio::test(start_paused = true)]
async fn contention_on_one_log_leaves_commits_to_another_table_alone() {
    let objects = Arc::new(InMemory::new());
    let slow: Arc<dyn ObjectStore> = Arc::new(ScriptedStore::slow(
        objects.clone(),
        Duration::from_millis(5),
    ));
    let table = FaultyTable::new();
    let config = common::test_lease_config("memory");
    let (leases, counted) = counted_leases(&table, config.clone());
    let leases = leases.with_clock(Arc::new(LongestPauses));
    let both = CommitStore::new(slow.clone(), leases);

    // The writer finds a version of the hot log taken, then loses the next to a commit in
    // progress: that log is contended, and its next operation owes a pause.
    find_taken(&both, &objects, "hot/_delta_log/0.json").await;
    let holder = commit_in_progress(
        writer(slow.clone(), &table, &config),
        &table,
        "hot/_delta_log/1.json",
    )
    .await;
    assert!(!create(&both, "hot/_delta_log/1.json").await);
    assert!(holder.await.unwrap());
    both.leases().settled().await;

    // A commit to another table: the check beside the PutItem, no read, no pause; the
    // 5 ms write is all it takes.
    let reads = counted.counts().reads;
    let started = Instant::now();
    assert!(create(&both, "cold/_delta_log/0.json").await);
    let took = started.elapsed();
    assert_eq!(
        counted.counts().reads,
        reads,
        "the cold table's commit read a record"
    );
    assert!(
        took < Duration::from_millis(6),
        "the cold table's commit took {took:?}"
    );

    // The hot log keeps both: its next commit pauses (two holds of 5 ms: one loss in a
    // row), then checks first and reads the record before its PutItem.
    let reads = counted.counts().reads;
    let started = Instant::now();
    assert!(create(&both, "hot/_delta_log/2.json").await);
    let took = started.elapsed();
    assert_eq!(
        counted.counts().reads,
        reads + 1,
        "the hot log's commit read no record"
    );
    assert!(
        took >= Duration::from_millis(15),
        "the hot log's commit took {took:?}"
    );
}

/// Tasks sharing one store (so one lease manager) that race to change one object take the
/// lease in turn: the first runs the protocol, and those behind its success learn that
/// they lost without a request, where writers of their own each send a PutItem that is
/// refused.
#[tokio::test(start_paused = true)]
async fn tasks_sharing_a_store_take_a_lease_in_turn_and_the_beaten_send_nothing() {
    let objects = Arc::new(InMemory::new());
    let table = FaultyTable::new();
    let config = common::test_lease_config("memory");
    let counters = Arc::new(common::Counters::default());
    // Every request takes 2 ms and writes 5 ms more, so that all eight are queued before
    // the first one's write is sent (a task queued after that only checks first: the
    // write may have landed before it came).
    let latent: Arc<dyn ObjectStore> = Arc::new(LatentStore::new(objects.clone(), 2..3));
    let counted: Arc<dyn ObjectStore> = Arc::new(ScriptedStore {
        counters: Some(counters.clone()),
        ..ScriptedStore::slow(latent, Duration::from_millis(5))
    });
    let s3 = || counters.s3.load(std::sync::atomic::Ordering::SeqCst);
    let shared = writer(counted.clone(), &table, &config);

    // Eight creates of one path at once.
    let created = futures::future::join_all((0..8).map(|_| create(&shared, "log/0.json"))).await;
    assert_eq!(created.iter().filter(|won| **won).count(), 1, "{created:?}");
    assert_eq!(table.refused(), 0, "a task sent a PutItem that was refused");
    shared.leases().settled().await;
    assert_eq!(table.writes().len(), 2, "one lease and its release");
    assert_eq!(
        s3(),
        2,
        "the winner's HEAD and PUT; the beaten sent nothing"
    );

    // Eight updates from the one ETag at once.
    let path = Path::from("pointer");
    let etag = objects.put(&path, "v0".into()).await.unwrap().e_tag;
    let (writes, s3_before) = (table.writes().len(), s3());
    let swapped =
        futures::future::join_all((0..8).map(|_| swap(&shared, &path, &etag, "v1"))).await;
    shared.leases().settled().await;
    assert_eq!(swapped.iter().filter(|won| **won).count(), 1, "{swapped:?}");
    assert_eq!(table.refused(), 0);
    assert_eq!(
        table.writes().len() - writes,
        2,
        "the lease and its release"
    );
    assert_eq!(s3() - s3_before, 2);

    // The same race between writers of their own (a manager each, as processes): every
    // loser's PutItem is refused. This is what the queue spares, and shows the counts
    // above can fail.
    let etag = objects.put(&path, "v2".into()).await.unwrap().e_tag;
    let (refused, s3_before) = (table.refused(), s3());
    let own: Vec<_> = (0..8)
        .map(|_| writer(counted.clone(), &table, &config))
        .collect();
    let swapped = futures::future::join_all(own.iter().map(|w| swap(w, &path, &etag, "v3"))).await;
    assert_eq!(swapped.iter().filter(|won| **won).count(), 1, "{swapped:?}");
    assert_eq!(table.refused() - refused, 7);
    assert!(s3() - s3_before > 2);
}

/// Replaces `path` at `etag` with `body`: `true` if this call did, `false` if the ETag had
/// changed.
async fn swap(store: &CommitStore, path: &Path, etag: &Option<String>, body: &'static str) -> bool {
    let mode = PutMode::Update(object_store::UpdateVersion {
        e_tag: etag.clone(),
        version: None,
    });
    match store.put_opts(path, body.into(), mode.into()).await {
        Ok(_) => true,
        Err(object_store::Error::Precondition { .. }) => false,
        Err(e) => panic!("updating {path}: {e}"),
    }
}

/// Tokio's clock, and a wall clock that moves on a millisecond at every reading: the worst
/// case of a busy machine, where two readings a microsecond apart cross a millisecond.
#[derive(Debug)]
struct TickingWallClock(std::sync::atomic::AtomicU64);

impl Clock for TickingWallClock {
    fn now(&self) -> Instant {
        Instant::now()
    }

    fn sleep_until(&self, deadline: Instant) -> BoxFuture<'static, ()> {
        Box::pin(tokio::time::sleep_until(deadline))
    }

    fn unix_time(&self) -> Duration {
        let tick = self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Duration::from_millis(1_800_000_000_000 + tick)
    }
}

/// A fresh commit record must read as written once (taken and written at one instant):
/// waiters take such a record for a commit in progress and look for its outcome after
/// about one hold. Its two times were read from the wall clock apart, and on a busy
/// machine they differed by a millisecond now and then: the waiter then started at 1/16
/// of the poll interval instead (`a_waiter_looks_for_a_commits_outcome_after_about_one_hold`
/// failed so in CI).
#[tokio::test(start_paused = true)]
async fn a_fresh_commit_record_is_written_at_the_instant_its_lease_is_taken() {
    let table = FaultyTable::new();
    let leases = LeaseManager::new(
        table.clone() as Arc<dyn LeaseTable>,
        LeaseConfig::new("memory"),
    )
    .unwrap()
    .with_clock(Arc::new(TickingWallClock(Default::default())));
    let store = CommitStore::new(Arc::new(InMemory::new()) as Arc<dyn ObjectStore>, leases);
    assert!(create(&store, "log/0.json").await);
    let (_, first) = table
        .writes()
        .into_iter()
        .next()
        .expect("a lease record was written");
    let holder = first.holder.expect("the record names its holder");
    assert_eq!(
        holder.since_ms, holder.written_ms,
        "a fresh record reads as renewed"
    );
}
