//! The key-value store when answers are lost or refused: through a scripted loopback server
//! in front of DynamoDB Local. A write whose condition its own earlier application would
//! not refuse is never sent twice (a lost answer is reported as "may have applied"), and a
//! write refused for load is built again with the time it is sent, not the time of its
//! first attempt.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use common::fake_server::{FakeServer, Reply};
use common::wire::THROTTLED;
use dynacommit::dynamo::RetryConfig;
use dynacommit::kv::{DynamoKv, KvError, KvStore};

const TRANSACTION_CONFLICT: &str = r#"{"__type":"com.amazonaws.dynamodb.v20120810#TransactionConflictException","message":"Transaction is ongoing for the item"}"#;
const INTERNAL: &str = r#"{"__type":"com.amazonaws.dynamodb.v20120810#InternalServerError","message":"Internal server error"}"#;
const TABLE: &str = "dynacommit-kv-tests";

/// The same store twice: straight to DynamoDB Local, and through `server`.
async fn stores(server: &FakeServer) -> (DynamoKv, DynamoKv) {
    stores_retrying(server, common::quick_retries()).await
}

/// [`stores`], the scripted one retrying as `retry` says.
async fn stores_retrying(server: &FakeServer, retry: RetryConfig) -> (DynamoKv, DynamoKv) {
    let direct = DynamoKv::new(common::dynamodb().await, TABLE)
        .with_namespace(&common::unique_name("faults"))
        .unwrap();
    direct.ensure_table().await.unwrap();
    let namespace = direct_namespace(&direct);
    let scripted = DynamoKv::new(common::client_for(&server.url, retry), TABLE)
        .with_namespace(&namespace)
        .unwrap();
    (direct, scripted)
}

fn direct_namespace(kv: &DynamoKv) -> String {
    // The namespace is in the Debug output (escaped, printable here).
    let debug = format!("{kv:?}");
    let start = debug.find("namespace: \"").unwrap() + "namespace: \"".len();
    debug[start..].split('"').next().unwrap().to_owned()
}

/// A server that answers the first PutItem with `first`, forwards everything else, and
/// keeps the body of every PutItem.
async fn server(first: fn(String) -> Reply) -> (FakeServer, Arc<Mutex<Vec<serde_json::Value>>>) {
    let real = format!("{}/", common::dynamodb_url());
    let puts = Arc::new(Mutex::new(Vec::new()));
    let seen = puts.clone();
    let server = FakeServer::start_with_body(move |_, target, body| {
        if target.ends_with(".PutItem") {
            let mut puts = seen.lock().unwrap();
            puts.push(serde_json::from_slice(body).unwrap());
            if puts.len() == 1 {
                return first(real.clone());
            }
        }
        Reply::Forward(real.clone())
    })
    .await;
    (server, puts)
}

#[tokio::test]
async fn a_compare_and_swap_whose_answer_was_lost_is_not_sent_again() {
    let (server, puts) = server(|real| Reply::ForwardThenAnswer(real, 500, INTERNAL.into())).await;
    let (direct, scripted) = stores(&server).await;
    direct.put(b"k", Bytes::from("a"), None).await.unwrap();
    let lost = scripted
        .compare_and_swap(b"k", b"a", Bytes::from("b"), None)
        .await
        .unwrap_err();
    assert!(lost.may_have_applied(), "{lost}");
    assert_eq!(puts.lock().unwrap().len(), 1, "sent once, never again");
    let stored = direct.get(b"k").await.unwrap().unwrap();
    assert_eq!(stored.value, Bytes::from("b"), "the first attempt applied");
}

