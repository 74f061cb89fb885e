//! The key-value store's contract, run on both stores: the in-process one and DynamoDB
//! Local (one shared table, a namespace per test). Vault's backend exercises and
//! Teleport's backend suite, restated as behaviours.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use dynacommit::kv::{
    Checkpoint, DynamoKv, EventKind, KvError, KvStore, MemoryKv, TxnOp, VALUE_MAX,
};

const TABLE: &str = "dynacommit-kv-tests";

async fn dynamo_store() -> Arc<dyn KvStore> {
    let client = common::dynamodb().await;
    let kv = DynamoKv::new(client, TABLE)
        .with_namespace(&common::unique_name("t"))
        .unwrap();
    kv.ensure_table().await.unwrap();
    Arc::new(kv)
}

fn memory_store() -> Arc<dyn KvStore> {
    Arc::new(MemoryKv::new())
}

/// Runs each behaviour on both stores.
macro_rules! on_both_stores {
    ($($name:ident),* $(,)?) => {
        mod memory {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                super::$name(super::memory_store()).await;
            })*
        }
        mod dynamodb {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                super::$name(super::dynamo_store().await).await;
            })*
        }
    };
}

on_both_stores!(
    vault_exercise_backend,
    vault_list_prefix,
    vault_transactional_backend,
    teleport_crud,
    teleport_query_range,
    teleport_range_of_1501,
    teleport_delete_range_of_150,
    teleport_compare_and_swap_rounds,
    teleport_expiration,
    teleport_keep_alive,
    teleport_events,
    teleport_concurrent_operations,
    watch_resumes_after_a_checkpoint,
    odd_keys_round_trip_and_bad_ones_are_refused,
    transactions_are_atomic_and_name_the_failed_step,
    ranges_cross_folders_in_key_order,
    folders_vanish_when_their_last_key_expires_however_it_got_its_expiry,
    delete_range_across_many_deep_branches,
    a_resumed_watch_stands_at_its_checkpoint_until_the_replay,
    a_transaction_over_an_expired_entry_relies_only_on_its_own_steps,
    read_bounds_longer_than_any_key_are_answered_not_refused,
    transactions_count_their_folder_counters_alike_in_both_stores,
);

fn b(text: &str) -> Bytes {
    Bytes::from(text.to_owned())
}

async fn names(kv: &Arc<dyn KvStore>, prefix: &str) -> Vec<String> {
    kv.list(prefix.as_bytes())
        .await
        .unwrap()
        .into_iter()
        .map(|n| String::from_utf8(n).unwrap())
        .collect()
}

async fn value(kv: &Arc<dyn KvStore>, key: &str) -> Option<Bytes> {
    kv.get(key.as_bytes()).await.unwrap().map(|e| e.value)
}

/// Vault's ExerciseBackend: an empty store, idempotent deletes, nested keys, folders that
/// vanish with their last key, deep nesting leaving no artifacts.
async fn vault_exercise_backend(kv: Arc<dyn KvStore>) {
    assert!(names(&kv, "").await.is_empty(), "a new store lists nothing");
    assert!(
        !kv.delete(b"foo").await.unwrap(),
        "deleting a missing key succeeds"
    );
    assert_eq!(value(&kv, "foo").await, None);

    kv.put(b"foo", b("test"), None).await.unwrap();
    assert_eq!(value(&kv, "foo").await, Some(b("test")));
    assert_eq!(names(&kv, "").await, ["foo"]);
    assert!(kv.delete(b"foo").await.unwrap());
    assert!(names(&kv, "").await.is_empty());
    assert_eq!(value(&kv, "foo").await, None);

    kv.put(b"foo", b("test"), None).await.unwrap();
    kv.put(b"foo", b("test"), None).await.unwrap();
    kv.put(b"foo/bar", b("baz"), None).await.unwrap();
    assert_eq!(value(&kv, "foo/bar").await, Some(b("baz")));
    assert_eq!(names(&kv, "").await, ["foo", "foo/"]);

    kv.delete(b"foo").await.unwrap();
    assert!(
        value(&kv, "foo/bar").await.is_some(),
        "a folder's key outlives a sibling"
    );

    kv.put(b"foo/nested1/nested2/nested3", b("baz"), None)
        .await
        .unwrap();
    kv.delete(b"foo/nested1/nested2/nested3").await.unwrap();
    assert_eq!(names(&kv, "foo/").await, ["bar"], "no folder left behind");

    kv.put(b"foo/zip", b("zap"), None).await.unwrap();
    kv.delete(b"foo/bar").await.unwrap();
    assert_eq!(names(&kv, "").await, ["foo/"]);
    kv.delete(b"foo/zip").await.unwrap();
    assert!(names(&kv, "").await.is_empty());

    kv.put(b"foo/nested1/nested2/value1", b("baz"), None)
        .await
        .unwrap();
    kv.put(b"foo/nested1/nested2/value2", b("baz"), None)
        .await
        .unwrap();
    kv.delete(b"foo/nested1/nested2/value2").await.unwrap();
    assert_eq!(
        names(&kv, "").await,
        ["foo/"],
        "a folder with one key left stays"
    );
    assert_eq!(names(&kv, "foo/nested1/").await, ["nested2/"]);
    kv.delete(b"foo/nested1/nested2/value1").await.unwrap();
    assert!(names(&kv, "").await.is_empty());
    assert!(names(&kv, "foo/nested1/").await.is_empty());
}

