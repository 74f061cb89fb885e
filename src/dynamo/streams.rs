//! DynamoDB Streams: a table's change log, read shard by shard.
//!
//! A table with a stream records every item change (insert, modify, remove) in order of
//! its key. The stream is split into shards; a shard is *open* (still written) until it
//! gets an ending sequence number, and a shard split off another names it as its parent.
//! Reading a shard means getting an iterator at a position
//! ([`get_shard_iterator`](DynamoClient::get_shard_iterator)) and following
//! [`get_records`](DynamoClient::get_records) pages; iterators expire after 15 minutes
//! ([`DynamoError::is_expired_iterator`]), records after 24 hours
//! ([`DynamoError::is_trimmed`]).
//!
//! All four calls only read, so they are retried freely; they go to the client's
//! [`streams_endpoint`](DynamoClient::streams_endpoint).

use std::cmp::Ordering;

use serde::{Deserialize, Serialize};

use super::attr::Item;
use super::client::DynamoClient;
use super::error::DynamoError;
use super::stream_view::StreamViewType;

/// One stream of a table, as ListStreams reports it. A table has at most one enabled
/// stream, but keeps its disabled ones listed for 24 hours.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamSummary {
    /// The stream's ARN, which every other Streams call takes.
    pub stream_arn: String,
    /// The table.
    pub table_name: String,
    /// A timestamp that tells the table's streams apart (not unique across tables).
    pub stream_label: String,
}

/// A stream as DescribeStream reports it, with all its shards.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamDescription {
    /// The stream's ARN.
    pub stream_arn: String,
    /// `ENABLING`, `ENABLED`, `DISABLING` or `DISABLED`. A disabled stream keeps its
    /// records readable for 24 hours; all its shards are closed.
    pub status: String,
    /// What its records hold.
    pub view_type: StreamViewType,
    /// Every shard, in the order DynamoDB lists them (not necessarily parents first).
    pub shards: Vec<Shard>,
}

/// One shard of a stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shard {
    /// The shard's id.
    pub shard_id: String,
    /// The shard this one was split from, if any: read it to its end first, to see each
    /// item's changes in order.
    pub parent_shard_id: Option<String>,
    /// The sequence number of the shard's first record.
    pub starting_sequence_number: String,
    /// The sequence number of the shard's last record, once the shard is closed; `None`
    /// while it is still written to.
    pub ending_sequence_number: Option<String>,
}

impl Shard {
    /// Whether the shard is closed: no record will be added to it.
    pub fn is_closed(&self) -> bool {
        self.ending_sequence_number.is_some()
    }
}

/// Where in a shard an iterator starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ShardPosition {
    /// At the oldest record the shard still keeps.
    TrimHorizon,
    /// Just after the newest record: only records written from now on.
    Latest,
    /// At the record with this sequence number.
    AtSequence(String),
    /// Just after the record with this sequence number: to resume after the last record
    /// processed.
    AfterSequence(String),
}

/// The kind of change a stream record describes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EventName {
    /// A new item was put.
    Insert,
    /// An existing item was changed.
    Modify,
    /// An item was deleted (by a caller, or by TTL: see [`StreamRecord::by_ttl`]).
    Remove,
    /// A kind this client does not know, as DynamoDB spelled it. Kept rather than refused,
    /// so that one unknown record cannot block the reading of a shard: its sequence number
    /// still lets a reader go past it.
    Other(String),
}

impl EventName {
    fn from_wire(name: String) -> Self {
        match name.as_str() {
            "INSERT" => Self::Insert,
            "MODIFY" => Self::Modify,
            "REMOVE" => Self::Remove,
            _ => Self::Other(name),
        }
    }
}

