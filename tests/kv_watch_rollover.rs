//! The DynamoDB store's watch across shard rollovers, against a scripted stream.
//!
//! DynamoDB Local never closes a shard, so the rollover is played by a fake server with a
//! model of one table and its stream: shard A (closed, three records), its children B and
//! C, and D, the child of B, which appears only once B has been read to its end (B is
//! open until then, and closes as it is read out). Iterators name their shard and place
//! (and an epoch, to expire them); GetRecords pages hold at most two records, a fresh
//! iterator's first page is empty, and DescribeStream lists two shards a page, children
//! before parents. The fake logs every call, to check that no shard is read before its
//! parent was read to its end.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use bytes::Bytes;
use futures::StreamExt;
use futures::stream::BoxStream;
use serde_json::{Map, Value, json};

use common::fake_server::{FakeServer, Reply};
use dynacommit::kv::{
    Checkpoint, DynamoKv, Entry, EventKind, KvError, KvStore, Revision, WatchEvent,
};

const TABLE: &str = "rollover";
const STREAM: &str =
    "arn:aws:dynamodb:us-east-1:123456789012:table/rollover/stream/2026-01-01T00:00:00.000";
const A: &str = "shardId-00000001767225600000-0000000a";
const B: &str = "shardId-00000001767225600000-0000000b";
const C: &str = "shardId-00000001767225600000-0000000c";
const D: &str = "shardId-00000001767225600000-0000000d";
/// The watched prefix.
const PREFIX: &[u8] = b"app/";
/// Records per GetRecords page, whatever the caller's limit.
const PAGE: usize = 2;
/// The bound on waiting for one event (over the watcher's 10 s shard refresh, so that a
/// watch that only finds D that way fails the checks on the calls, not the wait).
const WAIT: Duration = Duration::from_secs(15);
/// How long a watch must stay silent once every expected event came: five idle polls.
const QUIET: Duration = Duration::from_secs(1);

type Watch = BoxStream<'static, Result<WatchEvent, KvError>>;

// ---- the records

/// One record of the model's stream, and the event a watch of [`PREFIX`] must make of it.
struct Rec {
    /// The record as GetRecords sends it, without its sequence number and event id.
    wire: Value,
    expect: Option<EventKind>,
}

fn binary(bytes: &[u8]) -> Value {
    json!({ "B": BASE64.encode(bytes) })
}

/// The key attributes of `key` in namespace `ns`: `pk` = namespace, 0, folder; `sk` = the
/// rest.
fn keys(ns: &str, key: &str) -> Map<String, Value> {
    let (folder, name) = key
        .rsplit_once('/')
        .map_or(("", key), |(f, n)| (&key[..f.len() + 1], n));
    let mut pk = ns.as_bytes().to_vec();
    pk.push(0);
    pk.extend_from_slice(folder.as_bytes());
    Map::from_iter([
        ("pk".to_owned(), binary(&pk)),
        ("sk".to_owned(), binary(name.as_bytes())),
    ])
}

fn rev(value: &str) -> String {
    format!("rev-{value}")
}

/// An entry's item as the store writes it.
fn image(ns: &str, key: &str, value: &str, exp_ms: Option<u64>) -> Map<String, Value> {
    let mut item = keys(ns, key);
    item.insert("v".into(), binary(value.as_bytes()));
    item.insert("rev".into(), json!({ "S": rev(value) }));
    if let Some(ms) = exp_ms {
        item.insert("exp".into(), json!({ "N": ms.to_string() }));
        item.insert("ttl".into(), json!({ "N": (ms / 1000 + 3600).to_string() }));
    }
    item
}

fn record(
    name: &str,
    keys: Map<String, Value>,
    new: Option<Map<String, Value>>,
    old: Option<Map<String, Value>>,
    by_ttl: bool,
) -> Value {
    let mut body = json!({
        "ApproximateCreationDateTime": 1_767_225_600,
        "Keys": keys,
        "SizeBytes": 100,
        "StreamViewType": "NEW_AND_OLD_IMAGES",
    });
    if let Some(new) = new {
        body["NewImage"] = Value::Object(new);
    }
    if let Some(old) = old {
        body["OldImage"] = Value::Object(old);
    }
    let mut wire = json!({
        "awsRegion": "us-east-1",
        "eventName": name,
        "eventSource": "aws:dynamodb",
        "eventVersion": "1.1",
        "dynamodb": body,
    });
    if by_ttl {
        wire["userIdentity"] = json!({"type": "Service", "principalId": "dynamodb.amazonaws.com"});
    }
    wire
}

/// A write of `value` at watched `key` (INSERT or MODIFY): a put event.
fn write(name: &str, key: &str, value: &str, exp_ms: Option<u64>) -> Rec {
    let old = (name == "MODIFY").then(|| image("kv", key, "before", None));
    Rec {
        wire: record(
            name,
            keys("kv", key),
            Some(image("kv", key, value, exp_ms)),
            old,
            false,
        ),
        expect: Some(EventKind::Put(Entry {
            key: key.as_bytes().to_vec(),
            value: Bytes::from(value.to_owned()),
            revision: Revision::from(rev(value)),
            expires: exp_ms.map(|ms| SystemTime::UNIX_EPOCH + Duration::from_millis(ms)),
        })),
    }
}

/// A write the watch must not report: another namespace, or outside the prefix.
fn unwatched(ns: &str, key: &str, value: &str) -> Rec {
    Rec {
        wire: record(
            "INSERT",
            keys(ns, key),
            Some(image(ns, key, value, None)),
            None,
            false,
        ),
        expect: None,
    }
}

/// A sweep's mark on an expired entry before it deletes it: no event.
fn sweep_mark(key: &str, value: &str, exp_ms: u64) -> Rec {
    let mut marked = image("kv", key, value, Some(exp_ms));
    marked.insert("swept".into(), json!({ "BOOL": true }));
    Rec {
        wire: record(
            "MODIFY",
            keys("kv", key),
            Some(marked),
            Some(image("kv", key, value, Some(exp_ms))),
            false,
        ),
        expect: None,
    }
}

enum Removal {
    /// A caller's delete.
    Plain,
    /// A sweep's delete of a marked entry.
    Swept,
    /// DynamoDB's TTL.
    Ttl,
}

fn remove(key: &str, value: &str, how: Removal) -> Rec {
    let mut old = image("kv", key, value, Some(1_767_225_500_000));
    if matches!(how, Removal::Swept) {
        old.insert("swept".into(), json!({ "BOOL": true }));
    }
    let k = key.as_bytes().to_vec();
    let expect = match how {
        Removal::Plain => EventKind::Deleted { key: k },
        Removal::Swept | Removal::Ttl => EventKind::Expired { key: k },
    };
    Rec {
        wire: record(
            "REMOVE",
            keys("kv", key),
            None,
            Some(old),
            matches!(how, Removal::Ttl),
        ),
        expect: Some(expect),
    }
}

