//! Writes whose answer was lost: the client must report "may have applied" over the whole
//! call, never a plain condition failure or a plain success, and must not send again a
//! write that counts twice. Through a scripted loopback server in front of DynamoDB Local.

mod common;

use common::fake_server::{FakeServer, Reply};
use common::wire::{THROTTLED, key, lease_table};
use dynacommit::dynamo::{
    AttributeValue, DynamoError, GetItem, Item, PutItem, RetryConfig, TransactWriteItem, UpdateItem,
};

const INTERNAL: &str = r#"{"__type":"com.amazonaws.dynamodb.v20120810#InternalServerError","message":"Internal server error"}"#;
const EXPIRED: &str = r#"{"__type":"com.amazon.coral.service#ExpiredTokenException","message":"The security token included in the request is expired"}"#;
const IN_PROGRESS: &str = r#"{"__type":"com.amazonaws.dynamodb.v20120810#TransactionInProgressException","message":"Transaction is ongoing for the transaction request token"}"#;
const CONDITION_FAILED: &str = r#"{"__type":"com.amazonaws.dynamodb.v20120810#ConditionalCheckFailedException","message":"The conditional request failed"}"#;

fn real() -> String {
    format!("{}/", common::dynamodb_url())
}

/// A put-if-absent of an item carrying `owner`, asking for the old item on failure.
fn claim(table: &str, path: &str, owner: &str) -> PutItem {
    let mut item = key(path);
    item.insert("owner".to_owned(), owner.into());
    PutItem::new(table, item)
        .condition("attribute_not_exists(#pk)")
        .name("#pk", "path")
        .return_old_item_on_condition_failure()
}

async fn read(table: &str, path: &str) -> Option<Item> {
    common::dynamodb()
        .await
        .get_item(&GetItem::new(table, key(path)))
        .await
        .unwrap()
}

#[tokio::test]
async fn a_condition_failure_after_a_lost_answer_is_ambiguous_and_keeps_the_old_item() {
    let table = lease_table("ambiguity").await;
    let to = real();
    // Attempt 1 applies, but its answer is replaced by a 500; attempt 2 goes through and
    // fails its condition on attempt 1's own write.
    let server = FakeServer::start(move |n, _| {
        if n == 0 {
            Reply::ForwardThenAnswer(to.clone(), 500, INTERNAL.into())
        } else {
            Reply::Forward(to.clone())
        }
    })
    .await;
    let client = common::client_for(&server.url, common::quick_retries());
    let error = client
        .put_item(&claim(&table, "mine", "nonce-1"))
        .await
        .unwrap_err();
    assert_eq!(server.requests(), 2);
    assert!(error.is_ambiguous(), "{error:?}");
    assert!(error.is_condition_failure(), "{error:?}");
    assert_eq!(error.code(), Some("ConditionalCheckFailedException"));
    assert!(
        matches!(
            &error,
            DynamoError::AfterAmbiguousAttempt {
                attempts: 2,
                first_ambiguous_attempt: 1,
                ..
            }
        ),
        "{error:?}"
    );
    assert!(
        matches!(
            error.underlying(),
            DynamoError::ConditionalCheckFailed { .. }
        ),
        "{error:?}"
    );
    // The old item is our own write: the caller can recognise it.
    let old = error.old_item().expect("DynamoDB Local sends the old item");
    assert_eq!(old["owner"], AttributeValue::from("nonce-1"));
    let text = error.to_string();
    assert!(text.contains("may have applied"), "{text}");
    assert!(text.contains("HTTP 500"), "{text}");
    assert!(read(&table, "mine").await.is_some());
}

