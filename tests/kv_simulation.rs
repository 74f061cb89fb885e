//! The key-value store in the deterministic simulator (`kvsim`): the real `DynamoKv`
//! over a table that answers as AWS does (transaction conflicts, throttling as errors and
//! as cancellation reasons, lost answers, late writes, stalled reads, TTL deletes, and a
//! stream whose shards roll over, whose records are trimmed after a day and whose
//! iterators expire), its histories checked for linearizability with expiry, its
//! listings against the folder invariants and its watches against the table's changes;
//! and the planted bugs the runs must catch.
//!
//! `DYNACOMMIT_KV_SIM_SEED=N` replays one seed and prints what it found;
//! `DYNACOMMIT_KV_SIM_RATE=1` runs a planted bug over every seed and prints how many catch
//! it; `DYNACOMMIT_KV_SIM_TRACE=1` prints every request and answer, and
//! `DYNACOMMIT_KV_SIM_WATCH=1` each watcher's stops and resumes.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod kvsim;
mod lincheck;

use std::time::{Duration, SystemTime};

use bytes::Bytes;
use dynacommit::kv::KvStore;
use dynacommit::lease::PlantedBug;
use kvsim::table::{EPOCH_MS, FakeTable, Faults};
use kvsim::{Run, run_seed};

/// Runs `seeds`, returning the seeds that found a violation, and the totals.
fn run_seeds(seeds: std::ops::Range<u64>, planted: Option<PlantedBug>) -> (Vec<(u64, Run)>, Run) {
    let mut failed = Vec::new();
    let mut total = Run::default();
    let seeds = match std::env::var("DYNACOMMIT_KV_SIM_SEED") {
        Ok(one) => {
            let one: u64 = one.parse().expect("DYNACOMMIT_KV_SIM_SEED is a number");
            one..one + 1
        }
        Err(_) => seeds,
    };
    for seed in seeds {
        let run = run_seed(seed, planted);
        total.operations += run.operations;
        total.unknown += run.unknown;
        total.listings += run.listings;
        total.events += run.events;
        total.watches_lost += run.watches_lost;
        total.requests += run.requests;
        total.inconclusive |= run.inconclusive;
        if !run.violations.is_empty() {
            failed.push((seed, run));
        }
    }
    (failed, total)
}

/// Runs `seeds` with every safeguard in place: no violation, a conclusive check, and
/// faults that struck.
fn holds_over(seeds: std::ops::Range<u64>) {
    let (failed, total) = run_seeds(seeds, None);
    println!(
        "{} operations ({} of unknown outcome), {} listings, {} events watched ({} watches lost), {} requests",
        total.operations,
        total.unknown,
        total.listings,
        total.events,
        total.watches_lost,
        total.requests
    );
    if let Some((seed, run)) = failed.first() {
        panic!(
            "{} seeds failed; seed {seed}:\n{}",
            failed.len(),
            run.violations.join("\n")
        );
    }
    assert!(
        !total.inconclusive,
        "the linearizability check ran out of budget"
    );
    assert!(
        total.unknown > 0,
        "no write of unknown outcome: the faults never struck"
    );
    assert!(total.events > 0, "no watcher saw an event");
    assert!(
        total.watches_lost > 0,
        "no watch was lost: no resume came after the stream trimmed or dropped its place"
    );
}

// Four tests of 10 seeds each, so that nextest spreads them over the cores.
#[test]
fn the_kv_is_linearizable_with_expiry_lists_and_watches_truly_over_aws_answers() {
    holds_over(0..10);
}

#[test]
fn the_kv_is_linearizable_with_expiry_lists_and_watches_truly_over_seeds_10_to_19() {
    holds_over(10..20);
}

#[test]
fn the_kv_is_linearizable_with_expiry_lists_and_watches_truly_over_seeds_20_to_29() {
    holds_over(20..30);
}

#[test]
fn the_kv_is_linearizable_with_expiry_lists_and_watches_truly_over_seeds_30_to_39() {
    holds_over(30..40);
}

/// Runs seeds from 0 with `bug` planted until one catches it (or, with
/// `DYNACOMMIT_KV_SIM_RATE` set, all `seeds`, printing how many caught it).
fn caught(bug: PlantedBug, seeds: u64) {
    let all = std::env::var_os("DYNACOMMIT_KV_SIM_RATE").is_some();
    let mut caught = Vec::new();
    let seeds = match std::env::var("DYNACOMMIT_KV_SIM_SEED") {
        Ok(one) => {
            let one: u64 = one.parse().expect("DYNACOMMIT_KV_SIM_SEED is a number");
            one..one + 1
        }
        Err(_) => 0..seeds,
    };
    let count = seeds.end - seeds.start;
    for seed in seeds {
        let run = run_seed(seed, Some(bug));
        if let Some(first) = run.violations.first() {
            caught.push(seed);
            if !all {
                println!("{bug:?} caught by seed {seed}:\n{first}");
                return;
            }
        }
    }
    println!(
        "{bug:?} caught by {} of {count} seeds: {caught:?}",
        caught.len()
    );
    assert!(!caught.is_empty(), "{bug:?} passed {count} seeds");
}

