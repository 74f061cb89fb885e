//! DynamoDB Streams against DynamoDB Local: tables with streams, reading shards from
//! every position, and the typed errors of stream reads.

mod common;

use std::cmp::Ordering;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering::SeqCst;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use common::fake_server::{FakeServer, Reply};
use dynacommit::dynamo::{
    AttributeValue, DeleteItem, DynamoClient, DynamoError, EventName, Item, KeyAttribute, KeyType,
    PutItem, ShardPosition, StreamRecord, StreamViewType, TableSpec, UpdateItem,
    compare_sequence_numbers,
};

const INTERNAL_ERROR: &str =
    r#"{"__type":"com.amazonaws.dynamodb.v20120810#InternalServerError","message":"oops"}"#;

fn spec(name: &str) -> TableSpec {
    TableSpec::new(name, KeyAttribute::new("pk", KeyType::S))
}

/// A fresh table with a NEW_AND_OLD_IMAGES stream, and that stream's ARN.
async fn streamed_table(client: &DynamoClient) -> (String, String) {
    let name = common::unique_name("streams");
    let report = client
        .ensure_table(&spec(&name).with_stream(StreamViewType::NewAndOldImages))
        .await
        .unwrap();
    assert!(report.created, "{report:?}");
    assert_eq!(
        report.table.stream_view_type,
        Some(StreamViewType::NewAndOldImages)
    );
    let arn = report
        .table
        .latest_stream_arn
        .expect("a table created with a stream reports its ARN");
    (name, arn)
}

fn key(pk: &str) -> Item {
    [("pk".to_owned(), AttributeValue::from(pk))].into()
}

fn item(pk: &str, v: u32) -> Item {
    let mut item = key(pk);
    item.insert("v".to_owned(), v.into());
    item
}

async fn put(client: &DynamoClient, table: &str, pk: &str, v: u32) {
    client
        .put_item(&PutItem::new(table, item(pk, v)))
        .await
        .unwrap();
}

/// Every record of one shard from `position`: pages until a closed shard ends, or until
/// an open shard has nothing more (an empty page; on DynamoDB Local an empty page means
/// the end, where AWS may give empty pages before later records).
async fn read_shard(
    client: &DynamoClient,
    arn: &str,
    shard_id: &str,
    position: ShardPosition,
) -> Vec<StreamRecord> {
    let mut iterator = Some(
        client
            .get_shard_iterator(arn, shard_id, position)
            .await
            .unwrap(),
    );
    let mut records = Vec::new();
    while let Some(current) = iterator {
        let page = client.get_records(&current, Some(2)).await.unwrap();
        if page.records.is_empty() {
            break;
        }
        records.extend(page.records);
        iterator = page.next_shard_iterator;
    }
    records
}

/// Every record of the stream from the trim horizon, each shard after its parent.
async fn read_stream(client: &DynamoClient, arn: &str) -> Vec<StreamRecord> {
    let description = client.describe_stream(arn).await.unwrap();
    assert_eq!(description.stream_arn, arn);
    assert!(!description.shards.is_empty(), "{description:?}");
    let mut pending = description.shards;
    let mut records = Vec::new();
    while !pending.is_empty() {
        // A shard is ready once its parent has been read (or is no longer listed).
        let ready = pending
            .iter()
            .position(|s| {
                s.parent_shard_id
                    .as_ref()
                    .is_none_or(|parent| pending.iter().all(|p| &p.shard_id != parent))
            })
            .expect("shard parents form no cycle");
        let shard = pending.remove(ready);
        records.extend(read_shard(client, arn, &shard.shard_id, ShardPosition::TrimHorizon).await);
    }
    records
}

/// The only shard of a fresh table's stream (DynamoDB Local gives a new stream one).
async fn only_shard(client: &DynamoClient, arn: &str) -> String {
    let description = client.describe_stream(arn).await.unwrap();
    assert_eq!(description.shards.len(), 1, "{description:?}");
    description.shards[0].shard_id.clone()
}

