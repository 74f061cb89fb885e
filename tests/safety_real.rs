//! The safety review's holes, shown on the real servers (DynamoDB Local, s3rver) where a
//! real server can show them; the simulator (`tests/simulation.rs`) covers every hole
//! under random faults. Each test that can be made to fail by taking a fix out also runs
//! with that fix taken out (a planted bug) and shows the loss.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use common::faults::ScriptedStore;
use common::s3::S3Server;
use common::{Counters, delete_behind_its_back};
use dynacommit::CommitStore;
use dynacommit::lease::{
    DynamoLeaseTable, Expect, LeaseConfig, LeaseManager, LeaseRecord, LeaseTable, PlantedBug,
    PutOutcome, TableError,
};
use dynacommit::lock::{LOCK_ETAG, LockClient};
use object_store::aws::S3ConditionalPut;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutMode};

const LEASE: Duration = Duration::from_millis(300);
/// How long the stalled answer is held: five leases.
const STALL: Duration = Duration::from_millis(1_500);
/// Trials with the fix in place. With the fix taken out every one of 32 trials lost a
/// commit (the planted test): even a regression that lost one trial in four would pass 16
/// with odds of (3/4)^16, about 1%.
const TRIALS: usize = 16;
/// Trials with the fix taken out, which must lose a commit at least once.
const PLANTED_TRIALS: usize = 8;

fn config(table: &str) -> LeaseConfig {
    LeaseConfig::new(table)
        .with_timeout(LEASE)
        .with_poll_interval(Duration::from_millis(20))
}

async fn fresh_table() -> DynamoLeaseTable {
    let table = DynamoLeaseTable::new(common::dynamodb().await, common::unique_name("safety"));
    table.ensure_table().await.unwrap();
    table
}

/// Which of W's answers is slow.
#[derive(Debug, Clone, Copy)]
enum Stall {
    /// After W reclaims a dead holder's lease, its re-check HEAD answers "absent" 1.5 s
    /// late (the answer is read at once; a rival's commit lands meanwhile).
    RecheckAfterTakeover,
    /// W's first acquisition applies at once but its answer arrives 1.5 s late (the
    /// DynamoDB client can spend ~20 s on retries).
    AcquisitionAnswer,
}

/// W's lease table: the real one, with W's answers slowed as `stall` says.
#[derive(Debug)]
struct Slowed {
    inner: DynamoLeaseTable,
    stall: Stall,
    head_stall: Arc<Mutex<Option<Duration>>>,
}

#[async_trait]
impl LeaseTable for Slowed {
    async fn put(&self, record: &LeaseRecord, expect: &Expect) -> Result<PutOutcome, TableError> {
        let outcome = self.inner.put(record, expect).await?;
        if outcome == PutOutcome::Written {
            match (self.stall, expect) {
                (Stall::RecheckAfterTakeover, Expect::Unchanged { .. }) => {
                    *self.head_stall.lock().unwrap() = Some(STALL);
                }
                (Stall::AcquisitionAnswer, Expect::Absent) => tokio::time::sleep(STALL).await,
                _ => {}
            }
        }
        Ok(outcome)
    }

    async fn get(&self, path: &str, etag: &str) -> Result<Option<LeaseRecord>, TableError> {
        self.inner.get(path, etag).await
    }

    fn describe(&self) -> String {
        self.inner.describe()
    }
}