#[test]
fn the_simulator_catches_a_write_refused_for_a_transaction_in_flight_taken_as_final() {
    caught(PlantedBug::KvTransactionConflictFinal, 40);
}

#[test]
fn the_simulator_catches_a_throttled_transaction_taken_as_final() {
    caught(PlantedBug::KvThrottledTransactionFinal, 40);
}

#[test]
fn the_simulator_catches_a_retry_that_judges_liveness_by_its_first_attempts_clock() {
    caught(PlantedBug::KvRetryKeepsFirstClock, 40);
}

#[test]
fn the_simulator_catches_a_child_shard_resumed_at_trim_horizon() {
    caught(PlantedBug::KvChildResumedAtTrimHorizon, 40);
}

#[test]
fn the_simulator_catches_a_compare_and_swap_that_is_not_atomic() {
    caught(PlantedBug::KvSwapWithoutCondition, 40);
}

/// A `list` and a `range` whose page was read while an entry was live, and answered after
/// it expired, the key rewritten meanwhile: the key was live all the while, so both must
/// show it. (They judged the entry as of the answer, found it expired, and left the key
/// out: the review of the simulator's first run found it.)
#[test]
fn a_page_answered_after_its_entry_expired_still_shows_a_key_rewritten_meanwhile() {
    let runtime = kvsim::paused_runtime();
    runtime.block_on(async {
        let table = FakeTable::new(7, Faults::calm(Duration::from_millis(1)));
        let origin = tokio::time::Instant::now();
        let reader = kvsim::store(&table, kvsim::clock(origin, 1), None);
        let writer = kvsim::store(&table, kvsim::clock(origin, 2), None);
        let wall = |after: Duration| {
            let now = origin.elapsed() + after;
            SystemTime::UNIX_EPOCH + Duration::from_millis(EPOCH_MS) + now
        };
        for (i, read) in ["list", "range"].into_iter().enumerate() {
            let key = format!("t{i}/k");
            writer
                .put(
                    key.as_bytes(),
                    Bytes::from("x"),
                    Some(wall(Duration::from_millis(100))),
                )
                .await
                .unwrap();
            table.stall_next_query(Duration::from_millis(300));
            let prefix = format!("t{i}/");
            let reader = reader.clone();
            let seen = tokio::spawn(async move {
                match read {
                    "list" => reader.list(prefix.as_bytes()).await.unwrap().len(),
                    _ => reader
                        .range(prefix.as_bytes(), b"", None)
                        .await
                        .unwrap()
                        .len(),
                }
            });
            tokio::time::sleep(Duration::from_millis(50)).await;
            writer
                .put(key.as_bytes(), Bytes::from("y"), None)
                .await
                .unwrap();
            assert_eq!(
                seen.await.unwrap(),
                1,
                "{read} left out {key}, live all the while"
            );
        }
    });
}

/// A sweep that marked an expired entry, then lost the race to a user's delete that took
/// the mark off: the sweep must not delete the entry itself and count it, since its
/// watchers, finding no mark, would report a delete. (It did: its delete asked only for
/// the revision, which taking the mark off keeps.) The sweep's transaction is held until
/// the user has taken the mark off; the user's, until the sweep's has been tried.
#[test]
fn a_sweep_does_not_delete_an_entry_whose_mark_a_user_took_off() {
    let runtime = kvsim::paused_runtime();
    runtime.block_on(async {
        let table = FakeTable::new(9, Faults::calm(Duration::from_millis(1)));
        let origin = tokio::time::Instant::now();
        let user = kvsim::store(&table, kvsim::clock(origin, 1), None);
        let sweeper = kvsim::store(&table, kvsim::clock(origin, 2), None);
        let expires = SystemTime::UNIX_EPOCH
            + Duration::from_millis(EPOCH_MS)
            + origin.elapsed()
            + Duration::from_millis(100);
        user.put(b"s/k", Bytes::from("v"), Some(expires))
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(200)).await;
        table.hold_next_transactions(&[Duration::from_millis(300), Duration::from_millis(600)]);
        let sweep = tokio::spawn(async move { sweeper.sweep_expired(b"s/", b"s0").await });
        // The sweep has marked the entry and sent its delete, which the table holds.
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!user.delete(b"s/k").await.unwrap(), "the entry had expired");
        let swept = sweep.await.unwrap().unwrap();
        // Who removed it, as a watcher would judge: the removed item's mark.
        let (_, commits) = table.changes();
        let of_k: Vec<_> = commits.iter().filter(|c| c.key.1 == b"k").collect();
        let removal = of_k
            .iter()
            .rposition(|c| c.item.is_none())
            .expect("the entry was removed");
        let removed_by_sweep = removal
            .checked_sub(1)
            .and_then(|before| of_k[before].item.as_ref())
            .is_some_and(|item| item.contains_key("swept"));
        assert_eq!(
            swept,
            usize::from(removed_by_sweep),
            "the sweep counted {swept} removal(s), and its watchers would see the removal as {}",
            if removed_by_sweep {
                "an expiry"
            } else {
                "a delete"
            }
        );
        assert!(user.get(b"s/k").await.unwrap().is_none());
    });
}