#[tokio::test]
async fn a_stream_records_put_update_and_delete_in_order_with_images() {
    let client = common::dynamodb().await;
    let (table, arn) = streamed_table(&client).await;
    put(&client, &table, "a", 1).await;
    client
        .update_item(
            &UpdateItem::new(&table, key("a"), "SET #v = :v")
                .name("#v", "v")
                .value(":v", 2u32),
        )
        .await
        .unwrap();
    client
        .delete_item(&DeleteItem::new(&table, key("a")))
        .await
        .unwrap();

    let streams = client.list_streams(&table).await.unwrap();
    assert_eq!(streams.len(), 1, "{streams:?}");
    assert_eq!(streams[0].stream_arn, arn);
    assert_eq!(streams[0].table_name, table);
    let description = client.describe_stream(&arn).await.unwrap();
    assert_eq!(description.status, "ENABLED");
    assert_eq!(description.view_type, StreamViewType::NewAndOldImages);

    let records = read_stream(&client, &arn).await;
    let [insert, modify, remove] = records.as_slice() else {
        panic!("three records expected: {records:#?}");
    };
    assert_eq!(insert.event_name, EventName::Insert);
    assert_eq!(insert.new_image, Some(item("a", 1)));
    assert_eq!(insert.old_image, None);
    assert_eq!(modify.event_name, EventName::Modify);
    assert_eq!(modify.old_image, Some(item("a", 1)));
    assert_eq!(modify.new_image, Some(item("a", 2)));
    assert_eq!(remove.event_name, EventName::Remove);
    assert_eq!(remove.old_image, Some(item("a", 2)));
    assert_eq!(remove.new_image, None);
    for record in &records {
        assert_eq!(record.keys, key("a"));
        assert!(!record.by_ttl, "{record:?}");
        assert!(record.approximate_creation_time.is_some(), "{record:?}");
    }
    for pair in records.windows(2) {
        assert_eq!(
            compare_sequence_numbers(&pair[0].sequence_number, &pair[1].sequence_number),
            Ordering::Less,
            "{pair:?}"
        );
        assert_ne!(pair[0].event_id, pair[1].event_id);
    }
}

#[tokio::test]
async fn reading_resumes_exactly_after_or_at_a_sequence_number() {
    let client = common::dynamodb().await;
    let (table, arn) = streamed_table(&client).await;
    for (pk, v) in [("a", 1), ("b", 2), ("c", 3)] {
        put(&client, &table, pk, v).await;
    }
    let shard = only_shard(&client, &arn).await;
    let all = read_shard(&client, &arn, &shard, ShardPosition::TrimHorizon).await;
    assert_eq!(all.len(), 3, "{all:#?}");

    let after_first = read_shard(
        &client,
        &arn,
        &shard,
        ShardPosition::AfterSequence(all[0].sequence_number.clone()),
    )
    .await;
    assert_eq!(after_first, all[1..], "no repeat of the first record");

    let at_second = read_shard(
        &client,
        &arn,
        &shard,
        ShardPosition::AtSequence(all[1].sequence_number.clone()),
    )
    .await;
    assert_eq!(at_second, all[1..]);

    let after_last = read_shard(
        &client,
        &arn,
        &shard,
        ShardPosition::AfterSequence(all[2].sequence_number.clone()),
    )
    .await;
    assert_eq!(after_last, []);
}

#[tokio::test]
async fn latest_sees_only_later_writes() {
    let client = common::dynamodb().await;
    let (table, arn) = streamed_table(&client).await;
    put(&client, &table, "before", 1).await;
    let shard = only_shard(&client, &arn).await;
    let latest = client
        .get_shard_iterator(&arn, &shard, ShardPosition::Latest)
        .await
        .unwrap();
    let nothing_yet = client.get_records(&latest, None).await.unwrap();
    assert_eq!(nothing_yet.records, []);
    assert!(
        nothing_yet.next_shard_iterator.is_some(),
        "an open shard always has a next iterator"
    );

    put(&client, &table, "after", 2).await;
    // The LATEST iterator was taken before the write, and still reads it.
    let page = client.get_records(&latest, None).await.unwrap();
    let [record] = page.records.as_slice() else {
        panic!("one record expected: {page:#?}");
    };
    assert_eq!(record.keys, key("after"));
    assert_eq!(record.event_name, EventName::Insert);
}