/// Vault's ExerciseBackend_ListPrefix: a key and a folder of the same name, level by level.
async fn vault_list_prefix(kv: Arc<dyn KvStore>) {
    for k in ["foo", "foo/bar", "foo/bar/baz"] {
        kv.put(k.as_bytes(), b("test"), None).await.unwrap();
    }
    assert_eq!(names(&kv, "").await, ["foo", "foo/"]);
    assert_eq!(names(&kv, "foo/").await, ["bar", "bar/"]);
    assert_eq!(names(&kv, "foo/bar/").await, ["baz"]);
    // A prefix that is not a folder lists what starts with it, as Vault's in-memory
    // backend does.
    assert_eq!(names(&kv, "foo/b").await, ["ar", "ar/"]);
}

/// Vault's ExerciseTransactionalBackend: one key written twice, two deleted, all at once.
async fn vault_transactional_backend(kv: Arc<dyn KvStore>) {
    kv.put(b"foo", b("bar"), None).await.unwrap();
    kv.put(b"zip", b("zap"), None).await.unwrap();
    kv.put(b"deleteme", Bytes::new(), None).await.unwrap();
    kv.put(b"deleteme2", Bytes::new(), None).await.unwrap();
    kv.transaction(vec![
        TxnOp::put(b"foo", b("bar2")),
        TxnOp::delete(b"deleteme"),
        TxnOp::put(b"foo", b("bar3")),
        TxnOp::delete(b"deleteme2"),
        TxnOp::put(b"zip", b("zap3")),
    ])
    .await
    .unwrap();
    assert_eq!(names(&kv, "").await, ["foo", "zip"]);
    assert_eq!(value(&kv, "foo").await, Some(b("bar3")));
    assert_eq!(value(&kv, "zip").await, Some(b("zap3")));
}

/// Teleport's CRUD: create, update, put, delete, each refusing what it must.
async fn teleport_crud(kv: Arc<dyn KvStore>) {
    let key = b"/prefix/a";
    assert!(matches!(
        kv.update(key, b("x"), None).await,
        Err(KvError::NotFound { .. })
    ));
    let first = kv.create(key, b("1"), None).await.unwrap();
    assert!(matches!(
        kv.create(key, b("2"), None).await,
        Err(KvError::AlreadyExists { .. })
    ));
    let entry = kv.get(key).await.unwrap().unwrap();
    assert_eq!(
        (entry.value, entry.revision.clone()),
        (b("1"), first.clone())
    );
    let second = kv.update(key, b("2"), None).await.unwrap();
    assert_ne!(first, second, "every write gives a new revision");
    assert!(matches!(
        kv.conditional_update(key, &first, b("3"), None).await,
        Err(KvError::RevisionMismatch { .. })
    ));
    let third = kv
        .conditional_update(key, &second, b("3"), None)
        .await
        .unwrap();
    assert!(matches!(
        kv.conditional_delete(key, &second).await,
        Err(KvError::RevisionMismatch { .. })
    ));
    kv.conditional_delete(key, &third).await.unwrap();
    assert_eq!(value(&kv, "/prefix/a").await, None);
    assert!(matches!(
        kv.conditional_delete(key, &third).await,
        Err(KvError::RevisionMismatch { .. })
    ));
    let again = kv.put(key, b("4"), None).await.unwrap();
    assert!(
        ![first, second, third].contains(&again),
        "a re-created key never reuses a revision"
    );
}

/// Teleport's QueryRange: a prefix range in order, limits, nothing outside.
async fn teleport_query_range(kv: Arc<dyn KvStore>) {
    for k in [
        "/prefix/a",
        "/prefix/b",
        "/prefix/c/c1",
        "/prefix/c/c2",
        "/prefix0",
        "/prefiw",
    ] {
        kv.put(k.as_bytes(), Bytes::from(k.to_owned()), None)
            .await
            .unwrap();
    }
    let keys = |entries: Vec<dynacommit::kv::Entry>| -> Vec<String> {
        entries
            .into_iter()
            .map(|e| {
                assert_eq!(
                    e.value.as_ref(),
                    e.key.as_slice(),
                    "values go with their keys"
                );
                String::from_utf8(e.key).unwrap()
            })
            .collect()
    };
    let all = kv.range(b"/prefix/", b"/prefix0", None).await.unwrap();
    assert_eq!(
        keys(all),
        ["/prefix/a", "/prefix/b", "/prefix/c/c1", "/prefix/c/c2"]
    );
    let first_two = kv.range(b"/prefix/", b"/prefix0", Some(2)).await.unwrap();
    assert_eq!(keys(first_two), ["/prefix/a", "/prefix/b"]);
    let sub = kv.range(b"/prefix/c/", b"/prefix/c0", None).await.unwrap();
    assert_eq!(keys(sub), ["/prefix/c/c1", "/prefix/c/c2"]);
    let from_mid = kv.range(b"/prefix/b", b"/prefix/c/c2", None).await.unwrap();
    assert_eq!(keys(from_mid), ["/prefix/b", "/prefix/c/c1"]);
    assert!(
        kv.range(b"/prefix/", b"/prefix/", None)
            .await
            .unwrap()
            .is_empty()
    );
    let everything = kv.range(b"", b"", None).await.unwrap();
    assert_eq!(everything.len(), 6);
}

