//! Time bounds: a request that never gets an answer, a credential provider that never
//! answers, and calls of many requests (pages, chunks, polls) each within one deadline.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::fake_server::{FakeServer, Reply};
use common::wire::key;
use dynacommit::dynamo::{
    DynamoClient, DynamoError, GetItem, PutItem, Query, RetryConfig, Scan, WriteRequest,
};
use object_store::aws::AwsCredential;

/// A bound no test here should come near: a test that would hang fails here instead.
const HANG: Duration = Duration::from_secs(20);

async fn within<T>(what: &str, call: impl Future<Output = T>) -> (T, Duration) {
    let started = Instant::now();
    let out = tokio::time::timeout(HANG, call)
        .await
        .unwrap_or_else(|_| panic!("{what} still running after {HANG:?}: no bound held"));
    (out, started.elapsed())
}

/// Short request timeout, long everything else: only the request timeout can end it.
fn stall_retries() -> RetryConfig {
    RetryConfig {
        max_attempts: 2,
        request_timeout: Duration::from_millis(300),
        call_deadline: Duration::from_secs(60),
        ..common::quick_retries()
    }
}

fn builder(url: &str, retry: RetryConfig) -> dynacommit::dynamo::DynamoClientBuilder {
    DynamoClient::builder()
        .with_endpoint(url)
        .with_region("us-east-1")
        .with_credentials("dynacommit", "dynacommitsecret", None)
        .with_retry(retry)
}

async fn assert_stall_is_bounded(client: DynamoClient, server: &FakeServer) {
    let (result, took) = within(
        "a read from a server that never answers",
        client.get_item(&GetItem::new("t", key("x"))),
    )
    .await;
    let error = result.unwrap_err();
    // Two attempts of 300 ms and a backoff of at most 2 ms.
    assert!(took < Duration::from_secs(3), "took {took:?}: {error}");
    assert!(
        took >= Duration::from_millis(600),
        "took {took:?}: the request timeout was not what ended it: {error}"
    );
    let DynamoError::RetriesExhausted { attempts, last, .. } = &error else {
        panic!("expected RetriesExhausted, got {error:?}");
    };
    assert_eq!(*attempts, 2);
    assert!(matches!(**last, DynamoError::Transport { .. }), "{last:?}");
    assert_eq!(server.requests(), 2);
}

#[tokio::test]
async fn a_server_that_never_answers_is_bounded_by_the_request_timeout() {
    let server = FakeServer::start(|_, _| Reply::Stall).await;
    let client = builder(&server.url, stall_retries()).build().unwrap();
    assert_stall_is_bounded(client, &server).await;
}

#[tokio::test]
async fn the_request_timeout_holds_for_a_caller_s_own_http_client() {
    let server = FakeServer::start(|_, _| Reply::Stall).await;
    // A client with no timeout of any kind.
    let client = builder(&server.url, stall_retries())
        .with_http_client(reqwest::Client::new())
        .build()
        .unwrap();
    assert_stall_is_bounded(client, &server).await;
}

/// A credential provider that never answers (as one retrying an unreachable endpoint
/// for minutes would look from here).
#[derive(Debug)]
struct NeverAnswers;

#[async_trait::async_trait]
impl object_store::CredentialProvider for NeverAnswers {
    type Credential = AwsCredential;

    async fn get_credential(&self) -> object_store::Result<Arc<AwsCredential>> {
        std::future::pending().await
    }
}

#[tokio::test]
async fn a_credential_provider_that_never_answers_is_bounded_by_the_deadline() {
    let server = FakeServer::start(|_, _| Reply::With(200, "{}".into())).await;
    let client = DynamoClient::builder()
        .with_endpoint(&server.url)
        .with_region("us-east-1")
        .with_credential_provider(Arc::new(NeverAnswers))
        .with_retry(RetryConfig {
            call_deadline: Duration::from_millis(500),
            ..common::quick_retries()
        })
        .build()
        .unwrap();
    let (result, took) = within(
        "a write waiting for credentials",
        client.put_item(&PutItem::new("t", key("x"))),
    )
    .await;
    let error = result.unwrap_err();
    assert!(took < Duration::from_secs(3), "took {took:?}: {error}");
    let DynamoError::DeadlineExceeded {
        operation,
        deadline,
        last,
        may_have_applied,
        ..
    } = &error
    else {
        panic!("expected DeadlineExceeded, got {error:?}");
    };
    assert_eq!(*operation, "PutItem");
    assert_eq!(*deadline, Duration::from_millis(500));
    assert!(!may_have_applied, "nothing was sent");
    assert!(
        matches!(last.as_deref(), Some(DynamoError::Credentials(_))),
        "{last:?}"
    );
    assert!(!error.is_ambiguous());
    let text = error.to_string();
    assert!(text.contains("credential provider"), "{text}");
    assert!(text.contains("deadline of 500ms"), "{text}");
    assert_eq!(server.requests(), 0);
}

/// Each page answers in 250 ms (well within the request timeout) and says there is more.
async fn slow_endless_pages() -> FakeServer {
    let page = r#"{"Items":[{"pk":{"S":"a"}}],"Count":1,"LastEvaluatedKey":{"pk":{"S":"a"}}}"#;
    FakeServer::start(move |_, _| {
        Reply::Delayed(
            Duration::from_millis(250),
            Box::new(Reply::With(200, page.into())),
        )
    })
    .await
}

