//! The table's DynamoDB Stream, as AWS keeps it and DynamoDB Local does not: shards that
//! roll over (closed, with one child or two splitting the keys), records trimmed 24 hours
//! after they were written, shards dropped 24 hours after they closed, iterators that
//! expire after 15 minutes, listings that lag behind (a new shard missing, a closed one
//! shown open), and reads refused for load. The table appends a record for every change
//! as GetItem sees it, in that order, so every item's records are in order within its
//! line of shards.

use std::time::Duration;

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use serde_json::{Map, Value, json};
use tokio::time::Instant;

use super::expr::Item;
use super::table::Key;

/// The stream's ARN.
pub const ARN: &str =
    "arn:aws:dynamodb:us-east-1:000000000000:table/kv/stream/2026-01-01T00:00:00.000";
/// How long records and closed shards are kept.
const KEPT: Duration = Duration::from_secs(24 * 3600);
/// How long an iterator is good for.
const ITERATOR_LIFE: Duration = Duration::from_secs(15 * 60);
/// How long a listing may lag behind.
const LISTING_LAG: Duration = Duration::from_millis(300);

/// One record of a shard.
struct Record {
    seq: u128,
    at: Instant,
    wall_ms: u64,
    key: Key,
    old: Option<Item>,
    new: Option<Item>,
    by_ttl: bool,
}

struct Shard {
    id: String,
    parent: Option<String>,
    /// The keys' hashes it holds: `lo..hi`.
    lo: u64,
    hi: u64,
    start: u128,
    created: Instant,
    closes: Instant,
    closed: Option<(Instant, u128)>,
    records: Vec<Record>,
}

impl Shard {
    /// The greatest sequence number trimmed from it by `now`, if any.
    fn trimmed_through(&self, now: Instant) -> Option<u128> {
        self.records
            .iter()
            .take_while(|r| r.at + KEPT <= now)
            .last()
            .map(|r| r.seq)
    }

    fn gone(&self, now: Instant) -> bool {
        self.closed.is_some_and(|(at, _)| at + KEPT <= now)
    }
}

/// A change to append: the item's key, its images, and whether TTL made it.
pub struct Appended<'a> {
    pub key: &'a Key,
    pub old: Option<&'a Item>,
    pub new: Option<&'a Item>,
    pub by_ttl: bool,
}

/// The stream.
pub struct Stream {
    origin: Instant,
    epoch_ms: u64,
    shards: Vec<Shard>,
    next_seq: u128,
    /// Reads refused for load, per request.
    throttle: f64,
    rng: StdRng,
    /// While the clients work, shards live 1 to 4 s, so that a run of a few seconds sees
    /// them roll over; otherwise 4 hours, as on AWS.
    busy: (Instant, Instant),
}

fn seq_str(seq: u128) -> String {
    format!("{seq:021}")
}

fn error(code: &str, message: &str) -> (u16, Value) {
    (
        400,
        json!({
            "__type": format!("com.amazonaws.dynamodb.v20120810#{code}"),
            "message": message,
        }),
    )
}