/// Writes `count` keys `prefix/NNNNN` with 1 KiB values, in transactions.
async fn fill(kv: &Arc<dyn KvStore>, prefix: &str, count: usize) -> Vec<String> {
    let keys: Vec<String> = (0..count).map(|i| format!("{prefix}/{i:05}")).collect();
    for chunk in keys.chunks(90) {
        let ops = chunk
            .iter()
            .map(|k| TxnOp::put(k.as_bytes(), Bytes::from(vec![b'v'; 1024])))
            .collect();
        kv.transaction(ops).await.unwrap();
    }
    keys
}

/// Teleport's range of 1,501 items: every one, in order, past DynamoDB's 1 MB pages.
async fn teleport_range_of_1501(kv: Arc<dyn KvStore>) {
    let keys = fill(&kv, "/items", 1501).await;
    let got: Vec<String> = kv
        .range(b"/items/", b"/items0", None)
        .await
        .unwrap()
        .into_iter()
        .map(|e| String::from_utf8(e.key).unwrap())
        .collect();
    assert_eq!(got, keys);
    assert_eq!(
        kv.range(b"/items/", b"/items0", Some(1200))
            .await
            .unwrap()
            .len(),
        1200
    );
}

/// Teleport's DeleteRange of 150: all gone, the neighbours kept, the folder gone.
async fn teleport_delete_range_of_150(kv: Arc<dyn KvStore>) {
    fill(&kv, "/del", 150).await;
    kv.put(b"/dek", b("before"), None).await.unwrap();
    kv.put(b"/del0", b("after"), None).await.unwrap();
    assert_eq!(kv.delete_range(b"/del/", b"/del0").await.unwrap(), 150);
    assert!(kv.range(b"/del/", b"/del0", None).await.unwrap().is_empty());
    assert_eq!(names(&kv, "/").await, ["dek", "del0"]);
}

/// Teleport's CompareAndSwap, raced: 10 rounds of 2 racers from one value, exactly one
/// winner each.
async fn teleport_compare_and_swap_rounds(kv: Arc<dyn KvStore>) {
    let key = b"/cas/key";
    kv.put(key, b("round-0"), None).await.unwrap();
    for round in 0..10 {
        let expected = format!("round-{round}");
        let racers = (0..2).map(|racer| {
            let kv = kv.clone();
            let expected = expected.clone();
            tokio::spawn(async move {
                let next = Bytes::from(format!("round-{}-by-{racer}", round + 1));
                match kv
                    .compare_and_swap(key, expected.as_bytes(), next, None)
                    .await
                {
                    Ok(_) => true,
                    Err(KvError::CompareFailed { .. }) => false,
                    Err(e) => panic!("{e}"),
                }
            })
        });
        let wins = futures::future::join_all(racers)
            .await
            .into_iter()
            .filter(|r| *r.as_ref().unwrap())
            .count();
        assert_eq!(wins, 1, "round {round}: exactly one racer wins");
        let now = value(&kv, "/cas/key").await.unwrap();
        assert!(now.starts_with(format!("round-{}-by-", round + 1).as_bytes()));
        kv.put(key, Bytes::from(format!("round-{}", round + 1)), None)
            .await
            .unwrap();
    }
    assert!(matches!(
        kv.compare_and_swap(b"/cas/missing", b"x", b("y"), None)
            .await,
        Err(KvError::CompareFailed { .. })
    ));
}

/// Stores `key` with an expiry that then passes: expired, but not deleted.
async fn put_expired(kv: &Arc<dyn KvStore>, key: &[u8]) {
    let soon = SystemTime::now() + Duration::from_millis(100);
    kv.put(key, b("old"), Some(soon)).await.unwrap();
    until_gone(kv, key).await;
}