/// A folder counter's shard item changing: `segment/` in `folder`, counter shard `n`.
/// Its sort key's second-to-last byte is `/`: no event.
fn counter(folder: &str, segment: &str, n: u8) -> Rec {
    let mut pk = b"kv\0".to_vec();
    pk.extend_from_slice(folder.as_bytes());
    let mut sk = format!("{segment}/").into_bytes();
    sk.push(n);
    let item = Map::from_iter([
        ("pk".to_owned(), binary(&pk)),
        ("sk".to_owned(), binary(&sk)),
    ]);
    let mut new = item.clone();
    new.insert("n".into(), json!({ "N": "2" }));
    new.insert("x".into(), json!({ "N": "0" }));
    let mut old = item.clone();
    old.insert("n".into(), json!({ "N": "1" }));
    old.insert("x".into(), json!({ "N": "0" }));
    Rec {
        wire: record("MODIFY", item, Some(new), Some(old), false),
        expect: None,
    }
}

const EXPIRES_MS: u64 = 1_767_225_700_000;

/// The stream: per shard, its records in order. `app/k1` goes A -> B -> D, `app/k2` A -> C,
/// `app/k4` B -> D, `app/sub/k3` is in C only.
fn lineage() -> Vec<(&'static str, Option<&'static str>, Vec<Rec>)> {
    vec![
        (
            A,
            None,
            vec![
                write("INSERT", "app/k1", "v1", None),
                write("MODIFY", "app/k1", "v2", None),
                write("INSERT", "app/k2", "k2v1", None),
            ],
        ),
        (
            B,
            Some(A),
            vec![
                write("MODIFY", "app/k1", "v3", Some(EXPIRES_MS)),
                unwatched("kv", "other/x", "x1"),
                counter("", "app", 5),
                sweep_mark("app/k1", "v3", EXPIRES_MS),
                remove("app/k1", "v3", Removal::Swept),
                write("INSERT", "app/k1", "v4", None),
                unwatched("zz", "app/k9", "z1"),
                write("INSERT", "app/k4", "k4v1", None),
            ],
        ),
        (
            C,
            Some(A),
            vec![
                write("MODIFY", "app/k2", "k2v2", None),
                write("INSERT", "app/sub/k3", "k3v1", None),
                counter("app/", "sub", 1),
                remove("app/k2", "k2v2", Removal::Plain),
                write("MODIFY", "app/sub/k3", "k3v2", None),
            ],
        ),
        (
            D,
            Some(B),
            vec![
                write("MODIFY", "app/k1", "v5", None),
                remove("app/k4", "k4v1", Removal::Plain),
                remove("app/k1", "v5", Removal::Ttl),
                write("INSERT", "app/k1", "v6", None),
                write("INSERT", "app/k4", "k4v2", None),
            ],
        ),
    ]
}

fn parent_of(shard: &str) -> Option<&'static str> {
    match shard {
        B | C => Some(A),
        D => Some(B),
        _ => None,
    }
}

fn name_of(shard: &str) -> &'static str {
    match shard {
        A => "A",
        B => "B",
        C => "C",
        D => "D",
        _ => "?",
    }
}

// ---- the fake server

/// A shard of the model, its records numbered.
struct ShardModel {
    id: &'static str,
    parent: Option<&'static str>,
    /// (sequence number, wire record, expected event)
    records: Vec<(String, Value, Option<EventKind>)>,
}

