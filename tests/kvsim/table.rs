//! A DynamoDB table in process that answers as AWS does where DynamoDB Local does not:
//! writes to an item inside a transaction in flight are refused with
//! `TransactionConflictException`; a transaction meeting another is cancelled with the
//! reason `TransactionConflict`; throttling comes as a top-level error and as the
//! cancellation reasons `ThrottlingError`; a transaction's items become visible to Query
//! and BatchGetItem one by one (read-committed) while GetItem sees it whole
//! (serializable); writes apply with their answer lost, or after their caller gave up;
//! reads stall past the client's timeout with an old answer; TTL deletes expired items at
//! random moments, between the pages of a walk. It speaks the JSON protocol through the
//! client's [`Transport`] seam, so the real [`DynamoKv`] runs over it unchanged.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use bytes::Bytes;
use dynacommit::dynamo::Transport;
use futures::future::BoxFuture;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use serde_json::{Map, Value, json};
use tokio::sync::oneshot;
use tokio::time::Instant;

use super::expr::{self, Item, Names};
use super::stream::{self, Appended, Stream};

/// An item's place: partition and sort key bytes.
pub type Key = (Vec<u8>, Vec<u8>);

/// The wall clock's reading at the start of every simulation (the clocks' epoch,
/// 2026-01-01), in ms.
pub const EPOCH_MS: u64 = super::clock::EPOCH.as_millis() as u64;

/// How often each fault happens, per request.
#[derive(Debug, Clone)]
pub struct Faults {
    /// Refused as throttled (nothing applied).
    pub throttle: f64,
    /// A single-item write that starts a burst of throttling on its partition, for 5 to
    /// 60 ms: AWS throttles a hot partition for a while, not one request in isolation.
    pub throttle_burst: f64,
    /// A transaction cancelled with `ThrottlingError` on one item (nothing applied).
    pub cancel_throttled: f64,
    /// A 500 (nothing applied; the client cannot know).
    pub server_error: f64,
    /// A write applied, its answer lost.
    pub lost_answer: f64,
    /// A write answered with no answer at once, applied up to a second later.
    pub late_apply: f64,
    /// A read answered up to 1.5 s late (past the client's timeout) with what it read.
    pub stall: f64,
    /// How long each item of a transaction takes to apply, at most.
    pub transaction_item_time: Duration,
}

impl Faults {
    /// No faults: only AWS's own answers to contention (transaction conflicts), and
    /// transactions whose items take up to `transaction_item_time` each. (For
    /// `benches/kv_hot_folder.rs`; the tests draw their faults.)
    #[allow(dead_code)]
    pub fn calm(transaction_item_time: Duration) -> Self {
        Self {
            throttle: 0.0,
            throttle_burst: 0.0,
            cancel_throttled: 0.0,
            server_error: 0.0,
            lost_answer: 0.0,
            late_apply: 0.0,
            stall: 0.0,
            transaction_item_time,
        }
    }

    /// A profile drawn from `rng`: calm seeds and stormy ones.
    pub fn draw(rng: &mut StdRng) -> Self {
        let storm = rng.random_bool(0.5);
        let p = |rng: &mut StdRng, max: f64| {
            if storm {
                rng.random_range(0.0..max)
            } else {
                max / 10.0
            }
        };
        Self {
            throttle: p(rng, 0.15),
            throttle_burst: p(rng, 0.05),
            cancel_throttled: p(rng, 0.15),
            server_error: p(rng, 0.05),
            lost_answer: p(rng, 0.05),
            late_apply: p(rng, 0.05),
            stall: p(rng, 0.05),
            transaction_item_time: Duration::from_millis(rng.random_range(1..20)),
        }
    }
}

/// One change to an item that a caller could see: for the checks.
#[derive(Debug, Clone)]
pub struct Change {
    pub at: Instant,
    pub key: Key,
    pub item: Option<Item>,
    /// A removal by DynamoDB's TTL.
    pub by_ttl: bool,
}