/// Waits (polling, bounded) until `key` reads as absent.
async fn until_gone(kv: &Arc<dyn KvStore>, key: &[u8]) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while kv.get(key).await.unwrap().is_some() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the entry never expired"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Teleport's Expiration: an expired entry is absent to every read at once, although no
/// one has deleted it; create takes its place, update does not.
async fn teleport_expiration(kv: Arc<dyn KvStore>) {
    let soon = SystemTime::now() + Duration::from_millis(800);
    kv.put(b"/exp/short", b("1"), Some(soon)).await.unwrap();
    kv.put(
        b"/exp/long",
        b("2"),
        Some(SystemTime::now() + Duration::from_secs(3600)),
    )
    .await
    .unwrap();
    kv.put(b"/exp/sub/short", b("3"), Some(soon)).await.unwrap();
    let entry = kv.get(b"/exp/short").await.unwrap().unwrap();
    let stored_ms = entry
        .expires
        .unwrap()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_millis();
    let asked_ms = soon
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_millis();
    assert_eq!(stored_ms, asked_ms, "expiry kept to the millisecond");
    until_gone(&kv, b"/exp/short").await;
    assert!(kv.get(b"/exp/sub/short").await.unwrap().is_none());
    let live: Vec<_> = kv.range(b"/exp/", b"/exp0", None).await.unwrap();
    assert_eq!(live.len(), 1);
    assert_eq!(live[0].key, b"/exp/long");
    assert_eq!(
        names(&kv, "/exp/").await,
        ["long"],
        "expired keys are not listed"
    );
    assert!(matches!(
        kv.update(b"/exp/short", b("x"), None).await,
        Err(KvError::NotFound { .. })
    ));
    assert!(matches!(
        kv.keep_alive(b"/exp/short", None).await,
        Err(KvError::NotFound { .. })
    ));
    kv.create(b"/exp/short", b("again"), None).await.unwrap();
    assert_eq!(value(&kv, "/exp/short").await, Some(b("again")));
    assert_eq!(
        kv.sweep_expired(b"/exp/", b"/exp0").await.unwrap(),
        1,
        "the sub key"
    );
    kv.delete(b"/exp/short").await.unwrap();
    kv.delete(b"/exp/long").await.unwrap();
    assert!(
        names(&kv, "").await.is_empty(),
        "swept and deleted: no folder left"
    );
}

/// Teleport's KeepAlive: a live entry's expiry moves, with a new revision.
async fn teleport_keep_alive(kv: Arc<dyn KvStore>) {
    let rev = kv
        .put(
            b"/ka/a",
            b("1"),
            Some(SystemTime::now() + Duration::from_millis(600)),
        )
        .await
        .unwrap();
    let later = SystemTime::now() + Duration::from_secs(3600);
    let kept = kv.keep_alive(b"/ka/a", Some(later)).await.unwrap();
    assert_ne!(kept, rev);
    let entry = kv.get(b"/ka/a").await.unwrap().unwrap();
    assert_eq!(entry.revision, kept);
    assert_eq!(entry.value, b("1"), "the value stays");
    assert!(entry.expires.unwrap() > SystemTime::now() + Duration::from_secs(3000));
    assert!(matches!(
        kv.keep_alive(b"/ka/missing", Some(later)).await,
        Err(KvError::NotFound { .. })
    ));
    kv.keep_alive(b"/ka/a", None).await.unwrap();
    assert_eq!(kv.get(b"/ka/a").await.unwrap().unwrap().expires, None);
}

/// Teleport's Events: ready, then put, delete and expiry, only under the prefix.
async fn teleport_events(kv: Arc<dyn KvStore>) {
    let mut watch = kv.watch(b"/ev/", None);
    assert_eq!(common::next_event(&mut watch).await.kind, EventKind::Ready);
    kv.put(b"/other", b("ignored"), None).await.unwrap();
    let rev = kv.put(b"/ev/a", b("1"), None).await.unwrap();
    match common::next_event(&mut watch).await.kind {
        EventKind::Put(entry) => {
            assert_eq!(
                (entry.key.as_slice(), entry.value, entry.revision),
                (&b"/ev/a"[..], b("1"), rev)
            );
        }
        other => panic!("{other:?}"),
    }
    kv.delete(b"/ev/a").await.unwrap();
    assert_eq!(
        common::next_event(&mut watch).await.kind,
        EventKind::Deleted {
            key: b"/ev/a".to_vec()
        }
    );
    kv.put(
        b"/ev/b",
        b("2"),
        Some(SystemTime::now() + Duration::from_millis(300)),
    )
    .await
    .unwrap();
    assert!(matches!(
        common::next_event(&mut watch).await.kind,
        EventKind::Put(_)
    ));
    until_gone(&kv, b"/ev/b").await;
    assert_eq!(kv.sweep_expired(b"/ev/", b"/ev0").await.unwrap(), 1);
    assert_eq!(
        common::next_event(&mut watch).await.kind,
        EventKind::Expired {
            key: b"/ev/b".to_vec()
        }
    );
}

