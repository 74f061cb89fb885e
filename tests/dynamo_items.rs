//! The item operations, conditions and transactions against DynamoDB Local.

mod common;

use bytes::Bytes;
use common::wire::{key_at, lease_table_of};
use dynacommit::dynamo::{
    AttributeValue, ConditionCheck, DeleteItem, DynamoError, GetItem, Item, PutItem, ReturnValues,
    TransactWriteItem, UpdateItem,
};

fn with(mut item: Item, name: &str, value: impl Into<AttributeValue>) -> Item {
    item.insert(name.to_owned(), value.into());
    item
}

#[tokio::test]
async fn every_attribute_type_round_trips_through_the_server_exactly() {
    let client = common::dynamodb().await;
    let table = lease_table_of(&client, "items").await;
    let big = "12345678901234567890123456789012345678"; // 38 digits: past any float
    let precise = "3.1415926535897932384626433832795028";
    let mut item = key_at("types", "*");
    item.extend([
        ("s".to_owned(), AttributeValue::from("héllo ✓")),
        ("n_big".to_owned(), AttributeValue::N(big.into())),
        ("n_precise".to_owned(), AttributeValue::N(precise.into())),
        ("n_max".to_owned(), AttributeValue::from(u64::MAX)),
        (
            "b".to_owned(),
            AttributeValue::B(Bytes::from_static(&[0, 1, 254, 255])),
        ),
        ("bool".to_owned(), AttributeValue::Bool(true)),
        ("null".to_owned(), AttributeValue::Null(true)),
        (
            "l".to_owned(),
            AttributeValue::L(vec!["a".into(), AttributeValue::from(2u8)]),
        ),
        (
            "m".to_owned(),
            AttributeValue::M([("inner".to_owned(), AttributeValue::from(false))].into()),
        ),
        ("ss".to_owned(), AttributeValue::SS(vec!["x".into()])),
        ("ns".to_owned(), AttributeValue::NS(vec!["7".into()])),
        (
            "bs".to_owned(),
            AttributeValue::BS(vec![Bytes::from_static(b"\x00")]),
        ),
    ]);
    client
        .put_item(&PutItem::new(&table, item.clone()))
        .await
        .unwrap();
    let read = client
        .get_item(&GetItem::new(&table, key_at("types", "*")))
        .await
        .unwrap()
        .expect("the item just written");
    assert_eq!(read, item);
    assert_eq!(read["n_big"].as_number_text(), Some(big));
    assert_eq!(read["n_max"].as_u64(), Some(u64::MAX));

    let missing = client
        .get_item(&GetItem::new(&table, key_at("nothing", "*")))
        .await
        .unwrap();
    assert_eq!(missing, None);
}

#[tokio::test]
async fn a_failed_condition_returns_the_old_item_only_when_asked() {
    let client = common::dynamodb().await;
    let table = lease_table_of(&client, "items").await;
    let create = |generation: u64| {
        PutItem::new(&table, with(key_at("p", "*"), "generation", generation))
            .condition("attribute_not_exists(#pk)")
            .name("#pk", "path")
    };
    client.put_item(&create(1)).await.unwrap();

    let asked = client
        .put_item(&create(2).return_old_item_on_condition_failure())
        .await
        .unwrap_err();
    match &asked {
        DynamoError::ConditionalCheckFailed {
            old_item: Some(old),
            operation,
            ..
        } => {
            assert_eq!(*operation, "PutItem");
            assert_eq!(old["generation"].as_u64(), Some(1));
        }
        other => panic!("expected the old item, got {other:?}"),
    }
    assert!(asked.is_condition_failure() && !asked.is_retryable());

    let not_asked = client.put_item(&create(3)).await.unwrap_err();
    assert!(
        matches!(
            not_asked,
            DynamoError::ConditionalCheckFailed { old_item: None, .. }
        ),
        "{not_asked:?}"
    );
}

#[tokio::test]
async fn update_and_delete_honour_their_conditions() {
    let client = common::dynamodb().await;
    let table = lease_table_of(&client, "items").await;
    client
        .put_item(&PutItem::new(
            &table,
            with(key_at("u", "*"), "generation", 1u8),
        ))
        .await
        .unwrap();
    let bump = |expected: u64| {
        UpdateItem::new(&table, key_at("u", "*"), "SET #g = #g + :one")
            .condition("#g = :expected")
            .name("#g", "generation")
            .value(":one", 1u8)
            .value(":expected", expected)
            .return_values(ReturnValues::AllNew)
    };
    let updated = client.update_item(&bump(1)).await.unwrap();
    assert_eq!(updated.attributes.unwrap()["generation"].as_u64(), Some(2));
    let stale = client
        .update_item(&bump(1).return_old_item_on_condition_failure())
        .await
        .unwrap_err();
    assert!(stale.is_condition_failure(), "{stale:?}");

    let delete = |expected: u64| {
        DeleteItem::new(&table, key_at("u", "*"))
            .condition("generation = :g")
            .value(":g", expected)
            .return_values(ReturnValues::AllOld)
    };
    assert!(
        client
            .delete_item(&delete(1))
            .await
            .unwrap_err()
            .is_condition_failure()
    );
    let deleted = client.delete_item(&delete(2)).await.unwrap();
    assert_eq!(deleted.attributes.unwrap()["generation"].as_u64(), Some(2));
    assert_eq!(
        client
            .get_item(&GetItem::new(&table, key_at("u", "*")))
            .await
            .unwrap(),
        None
    );
}