#[tokio::test]
async fn an_expired_token_after_a_lost_answer_is_ambiguous() {
    let table = lease_table("ambiguity").await;
    let to = real();
    let server = FakeServer::start(move |n, _| match n {
        0 => Reply::ForwardThenAnswer(to.clone(), 503, INTERNAL.into()),
        _ => Reply::With(400, EXPIRED.into()),
    })
    .await;
    let client = common::client_for(&server.url, common::quick_retries());
    let error = client
        .put_item(&claim(&table, "expired", "nonce-2"))
        .await
        .unwrap_err();
    assert_eq!(server.requests(), 2, "an expired token is final");
    assert_eq!(error.code(), Some("ExpiredTokenException"));
    assert!(error.is_ambiguous(), "{error:?}");
    assert!(!error.is_condition_failure());
    assert!(error.to_string().contains("may have applied"), "{error}");
    assert!(read(&table, "expired").await.is_some(), "attempt 1 applied");
}

#[tokio::test]
async fn throttling_until_exhausted_after_a_lost_answer_is_ambiguous() {
    let table = lease_table("ambiguity").await;
    let to = real();
    let server = FakeServer::start(move |n, _| {
        if n == 0 {
            Reply::ForwardThenAnswer(to.clone(), 500, INTERNAL.into())
        } else {
            Reply::With(400, THROTTLED.into())
        }
    })
    .await;
    let client = common::client_for(
        &server.url,
        RetryConfig {
            max_attempts: 4,
            ..common::quick_retries()
        },
    );
    let error = client
        .put_item(&claim(&table, "throttled", "nonce-3"))
        .await
        .unwrap_err();
    assert_eq!(server.requests(), 4);
    match &error {
        DynamoError::RetriesExhausted {
            attempts: 4,
            last,
            earlier_attempt_may_have_applied: true,
            ..
        } => assert_eq!(last.code(), Some("ThrottlingException")),
        other => panic!("expected an ambiguous RetriesExhausted, got {other:?}"),
    }
    assert!(error.is_ambiguous());
    assert!(error.to_string().contains("may have applied"), "{error}");
}

#[tokio::test]
async fn a_read_after_a_lost_answer_is_not_marked() {
    let server = FakeServer::start(|n, _| match n {
        0 => Reply::With(500, INTERNAL.into()),
        _ => Reply::With(
            400,
            r#"{"__type":"x#ResourceNotFoundException","message":"no table"}"#.into(),
        ),
    })
    .await;
    let client = common::client_for(&server.url, common::quick_retries());
    let error = client
        .get_item(&GetItem::new("t", key("x")))
        .await
        .unwrap_err();
    assert!(
        matches!(error, DynamoError::Service { .. }),
        "a read has nothing to apply: {error:?}"
    );
    assert!(!error.is_ambiguous());
}

#[tokio::test]
async fn a_transaction_in_progress_is_retried_until_it_resolves() {
    let table = lease_table("ambiguity").await;
    let to = real();
    let server = FakeServer::start(move |n, _| {
        if n == 0 {
            Reply::With(400, IN_PROGRESS.into())
        } else {
            Reply::Forward(to.clone())
        }
    })
    .await;
    let client = common::client_for(&server.url, common::quick_retries());
    client
        .transact_write_items(&[TransactWriteItem::Put(claim(&table, "tx", "nonce-4"))])
        .await
        .expect("the second attempt goes through");
    assert_eq!(server.requests(), 2);
    assert!(read(&table, "tx").await.is_some());
}

#[tokio::test]
async fn a_transaction_forever_in_progress_is_ambiguous() {
    let server = FakeServer::start(|_, _| Reply::With(400, IN_PROGRESS.into())).await;
    let client = common::client_for(
        &server.url,
        RetryConfig {
            max_attempts: 3,
            ..common::quick_retries()
        },
    );
    let error = client
        .transact_write_items(&[TransactWriteItem::Put(claim("t", "tx", "nonce-5"))])
        .await
        .unwrap_err();
    assert_eq!(server.requests(), 3);
    assert!(
        matches!(error, DynamoError::RetriesExhausted { attempts: 3, .. }),
        "{error:?}"
    );
    assert_eq!(error.code(), Some("TransactionInProgressException"));
    assert!(error.is_ambiguous(), "{error:?}");
}