/// A watch given an event's checkpoint goes on right after that event: nothing lost,
/// nothing repeated.
async fn watch_resumes_after_a_checkpoint(kv: Arc<dyn KvStore>) {
    let mut watch = kv.watch(b"/res/", None);
    assert_eq!(common::next_event(&mut watch).await.kind, EventKind::Ready);
    for i in 0..6 {
        kv.put(format!("/res/{i}").as_bytes(), b("v"), None)
            .await
            .unwrap();
    }
    let mut checkpoint: Option<Checkpoint> = None;
    for i in 0..3 {
        let event = common::next_event(&mut watch).await;
        assert_eq!(event.key(), Some(format!("/res/{i}").as_bytes()));
        checkpoint = Some(event.checkpoint);
    }
    drop(watch);
    for i in 6..8 {
        kv.put(format!("/res/{i}").as_bytes(), b("v"), None)
            .await
            .unwrap();
    }
    let mut resumed = kv.watch(b"/res/", checkpoint);
    assert_eq!(
        common::next_event(&mut resumed).await.kind,
        EventKind::Ready
    );
    for i in 3..8 {
        let event = common::next_event(&mut resumed).await;
        assert_eq!(
            event.key(),
            Some(format!("/res/{i}").as_bytes()),
            "event {i}"
        );
    }
}

/// Teleport's ConcurrentOperations: 50 tasks x 5 mixed operations on a few keys; every
/// value read is one some task wrote whole.
async fn teleport_concurrent_operations(kv: Arc<dyn KvStore>) {
    let tasks = (0..50).map(|task| {
        let kv = kv.clone();
        tokio::spawn(async move {
            for step in 0..5 {
                let key = format!("/conc/{}", (task + step) % 4);
                let written = Bytes::from(format!("{key}|{task}|{step}|{}", "x".repeat(64)));
                match (task + step) % 5 {
                    0 | 1 => {
                        kv.put(key.as_bytes(), written, None).await.unwrap();
                    }
                    2 => match kv.create(key.as_bytes(), written, None).await {
                        Ok(_) | Err(KvError::AlreadyExists { .. }) => {}
                        Err(e) => panic!("{e}"),
                    },
                    3 => {
                        kv.delete(key.as_bytes()).await.unwrap();
                    }
                    _ => {
                        if let Some(entry) = kv.get(key.as_bytes()).await.unwrap() {
                            let text = String::from_utf8(entry.value.to_vec()).unwrap();
                            let parts: Vec<&str> = text.split('|').collect();
                            assert_eq!(parts.len(), 4, "a torn value: {text}");
                            assert_eq!(parts[0], key, "a value of another key");
                            assert_eq!(parts[3].len(), 64, "a cut value");
                        }
                    }
                }
            }
        })
    });
    for t in futures::future::join_all(tasks).await {
        t.unwrap();
    }
    let listed: BTreeSet<String> = names(&kv, "/conc/").await.into_iter().collect();
    for i in 0..4 {
        let present = value(&kv, &format!("/conc/{i}")).await.is_some();
        assert_eq!(
            listed.contains(&i.to_string()),
            present,
            "the listing agrees with the keys"
        );
    }
}

/// Binary, unicode, `//` and leading-slash keys round-trip; a trailing slash, an empty
/// key, an oversized segment and an oversized value are refused, naming the limit.
async fn odd_keys_round_trip_and_bad_ones_are_refused(kv: Arc<dyn KvStore>) {
    let odd: Vec<Vec<u8>> = vec![
        vec![0, 1, 0xfe, 0xff],
        "ünïcödé/ключ/鍵".as_bytes().to_vec(),
        b"a//b".to_vec(),
        b"/lead".to_vec(),
        vec![b'k'; 1000],
    ];
    for (i, key) in odd.iter().enumerate() {
        let value = Bytes::from(vec![i as u8, 0, 0xff]);
        kv.put(key, value.clone(), None).await.unwrap();
        assert_eq!(kv.get(key).await.unwrap().unwrap().value, value);
    }
    assert_eq!(names(&kv, "a/").await, ["/"]);
    assert_eq!(names(&kv, "a//").await, ["b"]);
    assert_eq!(names(&kv, "/").await, ["lead"]);
    assert_eq!(names(&kv, "ünïcödé/").await, ["ключ/"]);
    let bad = |r: Result<_, KvError>| match r {
        Err(KvError::InvalidKey { problem, .. }) => problem,
        other => panic!("{:?}", other.map(|_| ())),
    };
    assert!(bad(kv.put(b"dir/", b("x"), None).await).contains("end in `/`"));
    assert!(bad(kv.put(b"", b("x"), None).await).contains("empty"));
    assert!(bad(kv.put(&[b'k'; 1100], b("x"), None).await).contains("1022"));
    match kv
        .put(b"big", Bytes::from(vec![0; VALUE_MAX + 1]), None)
        .await
    {
        Err(e @ KvError::ValueTooLarge { .. }) => {
            assert!(e.to_string().contains(&VALUE_MAX.to_string()), "{e}")
        }
        other => panic!("{:?}", other.map(|_| ())),
    }
    kv.put(b"big", Bytes::from(vec![7; VALUE_MAX]), None)
        .await
        .unwrap();
    assert_eq!(
        kv.get(b"big").await.unwrap().unwrap().value.len(),
        VALUE_MAX
    );
}