#[derive(Default)]
struct State {
    /// What GetItem sees: every transaction whole or not at all.
    items: BTreeMap<Key, Item>,
    /// What Query and BatchGetItem see on top of `items`: the items of transactions in
    /// flight already applied (`None`: deleted).
    partial: BTreeMap<Key, Option<Item>>,
    /// The items of transactions in flight.
    locked: BTreeSet<Key>,
    /// Transactions by idempotency token: done or in flight, and the items sent.
    tokens: HashMap<String, (bool, Value)>,
    /// Every change as Query sees it: a transaction's items one by one as they land.
    changes: Vec<Change>,
    /// Every change as GetItem sees it: a transaction's items all at its end.
    commits: Vec<Change>,
    /// The table's stream, a record for each of `commits`.
    stream: Option<Stream>,
}

/// The table, shared by every client's transport.
pub struct FakeTable {
    state: Mutex<State>,
    rng: Mutex<StdRng>,
    faults: Faults,
    origin: Instant,
    /// Requests answered, by operation.
    pub counts: Mutex<BTreeMap<String, u64>>,
    /// Transactions cancelled because another in flight held one of their items.
    pub conflicts: std::sync::atomic::AtomicU64,
    /// Partitions throttled until a moment ([`Faults::throttle_burst`]).
    bursts: Mutex<HashMap<Vec<u8>, Instant>>,
    /// A stall for the next Query, set by a test that scripts one.
    stall_next_query: Mutex<Option<Duration>>,
    /// How long each of the next transactions waits before it is checked and applied,
    /// set by a test that scripts them.
    hold_next_transactions: Mutex<std::collections::VecDeque<Duration>>,
}

/// What a request gets back.
type Answer = Result<(u16, Bytes), String>;

fn ok(body: Value) -> Answer {
    Ok((200, Bytes::from(body.to_string())))
}

fn error(status: u16, code: &str, message: &str) -> Answer {
    let body = json!({
        "__type": format!("com.amazonaws.dynamodb.v20120810#{code}"),
        "message": message,
    });
    Ok((status, Bytes::from(body.to_string())))
}

fn error_with(status: u16, code: &str, mut extra: Map<String, Value>) -> Answer {
    extra.insert(
        "__type".into(),
        json!(format!("com.amazonaws.dynamodb.v20120810#{code}")),
    );
    Ok((status, Bytes::from(Value::Object(extra).to_string())))
}

fn throttled() -> Answer {
    error(
        400,
        "ThrottlingException",
        "Throughput exceeds the current capacity of your table or index.",
    )
}

/// How one write goes.
#[derive(Debug, Clone, Copy)]
enum Fate {
    Normal,
    Throttled,
    ServerError,
    LostAnswer,
    LateApply(Duration),
}

impl FakeTable {
    pub fn new(seed: u64, faults: Faults) -> Arc<Self> {
        let stream = Stream::new(
            Instant::now(),
            EPOCH_MS,
            faults.throttle / 2.0,
            seed ^ 0x5eed,
        );
        Arc::new(Self {
            state: Mutex::new(State {
                stream: Some(stream),
                ..State::default()
            }),
            rng: Mutex::new(StdRng::seed_from_u64(seed)),
            faults,
            origin: Instant::now(),
            counts: Mutex::default(),
            conflicts: Default::default(),
            bursts: Mutex::default(),
            stall_next_query: Mutex::default(),
            hold_next_transactions: Mutex::default(),
        })
    }

    /// The wall clock, in ms since the epoch.
    pub fn wall_ms(&self) -> u64 {
        EPOCH_MS + self.origin.elapsed().as_millis() as u64
    }

    /// How long after the table's start `at` is, as its traces show it.
    pub fn since_start(&self, at: Instant) -> Duration {
        at.saturating_duration_since(self.origin)
    }

    /// The wall clock's reading at `at`.
    pub fn wall_ms_at(&self, at: Instant) -> u64 {
        EPOCH_MS + at.saturating_duration_since(self.origin).as_millis() as u64
    }

    fn chance(&self, p: f64) -> bool {
        p > 0.0 && self.rng.lock().unwrap().random_bool(p.min(1.0))
    }

    fn pick(&self, range: std::ops::Range<u64>) -> u64 {
        self.rng.lock().unwrap().random_range(range)
    }