fn one_second_per_call() -> RetryConfig {
    RetryConfig {
        call_deadline: Duration::from_secs(1),
        ..common::quick_retries()
    }
}

fn assert_deadline(error: &DynamoError, call: &str, took: Duration) {
    assert!(took < Duration::from_secs(3), "took {took:?}: {error}");
    let DynamoError::DeadlineExceeded {
        operation, elapsed, ..
    } = error
    else {
        panic!("expected DeadlineExceeded, got {error:?}");
    };
    assert_eq!(*operation, call);
    assert!(*elapsed >= Duration::from_millis(900), "{elapsed:?}");
    let text = error.to_string();
    assert!(text.starts_with(call), "{text}");
    assert!(
        text.contains("did not finish within its deadline of 1s"),
        "{text}"
    );
}

#[tokio::test]
async fn a_query_of_slow_pages_is_bounded_as_a_whole() {
    let server = slow_endless_pages().await;
    let client = common::client_for(&server.url, one_second_per_call());
    let (result, took) = within(
        "a query of endless slow pages",
        client.query_all(Query::new("t", "pk = :p").value(":p", "a")),
    )
    .await;
    let error = result.unwrap_err();
    assert_deadline(&error, "query_all", took);
    assert!(!error.is_ambiguous(), "a read");
    assert!(server.requests() >= 3, "pages were walked");
}

#[tokio::test]
async fn a_scan_of_slow_pages_is_bounded_as_a_whole() {
    let server = slow_endless_pages().await;
    let client = common::client_for(&server.url, one_second_per_call());
    let (result, took) = within(
        "a scan of endless slow pages",
        client.scan_all(Scan::new("t")),
    )
    .await;
    assert_deadline(&result.unwrap_err(), "scan_all", took);
}

#[tokio::test]
async fn a_batch_of_slow_chunks_is_bounded_as_a_whole() {
    // Every chunk applies (nothing unprocessed), each in 250 ms: 12 chunks cannot fit.
    let server = FakeServer::start(|_, _| {
        Reply::Delayed(
            Duration::from_millis(250),
            Box::new(Reply::With(200, "{}".into())),
        )
    })
    .await;
    let writes: Vec<WriteRequest> = (0..300)
        .map(|i| WriteRequest::Put {
            item: key(&format!("slow/{i}")),
        })
        .collect();
    let client = common::client_for(&server.url, one_second_per_call());
    let (result, took) = within(
        "a batch of slow chunks",
        client.batch_write_item("t", &writes),
    )
    .await;
    let error = result.unwrap_err();
    assert_deadline(&error, "batch_write_item", took);
    assert!(server.requests() < 12, "{} chunks sent", server.requests());
}

#[tokio::test]
async fn unprocessed_batch_writes_retried_past_the_deadline_are_reported_with_the_count() {
    let writes: Vec<WriteRequest> = (0..5)
        .map(|i| WriteRequest::Put {
            item: key(&format!("left/{i}")),
        })
        .collect();
    let canned = serde_json::json!({ "UnprocessedItems": { "t": writes } }).to_string();
    let server = FakeServer::start(move |_, _| {
        Reply::Delayed(
            Duration::from_millis(250),
            Box::new(Reply::With(200, canned.clone())),
        )
    })
    .await;
    let client = common::client_for(
        &server.url,
        RetryConfig {
            max_attempts: 1_000,
            ..one_second_per_call()
        },
    );
    let (result, took) = within(
        "a batch never processed",
        client.batch_write_item("t", &writes),
    )
    .await;
    let error = result.unwrap_err();
    // Without one deadline, these retries went on for max_elapsed (10 s here).
    assert_deadline(&error, "batch_write_item", took);
    // Time runs out between retries (the count is reported) or during one (cut short).
    let DynamoError::DeadlineExceeded { last, .. } = &error else {
        unreachable!()
    };
    match last.as_deref() {
        Some(DynamoError::BatchIncomplete {
            unprocessed: 5,
            total: 5,
            ..
        }) => {}
        Some(DynamoError::Transport { .. }) => assert!(error.is_ambiguous()),
        other => panic!("unexpected last error {other:?}"),
    }
}

#[tokio::test]
async fn waiting_for_a_table_is_bounded_even_when_describe_stalls() {
    // The first DescribeTable says CREATING; the next never answers.
    let creating = r#"{"Table":{"TableName":"t","TableStatus":"CREATING","KeySchema":[{"AttributeName":"pk","KeyType":"HASH"}],"AttributeDefinitions":[{"AttributeName":"pk","AttributeType":"S"}]}}"#;
    let server = FakeServer::start(move |n, _| {
        if n == 0 {
            Reply::With(200, creating.into())
        } else {
            Reply::Stall
        }
    })
    .await;
    // Each request may take 5 s and retries go on for 10 s: only the wait bound can end it.
    let client = common::client_for(
        &server.url,
        RetryConfig {
            request_timeout: Duration::from_secs(5),
            ..common::quick_retries()
        },
    );
    let (result, took) = within(
        "waiting on a stalled DescribeTable",
        client.wait_until_active("t", Duration::from_secs(1)),
    )
    .await;
    let error = result.unwrap_err();
    assert_deadline(&error, "wait_until_active", took);
}