/// A failed step applies nothing and is named; limits are refused before anything is sent.
async fn transactions_are_atomic_and_name_the_failed_step(kv: Arc<dyn KvStore>) {
    let rev = kv.put(b"t/a", b("1"), None).await.unwrap();
    let failed = kv
        .transaction(vec![
            TxnOp::put(b"t/new", b("n")),
            TxnOp::delete(b"t/a"),
            TxnOp::check(b"t/a").if_revision(rev.clone()),
        ])
        .await;
    match failed {
        Err(KvError::TransactionConflict { index, key, .. }) => {
            assert_eq!(
                (index, key.as_str()),
                (2, "t/a"),
                "the check sees the delete before it"
            )
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(value(&kv, "t/new").await, None, "nothing applied");
    assert_eq!(value(&kv, "t/a").await, Some(b("1")));
    let revisions = kv
        .transaction(vec![
            TxnOp::check(b"t/a").if_revision(rev),
            TxnOp::put(b"t/new", b("n")).if_absent(),
            TxnOp::delete(b"t/missing"),
        ])
        .await
        .unwrap();
    assert!(revisions[0].is_none() && revisions[1].is_some() && revisions[2].is_none());
    assert_eq!(
        kv.get(b"t/new").await.unwrap().unwrap().revision,
        revisions[1].clone().unwrap()
    );
    let too_big = (0..11)
        .map(|i| {
            TxnOp::put(
                format!("t/big{i}").as_bytes(),
                Bytes::from(vec![0; VALUE_MAX]),
            )
        })
        .collect();
    match kv.transaction(too_big).await {
        Err(e @ KvError::InvalidTransaction { .. }) => {
            assert!(e.to_string().contains("bytes"), "{e}")
        }
        other => panic!("{other:?}"),
    }
    let too_many = (0..101)
        .map(|i| TxnOp::put(format!("t/{i}").as_bytes(), b("x")))
        .collect();
    match kv.transaction(too_many).await {
        Err(e @ KvError::InvalidTransaction { .. }) => {
            assert!(e.to_string().contains("100"), "{e}")
        }
        other => panic!("{other:?}"),
    }
}

/// A range across nested folders comes back in byte order, as if the keys were flat.
async fn ranges_cross_folders_in_key_order(kv: Arc<dyn KvStore>) {
    let mut keys: Vec<&str> = vec![
        "r/b",
        "r/b!",
        "r/b/x",
        "r/b/y/z",
        "r/b0",
        "r/a",
        "r//",
        "r//q",
        "r/c/d/e/f",
        "r/ba",
    ];
    keys.retain(|k| !k.ends_with('/'));
    for k in &keys {
        kv.put(k.as_bytes(), b("v"), None).await.unwrap();
    }
    let mut sorted: Vec<Vec<u8>> = keys.iter().map(|k| k.as_bytes().to_vec()).collect();
    sorted.sort();
    let got: Vec<Vec<u8>> = kv
        .range(b"r/", b"r0", None)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.key)
        .collect();
    assert_eq!(got, sorted);
    let mid: Vec<Vec<u8>> = kv
        .range(b"r/b/xx", b"r/c/d/e/f", None)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.key)
        .collect();
    assert_eq!(
        mid,
        vec![b"r/b/y/z".to_vec(), b"r/b0".to_vec(), b"r/ba".to_vec()]
    );
}

/// Storage and its leader lock in one table, as a Vault user runs them: lock records live
/// beside the entries without showing in listings, ranges or watches, and the lock still
/// excludes a second holder.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_table_holds_the_store_and_its_leader_lock() {
    use dynacommit::lease::{DynamoLeaseTable, LeaseManager};
    use dynacommit::lock::{LockClient, default_lock_config};

    let client = common::dynamodb().await;
    let table = common::unique_name("kv-and-lock");
    let kv: Arc<dyn KvStore> = {
        let kv = DynamoKv::new(client.clone(), &table);
        kv.ensure_table().await.unwrap();
        Arc::new(kv)
    };
    let locks = || {
        let mut config = default_lock_config();
        config.table = table.clone();
        let leases = DynamoLeaseTable::in_kv_table(client.clone(), &table);
        LockClient::with_leases(LeaseManager::new(Arc::new(leases), config).unwrap())
    };
    let mut watch = kv.watch(b"", None);
    assert_eq!(common::next_event(&mut watch).await.kind, EventKind::Ready);
    let mut leader = locks().acquire("core/lock", "node-a").await.unwrap();
    assert!(matches!(
        locks().try_acquire("core/lock", "node-b").await,
        Ok(None)
    ));
    kv.put(b"core/data", b("1"), None).await.unwrap();
    assert_eq!(
        names(&kv, "").await,
        ["core/"],
        "no lock record in the listing"
    );
    assert_eq!(names(&kv, "core/").await, ["data"]);
    assert_eq!(kv.range(b"", b"", None).await.unwrap().len(), 1);
    let event = common::next_event(&mut watch).await;
    assert_eq!(
        event.key(),
        Some(&b"core/data"[..]),
        "the lock's writes are not events"
    );
    let state = locks().value("core/lock").await.unwrap();
    assert!(format!("{state:?}").contains("node-a"), "{state:?}");
    leader.release().await.unwrap();
    let taken = locks().try_acquire("core/lock", "node-b").await.unwrap();
    assert!(taken.is_some(), "released: the other node takes it");
    assert!(matches!(
        DynamoKv::new(client, &table).with_namespace(dynacommit::lease::LEASE_NAMESPACE),
        Err(KvError::InvalidKey { .. })
    ));
}