    /// Makes each of the next transactions wait the given time before it is checked and
    /// applied, in the order they arrive (for a scripted test).
    #[allow(dead_code)]
    pub fn hold_next_transactions(&self, holds: &[Duration]) {
        self.hold_next_transactions.lock().unwrap().extend(holds);
    }

    /// Makes the next Query answer `stall` after it read (for a scripted test).
    #[allow(dead_code)]
    pub fn stall_next_query(&self, stall: Duration) {
        *self.stall_next_query.lock().unwrap() = Some(stall);
    }

    /// Runs `f` over the table's stream (for a test that scripts it or picks its
    /// moments by it).
    pub fn stream<T>(&self, f: impl FnOnce(&mut Stream) -> T) -> Option<T> {
        self.state.lock().unwrap().stream.as_mut().map(f)
    }

    /// Every change so far, as Query saw it and as GetItem saw it.
    pub fn changes(&self) -> (Vec<Change>, Vec<Change>) {
        let state = self.state.lock().unwrap();
        (state.changes.clone(), state.commits.clone())
    }

    /// DynamoDB's TTL: until `until`, every so often deletes some items whose `ttl` (epoch
    /// seconds) has passed, outside transactions in flight.
    pub async fn sweep_ttl(self: Arc<Self>, until: Instant) {
        while Instant::now() < until {
            tokio::time::sleep(Duration::from_millis(20 + self.pick(0..300))).await;
            let now_s = self.wall_ms() / 1000;
            let expired: Vec<Key> = {
                let state = self.state.lock().unwrap();
                state
                    .items
                    .iter()
                    .filter(|(k, item)| {
                        !state.locked.contains(*k)
                            && item
                                .get("ttl")
                                .and_then(|v| v.get("N"))
                                .and_then(Value::as_str)
                                .and_then(|n| n.parse::<u64>().ok())
                                .is_some_and(|ttl| ttl < now_s)
                    })
                    .map(|(k, _)| k.clone())
                    .collect()
            };
            for key in expired {
                if self.chance(0.4) {
                    let mut state = self.state.lock().unwrap();
                    if !state.locked.contains(&key) {
                        set(&mut state, &key, None, true);
                    }
                }
            }
        }
    }