#[tokio::test]
async fn an_unreadable_success_of_a_write_is_ambiguous() {
    let table = lease_table("ambiguity").await;
    let to = real();
    let server = FakeServer::start(move |_, _| {
        Reply::ForwardThenAnswer(to.clone(), 200, "<html>OK</html>".into())
    })
    .await;
    let client = common::client_for(&server.url, common::quick_retries());
    let error = client
        .put_item(&claim(&table, "html", "nonce-6"))
        .await
        .unwrap_err();
    assert_eq!(server.requests(), 1, "a 2xx is an answer: not sent again");
    assert!(
        matches!(error, DynamoError::MalformedResponse { status: 200, .. }),
        "{error:?}"
    );
    assert!(error.is_ambiguous(), "{error:?}");
    assert!(error.to_string().contains("may have applied"), "{error}");
    assert!(read(&table, "html").await.is_some(), "it did apply");
}

#[tokio::test]
async fn an_error_body_under_200_is_not_a_success() {
    let server = FakeServer::start(|_, _| Reply::With(200, CONDITION_FAILED.into())).await;
    let client = common::client_for(&server.url, common::quick_retries());
    let put = client
        .put_item(&claim("t", "x", "nonce-7"))
        .await
        .expect_err("an error body is not a success");
    assert!(
        matches!(put, DynamoError::MalformedResponse { status: 200, .. }),
        "{put:?}"
    );
    assert!(put.is_ambiguous(), "{put:?}");
    assert!(!put.is_condition_failure(), "the status and body disagree");
    assert!(
        put.to_string().contains("ConditionalCheckFailedException"),
        "{put}"
    );
    let get = client
        .get_item(&GetItem::new("t", key("x")))
        .await
        .unwrap_err();
    assert!(!get.is_ambiguous(), "a read applies nothing: {get:?}");
    assert_eq!(server.requests(), 2);
}

fn counter(table: &str) -> UpdateItem {
    UpdateItem::new(table, key("counter"), "ADD #n :one")
        .name("#n", "n")
        .value(":one", 1u8)
}

async fn count(table: &str) -> Option<u64> {
    read(table, "counter")
        .await
        .map(|item| item["n"].as_u64().unwrap())
}

#[tokio::test]
async fn a_counting_update_is_not_sent_again_after_a_lost_answer() {
    let table = lease_table("ambiguity").await;
    let to = real();
    let lost_first = move |n: usize, _: &str| {
        if n == 0 {
            Reply::ForwardThenAnswer(to.clone(), 500, INTERNAL.into())
        } else {
            Reply::Forward(to.clone())
        }
    };
    let server = FakeServer::start(lost_first.clone()).await;
    let client = common::client_for(&server.url, common::quick_retries());
    let error = client.update_item(&counter(&table)).await.unwrap_err();
    assert_eq!(server.requests(), 1, "not sent again");
    assert!(error.is_ambiguous(), "{error:?}");
    assert_eq!(count(&table).await, Some(1), "applied once");

    // Opted in: sent again, and counted twice.
    let server = FakeServer::start(lost_first).await;
    let client = common::client_for(&server.url, common::quick_retries());
    client
        .update_item(&counter(&table).resend_if_ambiguous())
        .await
        .unwrap();
    assert_eq!(server.requests(), 2);
    assert_eq!(count(&table).await, Some(3));
}

#[tokio::test]
async fn a_counting_update_is_still_retried_after_throttling() {
    let table = lease_table("ambiguity").await;
    let to = real();
    let server = FakeServer::start(move |n, _| {
        if n < 2 {
            Reply::With(400, THROTTLED.into())
        } else {
            Reply::Forward(to.clone())
        }
    })
    .await;
    let client = common::client_for(&server.url, common::quick_retries());
    client.update_item(&counter(&table)).await.unwrap();
    assert_eq!(server.requests(), 3);
    assert_eq!(count(&table).await, Some(1));
}
