//! How many items a folder counter's changes should be spread over: writers creating and
//! deleting keys under one hot folder (Vault's `sys/expire/id/`, where every lease is a
//! key, here under `sys/expire/id/auth/token/`), against the simulator's table, which
//! answers contention as AWS does (a transaction meeting another in flight on one of its
//! items is cancelled with `TransactionConflict`; DynamoDB Local never does that). Each
//! create and delete is one transaction with a `+1` or `-1` on one shard of each of the
//! key's five folders, so with one shard every two writers in flight conflict. Each row
//! is run twice: with a transaction refused for a counter shard waiting to try that
//! shard again (as the store did), and moving to another shard at once (as it does).
//!
//! Time is Tokio's paused clock, under the table's latency model: 0.2 to 2 ms each way
//! per request, and each item of a transaction applied up to `ITEM_TIME` after the last
//! (AWS commits a transaction in about 10 to 20 ms). So the figures are deterministic,
//! and say how the shard count trades conflicts against the items a listing reads; they
//! are not AWS's absolute latencies.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

#[path = "../tests/kvsim/mod.rs"]
mod kvsim;
#[path = "../tests/lincheck/mod.rs"]
mod lincheck;

use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::Bytes;
use dynacommit::kv::{FOLDER_SHARDS, KvError, KvStore};
use kvsim::table::{FakeTable, Faults};
use tokio::time::Instant;

/// Writers at once, and keys each creates and deletes.
const WRITERS: usize = 16;
const KEYS_EACH: usize = 25;
/// How long each item of a transaction takes to apply, at most.
const ITEM_TIME: Duration = Duration::from_millis(5);
/// Seeds per shard count (the table's timings differ with each).
const SEEDS: u64 = 3;

struct Figures {
    elapsed: Duration,
    latencies: Vec<Duration>,
    transactions: u64,
    conflicts: u64,
    contention: usize,
}

fn run(shards: u8, moves: bool, seed: u64) -> Figures {
    let runtime = kvsim::paused_runtime();
    runtime.block_on(async move {
        let table = FakeTable::new(seed, Faults::calm(ITEM_TIME));
        let origin = Instant::now();
        let mut writers = Vec::new();
        for w in 0..WRITERS {
            let clock = kvsim::clock(origin, seed * 1000 + w as u64);
            let kv = kvsim::store(&table, clock, None).with_folder_shards(shards);
            let kv = if moves { kv } else { kv.without_shard_moves() };
            writers.push(tokio::spawn(async move {
                let mut latencies = Vec::new();
                let mut contention = 0;
                for i in 0..KEYS_EACH {
                    let key = format!("sys/expire/id/auth/token/w{w}-{i}");
                    for create in [true, false] {
                        let started = Instant::now();
                        let result = if create {
                            kv.create(key.as_bytes(), Bytes::from_static(b"lease"), None)
                                .await
                                .map(|_| ())
                        } else {
                            kv.delete(key.as_bytes()).await.map(|_| ())
                        };
                        match result {
                            Ok(()) => latencies.push(started.elapsed()),
                            Err(KvError::Contention { .. }) => contention += 1,
                            Err(e) => panic!("writer {w}: {e}"),
                        }
                    }
                }
                (latencies, contention)
            }));
        }
        let mut figures = Figures {
            elapsed: Duration::ZERO,
            latencies: Vec::new(),
            transactions: 0,
            conflicts: 0,
            contention: 0,
        };
        for w in writers {
            let (latencies, contention) = w.await.unwrap();
            figures.latencies.extend(latencies);
            figures.contention += contention;
        }
        figures.elapsed = origin.elapsed();
        figures.transactions = *table
            .counts
            .lock()
            .unwrap()
            .get("TransactWriteItems")
            .unwrap_or(&0);
        figures.conflicts = table.conflicts.load(Ordering::Relaxed);
        figures
    })
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn main() {
    let smoke = std::env::var("DYNACOMMIT_BENCH_SMOKE").is_ok_and(|v| !v.is_empty() && v != "0");
    // DYNACOMMIT_HOT_SHARDS=8,16 runs only those counts.
    let chosen: Option<Vec<u8>> = std::env::var("DYNACOMMIT_HOT_SHARDS")
        .ok()
        .map(|v| v.split(',').filter_map(|n| n.trim().parse().ok()).collect());
    let counts: &[u8] = match &chosen {
        Some(c) => c,
        None if smoke => &[1, FOLDER_SHARDS],
        None => &[1, 2, 4, 8, 16, 32],
    };
    let seeds = if smoke { 1 } else { SEEDS };
    println!(
        "{WRITERS} writers each creating and deleting {KEYS_EACH} keys under sys/expire/id/auth/token/, \
         {seeds} seeds per row (virtual time; FOLDER_SHARDS = {FOLDER_SHARDS})\n"
    );
    println!(
        "| shards | conflicting shard | ops/s | p50 ms | p99 ms | transactions per op | conflicts per op | contention failures |"
    );
    println!("|---:|---|---:|---:|---:|---:|---:|---:|");
    for &shards in counts {
        for moves in [false, true] {
            let (mut elapsed, mut latencies, mut transactions, mut conflicts, mut contention) =
                (Duration::ZERO, Vec::new(), 0, 0, 0);
            for seed in 0..seeds {
                let f = run(shards, moves, seed);
                elapsed += f.elapsed;
                latencies.extend(f.latencies);
                transactions += f.transactions;
                conflicts += f.conflicts;
                contention += f.contention;
            }
            latencies.sort();
            let ops = latencies.len().max(1) as f64;
            println!(
                "| {shards} | {} | {:.0} | {:.1} | {:.1} | {:.2} | {:.2} | {contention} |",
                if moves { "moved at once" } else { "waited for" },
                ops / elapsed.as_secs_f64(),
                percentile(&latencies, 0.5).as_secs_f64() * 1e3,
                percentile(&latencies, 0.99).as_secs_f64() * 1e3,
                transactions as f64 / ops,
                conflicts as f64 / ops,
            );
        }
    }
}