#[tokio::test]
async fn ensure_table_enables_a_stream_on_an_existing_table_and_never_changes_one() {
    let client = common::dynamodb().await;
    let name = common::unique_name("enable-stream");
    let plain = client.ensure_table(&spec(&name)).await.unwrap();
    assert_eq!(plain.table.stream_view_type, None);
    assert_eq!(plain.table.latest_stream_arn, None);
    assert!(!plain.stream_enabled);
    assert_eq!(client.list_streams(&name).await.unwrap(), []);

    let wanted = spec(&name).with_stream(StreamViewType::NewImage);
    let enabled = client.ensure_table(&wanted).await.unwrap();
    assert!(enabled.stream_enabled && !enabled.created, "{enabled:?}");
    assert_eq!(enabled.table.status, "ACTIVE");
    assert_eq!(
        enabled.table.stream_view_type,
        Some(StreamViewType::NewImage)
    );
    let arn = enabled.table.latest_stream_arn.clone().unwrap();
    let streams = client.list_streams(&name).await.unwrap();
    assert_eq!(streams.len(), 1, "{streams:?}");
    assert_eq!(streams[0].stream_arn, arn);

    // The stream works: a write shows up with its new image only.
    put(&client, &name, "x", 7).await;
    let records = read_stream(&client, &arn).await;
    assert_eq!(records.len(), 1, "{records:#?}");
    assert_eq!(records[0].new_image, Some(item("x", 7)));
    assert_eq!(records[0].old_image, None);

    let again = client.ensure_table(&wanted).await.unwrap();
    assert!(!again.stream_enabled, "{again:?}");
    assert_eq!(again.table.latest_stream_arn.as_deref(), Some(arn.as_str()));

    // A spec that asks for no stream leaves the table's alone.
    let untouched = client.ensure_table(&spec(&name)).await.unwrap();
    assert_eq!(
        untouched.table.stream_view_type,
        Some(StreamViewType::NewImage)
    );

    let other = spec(&name).with_stream(StreamViewType::KeysOnly);
    let e = client.ensure_table(&other).await.unwrap_err();
    assert!(
        matches!(
            e,
            DynamoError::StreamViewTypeMismatch {
                expected: StreamViewType::KeysOnly,
                found: StreamViewType::NewImage,
                ..
            }
        ),
        "{e:?}"
    );
    let text = e.to_string();
    for needle in [
        name.as_str(),
        "KEYS_ONLY",
        "NEW_IMAGE",
        "disable the stream",
    ] {
        assert!(text.contains(needle), "{needle} missing from: {text}");
    }
    let after = client.describe_table(&name).await.unwrap();
    assert_eq!(after.stream_view_type, Some(StreamViewType::NewImage));
    assert_eq!(after.latest_stream_arn.as_deref(), Some(arn.as_str()));
}

#[tokio::test]
async fn an_unknown_stream_or_iterator_is_a_typed_error() {
    let client = common::dynamodb().await;
    let (table, arn) = streamed_table(&client).await;
    let unknown = arn.replace(&table, &common::unique_name("no-such-table"));
    assert_ne!(unknown, arn);

    let e = client.describe_stream(&unknown).await.unwrap_err();
    assert_eq!(e.code(), Some("ResourceNotFoundException"), "{e:?}");
    assert!(!e.is_retryable() && !e.is_ambiguous(), "{e:?}");

    let shard = only_shard(&client, &arn).await;
    let e = client
        .get_shard_iterator(&unknown, &shard, ShardPosition::TrimHorizon)
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some("ResourceNotFoundException"), "{e:?}");

    let e = client
        .get_records("not-an-iterator", None)
        .await
        .unwrap_err();
    assert!(matches!(e, DynamoError::Service { .. }), "{e:?}");
    assert!(!e.is_expired_iterator() && !e.is_trimmed(), "{e:?}");

    let e = client.get_records("whatever", Some(0)).await.unwrap_err();
    assert!(matches!(e, DynamoError::InvalidRequest(_)), "{e:?}");
}