/// One change of one item, as GetRecords reports it.
#[derive(Debug, Clone, PartialEq)]
pub struct StreamRecord {
    /// A unique id of this record.
    pub event_id: String,
    /// What happened to the item.
    pub event_name: EventName,
    /// The record's place in its shard: a decimal number of up to about 40 digits, kept as
    /// text. Compare two with [`compare_sequence_numbers`], never as plain strings.
    pub sequence_number: String,
    /// The item's key attributes.
    pub keys: Item,
    /// The item after the change, when the stream's view type includes it (never for a
    /// removal).
    pub new_image: Option<Item>,
    /// The item before the change, when the stream's view type includes it (never for an
    /// insertion).
    pub old_image: Option<Item>,
    /// When the change was made, in seconds since the Unix epoch, when reported. AWS
    /// rounds it to the second, DynamoDB Local to the minute.
    pub approximate_creation_time: Option<f64>,
    /// Whether the item was deleted by TTL expiry rather than by a caller: AWS marks those
    /// records with the user identity `{type: Service, principalId:
    /// dynamodb.amazonaws.com}`.
    pub by_ttl: bool,
}

/// One page of GetRecords.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordsPage {
    /// The records, in sequence number order. May be empty while more records follow:
    /// keep following `next_shard_iterator`.
    pub records: Vec<StreamRecord>,
    /// Where to read next. `None` once a closed shard has been read to its end; an open
    /// shard always has one (an empty page at its end means "nothing new yet").
    pub next_shard_iterator: Option<String>,
}

/// Orders two stream sequence numbers by their numeric value.
///
/// They are decimal numbers too long for any integer type (up to about 40 digits), sent
/// as text, and not always of one length: AWS's grow in length, DynamoDB Local pads with
/// zeros. Comparing them as strings gets `"9" > "10"` wrong; this compares the digits
/// after any leading zeros by count, then one by one. Text that is not decimal digits is
/// ordered by the same rule, without failing.
///
/// ```
/// use std::cmp::Ordering;
/// use dynacommit::dynamo::compare_sequence_numbers;
///
/// assert_eq!(compare_sequence_numbers("9", "10"), Ordering::Less);
/// assert_eq!(compare_sequence_numbers("000000000000000000012", "12"), Ordering::Equal);
/// ```
pub fn compare_sequence_numbers(a: &str, b: &str) -> Ordering {
    let a = a.trim_start_matches('0');
    let b = b.trim_start_matches('0');
    a.len().cmp(&b.len()).then_with(|| a.cmp(b))
}

// ---- wire shapes

#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct ListStreamsRequest<'a> {
    table_name: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    exclusive_start_stream_arn: Option<String>,
}

// Lists are required fields: an answer without one is malformed, not "none", so that a
// body cut to `{}` is never read as "no streams", "no shards" or "no records".
#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct ListStreamsOutput {
    streams: Vec<WireStreamSummary>,
    last_evaluated_stream_arn: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct WireStreamSummary {
    stream_arn: String,
    table_name: String,
    stream_label: String,
}

