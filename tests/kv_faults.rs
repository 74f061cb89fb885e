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
use dynacommit::kv::{DynamoKv, EventKind, KvError, KvStore, TxnOp};

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

/// A server that answers the first single-item write (PutItem or UpdateItem) with
/// `first`, forwards everything else, and keeps the body of every such write.
async fn server(first: fn(String) -> Reply) -> (FakeServer, Arc<Mutex<Vec<serde_json::Value>>>) {
    let real = format!("{}/", common::dynamodb_url());
    let puts = Arc::new(Mutex::new(Vec::new()));
    let seen = puts.clone();
    let server = FakeServer::start_with_body(move |_, target, body| {
        if target.ends_with(".PutItem") || target.ends_with(".UpdateItem") {
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
    let revision = match scripted.put(b"k", Bytes::from("b"), None).await {
        Err(e @ KvError::WriteMayHaveApplied { .. }) => {
            assert!(e.may_have_applied(), "{e}");
            let KvError::WriteMayHaveApplied { revision, key, .. } = e else {
                unreachable!()
            };
            assert_eq!(key, "k");
            revision.expect("a put's attempted revision")
        }
        other => panic!("{other:?}"),
    };
    assert_eq!(puts.lock().unwrap().len(), 1, "sent once, never again");
    // The write applied (its answer was lost): the key is at the revision the error names,
    // which is how a caller tells its own write from a rival's.
    assert_eq!(direct.get(b"k").await.unwrap().unwrap().revision, revision);
}

/// A transaction whose answer was lost says it may have applied, with the revisions it
/// would have returned: the key it put is at the one named.
#[tokio::test]
async fn a_transaction_whose_answer_was_lost_names_its_revisions() {
    let real = format!("{}/", common::dynamodb_url());
    let server = FakeServer::start(move |_, target| {
        if target.ends_with(".TransactWriteItems") {
            return Reply::ForwardThenAnswer(real.clone(), 500, INTERNAL.into());
        }
        Reply::Forward(real.clone())
    })
    .await;
    let (direct, scripted) = stores(&server).await;
    let ops = vec![
        TxnOp::put(b"f/a", Bytes::from("1")),
        TxnOp::check(b"f/b").if_absent(),
    ];
    let revisions = match scripted.transaction(ops).await {
        Err(KvError::TransactionMayHaveApplied { revisions, .. }) => revisions,
        other => panic!("{other:?}"),
    };
    assert_eq!(revisions.len(), 2);
    assert!(revisions[1].is_none());
    assert_eq!(
        Some(direct.get(b"f/a").await.unwrap().unwrap().revision),
        revisions[0]
    );
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
        // The update's write, whichever form it takes, names the time.
        let pinned = (target.ends_with(".PutItem") || target.ends_with(".UpdateItem"))
            && String::from_utf8_lossy(body).contains("\":now\"");
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

/// A transaction cancelled with `reasons` for each item (AWS's body).
fn cancelled(reasons: &[&str]) -> String {
    let reasons: Vec<serde_json::Value> = reasons
        .iter()
        .map(|code| serde_json::json!({ "Code": code, "Message": "as AWS answers" }))
        .collect();
    serde_json::json!({
        "__type": "com.amazonaws.dynamodb.v20120810#TransactionCanceledException",
        "Message": "Transaction cancelled, please refer cancellation reasons for specific reasons",
        "CancellationReasons": reasons,
    })
    .to_string()
}

/// A server that answers the first `refusals` TransactWriteItems with `reply` and forwards
/// everything else to DynamoDB Local; counts the transactions it refused.
async fn refusing_transactions(
    refusals: usize,
    reply: impl Fn() -> Reply + Send + Sync + 'static,
) -> (FakeServer, Arc<AtomicUsize>) {
    let real = format!("{}/", common::dynamodb_url());
    let refused = Arc::new(AtomicUsize::new(0));
    let count = refused.clone();
    let server = FakeServer::start_with_body(move |_, target, _| {
        if target.ends_with(".TransactWriteItems")
            && count.fetch_add(1, Ordering::SeqCst) < refusals
        {
            return reply();
        }
        Reply::Forward(real.clone())
    })
    .await;
    (server, refused)
}

/// Retries patient enough for `attempts` refusals in a row, and quick.
fn patient_retries(attempts: u32) -> RetryConfig {
    RetryConfig {
        max_attempts: attempts,
        initial_backoff: Duration::from_millis(1),
        max_backoff: Duration::from_millis(5),
        ..common::quick_retries()
    }
}

/// AWS cancels a transaction whose item writes were throttled with the reasons
/// `ThrottlingError` (on-demand) or `ProvisionedThroughputExceeded` (provisioned): nothing
/// applied, and the same transaction applies once sent again. A create (the key and its
/// folder counter, in one transaction) throttled so is sent again within the client's
/// retry budget, and succeeds; it was reported as a raw cancellation.
#[tokio::test]
async fn a_transaction_cancelled_for_throttling_is_sent_again() {
    for reason in ["ThrottlingError", "ProvisionedThroughputExceeded"] {
        let (server, refused) =
            refusing_transactions(3, move || Reply::With(400, cancelled(&["None", reason]))).await;
        let (direct, scripted) = stores_retrying(&server, patient_retries(10)).await;
        scripted
            .create(b"f/k", Bytes::from("v"), None)
            .await
            .unwrap_or_else(|e| panic!("a create throttled by {reason}: {e}"));
        assert!(
            refused.load(Ordering::SeqCst) > 3,
            "{reason}: never sent again"
        );
        assert_eq!(
            direct.get(b"f/k").await.unwrap().unwrap().value,
            Bytes::from("v")
        );
        assert_eq!(direct.list(b"f/").await.unwrap(), vec![b"k".to_vec()]);
    }
}

/// A transaction whose conditions name the time (here, one relying on a live entry) is
/// built anew for each attempt. Throttled as a whole more times in a row than the store's
/// re-reads allow, it is still throttling, retried within the client's budget: it applies.
/// Taken for contention, it re-read the unchanged key ten times and reported `Contention`.
#[tokio::test]
async fn a_throttled_transaction_naming_the_time_is_retried_as_throttling() {
    let (server, refused) = refusing_transactions(12, || Reply::With(400, THROTTLED.into())).await;
    let (direct, scripted) = stores_retrying(&server, patient_retries(30)).await;
    let revision = direct.put(b"f/k", Bytes::from("a"), None).await.unwrap();
    let ops = vec![TxnOp::put(b"f/k", Bytes::from("b")).if_revision(revision)];
    scripted
        .transaction(ops)
        .await
        .expect("a transaction throttled twelve times in a row, within the retry budget");
    assert!(refused.load(Ordering::SeqCst) > 12);
    assert_eq!(
        direct.get(b"f/k").await.unwrap().unwrap().value,
        Bytes::from("b")
    );
}

/// Other transactions in flight on a folder counter (`TransactionConflict`, which AWS
/// answers and DynamoDB Local never does) are contention: retried with backoff, and when
/// they never end, reported as `Contention` naming the contended item, the folder's
/// counter, not a raw cancellation.
#[tokio::test]
async fn endless_transaction_conflicts_are_contention_on_the_item_named() {
    let (server, refused) = refusing_transactions(usize::MAX, || {
        Reply::With(400, cancelled(&["None", "TransactionConflict"]))
    })
    .await;
    let (direct, scripted) = stores(&server).await;
    let error = scripted
        .create(b"f/k", Bytes::from("v"), None)
        .await
        .unwrap_err();
    match &error {
        KvError::Contention { key, .. } => {
            assert_eq!(key, "f/ (folder counter)", "{error}")
        }
        other => panic!("endless conflicts: {other:?}"),
    }
    assert!(!error.may_have_applied());
    assert!(refused.load(Ordering::SeqCst) > 1, "never sent again");
    assert!(direct.get(b"f/k").await.unwrap().is_none());
}

/// A read whose first attempt is throttled and whose retry reads the entry after its
/// expiry is judged live by the time of the answer, not of the asking. Here the entry is
/// written during the read's backoff with an expiry already past (never live at all):
/// judged by the time the read began, it was returned.
#[tokio::test]
async fn a_read_judges_liveness_when_its_answer_comes() {
    let real = format!("{}/", common::dynamodb_url());
    let gets = Arc::new(AtomicUsize::new(0));
    let seen = gets.clone();
    let backoff = Duration::from_millis(800);
    let server = FakeServer::start(move |_, target| {
        if target.ends_with(".GetItem") && seen.fetch_add(1, Ordering::SeqCst) == 0 {
            return Reply::Delayed(backoff, Box::new(Reply::With(400, THROTTLED.into())));
        }
        Reply::Forward(real.clone())
    })
    .await;
    let (direct, scripted) = stores(&server).await;
    let asked = SystemTime::now();
    let expires = asked + Duration::from_millis(100);
    let read = tokio::spawn(async move { scripted.get(b"k").await });
    // Written once its expiry has passed, while the read's first attempt is held.
    tokio::time::sleep(Duration::from_millis(200)).await;
    direct
        .put(b"k", Bytes::from("v"), Some(expires))
        .await
        .unwrap();
    let written = asked.elapsed().unwrap();
    let got = read.await.unwrap().unwrap();
    assert!(
        written < backoff,
        "the write took {written:?}, past the held first read: inconclusive"
    );
    // Throttled; then the item, which expired after the get began: which side of its
    // expiry DynamoDB read it on is unknown, so once more, from after the expiry.
    assert_eq!(
        gets.load(Ordering::SeqCst),
        3,
        "read, throttled, read again, and again past the expiry"
    );
    assert!(got.is_none(), "an entry that was never live: {got:?}");
}

/// A write the store builds again for each attempt (an update names the time) keeps the
/// client's bound on connections that cannot be opened: against an endpoint that refuses
/// them it gives up after `max_connect_attempts`, as the client's own retries do, not
/// after every attempt the policy allows. (It went on for all of them.)
#[tokio::test]
async fn a_write_built_per_attempt_gives_up_on_an_unreachable_endpoint_as_the_client_does() {
    // A port nothing listens on: connections are refused at once.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let retry = RetryConfig {
        max_attempts: 20,
        max_connect_attempts: 2,
        initial_backoff: Duration::from_millis(1),
        max_backoff: Duration::from_millis(5),
        ..common::quick_retries()
    };
    let client = common::client_for(&format!("http://{closed}"), retry);
    let kv = DynamoKv::new(client.clone(), TABLE);
    let error = kv.update(b"k", Bytes::from("v"), None).await.unwrap_err();
    assert!(!error.may_have_applied(), "nothing was sent: {error}");
    assert_eq!(client.requests_sent(), 2, "{error}");
}

/// A sweep cut short between marking an expired entry and deleting it leaves its mark;
/// a user's delete of that entry is then reported to watchers as a delete, as it is on
/// the in-process store, not as an expiry. (It came out as `Expired`.)
#[tokio::test]
async fn a_user_delete_of_an_entry_a_sweep_marked_is_a_delete() {
    const REFUSED: &str = r#"{"__type":"com.amazonaws.dynamodb.v20120810#ValidationException","message":"refused by the test"}"#;
    let real = format!("{}/", common::dynamodb_url());
    // The sweep's marks reach DynamoDB Local; its deleting transaction does not.
    let server = FakeServer::start(move |_, target| {
        if target.ends_with(".TransactWriteItems") {
            Reply::With(400, REFUSED.into())
        } else {
            Reply::Forward(real.clone())
        }
    })
    .await;
    let (direct, scripted) = stores(&server).await;
    let mut watch = direct.watch(b"sw/", None);
    assert_eq!(common::next_event(&mut watch).await.kind, EventKind::Ready);
    let expires = SystemTime::now() + Duration::from_millis(200);
    direct
        .put(b"sw/k", Bytes::from("v"), Some(expires))
        .await
        .unwrap();
    assert!(matches!(
        common::next_event(&mut watch).await.kind,
        EventKind::Put(_)
    ));
    // Waiting for the wall clock to pass the expiry, not for another task.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let cut_short = scripted.sweep_expired(b"sw/", b"sw0").await;
    assert!(
        cut_short.is_err(),
        "the sweep's delete was refused: {cut_short:?}"
    );
    assert!(
        !direct.delete(b"sw/k").await.unwrap(),
        "the entry had expired: no live entry deleted"
    );
    assert_eq!(
        common::next_event(&mut watch).await.kind,
        EventKind::Deleted {
            key: b"sw/k".to_vec()
        },
        "a user's delete, though a sweep had marked the entry"
    );
    assert!(direct.get(b"sw/k").await.unwrap().is_none());
}
