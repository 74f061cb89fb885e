//! The key-value store's operations on DynamoDB Local: latency and DynamoDB requests per
//! operation, for get, put, create, compare-and-swap, delete, a listing of 100, a range of
//! 1,000 and a 25-operation transaction, and the writes over a key that once had an
//! expiry (counted as expiring for good, `cx`) and a key's first expiry. Each operation runs in ROUNDS rounds; each round
//! reports its median, and the table gives the median of those medians with their spread
//! (one run on this machine swings about 20%). Needs DynamoDB Local
//! (`scripts/services.sh start dynamodb`); `scripts/bench.sh` does it all.

#[path = "../tests/common/mod.rs"]
mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use dynacommit::dynamo::DynamoClient;
use dynacommit::kv::{DynamoKv, KvStore, TxnOp};

const TABLE: &str = "dynacommit-kv-bench";

/// Rounds of each operation, and operations per round.
fn sizes() -> (usize, usize) {
    match std::env::var("DYNACOMMIT_BENCH_SMOKE") {
        Ok(v) if !v.is_empty() && v != "0" => (1, 2),
        _ => (5, 40),
    }
}

struct Measured {
    name: &'static str,
    /// Median latency of each round.
    medians: Vec<Duration>,
    requests_per_op: f64,
}

/// Runs `op` (given its index in the round) `per_round` times in each of `rounds` rounds,
/// after one warm-up; counts the client's requests.
async fn measure<F, Fut>(
    name: &'static str,
    client: &DynamoClient,
    rounds: usize,
    per_round: usize,
    mut op: F,
) -> Measured
where
    F: FnMut(usize) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    op(usize::MAX).await;
    let mut medians = Vec::new();
    let mut requests = 0;
    let mut ops = 0;
    let mut index = 0;
    for _ in 0..rounds {
        let mut times = Vec::with_capacity(per_round);
        for _ in 0..per_round {
            let before = client.requests_sent();
            let started = Instant::now();
            op(index).await;
            times.push(started.elapsed());
            requests += client.requests_sent() - before;
            ops += 1;
            index += 1;
        }
        times.sort();
        medians.push(times[times.len() / 2]);
    }
    medians.sort();
    Measured {
        name,
        medians,
        requests_per_op: requests as f64 / ops as f64,
    }
}

fn ms(d: Duration) -> String {
    format!("{:.2}", d.as_secs_f64() * 1000.0)
}