/// One trial: W and then V create `path`; returns how many acknowledged creates were
/// lost (the object holds someone else's bytes) and how many were acknowledged.
async fn trial(
    s3: Arc<dyn ObjectStore>,
    table: &DynamoLeaseTable,
    stall: Stall,
    planted: Option<PlantedBug>,
    path: Path,
) -> (usize, usize) {
    let key = path.to_string();
    let manager =
        || LeaseManager::new(Arc::new(table.clone()), config(table.table_name())).unwrap();
    if let Stall::RecheckAfterTakeover = stall {
        // A holder that died holding the lease: W will take it over and must re-check.
        let dead = manager()
            .acquire(&key, "*", || async {
                Ok::<(), std::convert::Infallible>(())
            })
            .await
            .unwrap();
        drop(dead);
    }
    let head_stall = Arc::new(Mutex::new(None));
    let slowed = Slowed {
        inner: table.clone(),
        stall,
        head_stall: head_stall.clone(),
    };
    let mut w_leases = LeaseManager::new(Arc::new(slowed), config(table.table_name())).unwrap();
    if let Some(bug) = planted {
        w_leases = w_leases.with_planted_bug(bug);
    }
    // W's PUTs go out in tasks of their own: once sent, a request goes on even if W
    // drops it, as one on the wire does.
    let in_flight = Arc::new(Counters::default());
    let w_inner = ScriptedStore {
        counters: Some(in_flight.clone()),
        slow_puts: Some(0..1),
        ..ScriptedStore::stalling_heads(s3.clone(), head_stall)
    };
    let w_store = CommitStore::new(Arc::new(w_inner), w_leases);
    let v_store = CommitStore::new(s3.clone(), manager());
    let w = {
        let path = path.clone();
        tokio::spawn(async move {
            w_store
                .put_opts(&path, "W".into(), PutMode::Create.into())
                .await
        })
    };
    // V comes a lease later, so W is first to take over the dead holder's lease.
    tokio::time::sleep(LEASE).await;
    let v = v_store
        .put_opts(&path, "V".into(), PutMode::Create.into())
        .await;
    let w = w.await.unwrap();
    in_flight.settled().await;
    let body = s3.get(&path).await.unwrap().bytes().await.unwrap();
    let mut lost = 0;
    let mut acknowledged = 0;
    for (name, result) in [("W", &w), ("V", &v)] {
        if result.is_ok() {
            acknowledged += 1;
            if body != name.as_bytes() {
                lost += 1;
            }
        }
    }
    (lost, acknowledged)
}

