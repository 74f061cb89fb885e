//! Retries and malformed answers, through a scripted loopback server standing in front of
//! DynamoDB Local.

mod common;

use std::time::Duration;

use common::fake_server::{FakeServer, Reply};
use common::wire::{THROTTLED, key, lease_table};
use dynacommit::dynamo::{DynamoError, GetItem, PutItem, Query, RetryConfig, WriteRequest};

/// A server that throttles the first `storm` requests and forwards the rest.
async fn storm(storm: usize) -> FakeServer {
    let real = format!("{}/", common::dynamodb_url());
    FakeServer::start(move |n, _| {
        if n < storm {
            Reply::With(400, THROTTLED.into())
        } else {
            Reply::Forward(real.clone())
        }
    })
    .await
}

#[tokio::test]
async fn a_throttling_storm_within_the_bound_ends_in_success() {
    let table = lease_table("faults").await;
    let server = storm(6).await;
    let client = common::client_for(
        &server.url,
        RetryConfig {
            max_attempts: 8,
            ..common::quick_retries()
        },
    );
    client
        .put_item(&PutItem::new(&table, key("stormy")))
        .await
        .expect("the 7th attempt passes through");
    assert_eq!(server.requests(), 7);
    // It really reached DynamoDB Local.
    let read = common::dynamodb()
        .await
        .get_item(&GetItem::new(&table, key("stormy")))
        .await
        .unwrap();
    assert!(read.is_some());
}

#[tokio::test]
async fn a_throttling_storm_past_the_attempt_bound_is_a_clear_error() {
    let server = storm(usize::MAX).await;
    let client = common::client_for(
        &server.url,
        RetryConfig {
            max_attempts: 4,
            ..common::quick_retries()
        },
    );
    let error = client
        .get_item(&GetItem::new("t", key("x")))
        .await
        .unwrap_err();
    assert_eq!(server.requests(), 4);
    match &error {
        DynamoError::RetriesExhausted { attempts, last, .. } => {
            assert_eq!(*attempts, 4);
            assert_eq!(last.code(), Some("ThrottlingException"));
        }
        other => panic!("expected RetriesExhausted, got {other:?}"),
    }
    let text = error.to_string();
    assert!(text.contains("gave up after 4 attempts"), "{text}");
    assert!(text.contains("Rate of requests exceeds"), "{text}");
}

#[tokio::test]
async fn a_throttling_storm_past_the_time_bound_stops_in_time() {
    let server = storm(usize::MAX).await;
    let client = common::client_for(
        &server.url,
        RetryConfig {
            max_attempts: 1_000,
            initial_backoff: Duration::from_millis(20),
            max_backoff: Duration::from_millis(50),
            max_elapsed: Duration::from_millis(300),
            ..RetryConfig::default()
        },
    );
    let started = std::time::Instant::now();
    let error = client
        .get_item(&GetItem::new("t", key("x")))
        .await
        .unwrap_err();
    // Bounded by max_elapsed (300 ms) plus one request: far below 1,000 attempts' worth.
    assert!(started.elapsed() < Duration::from_secs(5));
    assert!(matches!(error, DynamoError::RetriesExhausted { attempts, .. } if attempts < 1_000));
    assert!(server.requests() > 1);
}

/// Sends a GetItem to a server that always answers with `reply`, with retries as given.
async fn answer_with(
    reply: impl Fn() -> Reply + Send + Sync + 'static,
    attempts: u32,
) -> (DynamoError, usize) {
    let server = FakeServer::start(move |_, _| reply()).await;
    let client = common::client_for(
        &server.url,
        RetryConfig {
            max_attempts: attempts,
            ..common::quick_retries()
        },
    );
    let error = client
        .get_item(&GetItem::new("t", key("x")))
        .await
        .unwrap_err();
    (error, server.requests())
}

#[tokio::test]
async fn an_html_502_is_retried_then_reported_with_its_body() {
    let (error, requests) = answer_with(
        || {
            Reply::With(
                502,
                "<html><body><h1>502 Bad Gateway</h1></body></html>".into(),
            )
        },
        3,
    )
    .await;
    assert_eq!(requests, 3, "a 502 is retryable");
    let text = error.to_string();
    assert!(text.contains("HTTP 502"), "{text}");
    assert!(text.contains("not a DynamoDB error body"), "{text}");
    assert!(text.contains("502 Bad Gateway"), "{text}");
    assert!(error.is_ambiguous());
}

#[tokio::test]
async fn a_non_json_success_body_is_a_clear_error_at_once() {
    let (error, requests) = answer_with(|| Reply::With(200, "OK, stored.".into()), 5).await;
    assert_eq!(requests, 1, "a 200 is an answer: not retried");
    let text = error.to_string();
    assert!(
        matches!(error, DynamoError::MalformedResponse { status: 200, .. }),
        "{error:?}"
    );
    assert!(text.contains("not a valid GetItem answer"), "{text}");
    assert!(text.contains("OK, stored."), "{text}");
}

#[tokio::test]
async fn a_truncated_body_is_a_clear_error() {
    let (error, requests) = answer_with(
        || Reply::CutShort {
            declared: 500,
            body: r#"{"Item":{"path":{"S":"#.into(),
        },
        2,
    )
    .await;
    assert_eq!(requests, 2, "a cut connection gives no answer: retried");
    let DynamoError::RetriesExhausted { last, .. } = &error else {
        panic!("expected RetriesExhausted, got {error:?}");
    };
    assert!(matches!(**last, DynamoError::Transport { .. }), "{last:?}");
    assert!(error.is_ambiguous());
    assert!(error.to_string().contains("no answer from"), "{error}");
}