#[tokio::test]
async fn a_put_whose_answer_was_lost_says_it_may_have_applied() {
    let (server, puts) = server(|real| Reply::ForwardThenAnswer(real, 500, INTERNAL.into())).await;
    let (direct, scripted) = stores(&server).await;
    direct.put(b"k", Bytes::from("a"), None).await.unwrap();
    match scripted.put(b"k", Bytes::from("b"), None).await {
        Err(e @ KvError::Dynamo(_)) => assert!(e.may_have_applied(), "{e}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(puts.lock().unwrap().len(), 1, "sent once, never again");
}

#[tokio::test]
async fn a_throttled_write_is_built_again_with_the_time_it_is_sent() {
    let (server, puts) = server(|_| Reply::With(400, THROTTLED.into())).await;
    let (direct, scripted) = stores(&server).await;
    let rev = direct.put(b"k", Bytes::from("a"), None).await.unwrap();
    scripted
        .conditional_update(b"k", &rev, Bytes::from("b"), None)
        .await
        .unwrap();
    let puts: Vec<serde_json::Value> = puts.lock().unwrap().clone();
    assert_eq!(puts.len(), 2, "refused once, then sent again");
    let now = |body: &serde_json::Value| -> u64 {
        body["ExpressionAttributeValues"][":now"]["N"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap()
    };
    assert!(
        now(&puts[1]) > now(&puts[0]),
        "the retry names the time it was sent: {} then {}",
        now(&puts[0]),
        now(&puts[1])
    );
    assert_eq!(
        direct.get(b"k").await.unwrap().unwrap().value,
        Bytes::from("b")
    );
}

/// An update needs a live entry. Its write, pinned to the entry's revision, is throttled
/// until after the entry has expired: the attempt sent then must be refused as the update
/// would be (`NotFound`), and the entry stay gone. Pinned to the revision alone, that
/// attempt applied, and brought back an entry every reader had seen gone.
#[tokio::test]
async fn a_write_needing_a_live_entry_is_refused_once_it_expired_while_throttled() {
    let real = format!("{}/", common::dynamodb_url());
    let until: Arc<Mutex<Option<Instant>>> = Arc::default();
    let throttled = Arc::new(AtomicUsize::new(0));
    let (window, count) = (until.clone(), throttled.clone());
    let server = FakeServer::start_with_body(move |_, target, body| {
        let pinned =
            target.ends_with(".PutItem") && String::from_utf8_lossy(body).contains("\":rev\"");
        if pinned && window.lock().unwrap().is_some_and(|t| Instant::now() < t) {
            count.fetch_add(1, Ordering::SeqCst);
            return Reply::With(400, THROTTLED.into());
        }
        Reply::Forward(real.clone())
    })
    .await;
    // Patient enough to outlast the throttling.
    let patient = RetryConfig {
        max_attempts: 100,
        initial_backoff: Duration::from_millis(20),
        max_backoff: Duration::from_millis(40),
        max_elapsed: Duration::from_secs(20),
        ..common::quick_retries()
    };
    let (direct, scripted) = stores_retrying(&server, patient).await;
    let lifetime = Duration::from_millis(800);
    direct
        .put(b"k", Bytes::from("a"), Some(SystemTime::now() + lifetime))
        .await
        .unwrap();
    *until.lock().unwrap() = Some(Instant::now() + lifetime + Duration::from_millis(400));
    let updated = scripted.update(b"k", Bytes::from("b"), None).await;
    assert!(
        throttled.load(Ordering::SeqCst) > 0,
        "the pinned write was never throttled: the race was not run"
    );
    assert!(
        matches!(updated, Err(KvError::NotFound { .. })),
        "the update of an entry that expired meanwhile: {updated:?}"
    );
    let after = direct.get(b"k").await.unwrap();
    assert!(after.is_none(), "an expired entry came back: {after:?}");
}

/// AWS refuses a single-item write on an item inside a transaction in flight with
/// `TransactionConflictException` (DynamoDB Local never does). Nothing applied: the write
/// is sent again, and succeeds.
#[tokio::test]
async fn a_write_refused_for_a_transaction_in_flight_is_sent_again() {
    let (server, puts) = server(|_| Reply::With(400, TRANSACTION_CONFLICT.into())).await;
    let (direct, scripted) = stores(&server).await;
    direct.put(b"k", Bytes::from("a"), None).await.unwrap();
    scripted.put(b"k", Bytes::from("b"), None).await.unwrap();
    assert_eq!(
        puts.lock().unwrap().len(),
        2,
        "refused once, then sent again"
    );
    assert_eq!(
        direct.get(b"k").await.unwrap().unwrap().value,
        Bytes::from("b")
    );
}
