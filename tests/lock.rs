//! The leader lock against DynamoDB Local and the in-process table: Vault's HA test, a
//! contention log that would show two holders at once, and a holder killed for real.

mod common;

use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering::SeqCst;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dynacommit::lease::{DynamoLeaseTable, LeaseConfig, LeaseTable, MemoryLeaseTable};
use dynacommit::lock::{LockClient, default_lock_config};
use tokio::time::Instant;

fn fast_config(table: &str) -> LeaseConfig {
    let mut config = default_lock_config()
        .with_timeout(Duration::from_secs(2))
        .with_renew_interval(Duration::from_millis(500))
        .with_poll_interval(Duration::from_millis(20));
    config.table = table.into();
    config
}

async fn dynamo_table() -> Arc<dyn LeaseTable> {
    let name = common::unique_name("locks");
    let table = DynamoLeaseTable::new(common::dynamodb().await, &name);
    table.ensure_table().await.unwrap();
    Arc::new(table)
}

fn memory_table() -> Arc<dyn LeaseTable> {
    Arc::new(MemoryLeaseTable::new())
}

/// Vault's ExerciseHABackend, in its steps.
async fn vault_ha_behaviour(table: Arc<dyn LeaseTable>) {
    let a = LockClient::new(
        table.clone(),
        fast_config(table.dynamodb_table().unwrap_or("t")),
    )
    .unwrap();
    let b = LockClient::new(
        table.clone(),
        fast_config(table.dynamodb_table().unwrap_or("t")),
    )
    .unwrap();
    let key = "foo";

    let mut held = a.acquire(key, "bar").await.unwrap();
    let seen = b.value(key).await.unwrap();
    assert!(seen.held);
    assert_eq!(seen.value.as_deref(), Some("bar"));

    // B's acquire blocks while A holds it ...
    let blocked = tokio::time::timeout(Duration::from_millis(300), b.acquire(key, "baz")).await;
    assert!(blocked.is_err(), "B acquired a held lock");
    // ... and, cancelled after 50 ms, returns cleanly.
    let cancelled = b
        .acquire_until(key, "baz", tokio::time::sleep(Duration::from_millis(50)))
        .await
        .unwrap();
    assert!(cancelled.is_none());
    assert!(b.try_acquire(key, "baz").await.unwrap().is_none());

    held.release().await.unwrap();
    let mut next = tokio::time::timeout(Duration::from_secs(5), b.acquire(key, "baz"))
        .await
        .expect("B acquires promptly after A releases")
        .unwrap();
    let seen = a.value(key).await.unwrap();
    assert!(seen.held);
    assert_eq!(seen.value.as_deref(), Some("baz"));
    assert!(next.fencing_token() > held.fencing_token());
    next.release().await.unwrap();
    next.release().await.unwrap(); // idempotent
    assert!(!a.value(key).await.unwrap().held);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vault_ha_behaviour_on_dynamodb_local() {
    vault_ha_behaviour(dynamo_table().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vault_ha_behaviour_in_process() {
    vault_ha_behaviour(memory_table()).await;
}

/// 8 contenders x 50 rounds of acquire, hold 5 to 50 ms (random), release, logging
/// (token, start, end). A holder raises an "inside" flag for its whole hold: finding it
/// already raised means two holders at once, and fails the test on the spot. Holds long
/// enough to span several of the waiters' 20 ms polls give them every chance to get in.
async fn contention(table: Arc<dyn LeaseTable>) {
    let log: Arc<Mutex<Vec<(u64, Instant, Instant)>>> = Arc::default();
    let inside = Arc::new(AtomicBool::new(false));
    let tasks = (0..8).map(|i| {
        let locks = LockClient::new(
            table.clone(),
            fast_config(table.dynamodb_table().unwrap_or("t")),
        )
        .unwrap();
        let (log, inside) = (log.clone(), inside.clone());
        tokio::spawn(async move {
            for round in 0..50 {
                let mut guard = locks
                    .acquire("contended", &format!("node-{i}"))
                    .await
                    .unwrap();
                let token = guard.fencing_token();
                assert!(
                    !inside.swap(true, SeqCst),
                    "node-{i} (round {round}, token {token}) got the lock while another held it"
                );
                let start = Instant::now();
                tokio::time::sleep(Duration::from_millis(rand::random_range(5..=50))).await;
                let end = Instant::now();
                assert!(
                    !guard.is_lost(),
                    "node-{i} lost the lock while holding it: {}",
                    guard.lost().await
                );
                assert!(
                    inside.swap(false, SeqCst),
                    "node-{i} (token {token}): someone else left the lock while we held it"
                );
                log.lock().unwrap().push((token, start, end));
                guard.release().await.unwrap();
            }
        })
    });
    for task in futures::future::join_all(tasks).await {
        task.unwrap();
    }
    let mut log = log.lock().unwrap().clone();
    assert_eq!(log.len(), 400);
    log.sort_by_key(|(token, _, _)| *token);
    for pair in log.windows(2) {
        let ((t1, _, end1), (t2, start2, _)) = (pair[0], pair[1]);
        assert!(t2 > t1, "tokens not strictly increasing: {t1} then {t2}");
        assert!(
            start2 >= end1,
            "holders overlapped: token {t1} held until {end1:?}, token {t2} from {start2:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_contenders_fifty_rounds_on_dynamodb_local_never_overlap() {
    contention(dynamo_table().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_contenders_fifty_rounds_in_process_never_overlap() {
    contention(memory_table()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_holder_is_replaced_within_lease_times_skew_plus_one_poll() {
    common::dynamodb().await;
    let table = common::unique_name("killed");
    let dynamodb = common::dynamodb_url();
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_dynacommit"))
        .args(["lock", "hold", "leader", "doomed:1", "--lock-table", &table])
        .args(["--lease-ms", "1000", "--poll-ms", "20"])
        .env("AWS_ENDPOINT_URL_DYNAMODB", &dynamodb)
        .env("AWS_ACCESS_KEY_ID", "dynacommit")
        .env("AWS_SECRET_ACCESS_KEY", "dynacommitsecret")
        .env("AWS_REGION", "us-east-1")
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    // Wait for the child to say it holds the lock.
    let stdout = child.stdout.take().unwrap();
    let mut lines = tokio::io::AsyncBufReadExt::lines(tokio::io::BufReader::new(stdout));
    let first = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
        .await
        .expect("the child holds the lock within 30 s")
        .unwrap()
        .unwrap();
    let doomed_token: u64 = first
        .strip_prefix("acquired leader with fencing token ")
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|token| token.parse().ok())
        .unwrap_or_else(|| panic!("unexpected first line: {first}"));

    let client = common::client_for(&dynamodb, common::quick_retries());
    let locks = LockClient::new(Arc::new(DynamoLeaseTable::new(client, &table)), {
        let mut c = fast_config(&table);
        c.timeout = Duration::from_secs(1);
        c.renew_interval = None;
        c
    })
    .unwrap();
    assert_eq!(
        locks.value("leader").await.unwrap().value.as_deref(),
        Some("doomed:1")
    );

    child.start_kill().unwrap(); // SIGKILL: no release
    child.wait().await.unwrap();
    let killed = Instant::now();
    let mut guard = locks.acquire("leader", "survivor:2").await.unwrap();
    let took = killed.elapsed();
    // The waiter first sees the record after the kill, so it waits at least lease x skew
    // (3 s); and at most that plus one poll (20 ms), with room for the requests themselves
    // on a loaded machine.
    assert!(
        took >= Duration::from_millis(2_900),
        "took over early: {took:?}"
    );
    assert!(
        took <= Duration::from_millis(3_000 + 20 + 1_000),
        "took {took:?}"
    );
    assert!(guard.fencing_token() > doomed_token);
    guard.release().await.unwrap();
}