/// Runs `trials` trials eight at a time; returns (lost, acknowledged).
async fn trials(stall: Stall, planted: Option<PlantedBug>, trials: usize) -> (usize, usize) {
    let s3: Arc<dyn ObjectStore> = Arc::new(
        S3Server::S3rver
            // The client sends `If-None-Match` and s3rver ignores it: W's write is one
            // request, so the planted bug's first unfenced poll sends it. (With the
            // header refused, the write under the lease would go plain on a second
            // request, which the fence stops even with the bug planted.)
            .fresh_store(S3ConditionalPut::ETagMatch)
            .await,
    );
    let table = fresh_table().await;
    let mut totals = (0, 0);
    for wave in 0..trials / 8 {
        let runs: Vec<_> = (0..8)
            .map(|i| {
                let (s3, table) = (s3.clone(), table.clone());
                let path = Path::from(format!("log/{wave}-{i}.json"));
                tokio::spawn(async move { trial(s3, &table, stall, planted, path).await })
            })
            .collect();
        for run in runs {
            let (lost, acknowledged) = run.await.unwrap();
            totals.0 += lost;
            totals.1 += acknowledged;
        }
    }
    println!(
        "{stall:?}, planted {planted:?}: {} of {} acknowledged creates lost",
        totals.0, totals.1
    );
    totals
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_recheck_never_sends_a_write_after_the_lease_deadline() {
    let (lost, acknowledged) = trials(Stall::RecheckAfterTakeover, None, TRIALS).await;
    assert_eq!(lost, 0, "{lost} acknowledged commits overwritten");
    assert!(
        acknowledged >= TRIALS,
        "only {acknowledged} creates acknowledged"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_acquisition_answer_never_sends_a_write_after_the_lease_deadline() {
    let (lost, acknowledged) = trials(Stall::AcquisitionAnswer, None, TRIALS).await;
    assert_eq!(lost, 0, "{lost} acknowledged commits overwritten");
    assert!(
        acknowledged >= TRIALS,
        "only {acknowledged} creates acknowledged"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_fence_both_stalls_lose_acknowledged_commits() {
    for stall in [Stall::RecheckAfterTakeover, Stall::AcquisitionAnswer] {
        let (lost, _) = trials(stall, Some(PlantedBug::WriteAfterDeadline), PLANTED_TRIALS).await;
        assert!(
            lost > 0,
            "{stall:?}: the planted bug lost nothing in {PLANTED_TRIALS} trials"
        );
    }
}

#[tokio::test]
async fn fencing_tokens_keep_increasing_across_deletes_and_breaks() {
    let table = fresh_table().await;
    let locks = LockClient::new(Arc::new(table.clone()), config(table.table_name())).unwrap();
    let mut tokens = vec![];

    // Released, then the record deleted (as TTL would once, or an operator).
    let mut first = locks.acquire("leader", "a").await.unwrap();
    tokens.push(first.fencing_token());
    first.release().await.unwrap();
    let stored = table.get("leader", LOCK_ETAG).await.unwrap().unwrap();
    assert_eq!(stored.ttl, None, "lock records must never expire");
    delete_behind_its_back(&table, "leader", LOCK_ETAG).await;

    // Deleted under a live holder: it learns it lost the lock; the next holder's token
    // is larger still.
    let second = locks.acquire("leader", "b").await.unwrap();
    tokens.push(second.fencing_token());
    delete_behind_its_back(&table, "leader", LOCK_ETAG).await;
    let reason = tokio::time::timeout(LEASE * 2, second.lost())
        .await
        .expect("the holder notices within its lease");
    assert!(reason.contains("deleted"), "{reason}");
    let third = locks.acquire("leader", "c").await.unwrap();
    tokens.push(third.fencing_token());
    third.abandon().await;

    // An operator breaks a dead holder's lock: released at the next generation.
    let record = table.get("leader", LOCK_ETAG).await.unwrap().unwrap();
    assert!(table.break_lease(&record).await.unwrap());
    let mut fourth = locks.acquire("leader", "d").await.unwrap();
    tokens.push(fourth.fencing_token());
    fourth.release().await.unwrap();

    assert!(
        tokens.windows(2).all(|pair| pair[0] < pair[1]),
        "fencing tokens not strictly increasing: {tokens:?}"
    );
}

#[tokio::test]
async fn a_record_deleted_and_written_again_at_the_same_generation_is_not_reclaimed() {
    let table = fresh_table().await;
    // An object_store 0.12.5 writer's record (no owner), seen by a waiter.
    let old = |ttl: i64| LeaseRecord {
        path: "log/7.json".into(),
        etag: "*".into(),
        generation: 0,
        timeout: Duration::from_secs(20),
        ttl: Some(ttl),
        owner: None,
        value: None,
        released: false,
        holder: None,
    };
    assert_eq!(
        table
            .put(&old(1_900_000_000), &Expect::Absent)
            .await
            .unwrap(),
        PutOutcome::Written
    );
    let seen = table.get("log/7.json", "*").await.unwrap().unwrap();
    // TTL deletes it; another 0.12.5 writer takes the path afresh, at generation 0 again.
    delete_behind_its_back(&table, "log/7.json", "*").await;
    assert_eq!(
        table
            .put(&old(1_900_003_600), &Expect::Absent)
            .await
            .unwrap(),
        PutOutcome::Written
    );
    let reclaim = LeaseRecord {
        generation: 1,
        owner: Some("waiter".into()),
        ..seen.clone()
    };
    // The waiter's reclaim names the record as it saw it: it fails over the new holder.
    assert!(matches!(
        table.put(&reclaim, &seen.unchanged()).await.unwrap(),
        PutOutcome::Conflict(Some(_))
    ));
    // 0.12.5's condition (the generation alone) would have taken the live lease.
    assert_eq!(
        table
            .put(&reclaim, &Expect::Generation(seen.generation))
            .await
            .unwrap(),
        PutOutcome::Written
    );
}

/// A lease table whose renewals reach DynamoDB late: each is sent on in a task of its own
/// after a delay, going on when its caller stops waiting, as a request on the wire does.
#[derive(Debug)]
struct LateRenewals {
    inner: DynamoLeaseTable,
}

#[async_trait]
impl LeaseTable for LateRenewals {
    async fn put(&self, record: &LeaseRecord, expect: &Expect) -> Result<PutOutcome, TableError> {
        let renewal = matches!(expect, Expect::Owned { .. }) && !record.released;
        if !renewal {
            return self.inner.put(record, expect).await;
        }
        let (inner, record, expect) = (self.inner.clone(), record.clone(), expect.clone());
        tokio::spawn(async move {
            tokio::time::sleep(LEASE / 2).await;
            inner.put(&record, &expect).await
        })
        .await
        .unwrap()
    }

    async fn get(&self, path: &str, etag: &str) -> Result<Option<LeaseRecord>, TableError> {
        self.inner.get(path, etag).await
    }

    fn describe(&self) -> String {
        self.inner.describe()
    }
}

/// Holds a lease through one renewal sent, lets the operation end while that renewal is
/// still on its way, releases, and reports whether the record ends up released.
async fn release_with_a_renewal_in_flight(planted: Option<PlantedBug>) -> bool {
    let table = fresh_table().await;
    let mut leases = LeaseManager::new(
        Arc::new(LateRenewals {
            inner: table.clone(),
        }),
        config(table.table_name()),
    )
    .unwrap();
    if let Some(bug) = planted {
        leases = leases.with_planted_bug(bug);
    }
    let mut lease = leases
        .acquire("p", "*", || async {
            Ok::<(), std::convert::Infallible>(())
        })
        .await
        .unwrap();
    // The first renewal leaves at a third of the lease; the operation ends just after.
    leases
        .run_while_held(&mut lease, tokio::time::sleep(LEASE / 3 + LEASE / 10))
        .await
        .unwrap();
    leases.release(lease).await.unwrap();
    tokio::time::sleep(LEASE).await; // the renewal lands
    table.get("p", "*").await.unwrap().unwrap().released
}

#[tokio::test]
async fn a_renewal_landing_after_the_release_does_not_resurrect_the_lease() {
    assert!(
        release_with_a_renewal_in_flight(None).await,
        "the lease came back after its release"
    );
    assert!(
        !release_with_a_renewal_in_flight(Some(PlantedBug::ReleaseWithoutBump)).await,
        "without the bump the late renewal should have resurrected it: the test shows nothing"
    );
}

/// A lease table whose first reclaim answers "timed out" at once and reaches DynamoDB
/// 100 ms later, in a task of its own: the writer's read-back sees the record before it.
#[derive(Debug)]
struct LateReclaim {
    inner: DynamoLeaseTable,
    armed: std::sync::atomic::AtomicBool,
}

#[async_trait]
impl LeaseTable for LateReclaim {
    async fn put(&self, record: &LeaseRecord, expect: &Expect) -> Result<PutOutcome, TableError> {
        let reclaim = matches!(expect, Expect::Unchanged { .. });
        if !reclaim || !self.armed.swap(false, std::sync::atomic::Ordering::SeqCst) {
            return self.inner.put(record, expect).await;
        }
        let (inner, record, expect) = (self.inner.clone(), record.clone(), expect.clone());
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(100)).await;
            inner.put(&record, &expect).await
        });
        Err(TableError::Injected {
            message: "timed out; the request is still on its way".into(),
            ambiguous: true,
        })
    }

    async fn get(&self, path: &str, etag: &str) -> Result<Option<LeaseRecord>, TableError> {
        self.inner.get(path, etag).await
    }

    fn describe(&self) -> String {
        self.inner.describe()
    }
}

/// A writer reclaims a dead holder's lease, its reclaim lands after its answer: how long
/// from the reclaim until it holds the lease.
async fn reclaim_landing_late(planted: Option<PlantedBug>) -> Duration {
    let table = fresh_table().await;
    let no_check = || async { Ok::<(), std::convert::Infallible>(()) };
    let dead = LeaseManager::new(Arc::new(table.clone()), config(table.table_name()))
        .unwrap()
        .acquire("p", "*", no_check)
        .await
        .unwrap();
    drop(dead);
    let mut leases = LeaseManager::new(
        Arc::new(LateReclaim {
            inner: table.clone(),
            armed: true.into(),
        }),
        config(table.table_name()),
    )
    .unwrap();
    if let Some(bug) = planted {
        leases = leases.with_planted_bug(bug);
    }
    let started = std::time::Instant::now();
    let lease = leases.acquire("p", "*", no_check).await.unwrap();
    // The dead holder's lease is reclaimed after timeout x skew; the rest is waiting.
    let waited = started.elapsed() - LEASE * 3;
    assert!(lease.was_taken_over());
    waited
}

#[tokio::test]
async fn a_reclaim_that_lands_after_its_answer_is_recognised_within_a_poll() {
    let waited = reclaim_landing_late(None).await;
    // It lands 100 ms after the answer; the next poll (20 ms) sees it; requests on a
    // loaded machine take their share.
    assert!(
        waited < Duration::from_millis(500),
        "waited {waited:?} on its own lease"
    );
    let planted = reclaim_landing_late(Some(PlantedBug::NoSelfRecognitionWhileWaiting)).await;
    assert!(
        planted >= LEASE * 3,
        "without recognition it should wait timeout x skew on itself, waited {planted:?}"
    );
}