#[tokio::main]
async fn main() {
    let (rounds, per_round) = sizes();
    let client = common::dynamodb().await;
    let kv = DynamoKv::new(client.clone(), TABLE)
        .with_namespace(&common::unique_name("bench"))
        .unwrap();
    kv.ensure_table().await.unwrap();
    let kv = Arc::new(kv);
    let value = Bytes::from(vec![b'v'; 256]);

    // Fixtures: a key to read and overwrite, a folder of 100, a range of 1,000, a folder of
    // 25 keys for transactions.
    kv.put(b"bench/key", value.clone(), None).await.unwrap();
    for (folder, count) in [("list", 100), ("range", 1000), ("txn", 25)] {
        let keys: Vec<String> = (0..count)
            .map(|i| format!("bench/{folder}/{i:04}"))
            .collect();
        for chunk in keys.chunks(90) {
            let ops = chunk
                .iter()
                .map(|k| TxnOp::put(k.as_bytes(), value.clone()))
                .collect();
            kv.transaction(ops).await.unwrap();
        }
    }
    let run = format!("{:08x}", rand::random::<u32>());

    let mut results = Vec::new();
    results.push(
        measure("get", &client, rounds, per_round, |_| async {
            assert!(kv.get(b"bench/key").await.unwrap().is_some());
        })
        .await,
    );
    results.push(
        measure("put (overwrite)", &client, rounds, per_round, |_| async {
            kv.put(b"bench/key", value.clone(), None).await.unwrap();
        })
        .await,
    );
    results.push(
        measure("put (new key)", &client, rounds, per_round, |i| {
            let key = format!("bench/new-{run}/{i}");
            let kv = kv.clone();
            let value = value.clone();
            async move {
                kv.put(key.as_bytes(), value, None).await.unwrap();
            }
        })
        .await,
    );
    results.push(
        measure("create", &client, rounds, per_round, |i| {
            let key = format!("bench/created-{run}/{i}");
            let kv = kv.clone();
            let value = value.clone();
            async move {
                kv.create(key.as_bytes(), value, None).await.unwrap();
            }
        })
        .await,
    );
    results.push(
        measure("compare_and_swap", &client, rounds, per_round, |i| {
            let kv = kv.clone();
            async move {
                let from = if i == usize::MAX { 0 } else { i + 1 };
                let (old, new) = (format!("c{from}"), format!("c{}", from.wrapping_add(1)));
                if i == usize::MAX {
                    kv.put(b"bench/cas", Bytes::from(old), None).await.unwrap();
                    kv.compare_and_swap(b"bench/cas", b"c0", Bytes::from("c1"), None)
                        .await
                        .unwrap();
                    return;
                }
                kv.compare_and_swap(b"bench/cas", old.as_bytes(), Bytes::from(new), None)
                    .await
                    .unwrap();
            }
        })
        .await,
    );
    // A key that once had an expiry stays counted as expiring: a plain put over it, and a
    // compare-and-swap on it, must still cost one request.
    let far = std::time::SystemTime::now() + Duration::from_secs(3600);
    kv.put(b"bench/once-expiring", value.clone(), Some(far))
        .await
        .unwrap();
    kv.put(b"bench/once-expiring", Bytes::from("c0"), None)
        .await
        .unwrap();
    results.push(
        measure(
            "put (overwrite, once expiring)",
            &client,
            rounds,
            per_round,
            |_| async {
                kv.put(b"bench/once-expiring", value.clone(), None)
                    .await
                    .unwrap();
            },
        )
        .await,
    );
    results.push(
        measure(
            "compare_and_swap (once expiring)",
            &client,
            rounds,
            per_round,
            |i| {
                let kv = kv.clone();
                async move {
                    if i == usize::MAX {
                        kv.put(b"bench/once-expiring", Bytes::from("c0"), None)
                            .await
                            .unwrap();
                        return;
                    }
                    let (old, new) = (format!("c{i}"), format!("c{}", i + 1));
                    kv.compare_and_swap(
                        b"bench/once-expiring",
                        old.as_bytes(),
                        Bytes::from(new),
                        None,
                    )
                    .await
                    .unwrap();
                }
            },
        )
        .await,
    );
    results.push(
        measure(
            "put, then put with a first expiry (new key)",
            &client,
            rounds,
            per_round,
            |i| {
                let key = format!("bench/first-expiry-{run}/{i}");
                let kv = kv.clone();
                let value = value.clone();
                async move {
                    kv.put(key.as_bytes(), value.clone(), None).await.unwrap();
                    kv.put(key.as_bytes(), value, Some(far)).await.unwrap();
                }
            },
        )
        .await,
    );
    results.push(
        measure("delete", &client, rounds, per_round, |i| {
            let key = format!("bench/created-{run}/{i}");
            let kv = kv.clone();
            async move {
                kv.delete(key.as_bytes()).await.unwrap();
            }
        })
        .await,
    );
    results.push(
        measure(
            "list of 100",
            &client,
            rounds,
            per_round.min(20),
            |_| async {
                assert_eq!(kv.list(b"bench/list/").await.unwrap().len(), 100);
            },
        )
        .await,
    );
    results.push(
        measure(
            "range of 1,000",
            &client,
            rounds,
            per_round.min(10),
            |_| async {
                let got = kv
                    .range(b"bench/range/", b"bench/range0", None)
                    .await
                    .unwrap();
                assert_eq!(got.len(), 1000);
            },
        )
        .await,
    );
    results.push(
        measure(
            "transaction of 25 puts",
            &client,
            rounds,
            per_round.min(20),
            |_| {
                let ops = (0..25)
                    .map(|i| TxnOp::put(format!("bench/txn/{i:04}").as_bytes(), value.clone()))
                    .collect();
                let kv = kv.clone();
                async move {
                    kv.transaction(ops).await.unwrap();
                }
            },
        )
        .await,
    );

    println!(
        "\nkey-value store on DynamoDB Local ({}): {rounds} rounds, 256-byte values",
        client.endpoint()
    );
    println!("| operation | p50 ms (median of rounds) | spread of round medians | requests / op |");
    println!("|---|---|---|---|");
    for r in &results {
        let (lo, mid, hi) = (
            r.medians[0],
            r.medians[r.medians.len() / 2],
            r.medians[r.medians.len() - 1],
        );
        println!(
            "| {} | {} | {}-{} | {:.2} |",
            r.name,
            ms(mid),
            ms(lo),
            ms(hi),
            r.requests_per_op
        );
    }
    kv.delete_range(b"", b"").await.unwrap();
}
