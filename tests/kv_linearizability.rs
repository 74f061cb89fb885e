//! Linearizability of the key-value store's single-key operations on DynamoDB Local: 16
//! clients doing random get, put, compare-and-swap and conditional delete on 4 keys for
//! 10 s, every invoke and completion recorded, the history checked by `lincheck`. The
//! same run against a store with a planted bug (compare-and-swap as a read, then a blind
//! write) must be caught.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod lincheck;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use dynacommit::kv::{DynamoKv, KvError, KvStore, MemoryKv, Revision};
use lincheck::{Op, Outcome, Recorder};
use rand::RngExt;

const KEYS: [&str; 4] = ["lin/a", "lin/b", "lin/c", "lin/d"];

/// The shares of the operations, in percent (the rest are reads).
#[derive(Clone, Copy)]
struct Mix {
    cas: u32,
    delete: u32,
    put: u32,
}

const MIXED: Mix = Mix {
    cas: 30,
    delete: 15,
    put: 25,
};

/// Runs `clients` clients on `kv` for `duration`, recording everything.
async fn run(kv: Arc<dyn KvStore>, clients: usize, duration: Duration, mix: Mix) -> Arc<Recorder> {
    let recorder = Arc::new(Recorder::new());
    let deadline = tokio::time::Instant::now() + duration;
    let tasks = (0..clients).map(|client| {
        let kv = kv.clone();
        let recorder = recorder.clone();
        tokio::spawn(async move {
            // What this client last saw of each key: the basis of its conditional ops.
            let mut seen: Vec<Option<(Vec<u8>, Revision)>> = vec![None; KEYS.len()];
            let mut seq = 0u64;
            while tokio::time::Instant::now() < deadline {
                seq += 1;
                let (k, roll) = {
                    let mut rng = rand::rng();
                    (rng.random_range(0..KEYS.len()), rng.random_range(0..100))
                };
                let key = KEYS[k];
                let fresh = format!("c{client}-{seq}").into_bytes();
                if roll < mix.cas && seen[k].is_some() {
                    let expected = seen[k].as_ref().map(|s| s.0.clone()).unwrap_or_default();
                    let token =
                        recorder.invoke(client, key, Op::cas(expected.clone(), fresh.clone()));
                    let result = kv
                        .compare_and_swap(
                            key.as_bytes(),
                            &expected,
                            Bytes::from(fresh.clone()),
                            None,
                        )
                        .await;
                    let outcome = match result {
                        Ok(rev) => {
                            seen[k] = Some((fresh, rev.clone()));
                            Outcome::written(rev.as_str())
                        }
                        Err(KvError::CompareFailed { .. }) => Outcome::Mismatch,
                        Err(e) => unknown(e),
                    };
                    recorder.complete(token, outcome);
                } else if roll < mix.cas + mix.delete && seen[k].is_some() {
                    let rev = seen[k].as_ref().map(|s| s.1.clone()).unwrap();
                    let token = recorder.invoke(client, key, Op::delete(rev.as_str()));
                    let outcome = match kv.conditional_delete(key.as_bytes(), &rev).await {
                        Ok(()) => {
                            seen[k] = None;
                            Outcome::Deleted
                        }
                        Err(KvError::RevisionMismatch { .. }) => Outcome::Mismatch,
                        Err(e) => unknown(e),
                    };
                    recorder.complete(token, outcome);
                } else if roll < mix.cas + mix.delete + mix.put {
                    let token = recorder.invoke(client, key, Op::put(fresh.clone()));
                    let outcome = match kv
                        .put(key.as_bytes(), Bytes::from(fresh.clone()), None)
                        .await
                    {
                        Ok(rev) => {
                            seen[k] = Some((fresh, rev.clone()));
                            Outcome::written(rev.as_str())
                        }
                        Err(e) => unknown(e),
                    };
                    recorder.complete(token, outcome);
                } else {
                    let token = recorder.invoke(client, key, Op::Get);
                    let outcome = match kv.get(key.as_bytes()).await {
                        Ok(Some(entry)) => {
                            seen[k] = Some((entry.value.to_vec(), entry.revision.clone()));
                            Outcome::found(entry.value.to_vec(), entry.revision.as_str())
                        }
                        Ok(None) => Outcome::absent(),
                        Err(e) => panic!("a read failed: {e}"),
                    };
                    recorder.complete(token, outcome);
                }
            }
        })
    });
    for task in futures::future::join_all(tasks).await {
        task.unwrap();
    }
    recorder
}

/// A write whose outcome the client cannot know: it may have applied.
fn unknown(e: KvError) -> Outcome {
    assert!(e.may_have_applied(), "a write failed definitely: {e}");
    Outcome::Unknown
}

async fn dynamo(planted: bool) -> Arc<dyn KvStore> {
    let client = common::dynamodb().await;
    let kv = DynamoKv::new(client, "dynacommit-kv-tests")
        .with_namespace(&common::unique_name("lin"))
        .unwrap();
    kv.ensure_table().await.unwrap();
    let kv = if planted {
        kv.with_planted_bug(dynacommit::lease::PlantedBug::KvSwapWithoutCondition)
    } else {
        kv
    };
    Arc::new(kv)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn single_key_operations_on_dynamodb_are_linearizable() {
    let recorder = run(dynamo(false).await, 16, Duration::from_secs(10), MIXED).await;
    let history = recorder.history();
    match lincheck::check(&history) {
        Ok(report) => {
            println!("{} operations: {report}", history.len());
            assert!(
                report.is_conclusive(),
                "the checker ran out of budget: {report}"
            );
        }
        Err(violation) => panic!("not linearizable:\n{violation}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_in_process_store_is_linearizable_too() {
    let recorder = run(
        Arc::new(MemoryKv::new()),
        16,
        Duration::from_millis(500),
        MIXED,
    )
    .await;
    let history = recorder.history();
    let report = lincheck::check(&history).unwrap_or_else(|v| panic!("not linearizable:\n{v}"));
    assert!(report.is_conclusive(), "{report}");
}

/// The planted bug: compare-and-swap as a read, then an unconditional write. Two clients
/// that read the same value both "win". The checker must say so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_checker_catches_a_compare_and_swap_that_is_not_atomic() {
    let heavy = Mix {
        cas: 70,
        delete: 0,
        put: 5,
    };
    let recorder = run(dynamo(true).await, 16, Duration::from_secs(5), heavy).await;
    let history = recorder.history();
    match lincheck::check(&history) {
        Ok(report) => panic!(
            "{} operations with a racy compare-and-swap passed the check: {report}",
            history.len()
        ),
        Err(violation) => println!("caught, as it must be:\n{violation}"),
    }
}
