//! Query paging and BatchWriteItem against DynamoDB Local.

mod common;

use bytes::Bytes;
use dynacommit::dynamo::{
    AttributeValue, DynamoClient, Item, KeyAttribute, KeyType, Query, TableSpec, WriteRequest,
};
use futures::TryStreamExt;

/// A table keyed by `pk` (S) and `n` (N), so range order is numeric.
async fn numbered_table(client: &DynamoClient) -> String {
    let name = common::unique_name("query");
    let spec = TableSpec::new(&name, KeyAttribute::new("pk", KeyType::S))
        .with_range_key(KeyAttribute::new("n", KeyType::N));
    client.ensure_table(&spec).await.unwrap();
    name
}

fn row(pk: &str, n: u32, payload: Option<Bytes>) -> Item {
    let mut item: Item = [
        ("pk".to_owned(), AttributeValue::from(pk)),
        ("n".to_owned(), AttributeValue::from(n)),
    ]
    .into();
    if let Some(payload) = payload {
        item.insert("payload".to_owned(), AttributeValue::B(payload));
    }
    item
}

fn numbers(items: &[Item]) -> Vec<u64> {
    items.iter().map(|i| i["n"].as_u64().unwrap()).collect()
}

fn by_pk(table: &str, pk: &str) -> Query {
    Query::new(table, "pk = :pk").value(":pk", pk)
}

#[tokio::test]
async fn a_batch_of_sixty_lands_whole_and_a_limited_query_walks_every_page() {
    let client = common::dynamodb().await;
    let table = numbered_table(&client).await;
    let puts: Vec<WriteRequest> = (0..60)
        .map(|n| WriteRequest::Put {
            item: row("log", n, None),
        })
        .collect();
    client.batch_write_item(&table, &puts).await.unwrap();

    // Limit 7 per page: 60 items take 9 pages, and the walk returns them all, in order.
    let pages: Vec<_> = client
        .query_pages(by_pk(&table, "log").limit(7))
        .try_collect()
        .await
        .unwrap();
    assert!(pages.len() >= 9, "only {} pages", pages.len());
    assert!(pages.iter().all(|p| p.items.len() <= 7));
    let all: Vec<Item> = pages.into_iter().flat_map(|p| p.items).collect();
    assert_eq!(numbers(&all), (0..60).collect::<Vec<u64>>());

    let descending = client
        .query_all(by_pk(&table, "log").limit(25).descending())
        .await
        .unwrap();
    assert_eq!(numbers(&descending), (0..60).rev().collect::<Vec<u64>>());

    let ranged = client
        .query_all(
            Query::new(&table, "pk = :pk AND #n BETWEEN :lo AND :hi")
                .name("#n", "n")
                .value(":pk", "log")
                .value(":lo", 10u8)
                .value(":hi", 14u8),
        )
        .await
        .unwrap();
    assert_eq!(numbers(&ranged), [10, 11, 12, 13, 14]);

    // Deletes go through the same batching.
    let deletes: Vec<WriteRequest> = (0..60)
        .map(|n| WriteRequest::Delete {
            key: row("log", n, None),
        })
        .collect();
    client.batch_write_item(&table, &deletes).await.unwrap();
    assert!(
        client
            .query_all(by_pk(&table, "log"))
            .await
            .unwrap()
            .is_empty()
    );
}

#[tokio::test]
async fn a_query_past_one_megabyte_is_split_by_the_server_and_walked_whole() {
    let client = common::dynamodb().await;
    let table = numbered_table(&client).await;
    // 30 items of 100 KB: 3 MB, so DynamoDB must cut pages at 1 MB without any Limit.
    let payload = Bytes::from(vec![7u8; 100 * 1024]);
    let puts: Vec<WriteRequest> = (0..30)
        .map(|n| WriteRequest::Put {
            item: row("big", n, Some(payload.clone())),
        })
        .collect();
    client.batch_write_item(&table, &puts).await.unwrap();

    let pages: Vec<_> = client
        .query_pages(by_pk(&table, "big"))
        .try_collect()
        .await
        .unwrap();
    assert!(
        pages.len() >= 3,
        "3 MB should take at least 3 pages, took {}",
        pages.len()
    );
    let all: Vec<Item> = pages.into_iter().flat_map(|p| p.items).collect();
    assert_eq!(numbers(&all), (0..30).collect::<Vec<u64>>());
    assert!(
        all.iter()
            .all(|i| i["payload"].as_bytes() == Some(&payload))
    );
}

#[tokio::test]
async fn an_empty_batch_sends_nothing_and_succeeds() {
    let client = common::dynamodb().await;
    client.batch_write_item("never-called", &[]).await.unwrap();
}