    /// Answers one request on a task of its own, as a server would: the caller may stop
    /// waiting (its timeout), the work goes on.
    fn serve(self: Arc<Self>, target: String, body: Bytes) -> BoxFuture<'static, Answer> {
        let (tx, rx) = oneshot::channel();
        tokio::spawn(async move {
            // The request's way there.
            tokio::time::sleep(Duration::from_micros(self.pick(200..2000))).await;
            let op = target.rsplit('.').next().unwrap_or_default().to_owned();
            *self.counts.lock().unwrap().entry(op.clone()).or_default() += 1;
            let request: Map<String, Value> = match serde_json::from_slice(&body) {
                Ok(Value::Object(m)) => m,
                _ => {
                    let _ = tx.send(error(400, "SerializationException", "not a JSON object"));
                    return;
                }
            };
            let answer = match op.as_str() {
                "GetItem" | "BatchGetItem" | "Query" => self.read(&op, &request).await,
                "DescribeTable" => ok(stream::describe_table()),
                "DescribeStream" | "GetShardIterator" | "GetRecords" => {
                    let mut state = self.state.lock().unwrap();
                    match state.stream.as_mut().and_then(|s| s.answer(&op, &request)) {
                        Some((status, body)) => Ok((status, Bytes::from(body.to_string()))),
                        None => error(400, "ResourceNotFoundException", "no stream"),
                    }
                }
                "PutItem" | "UpdateItem" | "DeleteItem" => {
                    let key = request.get(if op == "PutItem" { "Item" } else { "Key" });
                    let partition = key_of(key).ok().map(|(pk, _)| pk);
                    self.write(
                        &op.clone(),
                        &body,
                        partition,
                        |table, fate| {
                            let request = request.clone();
                            let op = op.clone();
                            Box::pin(async move { table.single_write(&op, &request, fate) })
                        },
                        tx,
                    )
                    .await;
                    return;
                }
                "TransactWriteItems" => {
                    let request = request.clone();
                    self.write(
                        "TransactWriteItems",
                        &body,
                        None,
                        move |table, _fate| Box::pin(async move { table.transact(&request).await }),
                        tx,
                    )
                    .await;
                    return;
                }
                other => error(
                    400,
                    "UnknownOperationException",
                    &format!("the fake has no {other}"),
                ),
            };
            // The answer's way back.
            tokio::time::sleep(Duration::from_micros(self.pick(200..2000))).await;
            self.trace(&op, &body, &answer);
            let _ = tx.send(answer);
        });
        Box::pin(async move {
            rx.await
                .unwrap_or_else(|_| Err("the fake dropped the request".into()))
        })
    }

    /// With `DYNACOMMIT_KV_SIM_TRACE` set, prints a request and its answer.
    fn trace(&self, op: &str, body: &[u8], answer: &Answer) {
        if std::env::var_os("DYNACOMMIT_KV_SIM_TRACE").is_some() {
            let answer = match answer {
                Ok((status, body)) => format!("{status} {}", String::from_utf8_lossy(body)),
                Err(e) => format!("no answer: {e}"),
            };
            eprintln!(
                "{:?} {op} {}\n    -> {answer}",
                self.origin.elapsed(),
                String::from_utf8_lossy(body)
            );
        }
    }

    /// Runs a write through its fate: refused, applied and answered, applied with the
    /// answer lost, or answered at once and applied later.
    async fn write<F>(
        self: &Arc<Self>,
        op: &str,
        body: &[u8],
        partition: Option<Vec<u8>>,
        apply: F,
        tx: oneshot::Sender<Answer>,
    ) where
        F: FnOnce(Arc<Self>, Fate) -> BoxFuture<'static, Answer>,
    {
        let f = &self.faults;
        let fate = if partition.is_some_and(|p| self.in_burst(p)) || self.chance(f.throttle) {
            Fate::Throttled
        } else if self.chance(f.server_error) {
            Fate::ServerError
        } else if self.chance(f.lost_answer) {
            Fate::LostAnswer
        } else if self.chance(f.late_apply) {
            Fate::LateApply(Duration::from_millis(self.pick(1..1000)))
        } else {
            Fate::Normal
        };
        match fate {
            Fate::Throttled => {
                self.trace(&format!("{op} (throttled)"), body, &throttled());
                let _ = tx.send(throttled());
            }
            Fate::ServerError => {
                // A 500 may come before the write applied or after it.
                if self.chance(0.5) {
                    let _ = apply(self.clone(), fate).await;
                }
                let answer = error(500, "InternalServerError", "Internal server error");
                self.trace(&format!("{op} (500)"), body, &answer);
                let _ = tx.send(answer);
            }
            Fate::LateApply(after) => {
                let _ = tx.send(Err("connection reset before the answer".into()));
                tokio::time::sleep(after).await;
                let answer = apply(self.clone(), fate).await;
                self.trace(&format!("{op} (late)"), body, &answer);
            }
            Fate::LostAnswer => {
                let answer = apply(self.clone(), fate).await;
                self.trace(&format!("{op} (answer lost)"), body, &answer);
                let _ = tx.send(Err("connection reset after the request".into()));
            }
            Fate::Normal => {
                let answer = apply(self.clone(), fate).await;
                self.trace(op, body, &answer);
                tokio::time::sleep(Duration::from_micros(self.pick(200..2000))).await;
                let _ = tx.send(answer);
            }
        }
    }

    /// Whether a single-item write to `partition` is throttled by a burst, in one or
    /// starting now.
    fn in_burst(&self, partition: Vec<u8>) -> bool {
        let now = Instant::now();
        if self
            .bursts
            .lock()
            .unwrap()
            .get(&partition)
            .is_some_and(|until| *until > now)
        {
            return true;
        }
        if !self.chance(self.faults.throttle_burst) {
            return false;
        }
        let until = now + Duration::from_millis(self.pick(5..60));
        self.bursts.lock().unwrap().insert(partition, until);
        true
    }

    async fn read(&self, op: &str, request: &Map<String, Value>) -> Answer {
        if self.chance(self.faults.throttle) {
            return throttled();
        }
        if self.chance(self.faults.server_error) {
            return error(500, "InternalServerError", "Internal server error");
        }
        let consistent = match op {
            "BatchGetItem" => request
                .get("RequestItems")
                .and_then(Value::as_object)
                .is_some_and(|t| {
                    t.values()
                        .all(|k| k.get("ConsistentRead") == Some(&Value::Bool(true)))
                }),
            _ => request.get("ConsistentRead") == Some(&Value::Bool(true)),
        };
        if !consistent {
            // Every read of the store must be consistent: the fake serves no other.
            return error(
                400,
                "ValidationException",
                "the simulator serves consistent reads only",
            );
        }
        let answer = {
            let state = self.state.lock().unwrap();
            match op {
                "GetItem" => get_item(&state, request),
                "BatchGetItem" => batch_get(&state, request, &mut self.rng.lock().unwrap()),
                _ => query(&state, request, self.pick(1..5) as usize),
            }
        };
        let scripted = match op {
            "Query" => self.stall_next_query.lock().unwrap().take(),
            _ => None,
        };
        if let Some(stall) = scripted {
            tokio::time::sleep(stall).await;
        } else if self.chance(self.faults.stall) {
            tokio::time::sleep(Duration::from_millis(self.pick(100..1500))).await;
        }
        answer
    }

    fn single_write(&self, op: &str, request: &Map<String, Value>, _fate: Fate) -> Answer {
        let mut state = self.state.lock().unwrap();
        let names = names(request);
        let key = match key_of(request.get(if op == "PutItem" { "Item" } else { "Key" })) {
            Ok(k) => k,
            Err(e) => return error(400, "ValidationException", &e),
        };
        if state.locked.contains(&key) {
            return error(
                400,
                "TransactionConflictException",
                "Transaction is ongoing for the item",
            );
        }
        let old = state.items.get(&key).cloned();
        if let Some(condition) = request.get("ConditionExpression").and_then(Value::as_str) {
            match expr::holds(condition, &names, old.as_ref()) {
                Ok(true) => {}
                Ok(false) => return condition_failed(request, old),
                Err(e) => return error(400, "ValidationException", &e),
            }
        }
        let new = match op {
            "PutItem" => request.get("Item").and_then(Value::as_object).cloned(),
            "DeleteItem" => None,
            _ => {
                let mut item = old.clone().unwrap_or_else(|| key_item(request));
                let update = request
                    .get("UpdateExpression")
                    .and_then(Value::as_str)
                    .unwrap_or("");
                if let Err(e) = expr::apply_update(update, &names, &mut item) {
                    return error(400, "ValidationException", &e);
                }
                Some(item)
            }
        };
        set(&mut state, &key, new.clone(), false);
        let attributes = match request.get("ReturnValues").and_then(Value::as_str) {
            Some("ALL_OLD") => old,
            Some("ALL_NEW") => new,
            _ => None,
        };
        ok(match attributes {
            Some(a) => json!({ "Attributes": a }),
            None => json!({}),
        })
    }

    /// TransactWriteItems: the conditions checked at once over the items as GetItem sees
    /// them, the items locked, written one by one (each visible to Query as written), then
    /// the whole visible to GetItem.
    async fn transact(self: Arc<Self>, request: &Map<String, Value>) -> Answer {
        let held = self.hold_next_transactions.lock().unwrap().pop_front();
        if let Some(hold) = held {
            tokio::time::sleep(hold).await;
        }
        let items = request
            .get("TransactItems")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let token = request
            .get("ClientRequestToken")
            .and_then(Value::as_str)
            .map(str::to_owned);
        if items.is_empty() || items.len() > 100 {
            return error(400, "ValidationException", "1 to 100 TransactItems");
        }
        // (kind, the request, its key)
        let mut steps = Vec::new();
        for item in &items {
            let Some((kind, body)) = item.as_object().and_then(|o| o.iter().next()) else {
                return error(400, "ValidationException", "an empty TransactItem");
            };
            let Some(body) = body.as_object() else {
                return error(400, "ValidationException", "a TransactItem not an object");
            };
            let key = match key_of(body.get(if kind == "Put" { "Item" } else { "Key" })) {
                Ok(k) => k,
                Err(e) => return error(400, "ValidationException", &e),
            };
            if steps
                .iter()
                .any(|(_, _, k): &(String, Map<String, Value>, Key)| *k == key)
            {
                return error(
                    400,
                    "ValidationException",
                    "Transaction request cannot include multiple operations on one item",
                );
            }
            steps.push((kind.clone(), body.clone(), key));
        }
        let reasons_with = |at: usize, reason: Value| {
            let reasons: Vec<Value> = (0..steps.len())
                .map(|i| {
                    if i == at {
                        reason.clone()
                    } else {
                        json!({ "Code": "None" })
                    }
                })
                .collect();
            let codes: Vec<&str> = reasons
                .iter()
                .map(|r| r["Code"].as_str().unwrap_or("None"))
                .collect();
            let mut body = Map::new();
            body.insert(
                "Message".into(),
                json!(format!(
                    "Transaction cancelled, please refer cancellation reasons for specific reasons [{}]",
                    codes.join(", ")
                )),
            );
            body.insert("CancellationReasons".into(), Value::Array(reasons));
            error_with(400, "TransactionCanceledException", body)
        };
        {
            let mut state = self.state.lock().unwrap();
            if let Some(token) = &token {
                let sent = request.get("TransactItems").cloned().unwrap_or_default();
                match state.tokens.get(token) {
                    Some((_, earlier)) if *earlier != sent => {
                        return error(
                            400,
                            "IdempotentParameterMismatchException",
                            "The request uses the same client token as a previous, but non-identical request",
                        );
                    }
                    Some((true, _)) => return ok(json!({})),
                    Some((false, _)) => {
                        return error(
                            400,
                            "TransactionInProgressException",
                            "Transaction with the same client request token is in progress",
                        );
                    }
                    None => {}
                }
            }
            if self.chance(self.faults.cancel_throttled) {
                let at = self.pick(0..steps.len() as u64) as usize;
                return reasons_with(
                    at,
                    json!({ "Code": "ThrottlingError", "Message": "Throughput exceeds the current capacity for one or more global secondary indexes." }),
                );
            }
            for (i, (_, _, key)) in steps.iter().enumerate() {
                if state.locked.contains(key) {
                    self.conflicts
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    return reasons_with(
                        i,
                        json!({ "Code": "TransactionConflict", "Message": "Transaction is ongoing for the item" }),
                    );
                }
            }
            for (i, (_, body, key)) in steps.iter().enumerate() {
                let Some(condition) = body.get("ConditionExpression").and_then(Value::as_str)
                else {
                    continue;
                };
                let old = state.items.get(key);
                match expr::holds(condition, &names(body), old) {
                    Ok(true) => {}
                    Ok(false) => {
                        let mut reason = json!({ "Code": "ConditionalCheckFailed", "Message": "The conditional request failed" });
                        if body
                            .get("ReturnValuesOnConditionCheckFailure")
                            .and_then(Value::as_str)
                            == Some("ALL_OLD")
                            && let Some(old) = old
                        {
                            reason["Item"] = Value::Object(old.clone());
                        }
                        return reasons_with(i, reason);
                    }
                    Err(e) => return error(400, "ValidationException", &e),
                }
            }
            for (_, _, key) in &steps {
                state.locked.insert(key.clone());
            }
            if let Some(token) = &token {
                let sent = request.get("TransactItems").cloned().unwrap_or_default();
                state.tokens.insert(token.clone(), (false, sent));
            }
        }
        // Phase two: each item written on its own, visible to Query as it lands.
        let mut written = Vec::new();
        for (kind, body, key) in &steps {
            let pause = self.pick(0..self.faults.transaction_item_time.as_micros() as u64 + 1);
            tokio::time::sleep(Duration::from_micros(pause)).await;
            let mut state = self.state.lock().unwrap();
            let old = state.items.get(key).cloned();
            let new = match kind.as_str() {
                "ConditionCheck" => continue,
                "Put" => body.get("Item").and_then(Value::as_object).cloned(),
                "Delete" => None,
                _ => {
                    let mut item = old.unwrap_or_else(|| key_item(body));
                    let update = body
                        .get("UpdateExpression")
                        .and_then(Value::as_str)
                        .unwrap_or("");
                    if let Err(e) = expr::apply_update(update, &names(body), &mut item) {
                        // Checked nowhere before: a malformed update is the caller's bug.
                        panic!("a transaction's update failed after its conditions held: {e}");
                    }
                    Some(item)
                }
            };
            state.partial.insert(key.clone(), new.clone());
            let at = Instant::now();
            state.changes.push(Change {
                at,
                key: key.clone(),
                item: new.clone(),
                by_ttl: false,
            });
            written.push((key.clone(), new));
        }
        let mut state = self.state.lock().unwrap();
        let at = Instant::now();
        for (key, new) in written {
            state.partial.remove(&key);
            commit(&mut state, &key, new, at, false);
        }
        for (_, _, key) in &steps {
            state.locked.remove(key);
        }
        if let Some(token) = token
            && let Some(entry) = state.tokens.get_mut(&token)
        {
            entry.0 = true;
        }
        ok(json!({}))
    }
}