/// FNV-1a over the item's key: which shard of a line holds it.
fn hash(key: &Key) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in key.0.iter().chain([0xff].iter()).chain(key.1.iter()) {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

impl Stream {
    pub fn new(origin: Instant, epoch_ms: u64, throttle: f64, seed: u64) -> Self {
        let mut stream = Self {
            origin,
            epoch_ms,
            shards: Vec::new(),
            next_seq: 100,
            throttle,
            rng: StdRng::seed_from_u64(seed),
            busy: (origin, origin),
        };
        // Two lines of shards from the start.
        let half = u64::MAX / 2;
        stream.open_shard(None, 0, half);
        stream.open_shard(None, half, u64::MAX);
        stream
    }

    fn wall_ms(&self, at: Instant) -> u64 {
        self.epoch_ms + at.saturating_duration_since(self.origin).as_millis() as u64
    }

    /// When a shard opened now closes.
    fn closes(&mut self) -> Instant {
        let now = Instant::now();
        if now < self.busy.1 {
            now.max(self.busy.0) + Duration::from_millis(self.rng.random_range(1000..4000))
        } else {
            now + Duration::from_secs(4 * 3600)
        }
    }

    /// Shards roll over every 1 to 4 s from `from` until `until`.
    pub fn busy(&mut self, from: Instant, until: Instant) {
        self.busy = (from, until);
        for i in 0..self.shards.len() {
            if self.shards[i].closed.is_none() {
                self.shards[i].closes = self.closes();
            }
        }
    }

    fn open_shard(&mut self, parent: Option<String>, lo: u64, hi: u64) {
        let now = Instant::now();
        // The stream's first shards are two hours old (by their ids) when the run begins.
        let created_ms = match parent {
            Some(_) => self.wall_ms(now),
            None => self.wall_ms(now) - 2 * 3600 * 1000,
        };
        let id = format!("shardId-{created_ms:020}-{:08x}", self.rng.random::<u32>());
        let closes = self.closes();
        self.shards.push(Shard {
            id,
            parent,
            lo,
            hi,
            start: self.next_seq,
            created: now,
            closes,
            closed: None,
            records: Vec::new(),
        });
    }

    /// Closes every open shard past its life, each with one child, or two that split its
    /// keys.
    fn roll(&mut self) {
        let now = Instant::now();
        let due: Vec<usize> = (0..self.shards.len())
            .filter(|&i| self.shards[i].closed.is_none() && self.shards[i].closes <= now)
            .collect();
        for i in due {
            let last = self.shards[i]
                .records
                .last()
                .map_or(self.shards[i].start, |r| r.seq);
            self.shards[i].closed = Some((now, last));
            let (id, lo, hi) = (
                self.shards[i].id.clone(),
                self.shards[i].lo,
                self.shards[i].hi,
            );
            if hi - lo > 1 << 40 && self.rng.random_bool(0.3) {
                let mid = lo + (hi - lo) / 2;
                self.open_shard(Some(id.clone()), lo, mid);
                self.open_shard(Some(id), mid, hi);
            } else {
                self.open_shard(Some(id), lo, hi);
            }
        }
    }

    /// Appends the record of one change.
    pub fn append(&mut self, change: Appended<'_>) {
        if change.old.is_none() && change.new.is_none() {
            return;
        }
        self.roll();
        let h = hash(change.key);
        let now = Instant::now();
        let seq = self.next_seq;
        self.next_seq += 1 + u128::from(self.rng.random_range(0..3u8));
        let wall_ms = self.wall_ms(now);
        let Some(shard) = self
            .shards
            .iter_mut()
            .find(|s| s.closed.is_none() && s.lo <= h && h < s.hi)
        else {
            panic!("no open shard holds hash {h}");
        };
        shard.records.push(Record {
            seq,
            at: now,
            wall_ms,
            key: change.key.clone(),
            old: change.old.cloned(),
            new: change.new.cloned(),
            by_ttl: change.by_ttl,
        });
    }

    /// For a test that picks its moments: when shard `id` first held a record numbered
    /// `from` or above whose item `wanted` (by its key and images) wants, and when it
    /// closed, if it did.
    pub fn shard_times(
        &self,
        id: &str,
        from: u128,
        wanted: impl Fn(&Key, Option<&Item>, Option<&Item>) -> bool,
    ) -> (Option<Instant>, Option<Instant>) {
        let Some(shard) = self.shards.iter().find(|s| s.id == id) else {
            return (None, None);
        };
        let first = shard
            .records
            .iter()
            .find(|r| r.seq >= from && wanted(&r.key, r.old.as_ref(), r.new.as_ref()))
            .map(|r| r.at);
        (first, shard.closed.map(|(at, _)| at))
    }

    /// Answers one request of the Streams API (`op`), or `None` if it is not one.
    pub fn answer(&mut self, op: &str, request: &Map<String, Value>) -> Option<(u16, Value)> {
        if !matches!(op, "DescribeStream" | "GetShardIterator" | "GetRecords") {
            return None;
        }
        // Every Streams call can be refused for load.
        if self.throttle > 0.0 && self.rng.random_bool(self.throttle.min(1.0)) {
            return Some(error(
                "LimitExceededException",
                "Too many requests for this stream",
            ));
        }
        let answer = match op {
            "DescribeStream" => self.describe(),
            "GetShardIterator" => self.iterator(request),
            _ => self.records(request),
        };
        self.roll();
        Some(answer)
    }

    fn describe(&mut self) -> (u16, Value) {
        let now = Instant::now();
        // DescribeStream is eventually consistent: it may not show the newest shards yet,
        // and may show shards closed a moment ago as open (each on its own, so that a
        // child can be listed beside its parent shown open).
        let hides_new = self.rng.random_bool(0.3);
        let shows_open = self.rng.random_bool(0.3);
        let shards: Vec<Value> = self
            .shards
            .iter()
            .filter(|s| !s.gone(now))
            .filter(|s| !(hides_new && s.parent.is_some() && s.created + LISTING_LAG > now))
            .map(|s| {
                let mut range = json!({ "StartingSequenceNumber": seq_str(s.start) });
                if let Some((at, end)) = s.closed
                    && !(shows_open && at + LISTING_LAG > now)
                {
                    range["EndingSequenceNumber"] = json!(seq_str(end));
                }
                let mut shard = json!({ "ShardId": s.id, "SequenceNumberRange": range });
                if let Some(parent) = &s.parent {
                    shard["ParentShardId"] = json!(parent);
                }
                shard
            })
            .collect();
        (
            200,
            json!({ "StreamDescription": {
                "StreamArn": ARN,
                "StreamStatus": "ENABLED",
                "StreamViewType": "NEW_AND_OLD_IMAGES",
                "Shards": shards,
            }}),
        )
    }

    fn iterator(&self, request: &Map<String, Value>) -> (u16, Value) {
        let now = Instant::now();
        let id = request.get("ShardId").and_then(Value::as_str).unwrap_or("");
        let Some(shard) = self.shards.iter().find(|s| s.id == id && !s.gone(now)) else {
            return error(
                "ResourceNotFoundException",
                &format!("Requested resource not found: Shard: {id} in Stream: {ARN}"),
            );
        };
        let seq = request
            .get("SequenceNumber")
            .and_then(Value::as_str)
            .and_then(|n| n.parse::<u128>().ok());
        let trimmed = shard.trimmed_through(now);
        let kind = request
            .get("ShardIteratorType")
            .and_then(Value::as_str)
            .unwrap_or("");
        let trimmed_error = || {
            error(
                "TrimmedDataAccessException",
                "The requested sequence number is beyond the trim horizon",
            )
        };
        let from = match (kind, seq) {
            ("TRIM_HORIZON", _) => trimmed.map_or(shard.start, |t| t + 1),
            ("LATEST", _) => self.next_seq,
            ("AT_SEQUENCE_NUMBER", Some(n)) => {
                if trimmed.is_some_and(|t| t >= n) {
                    return trimmed_error();
                }
                n
            }
            ("AFTER_SEQUENCE_NUMBER", Some(n)) => {
                if trimmed.is_some_and(|t| t > n) {
                    return trimmed_error();
                }
                n + 1
            }
            _ => return error("ValidationException", "a bad iterator request"),
        };
        if from < shard.start && kind != "TRIM_HORIZON" {
            return error(
                "ValidationException",
                "Invalid SequenceNumber for the shard",
            );
        }
        let issued = now.saturating_duration_since(self.origin).as_nanos();
        (
            200,
            json!({ "ShardIterator": format!("it|{id}|{from}|{issued}") }),
        )
    }

    fn records(&self, request: &Map<String, Value>) -> (u16, Value) {
        let now = Instant::now();
        let iterator = request
            .get("ShardIterator")
            .and_then(Value::as_str)
            .unwrap_or("");
        let parts: Vec<&str> = iterator.split('|').collect();
        let (Some(id), Some(from), Some(issued)) = (
            parts.get(1),
            parts.get(2).and_then(|f| f.parse::<u128>().ok()),
            parts.get(3).and_then(|i| i.parse::<u64>().ok()),
        ) else {
            return error("ValidationException", "not an iterator of this stream");
        };
        if self.origin + Duration::from_nanos(issued) + ITERATOR_LIFE <= now {
            return error(
                "ExpiredIteratorException",
                "Iterator expired. The iterator was created at time ... while right now it is ...",
            );
        }
        let Some(shard) = self.shards.iter().find(|s| s.id == *id && !s.gone(now)) else {
            return error("ResourceNotFoundException", "Requested resource not found");
        };
        if shard.trimmed_through(now).is_some_and(|t| t >= from) {
            return error(
                "TrimmedDataAccessException",
                "The operation attempted to read past the oldest stream record in a shard",
            );
        }
        let limit = request
            .get("Limit")
            .and_then(Value::as_u64)
            .unwrap_or(1000)
            .min(1000) as usize;
        let page: Vec<&Record> = shard
            .records
            .iter()
            .filter(|r| r.seq >= from)
            .take(limit)
            .collect();
        let next_from = page.last().map_or(from, |r| r.seq + 1);
        let read_out = shard
            .closed
            .is_some_and(|_| !shard.records.iter().any(|r| r.seq >= next_from));
        let records: Vec<Value> = page.iter().map(|r| record_json(r)).collect();
        let mut body = json!({ "Records": records });
        if !read_out {
            let issued = now.saturating_duration_since(self.origin).as_nanos();
            body["NextShardIterator"] = json!(format!("it|{id}|{next_from}|{issued}"));
        }
        (200, body)
    }
}

fn record_json(r: &Record) -> Value {
    use base64::Engine;
    use base64::engine::general_purpose::STANDARD as BASE64;
    let name = match (&r.old, &r.new) {
        (None, _) => "INSERT",
        (Some(_), Some(_)) => "MODIFY",
        (Some(_), None) => "REMOVE",
    };
    let mut body = json!({
        "ApproximateCreationDateTime": r.wall_ms as f64 / 1000.0,
        "Keys": {
            "pk": { "B": BASE64.encode(&r.key.0) },
            "sk": { "B": BASE64.encode(&r.key.1) },
        },
        "SequenceNumber": seq_str(r.seq),
        "SizeBytes": 100,
        "StreamViewType": "NEW_AND_OLD_IMAGES",
    });
    if let Some(old) = &r.old {
        body["OldImage"] = Value::Object(old.clone());
    }
    if let Some(new) = &r.new {
        body["NewImage"] = Value::Object(new.clone());
    }
    let mut record = json!({
        "eventID": format!("e{}", r.seq),
        "eventName": name,
        "eventVersion": "1.1",
        "eventSource": "aws:dynamodb",
        "awsRegion": "us-east-1",
        "dynamodb": body,
    });
    if r.by_ttl {
        record["userIdentity"] =
            json!({ "type": "Service", "principalId": "dynamodb.amazonaws.com" });
    }
    record
}

/// The table's description, with its stream.
pub fn describe_table() -> Value {
    json!({ "Table": {
        "TableName": "kv",
        "TableStatus": "ACTIVE",
        "KeySchema": [
            { "AttributeName": "pk", "KeyType": "HASH" },
            { "AttributeName": "sk", "KeyType": "RANGE" },
        ],
        "AttributeDefinitions": [
            { "AttributeName": "pk", "AttributeType": "B" },
            { "AttributeName": "sk", "AttributeType": "B" },
        ],
        "StreamSpecification": { "StreamEnabled": true, "StreamViewType": "NEW_AND_OLD_IMAGES" },
        "LatestStreamArn": ARN,
    }})
}