/// A call the watcher made, in the order the fake answered them.
#[derive(Debug, Clone)]
enum Call {
    /// A DescribeStream page, with the shards it listed.
    Describe(Vec<&'static str>),
    /// GetShardIterator.
    Iterator { shard: &'static str, kind: String },
    /// GetRecords from record `from`: `got` records, `ended` if no NextShardIterator.
    Records {
        shard: &'static str,
        from: usize,
        got: usize,
        ended: bool,
    },
    /// GetRecords refused.
    Refused { shard: &'static str, code: String },
}

struct Model {
    shards: Vec<ShardModel>,
    /// B has closed and D exists.
    rolled: bool,
    /// Iterators handed out before this epoch have expired.
    epoch: u32,
    /// Per shard, how many of its first records the stream has trimmed (past 24 hours).
    trimmed: BTreeMap<&'static str, usize>,
    /// A shard whose fresh iterators at its end (LATEST) are refused as trimmed, as
    /// DynamoDB Local refuses one taken while the shard held nothing.
    refuse_young: Option<&'static str>,
    /// A shard whose reads (but for a fresh iterator's first) are refused for load.
    hold_reads: Option<&'static str>,
    /// How long an iterator lives (AWS: 15 minutes), if not for ever.
    iterator_life: Option<Duration>,
    /// When the model started: iterators carry their age from it.
    born: std::time::Instant,
    /// DescribeStream calls still to refuse for load.
    throttle_describes: usize,
    /// GetShardIterator calls still to refuse for load.
    throttle_iterators: usize,
    /// DescribeStream lists A as open (a stale listing, beside its open child C).
    stale_a: bool,
    /// Listings (all their pages) still to leave this shard out of (a stale listing).
    hide: Option<(&'static str, usize)>,
    /// The shard the listing under way leaves out.
    hiding: Option<&'static str>,
    /// Shards the stream no longer has (dropped a day after they closed).
    dropped: Vec<&'static str>,
    calls: Vec<Call>,
}

impl Model {
    fn new(rolled: bool) -> Self {
        let mut seq = 0u128;
        let shards = lineage()
            .into_iter()
            .enumerate()
            .map(|(i, (id, parent, records))| {
                // Children's numbers are above their parents', as on AWS; of variable
                // length, as on AWS.
                seq = seq.max(10u128.pow(20 + i as u32));
                let records = records
                    .into_iter()
                    .map(|rec| {
                        seq += 1;
                        let mut wire = rec.wire;
                        wire["eventID"] = json!(format!("event-{seq}"));
                        wire["dynamodb"]["SequenceNumber"] = json!(seq.to_string());
                        (seq.to_string(), wire, rec.expect)
                    })
                    .collect();
                ShardModel {
                    id,
                    parent,
                    records,
                }
            })
            .collect();
        Self {
            shards,
            rolled,
            epoch: 1,
            trimmed: BTreeMap::new(),
            refuse_young: None,
            hold_reads: None,
            iterator_life: None,
            born: std::time::Instant::now(),
            throttle_describes: 0,
            throttle_iterators: 0,
            stale_a: false,
            hide: None,
            hiding: None,
            dropped: Vec::new(),
            calls: Vec::new(),
        }
    }

    /// The shards DescribeStream lists: children before parents (DynamoDB promises no
    /// order), D only once B has closed.
    fn listed(&self) -> Vec<&ShardModel> {
        self.shards
            .iter()
            .rev()
            .filter(|s| s.id != D || self.rolled)
            .filter(|s| !self.dropped.contains(&s.id))
            .collect()
    }

    fn is_closed(&self, shard: &str) -> bool {
        shard == A || (shard == B && self.rolled)
    }

    fn shard(&self, id: &str) -> Option<&ShardModel> {
        self.listed().into_iter().find(|s| s.id == id)
    }

    fn seq(&self, shard: &str, index: usize) -> String {
        self.shards.iter().find(|s| s.id == shard).unwrap().records[index]
            .0
            .clone()
    }

    /// Every expected event of the stream after record `after` of shard A, in shard order
    /// (A, B, C, D): per key, stream order.
    fn expected_after_a(&self, after: usize) -> Vec<Expected> {
        let mut out = Vec::new();
        for shard in &self.shards {
            let skip = if shard.id == A { after + 1 } else { 0 };
            for (_, _, expect) in shard.records.iter().skip(skip) {
                if let Some(kind) = expect {
                    out.push(Expected {
                        shard: shard.id,
                        kind: kind.clone(),
                    });
                }
            }
        }
        out
    }

    fn iterator(&self, shard: &str, pos: usize, fresh: bool) -> String {
        let age = self.born.elapsed().as_millis();
        format!(
            "{STREAM}|{}|{age}|{shard}|{pos}|{}",
            self.epoch,
            u8::from(fresh)
        )
    }

    /// Adds a record to the end of `shard` (after every record of the model so far, so
    /// its sequence number is the highest).
    fn append(&mut self, shard: &str, rec: Rec) {
        let seq = self
            .shards
            .iter()
            .flat_map(|s| {
                s.records
                    .iter()
                    .map(|(seq, _, _)| seq.parse::<u128>().unwrap())
            })
            .max()
            .unwrap_or(0)
            + 1;
        let mut wire = rec.wire;
        wire["eventID"] = json!(format!("event-{seq}"));
        wire["dynamodb"]["SequenceNumber"] = json!(seq.to_string());
        let model = self.shards.iter_mut().find(|s| s.id == shard).unwrap();
        model.records.push((seq.to_string(), wire, rec.expect));
    }

    /// Refuses a call about `shard` with DynamoDB's error `code`, and logs it.
    fn refuse(&mut self, shard: &'static str, code: &str, message: &str) -> Reply {
        self.calls.push(Call::Refused {
            shard,
            code: code.into(),
        });
        error(code, message)
    }

    fn answer(&mut self, target: &str, body: &[u8]) -> Reply {
        let request: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
        match target.rsplit('.').next().unwrap_or("") {
            "DescribeTable" => self.describe_table(&request),
            "DescribeStream" => self.describe_stream(&request),
            "GetShardIterator" => self.get_shard_iterator(&request),
            "GetRecords" => self.get_records(&request),
            other => error("UnknownOperationException", &format!("no {other} here")),
        }
    }

    fn describe_table(&self, request: &Value) -> Reply {
        if request["TableName"] != TABLE {
            return error("ResourceNotFoundException", "Requested resource not found");
        }
        let key_schema = json!([
            {"AttributeName": "pk", "KeyType": "HASH"},
            {"AttributeName": "sk", "KeyType": "RANGE"},
        ]);
        ok(json!({"Table": {
            "TableName": TABLE,
            "TableStatus": "ACTIVE",
            "KeySchema": key_schema,
            "AttributeDefinitions": [
                {"AttributeName": "pk", "AttributeType": "B"},
                {"AttributeName": "sk", "AttributeType": "B"},
            ],
            "ItemCount": 0,
            "BillingModeSummary": {"BillingMode": "PAY_PER_REQUEST"},
            "StreamSpecification": {"StreamEnabled": true, "StreamViewType": "NEW_AND_OLD_IMAGES"},
            "LatestStreamArn": STREAM,
            "LatestStreamLabel": "2026-01-01T00:00:00.000",
        }}))
    }

    /// Two shards a page, to make the watcher follow `LastEvaluatedShardId`.
    fn describe_stream(&mut self, request: &Value) -> Reply {
        if request["StreamArn"] != STREAM {
            return error("ResourceNotFoundException", "Requested resource not found");
        }
        if self.throttle_describes > 0 {
            self.throttle_describes -= 1;
            return self.refuse(
                "stream",
                "LimitExceededException",
                "Rate exceeded for the stream",
            );
        }
        if request["ExclusiveStartShardId"].is_null() {
            // A new listing: does it leave a shard out?
            self.hiding = self.hide.map(|(shard, _)| shard);
            self.hide = self
                .hide
                .and_then(|(shard, left)| (left > 1).then_some((shard, left - 1)));
        }
        let hiding = self.hiding;
        let mut listed = self.listed();
        listed.retain(|s| Some(s.id) != hiding);
        let start = match request["ExclusiveStartShardId"].as_str() {
            Some(after) => listed
                .iter()
                .position(|s| s.id == after)
                .map_or(0, |i| i + 1),
            None => 0,
        };
        let page: Vec<&ShardModel> = listed.iter().skip(start).take(2).copied().collect();
        let more = start + page.len() < listed.len();
        let shards: Vec<Value> = page
            .iter()
            .map(|s| {
                let mut range = json!({"StartingSequenceNumber": s.records[0].0});
                if self.is_closed(s.id) && !(self.stale_a && s.id == A) {
                    range["EndingSequenceNumber"] = json!(s.records.last().unwrap().0);
                }
                let mut shard = json!({"ShardId": s.id, "SequenceNumberRange": range});
                if let Some(parent) = s.parent {
                    shard["ParentShardId"] = json!(parent);
                }
                shard
            })
            .collect();
        let ids = page.iter().map(|s| s.id).collect();
        let last = page.last().map(|s| s.id);
        self.calls.push(Call::Describe(ids));
        let mut description = json!({
            "StreamArn": STREAM,
            "StreamLabel": "2026-01-01T00:00:00.000",
            "StreamStatus": "ENABLED",
            "StreamViewType": "NEW_AND_OLD_IMAGES",
            "CreationRequestDateTime": 1_767_225_600.0,
            "TableName": TABLE,
            "KeySchema": [
                {"AttributeName": "pk", "KeyType": "HASH"},
                {"AttributeName": "sk", "KeyType": "RANGE"},
            ],
            "Shards": shards,
        });
        if more {
            description["LastEvaluatedShardId"] = json!(last);
        }
        ok(json!({ "StreamDescription": description }))
    }

    fn get_shard_iterator(&mut self, request: &Value) -> Reply {
        if self.throttle_iterators > 0 {
            self.throttle_iterators -= 1;
            return self.refuse(
                "iterator",
                "LimitExceededException",
                "Rate exceeded for shard",
            );
        }
        let id = request["ShardId"].as_str().unwrap_or("");
        let Some(shard) = self.shard(id) else {
            return error(
                "ResourceNotFoundException",
                &format!("Requested resource not found: Shard does not exist ({id})"),
            );
        };
        let kind = request["ShardIteratorType"]
            .as_str()
            .unwrap_or("")
            .to_owned();
        let at = |seq: &Value| {
            let seq = seq.as_str()?;
            shard.records.iter().position(|(s, _, _)| s == seq)
        };
        let trimmed = self.trimmed.get(id).copied().unwrap_or(0);
        let pos = match kind.as_str() {
            "TRIM_HORIZON" => Some(trimmed),
            "LATEST" => Some(shard.records.len()),
            "AT_SEQUENCE_NUMBER" => at(&request["SequenceNumber"]),
            "AFTER_SEQUENCE_NUMBER" => at(&request["SequenceNumber"]).map(|i| i + 1),
            _ => None,
        };
        let Some(pos) = pos else {
            return error(
                "ValidationException",
                &format!("Invalid SequenceNumber or ShardIteratorType in {request}"),
            );
        };
        let id = shard.id;
        if pos < trimmed {
            self.calls.push(Call::Iterator { shard: id, kind });
            return error(
                "TrimmedDataAccessException",
                "The requested sequence number is beyond the trim horizon",
            );
        }
        // A fresh iterator's first page is empty, as AWS's often is.
        let iterator = self.iterator(id, pos, true);
        self.calls.push(Call::Iterator { shard: id, kind });
        ok(json!({ "ShardIterator": iterator }))
    }

    fn get_records(&mut self, request: &Value) -> Reply {
        let iterator = request["ShardIterator"].as_str().unwrap_or("");
        let Some((epoch, age, id, pos, fresh)) = parse_iterator(iterator) else {
            return error("ValidationException", "Invalid ShardIterator");
        };
        let Some(shard) = self.shard(&id) else {
            return error("ResourceNotFoundException", "Shard does not exist");
        };
        let id = shard.id;
        let len = shard.records.len();
        let pos = pos.min(len);
        let limit = request["Limit"].as_u64().map_or(1000, |l| l as usize);
        let end = if fresh {
            pos
        } else {
            (pos + limit.min(PAGE)).min(len)
        };
        let records: Vec<Value> = shard.records[pos..end]
            .iter()
            .map(|(_, wire, _)| wire.clone())
            .collect();
        let young = fresh && pos == len && self.refuse_young == Some(id);
        if !fresh && self.hold_reads == Some(id) {
            return self.refuse(id, "LimitExceededException", "Rate exceeded for shard");
        }
        if young || pos < self.trimmed.get(id).copied().unwrap_or(0) {
            return self.refuse(
                id,
                "TrimmedDataAccessException",
                "The operation attempted to read past the oldest stream record in a shard",
            );
        }
        let aged = self
            .iterator_life
            .is_some_and(|life| self.born.elapsed() > Duration::from_millis(age) + life);
        if epoch < self.epoch || aged {
            return self.refuse(
                id,
                "ExpiredIteratorException",
                "Iterator expired. The iterator was created at time X while right now it is Y.",
            );
        }
        let next = if self.is_closed(id) && end == len && !fresh {
            None
        } else {
            if id == B && end == len && !fresh {
                // B is read to its (open) end: it closes now, and D takes over.
                self.rolled = true;
            }
            Some(self.iterator(id, end, false))
        };
        self.calls.push(Call::Records {
            shard: id,
            from: pos,
            got: records.len(),
            ended: next.is_none(),
        });
        let mut page = json!({ "Records": records });
        if let Some(next) = next {
            page["NextShardIterator"] = json!(next);
        }
        ok(page)
    }
}

/// An iterator's epoch, age (ms after the model started), shard, place and freshness.
fn parse_iterator(iterator: &str) -> Option<(u32, u64, String, usize, bool)> {
    let mut parts = iterator.rsplitn(6, '|');
    let fresh = parts.next()? == "1";
    let pos = parts.next()?.parse().ok()?;
    let shard = parts.next()?.to_owned();
    let age = parts.next()?.parse().ok()?;
    let epoch = parts.next()?.parse().ok()?;
    (parts.next()? == STREAM).then_some((epoch, age, shard, pos, fresh))
}

fn ok(body: Value) -> Reply {
    Reply::With(200, body.to_string())
}

fn error(code: &str, message: &str) -> Reply {
    Reply::With(
        400,
        json!({"__type": format!("com.amazonaws.dynamodb.v20120810#{code}"), "message": message})
            .to_string(),
    )
}

/// A fake table and stream, and a store on it.
struct Fake {
    server: FakeServer,
    model: Arc<Mutex<Model>>,
}

impl Fake {
    async fn start(rolled: bool) -> Self {
        let model = Arc::new(Mutex::new(Model::new(rolled)));
        let shared = model.clone();
        let server = FakeServer::start_with_body(move |_, target, body| {
            shared.lock().unwrap().answer(target, body)
        })
        .await;
        Self { server, model }
    }

    fn kv(&self) -> DynamoKv {
        DynamoKv::new(
            common::client_for(&self.server.url, common::quick_retries()),
            TABLE,
        )
    }

    fn watch(&self, from: Checkpoint) -> Watch {
        self.kv().watch(PREFIX, Some(from))
    }

    fn calls(&self) -> Vec<Call> {
        self.model.lock().unwrap().calls.clone()
    }
}

// ---- checkpoints

/// A checkpoint as the watcher writes one: `dynamodb:` and its `Position` as JSON.
fn checkpoint(shards: Value, done: &[&str]) -> Checkpoint {
    Checkpoint::from_text(format!(
        "dynamodb:{}",
        json!({"stream": STREAM, "shards": shards, "done": done})
    ))
}

/// "Shard A, after its first record."
fn after_first_of_a(model: &Model) -> Checkpoint {
    checkpoint(json!({ A: {"after": model.seq(A, 0)} }), &[])
}

/// A checkpoint's JSON.
fn json_of(checkpoint: &Checkpoint) -> Value {
    serde_json::from_str(checkpoint.as_str().strip_prefix("dynamodb:").unwrap()).unwrap()
}

/// The shards a checkpoint names as read to their end.
fn done_in(checkpoint: &Checkpoint) -> BTreeSet<String> {
    json_of(checkpoint)["done"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap().to_owned())
        .collect()
}

/// The shards a checkpoint says were read to their end: those it names, and every ancestor
/// of a shard in it that it is not reading.
fn finished_in(checkpoint: &Checkpoint) -> BTreeSet<String> {
    let json = json_of(checkpoint);
    let reading: BTreeSet<String> = json["shards"]
        .as_object()
        .unwrap()
        .keys()
        .cloned()
        .collect();
    let mut finished = done_in(checkpoint);
    for start in reading.iter().chain(done_in(checkpoint).iter()) {
        let mut at = parent_of(start);
        while let Some(parent) = at {
            if !reading.contains(parent) {
                finished.insert(parent.to_owned());
            }
            at = parent_of(parent);
        }
    }
    finished
}

// ---- reading a watch

/// An event the stream must yield, and the shard its record is in.
#[derive(Debug, Clone)]
struct Expected {
    shard: &'static str,
    kind: EventKind,
}

fn key_of(kind: &EventKind) -> Vec<u8> {
    match kind {
        EventKind::Put(entry) => entry.key.clone(),
        EventKind::Deleted { key } | EventKind::Expired { key } => key.clone(),
        EventKind::Ready => panic!("Ready has no key"),
    }
}

async fn next(watch: &mut Watch) -> WatchEvent {
    tokio::time::timeout(WAIT, watch.next())
        .await
        .unwrap_or_else(|_| panic!("no event within {WAIT:?}"))
        .expect("the watch ended")
        .expect("the watch failed")
}

/// Ready, then `n` events.
async fn ready_then(watch: &mut Watch, n: usize) -> (WatchEvent, Vec<WatchEvent>) {
    let ready = next(watch).await;
    assert_eq!(ready.kind, EventKind::Ready, "a watch starts with Ready");
    let mut events = Vec::with_capacity(n);
    for _ in 0..n {
        events.push(next(watch).await);
    }
    (ready, events)
}

async fn assert_quiet(watch: &mut Watch) {
    if let Ok(extra) = tokio::time::timeout(QUIET, watch.next()).await {
        panic!("an event beyond the stream's: {extra:?}");
    }
}

/// Checks that `got` are exactly the events of `expected`, each once, in stream order per
/// key, and that no record of a child shard came before one of its parent's. Returns the
/// shard each event came from, in the order they came.
fn check_events(got: &[WatchEvent], expected: &[Expected]) -> Vec<&'static str> {
    let mut want: BTreeMap<Vec<u8>, Vec<&Expected>> = BTreeMap::new();
    for e in expected {
        want.entry(key_of(&e.kind)).or_default().push(e);
    }
    let mut seen: BTreeMap<Vec<u8>, Vec<EventKind>> = BTreeMap::new();
    for event in got {
        assert_ne!(event.kind, EventKind::Ready, "Ready only comes first");
        seen.entry(key_of(&event.kind))
            .or_default()
            .push(event.kind.clone());
    }
    for (key, events) in &seen {
        let wanted: Vec<EventKind> = want
            .get(key)
            .map(|w| w.iter().map(|e| e.kind.clone()).collect())
            .unwrap_or_default();
        assert_eq!(
            events,
            &wanted,
            "the events of `{}`: each change once, in stream order",
            key.escape_ascii()
        );
    }
    let missing: Vec<String> = want
        .keys()
        .filter(|k| !seen.contains_key(*k))
        .map(|k| k.escape_ascii().to_string())
        .collect();
    assert!(missing.is_empty(), "no event at all for {missing:?}");

    // Each event's shard, by its place in its key's history.
    let mut index: BTreeMap<Vec<u8>, usize> = BTreeMap::new();
    let origins: Vec<&'static str> = got
        .iter()
        .map(|event| {
            let key = key_of(&event.kind);
            let i = index.entry(key.clone()).or_default();
            *i += 1;
            want[&key][*i - 1].shard
        })
        .collect();
    for (later, shard) in origins.iter().enumerate() {
        if let Some(parent) = parent_of(shard)
            && let Some(after) = origins[later..].iter().position(|s| *s == parent)
        {
            panic!(
                "event {} (shard {}) came before event {} of its parent shard {}: {:?}",
                later,
                name_of(shard),
                later + after,
                name_of(parent),
                origins.iter().map(|s| name_of(s)).collect::<Vec<_>>()
            );
        }
    }
    origins
}

/// Checks in the fake's log that no shard was asked for an iterator or records before its
/// parent had been read to its end (an answer without NextShardIterator), counting the
/// shards `done` as read already.
fn assert_parents_first(calls: &[Call], done: BTreeSet<String>) {
    let mut finished = done;
    for (i, call) in calls.iter().enumerate() {
        let (Call::Iterator { shard, .. } | Call::Records { shard, .. }) = call else {
            continue;
        };
        if let Some(parent) = parent_of(shard) {
            assert!(
                finished.contains(parent),
                "call {i} ({call:?}) reads shard {} before its parent {} was read to its end:\n{calls:#?}",
                name_of(shard),
                name_of(parent)
            );
        }
        if let Call::Records { ended: true, .. } = call {
            finished.insert((*shard).to_owned());
        }
    }
}

/// Asserts that `calls` asked for an iterator of `shard` of the type `kind`.
fn assert_opened(calls: &[Call], shard: &str, kind: &str) {
    assert!(
        calls
            .iter()
            .any(|c| matches!(c, Call::Iterator { shard: s, kind: k } if *s == shard && k == kind)),
        "no {kind} iterator of shard {}:\n{calls:#?}",
        name_of(shard)
    );
}

/// What a watch read.
struct Read {
    ready: WatchEvent,
    events: Vec<WatchEvent>,
    expected: Vec<Expected>,
    calls: Vec<Call>,
}

/// A watch from "A after its first record" on a stream that rolls B over to D while it is
/// read, to its end: its events, the events expected, and the fake's log.
async fn read_through_rollover() -> Read {
    let fake = Fake::start(false).await;
    let (from, expected) = {
        let model = fake.model.lock().unwrap();
        (after_first_of_a(&model), model.expected_after_a(0))
    };
    let mut watch = fake.watch(from);
    let (ready, events) = ready_then(&mut watch, expected.len()).await;
    assert_quiet(&mut watch).await;
    drop(watch);
    Read {
        ready,
        events,
        expected,
        calls: fake.calls(),
    }
}

// ---- the tests

/// 1 and 3: from "A after record 1", every later change once, per key in stream order
/// (A's, then B's, then D's for `app/k1`), children read only after their parents, and D,
/// which the stream lists only once B has closed, found by the describe that follows B's
/// end.
#[tokio::test]
async fn a_watch_from_a_checkpoint_reads_every_change_once_across_rollovers() {
    let Read {
        events,
        expected,
        calls,
        ..
    } = read_through_rollover().await;
    let origins = check_events(&events, &expected);
    // The spanning key really spans: A, B, D.
    let k1: Vec<&str> = events
        .iter()
        .zip(&origins)
        .filter(|(e, _)| e.key() == Some(b"app/k1".as_slice()))
        .map(|(_, s)| name_of(s))
        .collect();
    assert_eq!(k1, ["A", "B", "B", "B", "D", "D", "D"]);

    assert_parents_first(&calls, BTreeSet::new());
    // A is read from right after its first record.
    assert!(
        calls
            .iter()
            .filter_map(|c| match c {
                Call::Records { shard: A, from, .. } => Some(*from),
                _ => None,
            })
            .all(|from| from >= 1),
        "{calls:#?}"
    );
    // Every child read; GetRecords paged.
    for shard in [A, B, C, D] {
        let pages = calls
            .iter()
            .filter(|c| matches!(c, Call::Records { shard: s, got, .. } if *s == shard && *got > 0))
            .count();
        assert!(
            pages >= 2 || shard == A,
            "shard {} read in {pages} pages:\n{calls:#?}",
            name_of(shard)
        );
    }
    // D was not listed at first; the describe that found it came right after B's end
    // (within the same round of polls), not from the 10 s refresh.
    let first_describe = calls
        .iter()
        .position(|c| matches!(c, Call::Describe(_)))
        .unwrap();
    let Call::Describe(first) = &calls[first_describe] else {
        unreachable!()
    };
    assert!(!first.contains(&D));
    let b_end = calls
        .iter()
        .position(|c| {
            matches!(
                c,
                Call::Records {
                    shard: B,
                    ended: true,
                    ..
                }
            )
        })
        .expect("B read to its end");
    // The first describe after B's end, all its pages.
    let describe = calls[b_end..]
        .iter()
        .position(|c| matches!(c, Call::Describe(_)))
        .expect("a describe after B's end")
        + b_end;
    let between = &calls[b_end + 1..describe];
    assert!(
        between.len() <= 1,
        "B's end should make the watcher describe the stream at once, not at its next refresh:\n{calls:#?}"
    );
    let found = describe
        + calls[describe..]
            .iter()
            .take_while(|c| matches!(c, Call::Describe(_)))
            .position(|c| matches!(c, Call::Describe(ids) if ids.contains(&D)))
            .expect("the describe after B's end lists D");
    assert_opened(&calls[found..], D, "AT_SEQUENCE_NUMBER");
}

/// 4: what each kind of record becomes, spelled out by hand.
#[tokio::test]
async fn records_become_puts_deletes_expiries_or_nothing() {
    let events = read_through_rollover().await.events;
    let of = |key: &str| -> Vec<String> {
        events
            .iter()
            .filter(|e| e.key() == Some(key.as_bytes()))
            .map(|e| match &e.kind {
                EventKind::Put(entry) => format!(
                    "put {}{}",
                    String::from_utf8_lossy(&entry.value),
                    if entry.expires.is_some() { " exp" } else { "" }
                ),
                EventKind::Deleted { .. } => "deleted".into(),
                EventKind::Expired { .. } => "expired".into(),
                EventKind::Ready => "ready".into(),
            })
            .collect()
    };
    // B: a put, a sweep's mark (nothing), the sweep's delete (expired), a put; D: a put, a
    // TTL delete (expired), a put. A's first record is before the checkpoint.
    assert_eq!(
        of("app/k1"),
        [
            "put v2",
            "put v3 exp",
            "expired",
            "put v4",
            "put v5",
            "expired",
            "put v6"
        ]
    );
    // A plain REMOVE is a delete.
    assert_eq!(of("app/k2"), ["put k2v1", "put k2v2", "deleted"]);
    assert_eq!(of("app/k4"), ["put k4v1", "deleted", "put k4v2"]);
    // Counters (in folders `` and `app/`) are no keys.
    assert_eq!(of("app/sub/k3"), ["put k3v1", "put k3v2"]);
    // Outside the prefix, or in another namespace: nothing.
    assert!(
        events
            .iter()
            .all(|e| e.key().is_some_and(|k| k.starts_with(PREFIX))),
        "{events:#?}"
    );
    assert_eq!(events.len(), 15, "{events:#?}");
    let expiry = events
        .iter()
        .find_map(|e| match &e.kind {
            EventKind::Put(entry) if entry.expires.is_some() => entry.expires,
            _ => None,
        })
        .unwrap();
    assert_eq!(
        expiry,
        SystemTime::UNIX_EPOCH + Duration::from_millis(EXPIRES_MS)
    );
}

/// 2: stopped after any event (or right after Ready) and resumed from that event's
/// checkpoint, a watch yields the rest exactly once: across A -> B/C and B -> D too.
#[tokio::test]
async fn resuming_after_any_event_yields_the_rest_exactly_once() {
    let Read {
        ready,
        events,
        expected,
        ..
    } = read_through_rollover().await;
    let origins = check_events(&events, &expected);
    // Resume from Ready's checkpoint (cut 0: nothing handed out yet) and from each event's.
    let checkpoints: Vec<Checkpoint> = std::iter::once(&ready)
        .chain(&events)
        .map(|e| e.checkpoint.clone())
        .collect();
    let runs = checkpoints.iter().enumerate().map(|(cut, from)| {
        let rest: Vec<Expected> = events[cut..]
            .iter()
            .zip(&origins[cut..])
            .map(|(e, s)| Expected {
                shard: s,
                kind: e.kind.clone(),
            })
            .collect();
        async move {
            // The world has moved on: B is closed and D listed from the first describe.
            let fake = Fake::start(true).await;
            let mut watch = fake.watch(from.clone());
            let (_, got) = ready_then(&mut watch, rest.len()).await;
            assert_quiet(&mut watch).await;
            drop(watch);
            check_events(&got, &rest);
            assert_parents_first(&fake.calls(), finished_in(from));
        }
    });
    futures::future::join_all(runs).await;
}

/// 2, on one stream that rolls over while the watch is stopped and resumed again and
/// again: the events of all the watches together are the stream's, each once.
#[tokio::test]
async fn a_watch_stopped_and_resumed_again_and_again_loses_and_repeats_nothing() {
    let fake = Fake::start(false).await;
    let (mut from, expected) = {
        let model = fake.model.lock().unwrap();
        (after_first_of_a(&model), model.expected_after_a(0))
    };
    let mut all = Vec::new();
    for take in [1usize, 2, 1, 3, 1, 2, 1, 1, 2, 1].into_iter().cycle() {
        let take = take.min(expected.len() - all.len());
        let mut watch = fake.watch(from.clone());
        let (_, got) = ready_then(&mut watch, take).await;
        if all.len() + take == expected.len() {
            assert_quiet(&mut watch).await;
        }
        drop(watch);
        if let Some(last) = got.last() {
            from = last.checkpoint.clone();
        }
        all.extend(got);
        if all.len() == expected.len() {
            break;
        }
    }
    check_events(&all, &expected);
    // And a last resume finds nothing more.
    let mut watch = fake.watch(from);
    ready_then(&mut watch, 0).await;
    assert_quiet(&mut watch).await;
    // Across all the watches, children were read after their parents.
    assert_parents_first(&fake.calls(), BTreeSet::new());
}

/// 5: a checkpoint whose saved iterator has expired fails the watch with WatchLost: no
/// panic, no events, no fresh iterator for that shard, and the stream ends.
#[tokio::test]
async fn an_expired_iterator_on_resume_is_watch_lost() {
    let fake = Fake::start(true).await;
    let from = {
        let mut model = fake.model.lock().unwrap();
        // B's iterator from before: it is 15 minutes later now.
        let stale = model.iterator(B, 0, false);
        model.epoch += 1;
        checkpoint(
            json!({ B: {"iterator": stale}, C: {"after": model.seq(C, 0)} }),
            &[A],
        )
    };
    let mut watch = fake.watch(from);
    let mut items = Vec::new();
    loop {
        match tokio::time::timeout(WAIT, watch.next()).await {
            Err(_) => panic!("the watch neither failed nor ended: {items:?}"),
            Ok(None) => break,
            Ok(Some(item)) => items.push(item),
        }
    }
    let (last, before) = items.split_last().expect("the watch yielded nothing");
    assert!(
        matches!(last, Err(KvError::WatchLost { .. })),
        "the watch should end with WatchLost: {items:?}"
    );
    assert!(
        before
            .iter()
            .all(|i| matches!(i, Ok(e) if e.kind == EventKind::Ready)),
        "only Ready may come before the failure: {items:?}"
    );
    let calls = fake.calls();
    assert!(
        calls.iter().any(
            |c| matches!(c, Call::Refused { shard: B, code } if code == "ExpiredIteratorException")
        ),
        "{calls:#?}"
    );
    assert!(
        !calls
            .iter()
            .any(|c| matches!(c, Call::Iterator { shard: B, .. })),
        "no silent restart of B:\n{calls:#?}"
    );
}

/// Reads `watch` until it ends or fails (within [`WAIT`] each): what it yielded.
async fn to_the_end(watch: &mut Watch) -> Vec<Result<WatchEvent, KvError>> {
    let mut items = Vec::new();
    loop {
        match tokio::time::timeout(WAIT, watch.next()).await {
            Err(_) => panic!("the watch neither failed nor ended: {items:?}"),
            Ok(None) => return items,
            Ok(Some(item)) => items.push(item),
        }
    }
}

/// Asserts that `items` are at most Ready, then `WatchLost` naming `words`.
fn assert_lost(items: &[Result<WatchEvent, KvError>], words: &str) {
    let (last, before) = items.split_last().expect("the watch yielded nothing");
    match last {
        Err(KvError::WatchLost { problem }) => {
            assert!(problem.contains(words), "{problem}")
        }
        other => {
            panic!("the watch should end with WatchLost ({words}): {other:?} after {before:?}")
        }
    }
    assert!(
        before
            .iter()
            .all(|i| matches!(i, Ok(e) if e.kind == EventKind::Ready)),
        "no event may come before the failure: {items:?}"
    );
}

/// A checkpoint taken while a child shard had handed nothing out (C, adopted from its
/// start when A ended, behind B's first event), resumed after the stream trimmed C's first
/// record: the watch fails with `WatchLost`. Resumed "from the oldest record kept", as
/// such checkpoints once were, it went on from C's second record and lost the first in
/// silence.
#[tokio::test]
async fn a_child_shard_trimmed_before_the_resume_is_watch_lost() {
    let fake = Fake::start(false).await;
    let from = after_first_of_a(&fake.model.lock().unwrap());
    let mut watch = fake.watch(from);
    next(&mut watch).await;
    let mut checkpoint = None;
    while checkpoint.is_none() {
        let event = next(&mut watch).await;
        // The first event from B: C has handed nothing out yet.
        if matches!(&event.kind, EventKind::Put(e) if e.key == b"app/k1" && e.value == "v3") {
            checkpoint = Some(event.checkpoint);
        }
    }
    drop(watch);
    let checkpoint = checkpoint.unwrap();
    assert!(
        !checkpoint.as_str().contains("trim_horizon"),
        "C's place is kept as a sequence number: {}",
        checkpoint.as_str()
    );
    // A day later: C's first record is past the stream's 24 hours.
    fake.model.lock().unwrap().trimmed.insert(C, 1);
    let mut resumed = fake.watch(checkpoint);
    assert_lost(&to_the_end(&mut resumed).await, "24 hours");
}

/// The same for a checkpoint written by an earlier version (`trim_horizon` for a child
/// with nothing handed out): resumed at the shard's first sequence number as the stream
/// lists it, so that trimming is found.
#[tokio::test]
async fn an_earlier_versions_trim_horizon_checkpoint_finds_trimming_too() {
    let fake = Fake::start(true).await;
    let from = {
        let mut model = fake.model.lock().unwrap();
        model.trimmed.insert(C, 1);
        checkpoint(
            json!({ B: {"after": model.seq(B, 0)}, C: "trim_horizon" }),
            &[A],
        )
    };
    let mut watch = fake.watch(from);
    assert_lost(&to_the_end(&mut watch).await, "24 hours");
}

/// A checkpoint naming a shard the stream no longer has (DynamoDB drops a shard a day
/// after it closed) is `WatchLost`, not a raw DynamoDB error.
#[tokio::test]
async fn a_checkpoints_shard_gone_from_the_stream_is_watch_lost() {
    let fake = Fake::start(true).await;
    let gone = "shardId-00000001767225600000-0000000e";
    let from = checkpoint(json!({ gone: {"after": "5"} }), &[A, B, C, D]);
    let mut watch = fake.watch(from);
    assert_lost(&to_the_end(&mut watch).await, gone);
}

/// A checkpoint taken when A had been read to its end and no child of it was known yet,
/// resumed once the stream has dropped A and its child B (a day after B closed): D is
/// listed under B, a parent this watch never saw and whose records it never read. That
/// is `WatchLost`. (D was adopted from its first record: its events came out, and B's
/// were lost in silence. The review of the simulator's watches found it.)
#[tokio::test]
async fn a_shard_under_a_parent_the_watch_never_saw_is_watch_lost() {
    let fake = Fake::start(true).await;
    fake.model.lock().unwrap().dropped = vec![A, B];
    let from = checkpoint(json!({}), &[A]);
    let mut watch = fake.watch(from);
    assert_lost(&to_the_end(&mut watch).await, B);
}

/// A young iterator refused as trimmed (DynamoDB Local's answer for one taken while the
/// shard held nothing) makes the watcher read the shard from its oldest record, but on a
/// stream that keeps a day of records it must not hand out those from before the watch
/// began: here C's records are all from months ago, and a fresh watch stays quiet.
#[tokio::test]
async fn a_young_iterator_refused_as_trimmed_replays_nothing_old() {
    let fake = Fake::start(true).await;
    fake.model.lock().unwrap().refuse_young = Some(C);
    let mut watch = fake.kv().watch(PREFIX, None);
    ready_then(&mut watch, 0).await;
    // Until C has been read to its end from its oldest record, nothing may come.
    quiet_until_read_out(&mut watch, &fake, C).await;
    let calls = fake.calls();
    assert!(
        calls
            .iter()
            .any(|c| matches!(c, Call::Refused { shard: C, .. })),
        "the young iterator was never refused: the case was not run\n{calls:#?}"
    );
    assert_opened(&calls, C, "TRIM_HORIZON");
}

/// Checkpoints carry the frontier of the stream, not its day of closed shards: once A's
/// children and B's child are being read, A and B are done by lineage and left out (they
/// were carried in every checkpoint for a day: about 36 KB per event on a table of 100
/// partitions). A resume from such a checkpoint is checked by
/// `resuming_after_any_event_yields_the_rest_exactly_once`.
#[tokio::test]
async fn checkpoints_leave_out_shards_done_by_lineage() {
    let Read { events, .. } = read_through_rollover().await;
    let last = &events.last().unwrap().checkpoint;
    assert_eq!(done_in(last), BTreeSet::new(), "{}", last.as_str());
    let finished = finished_in(last);
    assert!(finished.contains(A) && finished.contains(B), "{finished:?}");
}

/// A consumer that stalls longer than an iterator lives, with the reader blocked on a full
/// buffer: a shard with nothing handed out yet (held by an iterator) is kept alive, and a
/// record written to it during the stall is delivered afterwards, with everything else.
/// With iterators left to expire, the watch ended with `WatchLost` though nothing was lost.
#[tokio::test]
async fn a_consumer_stalled_past_an_iterators_life_loses_nothing() {
    let life = Duration::from_millis(1500);
    let fake = Fake::start(true).await;
    let (from, bulk) = {
        let mut model = fake.model.lock().unwrap();
        model.iterator_life = Some(life);
        // More than the watch buffers, so that the reader blocks while the consumer stalls.
        let bulk = 400;
        for i in 0..bulk {
            model.append(C, write("INSERT", &format!("app/bulk/{i:03}"), "b", None));
        }
        let d_end = model.shard(D).unwrap().records.len();
        let from = checkpoint(
            json!({ C: {"after": model.seq(C, 4)}, D: {"iterator": model.iterator(D, d_end, false)} }),
            &[A, B],
        );
        (from, bulk)
    };
    let kv = fake.kv().with_watch_keep_alive(Duration::from_millis(300));
    let mut watch = kv.watch(PREFIX, Some(from));
    ready_then(&mut watch, 0).await;
    // The consumer stalls. Once the reader has fetched the page holding C's record past
    // what the watch buffers (256 events, from C's sixth record on), it is blocked on
    // sending it; then D gets a record, and the stall lasts twice an iterator's life.
    let deadline = tokio::time::Instant::now() + WAIT;
    let blocked = || {
        fake.calls().iter().any(
            |c| matches!(c, Call::Records { shard: C, from, got, .. } if *from + *got > 5 + 256),
        )
    };
    while !blocked() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "C was never read that far"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    fake.model
        .lock()
        .unwrap()
        .append(D, write("INSERT", "app/late", "during the stall", None));
    tokio::time::sleep(2 * life).await;
    let mut got = Vec::new();
    while got.len() < bulk + 1 {
        let item = tokio::time::timeout(WAIT, watch.next())
            .await
            .expect("no event")
            .expect("the watch ended");
        got.push(item.unwrap_or_else(|e| panic!("after {} events: {e}", got.len())));
    }
    assert!(got.iter().any(|e| e.key() == Some(b"app/late".as_slice())));
    assert_quiet(&mut watch).await;
    let calls = fake.calls();
    assert!(
        calls
            .iter()
            .any(|c| matches!(c, Call::Records { shard: D, .. })),
        "D was never read during the stall:\n{calls:#?}"
    );
}

/// DescribeStream refused for load more times in a row than the client retries is waited
/// out: the watch slows down and goes on, it does not end.
#[tokio::test]
async fn a_throttled_stream_description_slows_the_watch_down_and_no_more() {
    slowed_down_and_no_more(|model| model.throttle_describes = 12, "stream").await;
}

/// Resumes after A's first record with the calls `throttle` sets refused for load (more
/// than quick_retries' five attempts, twice over), and checks that every event comes
/// and that each refusal (logged as of `refused_as`) was waited out.
async fn slowed_down_and_no_more(throttle: impl FnOnce(&mut Model), refused_as: &str) {
    let fake = Fake::start(false).await;
    let (from, expected) = {
        let mut model = fake.model.lock().unwrap();
        throttle(&mut model);
        (after_first_of_a(&model), model.expected_after_a(0))
    };
    let mut watch = fake.watch(from);
    let (_, events) = ready_then(&mut watch, expected.len()).await;
    check_events(&events, &expected);
    let refused = fake
        .calls()
        .iter()
        .filter(|c| matches!(c, Call::Refused { shard, .. } if *shard == refused_as))
        .count();
    assert_eq!(refused, 12);
}

/// A fresh watch that finds a parent listed open beside its open child (DynamoDB Streams'
/// listing is eventually consistent) reads the child only once the parent has been read to
/// its end: the changes to one key come out in order. Both read at once, the parent's
/// third record came after the child's first.
#[tokio::test]
async fn a_fresh_watch_reads_a_child_listed_beside_its_open_parent_after_it() {
    let fake = Fake::start(true).await;
    fake.model.lock().unwrap().stale_a = true;
    let mut watch = fake.kv().watch(PREFIX, None);
    ready_then(&mut watch, 0).await;
    {
        let mut model = fake.model.lock().unwrap();
        for value in ["a1", "a2", "a3"] {
            model.append(A, write("MODIFY", "app/k2", value, None));
        }
        model.append(C, write("MODIFY", "app/k2", "c1", None));
    }
    let mut got = Vec::new();
    for _ in 0..4 {
        got.push(next(&mut watch).await);
    }
    let values: Vec<String> = got
        .iter()
        .map(|e| match &e.kind {
            EventKind::Put(entry) => String::from_utf8_lossy(&entry.value).into_owned(),
            other => format!("{other:?}"),
        })
        .collect();
    assert_eq!(values, ["a1", "a2", "a3", "c1"]);
    assert_quiet(&mut watch).await;
}

/// Waits (within [`WAIT`]) until `shard` has been read to its current end, failing on any
/// event meanwhile.
async fn quiet_until_read_out(watch: &mut Watch, fake: &Fake, shard: &'static str) {
    let len = fake
        .model
        .lock()
        .unwrap()
        .shard(shard)
        .unwrap()
        .records
        .len();
    let read_out = || {
        fake.calls().iter().any(
            |c| matches!(c, Call::Records { shard: s, from, .. } if *s == shard && *from >= len),
        )
    };
    let deadline = tokio::time::Instant::now() + WAIT;
    while !read_out() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{} was never read to its end",
            name_of(shard)
        );
        if let Ok(extra) = tokio::time::timeout(Duration::from_millis(50), watch.next()).await {
            panic!("a record from before the watch began: {extra:?}");
        }
    }
    // Whatever the shard's earlier pages made was sent before that last read.
    if let Ok(extra) = tokio::time::timeout(Duration::from_millis(10), watch.next()).await {
        panic!("a record from before the watch began: {extra:?}");
    }
}

/// A checkpoint taken while a shard is read again from its oldest record (its young
/// iterator refused as trimmed), before its old records have been passed over, holds the
/// refused iterator and the time the watch began: resumed, it passes over the same old
/// records. Holding the iterator at the oldest record instead, the resume handed a day of
/// old records out.
#[tokio::test]
async fn a_checkpoint_taken_while_passing_over_old_records_passes_over_them_again() {
    let fake = Fake::start(true).await;
    {
        let mut model = fake.model.lock().unwrap();
        model.refuse_young = Some(C);
        // C is read from its oldest record, then held there by throttling.
        model.hold_reads = Some(C);
    }
    let mut watch = fake.kv().watch(PREFIX, None);
    ready_then(&mut watch, 0).await;
    let held = || {
        fake.calls().iter().any(
            |c| matches!(c, Call::Refused { shard: C, code } if code == "LimitExceededException"),
        )
    };
    let deadline = tokio::time::Instant::now() + WAIT;
    while !held() {
        assert!(tokio::time::Instant::now() < deadline, "C was never held");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    fake.model
        .lock()
        .unwrap()
        .append(D, write("INSERT", "app/new", "n", None));
    let event = next(&mut watch).await;
    assert_eq!(event.key(), Some(b"app/new".as_slice()));
    drop(watch);
    assert!(
        json_of(&event.checkpoint)["since"].is_u64(),
        "{}",
        event.checkpoint.as_str()
    );
    fake.model.lock().unwrap().hold_reads = None;
    let mut resumed = fake.watch(event.checkpoint);
    ready_then(&mut resumed, 0).await;
    quiet_until_read_out(&mut resumed, &fake, C).await;
}

/// A checkpoint that left finished shards to lineage (A and B, ancestors of C and D) keeps
/// the lineage it relied on: resumed against a stale first listing that does not show D
/// yet, the watch still knows B is done, and hands nothing out again. Without the parents
/// in the checkpoint, B (and A) looked unread and were read again from their first
/// records.
#[tokio::test]
async fn a_resume_against_a_stale_listing_reads_no_finished_shard_again() {
    let Read { events, .. } = read_through_rollover().await;
    let last = events.last().unwrap().checkpoint.clone();
    assert_eq!(done_in(&last), BTreeSet::new(), "{}", last.as_str());
    let fake = Fake::start(true).await;
    // The first listing (all its pages) leaves D out.
    fake.model.lock().unwrap().hide = Some((D, 1));
    let mut watch = fake.watch(last);
    ready_then(&mut watch, 0).await;
    assert_quiet(&mut watch).await;
    let calls = fake.calls();
    assert!(
        !calls
            .iter()
            .any(|c| matches!(c, Call::Iterator { shard, .. } if *shard == A || *shard == B)),
        "a finished shard was read again:\n{calls:#?}"
    );
}

/// GetShardIterator refused for load more often than the client retries (AWS answers
/// `LimitExceededException` for it too): the watch waits and goes on, as it does for a
/// throttled DescribeStream. (It ended with the raw error once the client's retries ran
/// out: the review of the simulator's watches found it.)
#[tokio::test]
async fn a_throttled_shard_iterator_slows_the_watch_down_and_no_more() {
    slowed_down_and_no_more(|model| model.throttle_iterators = 12, "iterator").await;
}

/// A fresh watch whose first listing shows B closed but not yet its child D (a stale
/// listing) adopts D later; D's records from before the watch began (here all of them,
/// months old) are no events of this watch and are passed over. Adopted from its first
/// record, D handed them all out.
#[tokio::test]
async fn a_child_of_a_shard_closed_before_the_watch_hands_out_nothing_older() {
    let fake = Fake::start(true).await;
    fake.model.lock().unwrap().hide = Some((D, 1));
    let mut watch = fake.kv().watch(PREFIX, None);
    ready_then(&mut watch, 0).await;
    // D is found at the next listing (the watch's ten-second refresh), and read out.
    quiet_until_read_out(&mut watch, &fake, D).await;
    assert_opened(&fake.calls(), D, "TRIM_HORIZON");
}
