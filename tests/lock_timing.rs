//! Every timing rule of the lock, on Tokio's paused clock with scripted table faults.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::faults::{FaultyTable, TableFaults};
use dynacommit::lock::{LockClient, default_lock_config};
use tokio::time::Instant;

const LEASE: Duration = Duration::from_secs(15);
const RENEW: Duration = Duration::from_secs(5);

fn client(table: &Arc<FaultyTable>) -> LockClient {
    LockClient::new(table.clone(), default_lock_config()).unwrap()
}

#[tokio::test(start_paused = true)]
async fn the_defaults_are_vaults_and_a_renew_period_over_half_the_lease_is_refused() {
    let config = default_lock_config();
    assert_eq!(config.timeout, LEASE);
    assert_eq!(config.renew_interval(), RENEW);
    let table = FaultyTable::new();
    let too_slow = config.with_renew_interval(Duration::from_secs(8));
    let error = LockClient::new(table, too_slow).unwrap_err();
    assert!(error.to_string().contains("at most half"), "{error}");
}

#[tokio::test(start_paused = true)]
async fn the_holder_renews_every_renew_period() {
    let table = FaultyTable::new();
    let guard = client(&table).acquire("k", "a").await.unwrap();
    let acquired = Instant::now();
    tokio::time::sleep(Duration::from_secs(61)).await;
    let renewals: Vec<Duration> = table
        .writes()
        .into_iter()
        .skip(1)
        .map(|(at, _)| at - acquired)
        .collect();
    let expected: Vec<Duration> = (1..=12).map(|n| RENEW * n).collect();
    assert_eq!(renewals, expected);
    assert!(!guard.is_lost());
}

#[tokio::test(start_paused = true)]
async fn blocked_renewals_fire_lost_at_the_deadline_before_any_contender_acquires() {
    let table = FaultyTable::new();
    let holder = client(&table).acquire("k", "a").await.unwrap();
    let acquired = Instant::now();
    table.set_faults(TableFaults {
        fail_owned_puts: true,
        ..TableFaults::default()
    });
    let contender = {
        let locks = client(&table);
        tokio::spawn(async move {
            let guard = locks.acquire("k", "b").await.unwrap();
            (Instant::now(), guard.fencing_token())
        })
    };
    let reason = holder.lost().await;
    let lost_at = Instant::now();
    assert!(
        reason.contains("not confirmed before the lease deadline"),
        "{reason}"
    );
    // Uncertain, not lost, until the usable time: the lease's 15 s less its safety margin
    // of a tenth, to the poll interval.
    let usable = LEASE - LEASE / 10;
    assert!(
        lost_at - acquired <= usable,
        "lost after {:?}",
        lost_at - acquired
    );
    assert!(lost_at - acquired >= usable - Duration::from_millis(200));
    let (taken_at, token) = contender.await.unwrap();
    assert!(lost_at < taken_at);
    assert!(
        taken_at - acquired >= LEASE * 3,
        "taken over after only {:?}",
        taken_at - acquired
    );
    assert!(token > holder.fencing_token());
}

#[tokio::test(start_paused = true)]
async fn an_uncertain_renewal_is_retried_and_the_lock_is_kept() {
    let table = FaultyTable::new();
    let holder = client(&table).acquire("k", "a").await.unwrap();
    table.set_faults(TableFaults {
        fail_next_owned_puts: 20, // 2 s of failed retries at the 100 ms poll
        ..TableFaults::default()
    });
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert!(!holder.is_lost());
}

#[tokio::test(start_paused = true)]
async fn a_taken_lock_fires_lost_on_the_next_renewal() {
    let table = FaultyTable::new();
    let holder = client(&table).acquire("k", "a").await.unwrap();
    // An operator breaks the lock and another node takes it at once.
    let mut record = table.writes().pop().unwrap().1;
    record.owner = Some("usurper".into());
    record.generation += 1;
    dynacommit::lease::LeaseTable::put(
        &*table,
        &record,
        &dynacommit::lease::Expect::Generation(record.generation - 1),
    )
    .await
    .unwrap();
    let started = Instant::now();
    let reason = holder.lost().await;
    assert!(started.elapsed() <= RENEW);
    assert!(reason.contains("usurper"), "{reason}");
}

#[tokio::test(start_paused = true)]
async fn try_acquire_answers_at_once() {
    let table = FaultyTable::new();
    let locks = client(&table);
    let started = Instant::now();
    let mut first = locks.try_acquire("k", "a").await.unwrap().expect("free");
    assert!(locks.try_acquire("k", "b").await.unwrap().is_none());
    first.release().await.unwrap();
    let second = locks
        .try_acquire("k", "b")
        .await
        .unwrap()
        .expect("released");
    assert_eq!(started.elapsed(), Duration::ZERO);
    assert!(second.fencing_token() > first.fencing_token());
}

#[tokio::test(start_paused = true)]
async fn fencing_tokens_increase_across_holders_even_through_renewals() {
    let table = FaultyTable::new();
    let locks = client(&table);
    let mut last = None;
    for round in 0..5 {
        let mut guard = locks.acquire("k", &format!("n{round}")).await.unwrap();
        tokio::time::sleep(RENEW * 3).await; // renews three times
        if let Some(previous) = last {
            assert!(guard.fencing_token() > previous);
        }
        last = Some(guard.fencing_token());
        guard.release().await.unwrap();
    }
}

#[tokio::test(start_paused = true)]
async fn a_dropped_guard_releases_in_the_background() {
    let table = FaultyTable::new();
    let locks = client(&table);
    drop(locks.acquire("k", "a").await.unwrap());
    tokio::time::sleep(Duration::from_millis(1)).await;
    let started = Instant::now();
    locks.acquire("k", "b").await.unwrap();
    assert_eq!(started.elapsed(), Duration::ZERO);
}