#[tokio::test]
async fn a_transaction_cancelled_on_its_second_item_names_that_item_and_applies_nothing() {
    let client = common::dynamodb().await;
    let table = lease_table_of(&client, "items").await;
    client
        .put_item(&PutItem::new(
            &table,
            with(key_at("taken", "*"), "owner", "a"),
        ))
        .await
        .unwrap();
    let items = [
        TransactWriteItem::Put(PutItem::new(&table, key_at("first", "*"))),
        TransactWriteItem::Put(
            PutItem::new(&table, with(key_at("taken", "*"), "owner", "b"))
                .condition("attribute_not_exists(#pk)")
                .name("#pk", "path")
                .return_old_item_on_condition_failure(),
        ),
        TransactWriteItem::ConditionCheck(ConditionCheck::new(
            &table,
            key_at("taken", "x"),
            "attribute_not_exists(etag)",
        )),
    ];
    let error = client.transact_write_items(&items).await.unwrap_err();
    let DynamoError::TransactionCanceled { reasons, .. } = &error else {
        panic!("expected a cancellation, got {error:?}");
    };
    assert_eq!(reasons.len(), 3, "{reasons:?}");
    let causes: Vec<usize> = reasons
        .iter()
        .filter(|r| r.is_cause())
        .map(|r| r.index)
        .collect();
    assert_eq!(causes, [1], "{reasons:?}");
    assert_eq!(reasons[1].code, "ConditionalCheckFailed");
    let old = reasons[1]
        .item
        .as_ref()
        .expect("item 1 asked for its old item on a failed condition");
    assert_eq!(old["owner"].as_str(), Some("a"));
    assert!(
        error.to_string().contains("item 1: ConditionalCheckFailed"),
        "{error}"
    );
    assert!(error.is_condition_failure());
    // All or nothing: the first put did not land.
    assert_eq!(
        client
            .get_item(&GetItem::new(&table, key_at("first", "*")))
            .await
            .unwrap(),
        None
    );

    // The same transaction without the conflict applies every item.
    client
        .transact_write_items(&items[..1])
        .await
        .expect("an unconflicted transaction");
    assert!(
        client
            .get_item(&GetItem::new(&table, key_at("first", "*")))
            .await
            .unwrap()
            .is_some()
    );
}

#[tokio::test]
async fn transactions_outside_the_limits_are_refused_before_sending() {
    let client = common::dynamodb().await;
    let too_many: Vec<TransactWriteItem> = (0..101)
        .map(|i| TransactWriteItem::Put(PutItem::new("t", key_at(&i.to_string(), "*"))))
        .collect();
    let e = client.transact_write_items(&too_many).await.unwrap_err();
    assert!(e.to_string().contains("1 to 100 items, not 101"), "{e}");
    let e = client.transact_write_items(&[]).await.unwrap_err();
    assert!(e.to_string().contains("not 0"), "{e}");
    let returning = [TransactWriteItem::Put(
        PutItem::new("t", key_at("a", "*")).return_values(ReturnValues::AllOld),
    )];
    let e = client.transact_write_items(&returning).await.unwrap_err();
    assert!(
        e.to_string().contains("item 0 asks for ReturnValues"),
        "{e}"
    );
}

#[tokio::test]
async fn server_errors_carry_dynamodbs_own_words_and_are_not_retried() {
    let client = common::dynamodb().await;
    let missing = client
        .get_item(&GetItem::new("dynacommit-no-such-table", key_at("a", "*")))
        .await
        .unwrap_err();
    assert_eq!(missing.code(), Some("ResourceNotFoundException"));
    assert!(!missing.is_retryable());
    assert!(
        missing.to_string().contains("non-existent table"),
        "DynamoDB Local's message should be kept: {missing}"
    );

    let table = lease_table_of(&client, "items").await;
    let bad_key: Item = [("path".to_owned(), AttributeValue::from("only-half"))].into();
    let invalid = client
        .get_item(&GetItem::new(&table, bad_key))
        .await
        .unwrap_err();
    assert_eq!(invalid.code(), Some("ValidationException"), "{invalid}");
    assert!(invalid.to_string().contains("key"), "{invalid}");
}