/// Writes `key` outside any transaction, recording the change in both views.
fn set(state: &mut State, key: &Key, item: Option<Item>, by_ttl: bool) {
    let at = Instant::now();
    state.changes.push(Change {
        at,
        key: key.clone(),
        item: item.clone(),
        by_ttl,
    });
    commit(state, key, item, at, by_ttl);
}

/// Makes `item` the one GetItem sees at `key`, recording the change and its stream record.
fn commit(state: &mut State, key: &Key, item: Option<Item>, at: Instant, by_ttl: bool) {
    let old = match &item {
        Some(i) => state.items.insert(key.clone(), i.clone()),
        None => state.items.remove(key),
    };
    if let Some(stream) = state.stream.as_mut() {
        stream.append(Appended {
            key,
            old: old.as_ref(),
            new: item.as_ref(),
            by_ttl,
        });
    }
    state.commits.push(Change {
        at,
        key: key.clone(),
        item,
        by_ttl,
    });
}

fn names(request: &Map<String, Value>) -> Names<'_> {
    Names {
        names: request
            .get("ExpressionAttributeNames")
            .and_then(Value::as_object),
        values: request
            .get("ExpressionAttributeValues")
            .and_then(Value::as_object),
    }
}

fn key_of(item: Option<&Value>) -> Result<Key, String> {
    let item = item.and_then(Value::as_object).ok_or("no key")?;
    let part = |name: &str| {
        item.get(name)
            .and_then(expr::bytes_of)
            .ok_or_else(|| format!("the key has no binary {name}"))
    };
    Ok((part("pk")?, part("sk")?))
}