/// DynamoDB Local's iterator: `{arn}|001|base64({shard}|{sequence number}|{ms since
/// epoch, zero-padded})`. Rewritten here to stand for an old iterator, or one before the
/// shard's first record, which a test cannot otherwise wait for.
fn forged_iterator(iterator: &str, sequence: Option<&str>, age_ms: u64) -> String {
    let parts: Vec<&str> = iterator.rsplitn(2, '|').collect();
    let [payload, prefix] = parts.as_slice() else {
        panic!("DynamoDB Local's iterator format changed: {iterator}");
    };
    let decoded = String::from_utf8(BASE64.decode(payload).unwrap()).unwrap();
    let fields: Vec<&str> = decoded.split('|').collect();
    let [shard, seq, millis] = fields.as_slice() else {
        panic!("DynamoDB Local's iterator format changed: {decoded}");
    };
    let then = millis.parse::<u64>().unwrap() - age_ms;
    let seq = sequence.unwrap_or(seq);
    let forged = format!("{shard}|{seq}|{then:0width$}", width = millis.len());
    format!("{prefix}|{}", BASE64.encode(forged))
}

#[tokio::test]
async fn expired_and_trimmed_iterators_are_told_apart() {
    let client = common::dynamodb().await;
    let (table, arn) = streamed_table(&client).await;
    put(&client, &table, "a", 1).await;
    let shard = only_shard(&client, &arn).await;
    let fresh = client
        .get_shard_iterator(&arn, &shard, ShardPosition::TrimHorizon)
        .await
        .unwrap();
    assert_eq!(
        client
            .get_records(&fresh, None)
            .await
            .unwrap()
            .records
            .len(),
        1
    );

    // Iterators expire after 15 minutes.
    let old = forged_iterator(&fresh, None, 16 * 60 * 1000);
    let e = client.get_records(&old, None).await.unwrap_err();
    assert!(e.is_expired_iterator() && !e.is_trimmed(), "{e:?}");
    assert!(!e.is_retryable(), "{e:?}");

    // Sequence number 0 comes before the shard's first record.
    let before = forged_iterator(&fresh, Some("000000000000000000000"), 0);
    let e = client.get_records(&before, None).await.unwrap_err();
    assert!(e.is_trimmed() && !e.is_expired_iterator(), "{e:?}");
}

#[tokio::test]
async fn streams_calls_go_to_the_streams_endpoint_and_reads_are_retried() {
    let client = common::dynamodb().await;
    let (table, arn) = streamed_table(&client).await;
    put(&client, &table, "a", 1).await;
    let real = format!("{}/", common::dynamodb_url());
    // The first GetRecords gets a 500: a read, so it is simply sent again.
    let failed_once = AtomicBool::new(false);
    let server = FakeServer::start(move |_, target| {
        if target == "DynamoDBStreams_20120810.GetRecords" && !failed_once.swap(true, SeqCst) {
            return Reply::With(500, INTERNAL_ERROR.into());
        }
        Reply::Forward(real.clone())
    })
    .await;
    let via = DynamoClient::builder()
        .with_endpoint(common::dynamodb_url())
        .with_streams_endpoint(&server.url)
        .with_region("us-east-1")
        .with_credentials("dynacommit", "dynacommitsecret", None)
        .with_retry(common::quick_retries())
        .build()
        .unwrap();
    via.describe_table(&table).await.unwrap();
    let records = read_stream(&via, &arn).await;
    assert_eq!(records.len(), 1, "{records:#?}");
    assert_eq!(
        server.targets(),
        [
            "DynamoDBStreams_20120810.DescribeStream",
            "DynamoDBStreams_20120810.GetShardIterator",
            "DynamoDBStreams_20120810.GetRecords",
            "DynamoDBStreams_20120810.GetRecords",
            "DynamoDBStreams_20120810.GetRecords",
        ],
        "DescribeTable went to the DynamoDB endpoint; the 500 was retried"
    );
}