/// A folder is listed while it holds a live key: keys that got their expiry from a
/// create, an overwrite, `keep_alive` or a transaction all take it away when they expire,
/// while one key that never expires keeps it.
async fn folders_vanish_when_their_last_key_expires_however_it_got_its_expiry(
    kv: Arc<dyn KvStore>,
) {
    // Long enough for the writes and the first listing under the suite's load on two
    // cores (700 ms once ran out there).
    let soon = || SystemTime::now() + Duration::from_millis(2000);
    kv.put(b"f/created/k", b("1"), Some(soon())).await.unwrap();
    kv.put(b"f/overwritten/k", b("1"), None).await.unwrap();
    kv.put(b"f/overwritten/k", b("2"), Some(soon()))
        .await
        .unwrap();
    kv.put(b"f/kept/k", b("1"), None).await.unwrap();
    kv.keep_alive(b"f/kept/k", Some(soon())).await.unwrap();
    kv.put(b"f/txn/k", b("1"), None).await.unwrap();
    kv.transaction(vec![TxnOp::put(b"f/txn/k", b("2")).expires(soon())])
        .await
        .unwrap();
    kv.put(b"f/mixed/short", b("1"), Some(soon()))
        .await
        .unwrap();
    kv.put(b"f/mixed/long", b("1"), None).await.unwrap();
    kv.put(b"f/renewed/k", b("1"), Some(soon())).await.unwrap();
    kv.put(b"f/renewed/k", b("2"), None).await.unwrap();
    assert_eq!(
        names(&kv, "f/").await,
        [
            "created/",
            "kept/",
            "mixed/",
            "overwritten/",
            "renewed/",
            "txn/"
        ]
    );
    for k in [
        "f/created/k",
        "f/overwritten/k",
        "f/kept/k",
        "f/txn/k",
        "f/mixed/short",
    ] {
        until_gone(&kv, k.as_bytes()).await;
    }
    assert_eq!(names(&kv, "f/").await, ["mixed/", "renewed/"]);
    assert_eq!(names(&kv, "").await, ["f/"]);
    kv.delete(b"f/mixed/long").await.unwrap();
    kv.delete(b"f/renewed/k").await.unwrap();
    assert!(names(&kv, "").await.is_empty());
}

/// Keys deep in many branches: each deleted key changes counters of its own folders, and
/// no batch may pass DynamoDB's 100 items in one transaction.
async fn delete_range_across_many_deep_branches(kv: Arc<dyn KvStore>) {
    let keys: Vec<String> = (0..30).map(|i| format!("d/{i:02}/a/b/k")).collect();
    for chunk in keys.chunks(20) {
        let ops = chunk
            .iter()
            .map(|k| TxnOp::put(k.as_bytes(), b("v")))
            .collect();
        kv.transaction(ops).await.unwrap();
    }
    assert_eq!(names(&kv, "d/").await.len(), 30);
    assert_eq!(kv.delete_range(b"d/", b"d0").await.unwrap(), 30);
    assert!(names(&kv, "").await.is_empty(), "no folder left");
}

/// A watch resumed from a checkpoint says Ready at that checkpoint: a consumer that saves
/// Ready's checkpoint and stops before the replay loses nothing.
async fn a_resumed_watch_stands_at_its_checkpoint_until_the_replay(kv: Arc<dyn KvStore>) {
    // DynamoDB Local refuses, as trimmed, a position taken at the end of a shard that held
    // no record yet once records arrive (AWS serves it for its 15 minutes): give a fresh
    // table's shard a record before the watch begins.
    kv.put(b"before-the-watch", b("v"), None).await.unwrap();
    let mut watch = kv.watch(b"w/", None);
    let ready = common::next_event(&mut watch).await;
    assert_eq!(ready.kind, EventKind::Ready);
    drop(watch);
    for i in 0..3 {
        kv.put(format!("w/{i}").as_bytes(), b("v"), None)
            .await
            .unwrap();
    }
    let mut resumed = kv.watch(b"w/", Some(ready.checkpoint));
    let again = common::next_event(&mut resumed).await;
    assert_eq!(again.kind, EventKind::Ready);
    drop(resumed);
    let mut from_ready = kv.watch(b"w/", Some(again.checkpoint));
    assert_eq!(
        common::next_event(&mut from_ready).await.kind,
        EventKind::Ready
    );
    for i in 0..3 {
        let event = common::next_event(&mut from_ready).await;
        assert_eq!(event.key(), Some(format!("w/{i}").as_bytes()), "event {i}");
    }
}