/// The key attributes of a request's `Key`, as a new item.
fn key_item(request: &Map<String, Value>) -> Item {
    request
        .get("Key")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default()
}

fn condition_failed(request: &Map<String, Value>, old: Option<Item>) -> Answer {
    let mut body = Map::new();
    body.insert("message".into(), json!("The conditional request failed"));
    if request
        .get("ReturnValuesOnConditionCheckFailure")
        .and_then(Value::as_str)
        == Some("ALL_OLD")
        && let Some(old) = old
    {
        body.insert("Item".into(), Value::Object(old));
    }
    error_with(400, "ConditionalCheckFailedException", body)
}

fn get_item(state: &State, request: &Map<String, Value>) -> Answer {
    match key_of(request.get("Key")) {
        Ok(key) => ok(match state.items.get(&key) {
            Some(item) => json!({ "Item": item }),
            None => json!({}),
        }),
        Err(e) => error(400, "ValidationException", &e),
    }
}

/// An item as Query and BatchGetItem see it: transactions in flight partly applied.
fn committed_view<'s>(state: &'s State, key: &Key) -> Option<&'s Item> {
    match state.partial.get(key) {
        Some(item) => item.as_ref(),
        None => state.items.get(key),
    }
}

fn batch_get(state: &State, request: &Map<String, Value>, rng: &mut StdRng) -> Answer {
    let Some(tables) = request.get("RequestItems").and_then(Value::as_object) else {
        return error(400, "ValidationException", "no RequestItems");
    };
    let mut responses = Map::new();
    let mut unprocessed = Map::new();
    for (table, spec) in tables {
        let keys = spec
            .get("Keys")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let mut found = Vec::new();
        let mut left = Vec::new();
        for k in keys {
            // AWS leaves keys unprocessed under load.
            if rng.random_bool(0.1) {
                left.push(k);
                continue;
            }
            match key_of(Some(&k)) {
                Ok(key) => {
                    if let Some(item) = committed_view(state, &key) {
                        found.push(Value::Object(item.clone()));
                    }
                }
                Err(e) => return error(400, "ValidationException", &e),
            }
        }
        responses.insert(table.clone(), Value::Array(found));
        if !left.is_empty() {
            let mut rest = spec.clone();
            rest["Keys"] = Value::Array(left);
            unprocessed.insert(table.clone(), rest);
        }
    }
    ok(json!({ "Responses": responses, "UnprocessedKeys": unprocessed }))
}