#[tokio::test]
async fn a_missing_field_is_a_clear_error() {
    let server = FakeServer::start(|_, target| {
        if target.ends_with("Query") {
            Reply::With(200, r#"{"Count":0}"#.into())
        } else {
            Reply::With(200, r#"{"Table":{"TableName":"t"}}"#.into())
        }
    })
    .await;
    let client = common::client_for(&server.url, common::quick_retries());
    let query = client
        .query(&Query::new("t", "pk = :p").value(":p", "x"))
        .await
        .unwrap_err();
    assert!(
        query.to_string().contains("missing field `Items`"),
        "{query}"
    );
    let describe = client.describe_table("t").await.unwrap_err();
    assert!(describe.to_string().contains("missing field"), "{describe}");
    assert_eq!(server.requests(), 2, "not retried");
}

/// A loopback port with (almost certainly) nothing listening: a listener bound and dropped.
fn closed_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[tokio::test]
async fn nobody_listening_is_retried_a_few_times_then_reported() {
    let port = closed_port();
    let client = common::client_for(&format!("http://127.0.0.1:{port}"), common::quick_retries());
    let error = client
        .get_item(&GetItem::new("t", key("x")))
        .await
        .unwrap_err();
    // max_connect_attempts (3), not max_attempts (5).
    let DynamoError::RetriesExhausted {
        attempts: 3, last, ..
    } = &error
    else {
        panic!("expected RetriesExhausted after 3 attempts, got {error:?}");
    };
    assert!(
        matches!(**last, DynamoError::Unreachable { .. }),
        "{last:?}"
    );
    let text = error.to_string();
    assert!(text.contains(&port.to_string()), "{text}");
    assert!(text.contains("nothing was sent"), "{text}");
}

/// A refused connection sent nothing: a write to it is not ambiguous, and the default
/// policy gives up at once rather than after 20 s of retries.
///
/// The bound: the default policy makes 3 connection attempts (each refused at once on
/// loopback) with backoffs of at most 25 ms and 50 ms between them, so under 0.1 s of
/// work; 2 s leaves room for a loaded machine, and is still far below what 10 attempts
/// (backoff caps summing to 7.2 s, about 3.6 s on average) took before.
#[tokio::test]
async fn a_refused_connection_is_not_ambiguous_and_fails_fast() {
    let port = closed_port();
    let client = common::client_for(&format!("http://127.0.0.1:{port}"), RetryConfig::default());
    let started = std::time::Instant::now();
    let error = client
        .put_item(&PutItem::new("t", key("x")))
        .await
        .unwrap_err();
    let took = started.elapsed();
    assert!(!error.is_ambiguous(), "nothing was sent: {error:?}");
    assert!(took < Duration::from_secs(2), "took {took:?}: {error}");
    assert!(
        matches!(&error, DynamoError::RetriesExhausted { last, .. } if matches!(**last, DynamoError::Unreachable { .. })),
        "{error:?}"
    );
}

/// The body of a BatchWriteItem answer leaving `items` unprocessed.
fn unprocessed(table: &str, items: &[WriteRequest]) -> String {
    serde_json::json!({ "UnprocessedItems": { table: items } }).to_string()
}

#[tokio::test]
async fn unprocessed_batch_writes_are_sent_again_until_applied() {
    let table = lease_table("faults").await;
    let writes: Vec<WriteRequest> = (0..25)
        .map(|i| WriteRequest::Put {
            item: key(&format!("batch/{i}")),
        })
        .collect();
    let real = format!("{}/", common::dynamodb_url());
    // The first two answers apply nothing and hand every write back.
    let canned = unprocessed(&table, &writes);
    let server = FakeServer::start(move |n, _| {
        if n < 2 {
            Reply::With(200, canned.clone())
        } else {
            Reply::Forward(real.clone())
        }
    })
    .await;
    let client = common::client_for(&server.url, common::quick_retries());
    client.batch_write_item(&table, &writes).await.unwrap();
    assert_eq!(server.requests(), 3);
    let direct = common::dynamodb().await;
    for i in 0..25 {
        let found = direct
            .get_item(&GetItem::new(&table, key(&format!("batch/{i}"))))
            .await
            .unwrap();
        assert!(found.is_some(), "batch/{i} missing");
    }
}

#[tokio::test]
async fn batch_writes_still_unprocessed_past_the_bound_are_reported() {
    let writes: Vec<WriteRequest> = (0..30)
        .map(|i| WriteRequest::Put {
            item: key(&format!("never/{i}")),
        })
        .collect();
    // Every answer hands back the first 25 writes unprocessed.
    let canned = unprocessed("t", &writes[..25]);
    let server = FakeServer::start(move |_, _| Reply::With(200, canned.clone())).await;
    let client = common::client_for(&server.url, common::quick_retries());
    let error = client.batch_write_item("t", &writes).await.unwrap_err();
    assert!(
        matches!(
            error,
            DynamoError::BatchIncomplete {
                unprocessed: 30,
                total: 30,
                attempts: 5
            }
        ),
        "{error:?}"
    );
    assert!(
        error
            .to_string()
            .contains("30 of 30 writes still unprocessed"),
        "{error}"
    );
}
