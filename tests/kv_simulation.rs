//! The key-value store in the deterministic simulator (`kvsim`): the real `DynamoKv`
//! over a table that answers as AWS does (transaction conflicts, throttling as errors and
//! as cancellation reasons, lost answers, late writes, stalled reads, TTL deletes), its
//! histories checked for linearizability with expiry and its listings against the
//! folder invariants; and the planted bugs the runs must catch.
//!
//! `DYNACOMMIT_KV_SIM_SEED=N` replays one seed and prints what it found.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod kvsim;
mod lincheck;

use dynacommit::lease::PlantedBug;
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
        "{} operations ({} of unknown outcome), {} listings, {} requests",
        total.operations, total.unknown, total.listings, total.requests
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
}

// Two tests of 20 seeds each, so that nextest runs them side by side.
#[test]
fn the_kv_is_linearizable_with_expiry_and_lists_truly_over_aws_answers() {
    holds_over(0..20);
}

#[test]
fn the_kv_is_linearizable_with_expiry_and_lists_truly_over_more_seeds() {
    holds_over(20..40);
}

/// Runs seeds from 0 with `bug` planted until one catches it (or, with
/// `DYNACOMMIT_KV_SIM_RATE` set, all `seeds`, printing how many caught it).
fn caught(bug: PlantedBug, seeds: u64) {
    let all = std::env::var_os("DYNACOMMIT_KV_SIM_RATE").is_some();
    let mut caught = Vec::new();
    for seed in 0..seeds {
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
        "{bug:?} caught by {} of {seeds} seeds: {caught:?}",
        caught.len()
    );
    assert!(!caught.is_empty(), "{bug:?} passed {seeds} seeds");
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
fn the_simulator_catches_a_compare_and_swap_that_is_not_atomic() {
    caught(PlantedBug::KvSwapWithoutCondition, 40);
}