/// A transaction over an entry that has expired but is still stored (not yet swept): a
/// condition met by an earlier step of the same transaction holds, whatever the stored
/// entry's expiry. Pinned to the stored entry being live, the write was refused at every
/// attempt and the transaction reported `Contention`.
async fn a_transaction_over_an_expired_entry_relies_only_on_its_own_steps(kv: Arc<dyn KvStore>) {
    put_expired(&kv, b"tx/k").await;
    let revisions = kv
        .transaction(vec![
            TxnOp::put(b"tx/k", b("v")),
            TxnOp::put(b"tx/k", b("w")).if_value(b("v")),
            TxnOp::check(b"tx/k").if_exists(),
        ])
        .await
        .expect("each condition is met by the transaction's own earlier step");
    let entry = kv.get(b"tx/k").await.unwrap().unwrap();
    assert_eq!(entry.value, b("w"));
    assert_eq!(entry.expires, None);
    assert_eq!(revisions, [None, Some(entry.revision), None]);
    // A step that does see the stored entry still relies on it being live.
    put_expired(&kv, b"tx/e").await;
    let refused = kv
        .transaction(vec![
            TxnOp::check(b"tx/e").if_exists(),
            TxnOp::put(b"tx/e", b("x")),
        ])
        .await;
    assert!(
        matches!(refused, Err(KvError::TransactionConflict { index: 0, .. })),
        "{refused:?}"
    );
}

/// Read bounds longer than any key DynamoDB can hold (a segment over a sort key, a folder
/// over a partition key) are answered, by both stores alike, as the bounds say: DynamoDB
/// would refuse them in a key condition with a ValidationException.
async fn read_bounds_longer_than_any_key_are_answered_not_refused(kv: Arc<dyn KvStore>) {
    for key in ["rb/a", "rb/n", "rb/z", "rb/m/deep"] {
        kv.put(key.as_bytes(), b("v"), None).await.unwrap();
    }
    let long = |c: char, n: usize| c.to_string().repeat(n);
    // A lower bound with a 2,000-byte segment; an upper one with 1,500.
    let start = format!("rb/{}", long('m', 2000));
    let end = format!("rb/{}", long('z', 1500));
    let found: Vec<Vec<u8>> = kv
        .range(start.as_bytes(), end.as_bytes(), None)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.key)
        .collect();
    assert_eq!(found, [b"rb/n".to_vec(), b"rb/z".to_vec()]);
    // A folder longer than a partition key leaves: nothing there.
    let folder = format!("{}/", long('x', 3000));
    let (a, z) = (format!("{folder}a"), format!("{folder}z"));
    assert!(
        kv.range(a.as_bytes(), z.as_bytes(), None)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        kv.delete_range(a.as_bytes(), z.as_bytes()).await.unwrap(),
        0
    );
    assert_eq!(
        kv.sweep_expired(a.as_bytes(), z.as_bytes()).await.unwrap(),
        0
    );
    assert!(kv.list(folder.as_bytes()).await.unwrap().is_empty());
    // A listing prefix longer than any name.
    let prefix = format!("rb/{}", long('q', 1500));
    assert!(kv.list(prefix.as_bytes()).await.unwrap().is_empty());
    // Deleting by long bounds deletes what they hold, and only that.
    let start = format!("rb/{}", long('b', 1200));
    assert_eq!(
        kv.delete_range(start.as_bytes(), end.as_bytes())
            .await
            .unwrap(),
        3
    );
    assert_eq!(names(&kv, "rb/").await, ["a"]);
}

/// A transaction's items, folder counters included, are counted before anything is read,
/// by both stores alike: 99 new keys in one folder (and its counter) fit DynamoDB's 100
/// items; 100 do not, and are refused by `MemoryKv` too, which once took them while
/// `DynamoKv` refused them after reading.
async fn transactions_count_their_folder_counters_alike_in_both_stores(kv: Arc<dyn KvStore>) {
    let puts = |n: usize| -> Vec<TxnOp> {
        (0..n)
            .map(|i| TxnOp::put(format!("tc/{i}").as_bytes(), b("x")))
            .collect()
    };
    assert_eq!(dynacommit::kv::transaction_items(&puts(99)), 100);
    kv.transaction(puts(99)).await.unwrap();
    assert_eq!(dynacommit::kv::transaction_items(&puts(100)), 101);
    match kv.transaction(puts(100)).await {
        Err(e @ KvError::InvalidTransaction { .. }) => {
            assert!(e.to_string().contains("101 items"), "{e}")
        }
        other => panic!("100 new keys and their folder's counter: {other:?}"),
    }
    // Checks change no counter.
    let mut ops = puts(50);
    ops.extend((0..49).map(|i| TxnOp::check(format!("tc/c/{i}").as_bytes())));
    assert_eq!(dynacommit::kv::transaction_items(&ops), 100);
    kv.transaction(ops).await.unwrap();
}
