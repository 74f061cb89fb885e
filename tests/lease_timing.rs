//! Deterministic simulation of the lease protocol: Tokio's paused clock, the in-process
//! table and store, and scripted faults. Every timing rule is checked to the millisecond.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::faults::{FaultyTable, ScriptedStore, TableFaults};
use dynacommit::CommitStore;
use dynacommit::lease::{
    AcquireError, Lease, LeaseConfig, LeaseError, LeaseManager, LeaseRecord, LeaseTable,
};
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutMode};
use tokio::time::Instant;

const TIMEOUT: Duration = Duration::from_secs(1);
const POLL: Duration = Duration::from_millis(100);

fn config() -> LeaseConfig {
    LeaseConfig::new("timing")
        .with_timeout(TIMEOUT)
        .with_max_clock_skew_rate(3)
        .with_poll_interval(POLL)
}

fn manager(table: Arc<FaultyTable>) -> LeaseManager {
    LeaseManager::new(table, config()).unwrap()
}

type Never = std::convert::Infallible;

async fn no_check() -> Result<(), Never> {
    Ok(())
}

async fn take(leases: &LeaseManager, path: &str) -> Lease {
    leases.acquire(path, "*", no_check).await.unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_dead_holders_lease_is_reclaimed_after_timeout_times_skew_and_not_before() {
    let table = FaultyTable::new();
    let leases = manager(table.clone());
    let dead = take(&leases, "p").await;
    let first = dead.generation();
    drop(dead); // the holder dies: no renewal, no release

    let started = Instant::now();
    let lease = take(&leases, "p").await;
    let waited = started.elapsed();
    assert!(waited >= TIMEOUT * 3, "reclaimed after only {waited:?}");
    assert!(waited <= TIMEOUT * 3 + POLL, "reclaimed late: {waited:?}");
    assert_eq!(lease.generation(), first + 1);
    assert!(lease.was_taken_over());
}

#[tokio::test(start_paused = true)]
async fn a_waiter_keeps_waiting_while_the_holder_renews() {
    let table = FaultyTable::new();
    let leases = manager(table.clone());
    let mut holder = take(&leases, "p").await;
    let first = holder.generation();
    let waiter = {
        let leases = leases.clone();
        tokio::spawn(async move {
            let lease = take(&leases, "p").await;
            (Instant::now(), lease)
        })
    };
    // The holder's operation runs 10 s: ten timeouts, thirty renewals.
    let started = Instant::now();
    leases
        .run_while_held(&mut holder, tokio::time::sleep(Duration::from_secs(10)))
        .await
        .unwrap();
    let finished = Instant::now();
    assert!(
        holder.generation() >= first + 25,
        "renewed only {} times",
        holder.generation() - first
    );
    drop(holder); // dies without releasing
    let (acquired_at, lease) = waiter.await.unwrap();
    assert!(
        acquired_at >= finished + TIMEOUT * 2,
        "the waiter took over {:?} after the holder's last renewal",
        acquired_at - finished
    );
    assert!(acquired_at - started < Duration::from_secs(10) + TIMEOUT * 3 + POLL);
    assert!(lease.generation() > first + 25);
}

#[tokio::test(start_paused = true)]
async fn a_lease_whose_answer_was_lost_is_recognised_as_ours_at_once() {
    let table = FaultyTable::new();
    table.set_faults(TableFaults {
        lose_answers: 1,
        ..TableFaults::default()
    });
    let leases = manager(table.clone());
    let started = Instant::now();
    let lease = take(&leases, "p").await;
    assert_eq!(started.elapsed(), Duration::ZERO, "it waited for itself");
    let stored = table.get("p", "*").await.unwrap().unwrap();
    assert!(stored.is_written_by(lease.owner(), lease.generation()));
}

#[tokio::test(start_paused = true)]
async fn an_uncertain_renewal_is_retried_and_the_operation_carries_on() {
    let table = FaultyTable::new();
    let leases = manager(table.clone());
    let mut lease = take(&leases, "p").await;
    table.set_faults(TableFaults {
        fail_next_owned_puts: 3,
        ..TableFaults::default()
    });
    let out = leases
        .run_while_held(&mut lease, async {
            tokio::time::sleep(Duration::from_secs(3)).await;
            "done"
        })
        .await
        .unwrap();
    assert_eq!(out, "done");
}

#[tokio::test(start_paused = true)]
async fn a_failed_renewal_aborts_the_operation_before_anyone_can_reclaim() {
    let table = FaultyTable::new();
    let leases = manager(table.clone());
    let mut lease = take(&leases, "p").await;
    let acquired = Instant::now();
    let deadline = lease.deadline();
    table.set_faults(TableFaults {
        fail_owned_puts: true,
        ..TableFaults::default()
    });
    let waiter = {
        let leases = leases.clone();
        tokio::spawn(async move {
            take(&leases, "p").await;
            Instant::now()
        })
    };
    let error = tokio::time::timeout(
        TIMEOUT * 60,
        leases.run_while_held(&mut lease, std::future::pending::<()>()),
    )
    .await
    .expect("a failed renewal must end the operation")
    .unwrap_err();
    let gave_up = Instant::now();
    assert!(matches!(error, LeaseError::Lost { .. }), "{error:?}");
    assert!(
        error
            .to_string()
            .contains("not confirmed before the lease deadline"),
        "{error}"
    );
    assert!(gave_up <= deadline, "gave up {:?} late", gave_up - deadline);
    let reclaimed = waiter.await.unwrap();
    assert!(reclaimed >= acquired + TIMEOUT * 3);
    assert!(gave_up < reclaimed);
}

/// Two commit stores on one in-memory store and one table; the first writer's puts take
/// `delay`.
fn two_writers(
    table: Arc<FaultyTable>,
    delay: Duration,
) -> (CommitStore, CommitStore, Arc<InMemory>) {
    let shared = Arc::new(InMemory::new());
    let slow = Arc::new(ScriptedStore::slow(shared.clone(), delay));
    (
        CommitStore::new(slow, manager(table.clone())),
        CommitStore::new(shared.clone(), manager(table)),
        shared,
    )
}

#[tokio::test(start_paused = true)]
async fn a_write_slower_than_the_lease_commits_exactly_once_and_nobody_reclaims() {
    let table = FaultyTable::new();
    // The first writer's PUT takes 5 lease timeouts.
    let (slow, fast, shared) = two_writers(table.clone(), TIMEOUT * 5);
    let path = Path::from("_log/00000000000000000000.json");
    let first = {
        let path = path.clone();
        tokio::spawn(async move {
            slow.put_opts(&path, "slow".into(), PutMode::Create.into())
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(10)).await;
    let second = fast
        .put_opts(&path, "fast".into(), PutMode::Create.into())
        .await;
    let first = first.await.unwrap();
    assert!(first.is_ok(), "{first:?}");
    assert!(
        matches!(second, Err(object_store::Error::AlreadyExists { .. })),
        "{second:?}"
    );
    let body = shared.get(&path).await.unwrap().bytes().await.unwrap();
    assert_eq!(body.as_ref(), b"slow");
    // Every lease write came from the first writer: the second never took it over.
    let owners: std::collections::HashSet<_> = table
        .writes()
        .into_iter()
        .filter(|(_, r)| !r.released)
        .map(|(_, r)| r.owner)
        .collect();
    assert_eq!(owners.len(), 1, "{owners:?}");
}

#[tokio::test(start_paused = true)]
async fn delete_then_recreate_completes_in_well_under_a_second() {
    let table = FaultyTable::new();
    let store = CommitStore::new(
        Arc::new(InMemory::new()),
        LeaseManager::new(table, LeaseConfig::default()).unwrap(),
    );
    let path = Path::from("checkpoint");
    let started = Instant::now();
    for round in 0..5 {
        store
            .put_opts(&path, format!("v{round}").into(), PutMode::Create.into())
            .await
            .unwrap();
        store.delete(&path).await.unwrap();
    }
    // Upstream waits timeout x skew (60 s) on every re-create.
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test(start_paused = true)]
async fn a_waiter_fails_fast_once_the_holders_write_shows() {
    let table = FaultyTable::new();
    let (slow, fast, _) = two_writers(table, Duration::from_millis(300));
    let path = Path::from("x");
    let first = {
        let path = path.clone();
        tokio::spawn(async move {
            slow.put_opts(&path, "a".into(), PutMode::Create.into())
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(10)).await;
    let started = Instant::now();
    let second = fast
        .put_opts(&path, "b".into(), PutMode::Create.into())
        .await;
    assert!(matches!(
        second,
        Err(object_store::Error::AlreadyExists { .. })
    ));
    // The holder's write lands at 300 ms; the waiter sees it at its next poll.
    assert!(started.elapsed() <= Duration::from_millis(300) + POLL);
    first.await.unwrap().unwrap();
}

fn record_at(generation: u64, released: bool) -> LeaseRecord {
    LeaseRecord {
        path: "p".into(),
        etag: "*".into(),
        generation,
        timeout: TIMEOUT,
        ttl: None,
        owner: Some("someone".into()),
        value: None,
        released,
        holder: None,
    }
}

#[tokio::test(start_paused = true)]
async fn generation_overflow_is_refused() {
    let table = FaultyTable::new();
    table.seed(record_at(u64::MAX, true)).await;
    let leases = manager(table);
    let error = leases.acquire("p", "*", no_check).await.unwrap_err();
    let AcquireError::Lease(error @ LeaseError::GenerationExhausted { .. }) = error else {
        panic!("expected GenerationExhausted, got {error:?}");
    };
    assert!(error.to_string().contains("u64::MAX"), "{error}");
}

#[tokio::test(start_paused = true)]
async fn renewal_at_the_last_generation_is_refused_not_wrapped() {
    let table = FaultyTable::new();
    table.seed(record_at(u64::MAX - 1, true)).await;
    let leases = manager(table);
    let mut lease = leases.acquire("p", "*", no_check).await.unwrap();
    assert_eq!(lease.generation(), u64::MAX);
    let error = leases.renew(&mut lease).await.unwrap_err();
    assert!(
        matches!(error, LeaseError::GenerationExhausted { .. }),
        "{error:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_released_lease_is_taken_at_once() {
    let table = FaultyTable::new();
    let leases = manager(table.clone());
    let lease = take(&leases, "p").await;
    let first = lease.generation();
    leases.release(lease).await.unwrap();
    let started = Instant::now();
    let next = take(&leases, "p").await;
    assert_eq!(started.elapsed(), Duration::ZERO);
    // Acquired at g, released at g + 1 (a release moves the generation on), reclaimed at
    // g + 2.
    assert_eq!(next.generation(), first + 2);
}

#[tokio::test(start_paused = true)]
async fn an_old_writers_record_is_waited_out_in_full() {
    // object_store 0.12 writers never release and write no owner.
    let table = FaultyTable::new();
    let mut old = record_at(7, false);
    old.owner = None;
    table.seed(old).await;
    let leases = manager(table);
    let started = Instant::now();
    let lease = take(&leases, "p").await;
    assert!(started.elapsed() >= TIMEOUT * 3);
    assert_eq!(lease.generation(), 8);
}

#[tokio::test(start_paused = true)]
async fn a_long_wait_says_what_it_waits_for_once_a_second_has_passed() {
    let table = FaultyTable::new();
    let told = Arc::new(std::sync::Mutex::new(Vec::new()));
    let leases = {
        let told = told.clone();
        manager(table.clone())
            .on_wait(move |w| told.lock().unwrap().push((Instant::now(), w.clone())))
    };
    let started = Instant::now();
    drop(take(&leases, "p").await); // a dead holder
    take(&leases, "p").await;
    let told = told.lock().unwrap();
    assert_eq!(told.len(), 1, "{told:?}");
    let (at, waiting) = &told[0];
    assert!(
        *at - started >= Duration::from_secs(1),
        "told after {:?}",
        *at - started
    );
    assert!(*at - started < Duration::from_secs(1) + POLL * 2);
    assert_eq!(waiting.path, "p");
    assert_eq!(waiting.unchanged_for + waiting.reclaimable_in, TIMEOUT * 3);
}

#[tokio::test(start_paused = true)]
async fn a_write_abandoned_when_its_lease_is_lost_may_have_applied() {
    let table = FaultyTable::new();
    let slow = Arc::new(ScriptedStore::slow(Arc::new(InMemory::new()), TIMEOUT * 5));
    let store = CommitStore::new(slow, manager(table.clone()));
    let path = Path::from("log/0.json");
    let write = {
        let path = path.clone();
        tokio::spawn(async move {
            store
                .put_opts(&path, "slow".into(), PutMode::Create.into())
                .await
        })
    };
    // Renewals fail from the start: the write is dropped at the lease's usable time.
    table.set_faults(TableFaults {
        fail_owned_puts: true,
        ..TableFaults::default()
    });
    let error = write.await.unwrap().unwrap_err();
    assert!(dynacommit::may_have_applied(&error), "{error}");
    let lease = error_source::<dynacommit::lease::LeaseError>(&error);
    assert!(matches!(lease, Some(LeaseError::Lost { .. })), "{error}");
}

/// The first error of type `T` in `error`'s source chain.
fn error_source<T: std::error::Error + 'static>(error: &object_store::Error) -> Option<&T> {
    let mut source = std::error::Error::source(error);
    while let Some(e) = source {
        if let Some(found) = e.downcast_ref::<T>() {
            return Some(found);
        }
        source = e.source();
    }
    None
}