#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct DescribeStreamRequest<'a> {
    stream_arn: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    exclusive_start_shard_id: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct DescribeStreamOutput {
    stream_description: WireStreamDescription,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct WireStreamDescription {
    stream_arn: String,
    stream_status: String,
    stream_view_type: StreamViewType,
    shards: Vec<WireShard>,
    last_evaluated_shard_id: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct WireShard {
    shard_id: String,
    parent_shard_id: Option<String>,
    sequence_number_range: WireSequenceNumberRange,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct WireSequenceNumberRange {
    starting_sequence_number: String,
    ending_sequence_number: Option<String>,
}

#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct GetShardIteratorRequest<'a> {
    stream_arn: &'a str,
    shard_id: &'a str,
    shard_iterator_type: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    sequence_number: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct GetShardIteratorOutput {
    shard_iterator: String,
}

#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct GetRecordsRequest<'a> {
    shard_iterator: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    limit: Option<u32>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct GetRecordsOutput {
    records: Vec<WireRecord>,
    next_shard_iterator: Option<String>,
}

// A record's own fields are camelCase on the wire; the `dynamodb` body's are PascalCase.
#[derive(Deserialize)]
struct WireRecord {
    #[serde(rename = "eventID")]
    event_id: String,
    #[serde(rename = "eventName")]
    event_name: String,
    dynamodb: WireStreamRecord,
    #[serde(rename = "userIdentity")]
    user_identity: Option<WireIdentity>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct WireStreamRecord {
    approximate_creation_date_time: Option<f64>,
    keys: Item,
    new_image: Option<Item>,
    old_image: Option<Item>,
    sequence_number: String,
}

// The API reference spells these `Type` and `PrincipalId`, its prose (and Lambda's event
// JSON) `type` and `principalId`: both are read.
#[derive(Deserialize)]
struct WireIdentity {
    #[serde(rename = "Type", alias = "type")]
    kind: Option<String>,
    #[serde(rename = "PrincipalId", alias = "principalId")]
    principal_id: Option<String>,
}

/// The event name DynamoDB Local gives a TTL deletion (a Java SDK enum's placeholder for
/// a value it does not know), with no user identity at all.
const LOCAL_TTL_EVENT_NAME: &str = "UNKNOWN_TO_SDK_VERSION";

impl WireRecord {
    fn into_record(self) -> StreamRecord {
        let by_identity = self.user_identity.is_some_and(|identity| {
            identity.kind.as_deref() == Some("Service")
                && identity.principal_id.as_deref() == Some("dynamodb.amazonaws.com")
        });
        let record = self.dynamodb;
        // DynamoDB Local's TTL deletions: only the sweeper writes this name, and the record
        // is a removal in all but name (keys, the old image, no new image). Read as what
        // AWS sends for the same event, so that code tested on Local works on AWS.
        let local_ttl = self.event_name == LOCAL_TTL_EVENT_NAME && record.new_image.is_none();
        let event_name = if local_ttl {
            EventName::Remove
        } else {
            EventName::from_wire(self.event_name)
        };
        StreamRecord {
            event_id: self.event_id,
            event_name,
            sequence_number: record.sequence_number,
            keys: record.keys,
            new_image: record.new_image,
            old_image: record.old_image,
            approximate_creation_time: record.approximate_creation_date_time,
            by_ttl: by_identity || local_ttl,
        }
    }
}

impl From<GetRecordsOutput> for RecordsPage {
    fn from(output: GetRecordsOutput) -> Self {
        Self {
            records: output
                .records
                .into_iter()
                .map(WireRecord::into_record)
                .collect(),
            next_shard_iterator: output.next_shard_iterator,
        }
    }
}

impl From<WireShard> for Shard {
    fn from(shard: WireShard) -> Self {
        Self {
            shard_id: shard.shard_id,
            parent_shard_id: shard.parent_shard_id,
            starting_sequence_number: shard.sequence_number_range.starting_sequence_number,
            ending_sequence_number: shard.sequence_number_range.ending_sequence_number,
        }
    }
}

impl ShardPosition {
    /// The `ShardIteratorType` and `SequenceNumber` of a GetShardIterator request.
    fn to_wire(&self) -> (&'static str, Option<String>) {
        match self {
            Self::TrimHorizon => ("TRIM_HORIZON", None),
            Self::Latest => ("LATEST", None),
            Self::AtSequence(n) => ("AT_SEQUENCE_NUMBER", Some(n.clone())),
            Self::AfterSequence(n) => ("AFTER_SEQUENCE_NUMBER", Some(n.clone())),
        }
    }
}

/// GetRecords' largest `Limit`.
const GET_RECORDS_MAX: u32 = 1000;

impl DynamoClient {
    /// Every stream of `table` (ListStreams, all pages, within one
    /// [`call_deadline`](super::RetryConfig::call_deadline) named `list_streams`): the
    /// enabled one, if any, and those disabled in the last 24 hours. An unknown table has
    /// none.
    #[cfg_attr(feature = "harness", visibility::make(pub))]
    pub(crate) async fn list_streams(
        &self,
        table: &str,
    ) -> Result<Vec<StreamSummary>, DynamoError> {
        let deadline = self.deadline("list_streams");
        let mut streams = Vec::new();
        let mut start = None;
        loop {
            let request = ListStreamsRequest {
                table_name: table,
                exclusive_start_stream_arn: start,
            };
            let page: ListStreamsOutput = self.call_by("ListStreams", &request, &deadline).await?;
            streams.extend(page.streams.into_iter().map(|s| StreamSummary {
                stream_arn: s.stream_arn,
                table_name: s.table_name,
                stream_label: s.stream_label,
            }));
            match page.last_evaluated_stream_arn {
                Some(arn) => start = Some(arn),
                None => return Ok(streams),
            }
        }
    }

    /// The stream `stream_arn` with every one of its shards (DescribeStream, all pages,
    /// within one [`call_deadline`](super::RetryConfig::call_deadline) named
    /// `describe_stream`). An unknown stream is a [`DynamoError::Service`] with code
    /// `ResourceNotFoundException`.
    #[cfg_attr(feature = "harness", visibility::make(pub))]
    pub(crate) async fn describe_stream(
        &self,
        stream_arn: &str,
    ) -> Result<StreamDescription, DynamoError> {
        let deadline = self.deadline("describe_stream");
        let mut shards = Vec::new();
        let mut start = None;
        loop {
            let request = DescribeStreamRequest {
                stream_arn,
                exclusive_start_shard_id: start,
            };
            let page: DescribeStreamOutput =
                self.call_by("DescribeStream", &request, &deadline).await?;
            let page = page.stream_description;
            shards.extend(page.shards.into_iter().map(Shard::from));
            match page.last_evaluated_shard_id {
                Some(shard_id) => start = Some(shard_id),
                None => {
                    return Ok(StreamDescription {
                        stream_arn: page.stream_arn,
                        status: page.stream_status,
                        view_type: page.stream_view_type,
                        shards,
                    });
                }
            }
        }
    }

    /// An iterator over shard `shard_id` of stream `stream_arn`, starting at `position`
    /// (GetShardIterator). It expires after 15 minutes unless used.
    ///
    /// A sequence number no longer kept is refused with `TrimmedDataAccessException`
    /// ([`DynamoError::is_trimmed`]); one the shard does not have, with a
    /// `ValidationException`.
    #[cfg_attr(feature = "harness", visibility::make(pub))]
    pub(crate) async fn get_shard_iterator(
        &self,
        stream_arn: &str,
        shard_id: &str,
        position: ShardPosition,
    ) -> Result<String, DynamoError> {
        let (shard_iterator_type, sequence_number) = position.to_wire();
        let request = GetShardIteratorRequest {
            stream_arn,
            shard_id,
            shard_iterator_type,
            sequence_number,
        };
        let output: GetShardIteratorOutput = self.call("GetShardIterator", &request).await?;
        Ok(output.shard_iterator)
    }

    /// One page of records from `shard_iterator` (GetRecords): at most `limit` (1 to
    /// 1000; `None` for DynamoDB's default of 1000) and 1 MB.
    ///
    /// An iterator is not used up by reading: the same one may be read again within its 15
    /// minutes, which is what makes this call safe to retry. Past them it is refused with
    /// `ExpiredIteratorException` ([`DynamoError::is_expired_iterator`]): get a new one
    /// [after](ShardPosition::AfterSequence) the last record processed.
    #[cfg_attr(feature = "harness", visibility::make(pub))]
    pub(crate) async fn get_records(
        &self,
        shard_iterator: &str,
        limit: Option<u32>,
    ) -> Result<RecordsPage, DynamoError> {
        if let Some(limit) = limit
            && !(1..=GET_RECORDS_MAX).contains(&limit)
        {
            return Err(DynamoError::InvalidRequest(format!(
                "GetRecords limit {limit} is not between 1 and {GET_RECORDS_MAX}"
            )));
        }
        let request = GetRecordsRequest {
            shard_iterator,
            limit,
        };
        let output: GetRecordsOutput = self.call("GetRecords", &request).await?;
        Ok(output.into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dynamo::AttributeValue;
    use crate::dynamo::response::parse_response;

    fn parse_records(body: &str) -> Result<RecordsPage, DynamoError> {
        parse_response::<GetRecordsOutput>("GetRecords", "http://h/", 200, body.as_bytes())
            .map(RecordsPage::from)
    }

    /// A GetRecords answer in AWS's shape: a caller's delete, then a TTL deletion.
    const AWS_ANSWER: &str = r#"{
        "NextShardIterator": "arn:aws:dynamodb:us-east-1:123456789012:table/t/stream/2026-01-01T00:00:00.000|1|AAAA",
        "Records": [
            {
                "awsRegion": "us-east-1",
                "eventID": "e1",
                "eventName": "REMOVE",
                "eventSource": "aws:dynamodb",
                "eventVersion": "1.1",
                "dynamodb": {
                    "ApproximateCreationDateTime": 1796286660,
                    "Keys": {"pk": {"S": "a"}},
                    "OldImage": {"pk": {"S": "a"}, "v": {"N": "2"}},
                    "SequenceNumber": "99000000000000000000000000000000000000001",
                    "SizeBytes": 15,
                    "StreamViewType": "NEW_AND_OLD_IMAGES"
                }
            },
            {
                "awsRegion": "us-east-1",
                "eventID": "e2",
                "eventName": "REMOVE",
                "eventSource": "aws:dynamodb",
                "eventVersion": "1.1",
                "userIdentity": {"PrincipalId": "dynamodb.amazonaws.com", "Type": "Service"},
                "dynamodb": {
                    "ApproximateCreationDateTime": 1796286661.5,
                    "Keys": {"pk": {"S": "b"}},
                    "OldImage": {"pk": {"S": "b"}, "ttl": {"N": "1796286000"}},
                    "SequenceNumber": "100000000000000000000000000000000000000002",
                    "SizeBytes": 20,
                    "StreamViewType": "NEW_AND_OLD_IMAGES"
                }
            }
        ]
    }"#;

    #[test]
    fn a_recorded_answer_parses_with_its_ttl_deletion_marked() {
        let page = parse_records(AWS_ANSWER).unwrap();
        assert!(page.next_shard_iterator.is_some());
        let [by_caller, by_ttl] = page.records.as_slice() else {
            panic!("two records expected: {page:?}");
        };
        assert_eq!(by_caller.event_id, "e1");
        assert_eq!(by_caller.event_name, EventName::Remove);
        assert!(!by_caller.by_ttl);
        assert_eq!(by_caller.keys["pk"], AttributeValue::S("a".into()));
        assert_eq!(
            by_caller.old_image.as_ref().unwrap()["v"],
            AttributeValue::N("2".into())
        );
        assert_eq!(by_caller.new_image, None);
        assert_eq!(by_caller.approximate_creation_time, Some(1_796_286_660.0));

        assert_eq!(by_ttl.event_name, EventName::Remove);
        assert!(by_ttl.by_ttl);
        assert_eq!(
            by_ttl.sequence_number,
            "100000000000000000000000000000000000000002"
        );
        assert_eq!(by_ttl.approximate_creation_time, Some(1_796_286_661.5));
        // Longer means larger, whatever the first digits say.
        assert_eq!(
            compare_sequence_numbers(&by_caller.sequence_number, &by_ttl.sequence_number),
            Ordering::Less
        );
    }

    #[test]
    fn identities_other_than_the_ttl_service_are_not_ttl() {
        for identity in [
            r#"{"Type": "Service", "PrincipalId": "someone.else.amazonaws.com"}"#,
            r#"{"Type": "User", "PrincipalId": "dynamodb.amazonaws.com"}"#,
            r#"{}"#,
        ] {
            let body = format!(
                r#"{{"Records": [{{"eventID": "e", "eventName": "REMOVE", "userIdentity": {identity},
                    "dynamodb": {{"Keys": {{"pk": {{"S": "a"}}}}, "SequenceNumber": "1"}}}}]}}"#
            );
            let page = parse_records(&body).unwrap();
            assert!(!page.records[0].by_ttl, "{identity}");
            assert_eq!(page.next_shard_iterator, None);
        }
        // The lower-case spelling of the documentation's prose is read too.
        let body = r#"{"Records": [{"eventID": "e", "eventName": "REMOVE",
            "userIdentity": {"type": "Service", "principalId": "dynamodb.amazonaws.com"},
            "dynamodb": {"Keys": {"pk": {"S": "a"}}, "SequenceNumber": "1"}}]}"#;
        assert!(parse_records(body).unwrap().records[0].by_ttl);
    }

    #[test]
    fn dynamodb_locals_ttl_deletion_reads_as_aws_s() {
        // Recorded from DynamoDB Local: its TTL sweeper's record, with no userIdentity.
        let body = r#"{"Records":[{"eventID":"f54a4d78-3ed6-49f1-b35d-7ba6b0699fa1","eventName":"UNKNOWN_TO_SDK_VERSION","eventVersion":"1.1","eventSource":"aws:dynamodb","awsRegion":"ddblocal","dynamodb":{"ApproximateCreationDateTime":1796286720.000,"Keys":{"pk":{"S":"x"}},"OldImage":{"pk":{"S":"x"},"ttl":{"N":"1796286669"}},"SequenceNumber":"000000000000000000007","SizeBytes":15,"StreamViewType":"NEW_AND_OLD_IMAGES"}}],"NextShardIterator":"it"}"#;
        let record = &parse_records(body).unwrap().records[0];
        assert_eq!(record.event_name, EventName::Remove);
        assert!(record.by_ttl);
        assert_eq!(record.sequence_number, "000000000000000000007");
    }

    #[test]
    fn an_unknown_event_name_is_kept_not_refused() {
        let body = r#"{"Records": [{"eventID": "e", "eventName": "TRUNCATE",
            "dynamodb": {"Keys": {"pk": {"S": "a"}}, "NewImage": {"pk": {"S": "a"}}, "SequenceNumber": "5"}}]}"#;
        let record = &parse_records(body).unwrap().records[0];
        assert_eq!(record.event_name, EventName::Other("TRUNCATE".into()));
        assert!(!record.by_ttl);
    }

    #[test]
    fn malformed_answers_are_errors_not_panics() {
        for (body, expected) in [
            ("{}", "missing field `Records`"),
            (
                r#"{"Records": [{"eventID": "e", "eventName": "INSERT"}]}"#,
                "dynamodb",
            ),
            (
                r#"{"Records": [{"eventID": "e", "eventName": "INSERT", "dynamodb": {"Keys": {}}}]}"#,
                "SequenceNumber",
            ),
            (
                r#"{"Records": [{"eventID": "e", "eventName": "INSERT", "dynamodb": {"Keys": {}, "SequenceNumber": 7}}]}"#,
                "invalid type",
            ),
            (
                r#"{"Records": [{"eventName": "INSERT", "dynamodb": {"Keys": {}, "SequenceNumber": "7"}}]}"#,
                "eventID",
            ),
            (r#"{"Records": "none"}"#, "invalid type"),
        ] {
            let e = parse_records(body).unwrap_err();
            assert!(
                matches!(e, DynamoError::MalformedResponse { .. }),
                "{body}: {e:?}"
            );
            assert!(e.to_string().contains(expected), "{body}: {e}");
        }
        let unknown_view = r#"{"StreamDescription": {"StreamArn": "a", "StreamStatus": "ENABLED",
            "StreamViewType": "EVERYTHING", "Shards": []}}"#;
        let e = parse_response::<DescribeStreamOutput>(
            "DescribeStream",
            "http://h/",
            200,
            unknown_view.as_bytes(),
        )
        .err()
        .unwrap();
        assert!(e.to_string().contains("EVERYTHING"), "{e}");
    }

    #[test]
    fn shards_parse_open_and_closed() {
        let body = r#"{"StreamDescription": {"StreamArn": "arn", "StreamStatus": "ENABLED",
            "StreamViewType": "KEYS_ONLY", "LastEvaluatedShardId": "s2", "Shards": [
              {"ShardId": "s1", "SequenceNumberRange": {"StartingSequenceNumber": "1", "EndingSequenceNumber": "9"}},
              {"ShardId": "s2", "ParentShardId": "s1", "SequenceNumberRange": {"StartingSequenceNumber": "10"}}]}}"#;
        let output: DescribeStreamOutput =
            parse_response("DescribeStream", "http://h/", 200, body.as_bytes()).unwrap();
        let page = output.stream_description;
        assert_eq!(page.stream_view_type, StreamViewType::KeysOnly);
        assert_eq!(page.last_evaluated_shard_id.as_deref(), Some("s2"));
        let shards: Vec<Shard> = page.shards.into_iter().map(Shard::from).collect();
        assert!(shards[0].is_closed() && !shards[1].is_closed());
        assert_eq!(shards[1].parent_shard_id.as_deref(), Some("s1"));
        assert_eq!(shards[0].ending_sequence_number.as_deref(), Some("9"));
    }

    #[test]
    fn sequence_numbers_compare_by_value() {
        use Ordering::{Equal, Greater, Less};
        for (a, b, expected) in [
            ("1", "2", Less),
            ("9", "10", Less),
            ("10", "9", Greater),
            ("123", "123", Equal),
            // DynamoDB Local pads to 21 digits; AWS does not pad.
            ("000000000000000000009", "10", Less),
            ("000000000000000000010", "10", Equal),
            ("0", "", Equal),
            (
                "4900000000000000000000000000000000000001",
                "4900000000000000000000000000000000000002",
                Less,
            ),
            (
                "999999999999999999999999999999999999999",
                "1000000000000000000000000000000000000000",
                Less,
            ),
        ] {
            assert_eq!(compare_sequence_numbers(a, b), expected, "{a} vs {b}");
            assert_eq!(
                compare_sequence_numbers(b, a),
                expected.reverse(),
                "{b} vs {a}"
            );
        }
        let mut numbers = vec!["100", "000000000000000000002", "99", "1000", "3"];
        numbers.sort_by(|a, b| compare_sequence_numbers(a, b));
        assert_eq!(numbers, ["000000000000000000002", "3", "99", "100", "1000"]);
    }

    #[test]
    fn positions_and_view_types_take_their_wire_names() {
        assert_eq!(ShardPosition::TrimHorizon.to_wire(), ("TRIM_HORIZON", None));
        assert_eq!(ShardPosition::Latest.to_wire(), ("LATEST", None));
        assert_eq!(
            ShardPosition::AtSequence("7".into()).to_wire(),
            ("AT_SEQUENCE_NUMBER", Some("7".into()))
        );
        assert_eq!(
            ShardPosition::AfterSequence("7".into()).to_wire(),
            ("AFTER_SEQUENCE_NUMBER", Some("7".into()))
        );
        for view in [
            StreamViewType::KeysOnly,
            StreamViewType::NewImage,
            StreamViewType::OldImage,
            StreamViewType::NewAndOldImages,
        ] {
            let json = serde_json::to_string(&view).unwrap();
            assert_eq!(json, format!("\"{view}\""));
            assert_eq!(serde_json::from_str::<StreamViewType>(&json).unwrap(), view);
        }
    }
}