/// Query: the key condition over the items of one partition as committed so far, a
/// page of at most `page` items (or the request's `Limit`).
fn query(state: &State, request: &Map<String, Value>, page: usize) -> Answer {
    let names = names(request);
    let Some(condition) = request
        .get("KeyConditionExpression")
        .and_then(Value::as_str)
    else {
        return error(400, "ValidationException", "no KeyConditionExpression");
    };
    let limit = request
        .get("Limit")
        .and_then(Value::as_u64)
        .map_or(page, |l| (l as usize).min(page));
    let forward = request
        .get("ScanIndexForward")
        .and_then(Value::as_bool)
        .unwrap_or(true);
    let start = match request.get("ExclusiveStartKey") {
        Some(k) => match key_of(Some(k)) {
            Ok(k) => Some(k),
            Err(e) => return error(400, "ValidationException", &e),
        },
        None => None,
    };
    // Every key, committed or partly applied.
    let keys: BTreeSet<&Key> = state.items.keys().chain(state.partial.keys()).collect();
    let mut matched = Vec::new();
    let ordered: Box<dyn Iterator<Item = &&Key>> = if forward {
        Box::new(keys.iter())
    } else {
        Box::new(keys.iter().rev())
    };
    for key in ordered {
        if let Some(start) = &start {
            let past = if forward { *key > start } else { *key < start };
            if !past {
                continue;
            }
        }
        let Some(item) = committed_view(state, key) else {
            continue;
        };
        match expr::holds(condition, &names, Some(item)) {
            Ok(true) => matched.push((*key, item)),
            Ok(false) => {}
            Err(e) => return error(400, "ValidationException", &e),
        }
        if matched.len() > limit {
            break;
        }
    }
    // As AWS does: a page that reached its limit names where it stopped, even when
    // nothing is left (the next page is then empty).
    let more = matched.len() >= limit;
    matched.truncate(limit);
    let mut body = json!({
        "Items": matched.iter().map(|(_, i)| Value::Object((*i).clone())).collect::<Vec<_>>(),
        "Count": matched.len(),
        "ScannedCount": matched.len(),
    });
    if more && let Some((key, _)) = matched.last() {
        body["LastEvaluatedKey"] = json!({
            "pk": { "B": BASE64.encode(&key.0) },
            "sk": { "B": BASE64.encode(&key.1) },
        });
    }
    ok(body)
}

/// A client's way to the table.
pub struct Link(pub Arc<FakeTable>);

impl Transport for Link {
    fn send(&self, target: &str, body: Bytes) -> BoxFuture<'static, Result<(u16, Bytes), String>> {
        self.0.clone().serve(target.to_owned(), body)
    }

    fn draw(&self, cap: Duration) -> Duration {
        let nanos = cap.as_nanos().min(u64::MAX as u128) as u64;
        Duration::from_nanos(self.0.rng.lock().unwrap().random_range(0..=nanos))
    }
}
