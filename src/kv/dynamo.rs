//! The DynamoDB store.
//!
//! # Layout
//!
//! One item per key, in the partition of its folder: partition key `pk` = namespace, a
//! zero byte, the folder (`kv\0a/b/`); sort key `sk` = the rest of the key (`c`). So keys
//! spread over as many partitions as there are folders, and a folder's keys come back in
//! key order from one Query.
//!
//! Each folder has a counter of the keys stored anywhere beneath it, kept in its parent's
//! partition beside its sibling keys: sort key = the folder's name, its `/` and one byte
//! of shard (`b/\x03`), attribute `n`. A key is created or deleted in one transaction with
//! `+1` or `-1` on one shard of each folder it sits in, so a folder is listed exactly while
//! the sum of its shards is above zero. Shards spread those updates over
//! [`FOLDER_SHARDS`] items, so that creates in one busy folder do not queue on one item.
//! Overwrites never touch counters. Counter items whose sum fell to zero stay behind (a
//! few bytes per folder ever used) and are skipped by every read.
//!
//! Why the counters sort where they do: every key under folder `b/` of `a/` is `a/b/...`,
//! which sorts after every sibling key `a/b<c>` with `<c>` below `/` and before every one
//! with `<c>` above it, exactly where `b/` + shard sorts among the names in `a/`'s
//! partition. So a walk of the partitions that descends at each counter visits keys in
//! key order: that is how [`KvStore::range`] reads ordered ranges across folders.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use bytes::Bytes;
use futures::StreamExt;
use futures::stream::BoxStream;

use super::{
    Checkpoint, Condition, Entry, KvError, KvStore, Revision, TRANSACTION_MAX, TxnOp, WatchEvent,
    check_write, from_unix_ms, key, txn, unix_ms,
};
use crate::dynamo::{
    AttributeValue, ConditionCheck, DeleteItem, DynamoClient, DynamoError, EnsureReport,
    ExpressionAttributes, GetItem, Item, PutItem, Query, TransactWriteItem, UpdateItem,
};
use crate::safeguards::Safeguards;

/// The namespace of a [`DynamoKv`] unless told otherwise.
pub const DEFAULT_NAMESPACE: &str = "kv";

/// How many items each folder's counter is spread over.
pub const FOLDER_SHARDS: u8 = 8;

/// How long after an entry expires DynamoDB's TTL may delete it, unless told otherwise:
/// long enough that [`KvStore::sweep_expired`] normally gets there first (its deletes keep
/// the folder counters right; DynamoDB's do not).
pub const DEFAULT_TTL_GRACE: Duration = Duration::from_secs(3600);

/// The attribute a sweep marks an expired entry with before deleting it, so that watchers
/// tell its removal from a delete.
pub(crate) const SWEPT: &str = "swept";

/// Attempts of an operation that must re-read because others changed what it read.
const ATTEMPTS: u32 = 10;

/// Keys deleted per transaction by [`KvStore::delete_range`] and sweeps at most; fewer
/// where their folder counters would take a transaction past 100 items.
const DELETE_BATCH: usize = 25;

/// The key-value store on a DynamoDB table.
///
/// ```no_run
/// use bytes::Bytes;
/// use dynacommit::dynamo::DynamoClient;
/// use dynacommit::kv::{DynamoKv, KvStore};
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let client = dynacommit::dynamo::DynamoClientBuilder::from_env().build()?;
/// let kv = DynamoKv::new(client, "vault-storage");
/// kv.ensure_table().await?;
/// kv.put(b"sys/token/id/abc", Bytes::from("..."), None).await?;
/// println!("{:?}", kv.list(b"sys/token/").await?);
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct DynamoKv {
    client: DynamoClient,
    table: String,
    namespace: Vec<u8>,
    ttl_grace: Option<Duration>,
    /// All in force, but where a test planted a bug.
    safeguards: Safeguards,
}

impl std::fmt::Debug for DynamoKv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DynamoKv")
            .field("table", &self.table)
            .field("namespace", &key::display(&self.namespace))
            .field("endpoint", &self.client.endpoint())
            .finish()
    }
}

/// A stored item of this store, expired or not.
#[derive(Debug, Clone)]
struct Stored {
    key: Vec<u8>,
    value: Bytes,
    revision: Revision,
    expires_ms: Option<u64>,
    /// Counted in its folders' `x` (see the module's layout notes).
    counted_expiring: bool,
}

impl Stored {
    fn is_live(&self, now_ms: u64) -> bool {
        self.expires_ms.is_none_or(|e| e > now_ms)
    }

    fn entry(self) -> Entry {
        Entry {
            key: self.key,
            value: self.value,
            revision: self.revision,
            expires: self.expires_ms.map(from_unix_ms),
        }
    }
}

/// One item of a partition walk, in sort key order.
enum Row {
    Key(Stored),
    /// A folder counter shard: the folder's name (with its `/`) and the shard's counts.
    Counter(Vec<u8>, Counts),
}

/// A folder counter's counts (or a change to them): `n` keys stored beneath, `x` of them
/// counted as expiring.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Counts {
    n: i64,
    x: i64,
}

impl std::ops::AddAssign for Counts {
    fn add_assign(&mut self, other: Self) {
        self.n += other.n;
        self.x += other.x;
    }
}

impl Counts {
    /// Certainly a live key beneath: one that never expires.
    fn has_permanent(self) -> bool {
        self.n - self.x > 0
    }
}

/// The condition that an item is live, for expressions with `#exp` and `:now`.
const LIVE: &str = "(attribute_not_exists(#exp) OR #exp > :now)";

impl DynamoKv {
    /// The store in `table`, under the namespace [`DEFAULT_NAMESPACE`].
    pub fn new(client: DynamoClient, table: impl Into<String>) -> Self {
        Self {
            client,
            table: table.into(),
            namespace: DEFAULT_NAMESPACE.as_bytes().to_vec(),
            ttl_grace: Some(DEFAULT_TTL_GRACE),
            safeguards: Safeguards::default(),
        }
    }

    /// Keeps this store's items apart from other stores' in the same table. Non-empty,
    /// without zero bytes, and not [`LEASE_NAMESPACE`](crate::lease::LEASE_NAMESPACE).
    pub fn with_namespace(mut self, namespace: &str) -> Result<Self, KvError> {
        if namespace.is_empty() || namespace.contains('\0') || namespace.len() > 512 {
            return Err(KvError::InvalidKey {
                key: namespace.escape_default().to_string(),
                problem: "a namespace must be 1 to 512 bytes without zero bytes".into(),
            });
        }
        if namespace == crate::schema::LEASE_NAMESPACE {
            return Err(KvError::InvalidKey {
                key: namespace.to_owned(),
                problem: "that namespace holds the lease records of a shared table: pick another"
                    .into(),
            });
        }
        self.namespace = namespace.as_bytes().to_vec();
        Ok(self)
    }

    /// How long after expiry DynamoDB's TTL may delete an entry (`None`: never; only
    /// [`KvStore::sweep_expired`] and deletes remove expired entries then).
    pub fn with_ttl_grace(mut self, grace: Option<Duration>) -> Self {
        self.ttl_grace = grace;
        self
    }

    /// Takes out one of the safeguards again, so a test can show the linearizability check
    /// catching its absence ([`PlantedBug::KvSwapWithoutCondition`]). Never for production
    /// use.
    #[cfg(feature = "planted-bugs")]
    #[doc(hidden)]
    pub fn with_planted_bug(mut self, bug: crate::safeguards::PlantedBug) -> Self {
        self.safeguards = self.safeguards.without(bug);
        self
    }

    /// The table's name.
    pub fn table_name(&self) -> &str {
        &self.table
    }

    /// The client.
    pub fn client(&self) -> &DynamoClient {
        &self.client
    }

    /// Creates the table if missing, waits for it, turns TTL and the stream on; refuses a
    /// table of another shape.
    pub async fn ensure_table(&self) -> Result<EnsureReport, DynamoError> {
        self.client
            .ensure_table(&crate::schema::kv_table(&self.table))
            .await
    }

    fn partition(&self, folder: &[u8]) -> Bytes {
        crate::schema::partition_key(&self.namespace, folder)
    }

    fn item_key(&self, folder: &[u8], sort: &[u8]) -> Item {
        Item::from([
            ("pk".to_owned(), AttributeValue::B(self.partition(folder))),
            (
                "sk".to_owned(),
                AttributeValue::B(Bytes::copy_from_slice(sort)),
            ),
        ])
    }

    fn key_of(&self, key: &[u8]) -> Item {
        let (folder, name) = key::split(key);
        self.item_key(folder, name)
    }

    /// The item of an entry; `counted` marks it counted in its folders' `x`.
    fn item_of(
        &self,
        key: &[u8],
        value: &Bytes,
        revision: &Revision,
        expires: Option<SystemTime>,
        counted: bool,
    ) -> Item {
        let mut item = self.key_of(key);
        if counted {
            item.insert("cx".into(), AttributeValue::Bool(true));
        }
        item.insert("v".into(), AttributeValue::B(value.clone()));
        item.insert("rev".into(), AttributeValue::from(revision.as_str()));
        if let Some(at) = expires {
            let ms = unix_ms(at);
            item.insert("exp".into(), AttributeValue::from(ms));
            if let Some(seconds) = self.ttl_seconds(ms) {
                item.insert("ttl".into(), AttributeValue::from(seconds));
            }
        }
        item
    }

    /// The TTL attribute for an entry expiring at `ms`: the expiry plus the grace, in whole
    /// seconds rounded up (`None`: no TTL deletion).
    fn ttl_seconds(&self, ms: u64) -> Option<u64> {
        let grace = u64::try_from(self.ttl_grace?.as_millis()).unwrap_or(u64::MAX);
        Some(ms.saturating_add(grace).div_ceil(1000))
    }

    /// Reads an item of this store back: a key, a counter, or an error for a stranger.
    fn row(&self, item: &Item) -> Result<Row, KvError> {
        let bytes = |name: &str| item.get(name).and_then(AttributeValue::as_bytes);
        let (Some(pk), Some(sk)) = (bytes("pk"), bytes("sk")) else {
            return Err(KvError::Malformed {
                key: "?".into(),
                problem: "no binary pk and sk".into(),
            });
        };
        let folder = pk
            .strip_prefix(self.namespace.as_slice())
            .and_then(|rest| rest.strip_prefix(&[0][..]))
            .ok_or_else(|| KvError::Malformed {
                key: key::display(pk),
                problem: "its partition is not in this store's namespace".into(),
            })?;
        let mut full = folder.to_vec();
        full.extend_from_slice(sk);
        let malformed = |problem: &str| KvError::Malformed {
            key: key::display(&full),
            problem: problem.to_owned(),
        };
        if sk.len() >= 2 && sk[sk.len() - 2] == b'/' {
            let number = |name: &str| item.get(name).map(AttributeValue::as_i64);
            let (Some(Some(n)), None | Some(Some(_))) = (number("n"), number("x")) else {
                return Err(malformed(
                    "a folder counter without whole numbers `n` and `x`",
                ));
            };
            let x = number("x").flatten().unwrap_or(0);
            return Ok(Row::Counter(sk[..sk.len() - 1].to_vec(), Counts { n, x }));
        }
        let value = bytes("v")
            .ok_or_else(|| malformed("no binary value `v`"))?
            .clone();
        let revision = item
            .get("rev")
            .and_then(AttributeValue::as_str)
            .ok_or_else(|| malformed("no string revision `rev`"))?;
        let expires_ms = match item.get("exp") {
            None => None,
            Some(exp) => Some(
                exp.as_u64()
                    .ok_or_else(|| malformed("`exp` is not a whole number"))?,
            ),
        };
        let counted_expiring = item.get("cx").and_then(AttributeValue::as_bool) == Some(true);
        Ok(Row::Key(Stored {
            key: full,
            value,
            revision: Revision::from(revision),
            expires_ms,
            counted_expiring,
        }))
    }

    fn stored(&self, item: &Item) -> Result<Stored, KvError> {
        match self.row(item)? {
            Row::Key(stored) => Ok(stored),
            Row::Counter(name, _) => Err(KvError::Malformed {
                key: key::display(&name),
                problem: "a folder counter where a key was expected".into(),
            }),
        }
    }

    /// The item at `key`, expired or not, read consistently.
    async fn read(&self, key: &[u8]) -> Result<Option<Stored>, KvError> {
        let item = self
            .client
            .get_item(&GetItem::new(&self.table, self.key_of(key)))
            .await?;
        item.as_ref().map(|i| self.stored(i)).transpose()
    }

    /// The items at `keys` (expired or not), read consistently in one BatchGetItem.
    async fn read_many<'k>(
        &self,
        keys: &[&'k [u8]],
    ) -> Result<HashMap<&'k [u8], Option<Stored>>, KvError> {
        let requested: Vec<Item> = keys.iter().map(|k| self.key_of(k)).collect();
        let mut found: HashMap<Vec<u8>, Stored> = HashMap::new();
        for item in self.client.batch_get_item(&self.table, &requested).await? {
            let stored = self.stored(&item)?;
            found.insert(stored.key.clone(), stored);
        }
        Ok(keys.iter().map(|k| (*k, found.remove(*k))).collect())
    }

    /// `delta` on one shard of each folder `key` sits in.
    fn count(&self, key: &[u8], delta: Counts, counts: &mut FolderCounts) {
        for (parent, name) in key::folders(key) {
            *counts.entry((parent.to_vec(), name.to_vec())).or_default() += delta;
        }
    }

    /// The counter updates for `counts`, each on a random shard of its folder.
    fn counter_updates(&self, counts: FolderCounts) -> Vec<TransactWriteItem> {
        counts
            .into_iter()
            .filter(|(_, delta)| *delta != Counts::default())
            .map(|((parent, name), delta)| {
                let mut sort = name;
                sort.push(rand::random_range(0..FOLDER_SHARDS));
                let key = self.item_key(&parent, &sort);
                TransactWriteItem::Update(
                    UpdateItem::new(&self.table, key, "ADD #n :n, #x :x")
                        .name("#n", "n")
                        .name("#x", "x")
                        .value(":n", delta.n)
                        .value(":x", delta.x),
                )
            })
            .collect()
    }

    /// Creates `key` (it has no item): the item and its counters, in one transaction.
    /// `Ok(None)`: an item appeared meanwhile.
    async fn create_new(
        &self,
        key: &[u8],
        item: Item,
        expiring: bool,
    ) -> Result<Option<()>, KvError> {
        let mut counts = BTreeMap::new();
        let x = i64::from(expiring);
        self.count(key, Counts { n: 1, x }, &mut counts);
        let mut items = vec![TransactWriteItem::Put(
            PutItem::new(&self.table, item)
                .condition("attribute_not_exists(#pk)")
                .name("#pk", "pk"),
        )];
        items.extend(self.counter_updates(counts));
        match self.transact(&items).await? {
            Transacted::Applied => Ok(Some(())),
            Transacted::NotApplied => Ok(None),
        }
    }

    /// Sends a transaction, retrying while other transactions hold its items.
    ///
    /// A transaction whose conditions name the current time (`:now`) is sent once: a
    /// retry must not carry an old time, so any failure that did not apply it (throttling,
    /// another transaction on its items) comes back as [`Transacted::NotApplied`] for the
    /// caller to build it again. Others are retried here, the client resending each with
    /// its idempotency token.
    async fn transact(&self, items: &[TransactWriteItem]) -> Result<Transacted, KvError> {
        let clocked = items.iter().any(names_the_clock);
        let mut attempt = 0;
        loop {
            attempt += 1;
            let sent = if clocked {
                self.client.transact_write_items_once(items).await
            } else {
                self.client.transact_write_items(items).await
            };
            match sent {
                Ok(()) => return Ok(Transacted::Applied),
                Err(e) if e.is_ambiguous() => return Err(e.into()),
                Err(DynamoError::TransactionCanceled { reasons, message }) => {
                    if reasons.iter().any(|r| r.code == "ConditionalCheckFailed") {
                        return Ok(Transacted::NotApplied);
                    }
                    let busy = reasons.iter().any(|r| r.code == "TransactionConflict");
                    if busy && clocked {
                        return Ok(Transacted::NotApplied);
                    }
                    if !busy || attempt >= ATTEMPTS {
                        return Err(DynamoError::TransactionCanceled { message, reasons }.into());
                    }
                    backoff(attempt).await;
                }
                Err(e) if clocked && e.is_retryable() => return Ok(Transacted::NotApplied),
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Sends a write built for the time it is sent, once per attempt, building it again
    /// with a fresh reading of the clock after a failure that did not apply it
    /// (throttling), within the client's retry policy. An ambiguous failure is returned at
    /// once: the write may have applied, and sending it again could apply it twice.
    async fn send_fresh<T, F, Fut>(&self, mut attempt: F) -> Result<T, DynamoError>
    where
        F: FnMut(u64) -> Fut,
        Fut: Future<Output = Result<T, DynamoError>>,
    {
        let retry = self.client.retry_config();
        let started = tokio::time::Instant::now();
        let mut attempts = 0;
        loop {
            attempts += 1;
            match attempt(unix_ms(SystemTime::now())).await {
                Err(e) if e.is_retryable() && !e.is_ambiguous() => {
                    match retry.next_delay(attempts, started) {
                        Some(delay) => tokio::time::sleep(delay).await,
                        None => return Err(e),
                    }
                }
                other => return other,
            }
        }
    }

    /// Removes stored items exactly as read (pinned by revision), with their counters,
    /// in one transaction. `Ok(false)`: one of them changed meanwhile; nothing applied.
    async fn remove_pinned(&self, items: &[Stored]) -> Result<bool, KvError> {
        let mut counts = BTreeMap::new();
        let mut writes = Vec::with_capacity(items.len());
        for stored in items {
            let x = -i64::from(stored.counted_expiring);
            self.count(&stored.key, Counts { n: -1, x }, &mut counts);
            writes.push(TransactWriteItem::Delete(
                DeleteItem::new(&self.table, self.key_of(&stored.key))
                    .condition("#rev = :rev")
                    .name("#rev", "rev")
                    .value(":rev", stored.revision.as_str()),
            ));
        }
        writes.extend(self.counter_updates(counts));
        Ok(matches!(self.transact(&writes).await?, Transacted::Applied))
    }

    /// An overwrite of an existing item (live or not, per `condition`), which leaves the
    /// counters alone: so it applies only over an item counted as expiring exactly when
    /// the new one is (`cx`); the caller handles the other case from a read. Sent once per
    /// attempt ([`send_fresh`](Self::send_fresh)): its condition is not refused by its own
    /// earlier application, and it names the time. `Ok(Err(_))`: refused.
    async fn overwrite(
        &self,
        key: &[u8],
        item: &Item,
        condition: &Condition,
        expiring: bool,
    ) -> Result<Result<(), DynamoError>, KvError> {
        let counted = if expiring {
            " AND attribute_exists(#cx)"
        } else {
            " AND attribute_not_exists(#cx)"
        };
        let build = |now: u64| {
            let mut put = PutItem::new(&self.table, item.clone())
                .name("#pk", "pk")
                .name("#cx", "cx");
            put = match condition {
                Condition::Always => put.condition(format!("attribute_exists(#pk){counted}")),
                Condition::Exists => {
                    put.condition(format!("attribute_exists(#pk) AND {LIVE}{counted}"))
                }
                Condition::Value(v) => put
                    .condition(format!(
                        "attribute_exists(#pk) AND #v = :expected AND {LIVE}{counted}"
                    ))
                    .name("#v", "v")
                    .value(":expected", AttributeValue::B(v.clone())),
                Condition::Revision(r) => put
                    .condition(format!(
                        "attribute_exists(#pk) AND #rev = :expected AND {LIVE}{counted}"
                    ))
                    .name("#rev", "rev")
                    .value(":expected", r.as_str()),
                Condition::Absent => put,
            };
            if !matches!(condition, Condition::Always) {
                put = put.name("#exp", "exp").value(":now", now);
            }
            put
        };
        if matches!(condition, Condition::Absent) {
            return Err(KvError::InvalidTransaction {
                problem: format!(
                    "no overwrite of `{}` can expect it absent",
                    key::display(key)
                ),
            });
        }
        match self
            .send_fresh(|now| {
                let put = build(now);
                async move { self.client.put_item_once(&put).await }
            })
            .await
        {
            Ok(_) => Ok(Ok(())),
            Err(e) if e.is_ambiguous() => Err(e.into()),
            Err(e) if e.is_condition_failure() => Ok(Err(e)),
            Err(e) => Err(e.into()),
        }
    }

    /// Overwrites `before` (pinned to its revision, and to being live if `live_needed`)
    /// with `item`, which is counted as expiring, with `+1` on `x` of each folder.
    /// `Ok(false)`: it changed meanwhile.
    async fn overwrite_counting(
        &self,
        before: &Stored,
        item: Item,
        live_needed: bool,
    ) -> Result<bool, KvError> {
        let expressions = pin(Some(before), live_needed, unix_ms(SystemTime::now()));
        let mut put = PutItem::new(&self.table, item).condition(pin_condition(&expressions));
        put.expressions = expressions;
        let mut counts = BTreeMap::new();
        self.count(&before.key, Counts { n: 0, x: 1 }, &mut counts);
        let mut items = vec![TransactWriteItem::Put(put)];
        items.extend(self.counter_updates(counts));
        Ok(matches!(self.transact(&items).await?, Transacted::Applied))
    }

    /// The planted bug: compare-and-swap as a read and a blind write.
    async fn planted_compare_and_swap(
        &self,
        key: &[u8],
        item: Item,
        expected: &[u8],
        now: u64,
    ) -> Result<(), KvError> {
        match self.read(key).await? {
            Some(s) if s.is_live(now) && s.value.as_ref() == expected => {
                self.client
                    .put_item(&PutItem::new(&self.table, item))
                    .await?;
                Ok(())
            }
            _ => Err(KvError::CompareFailed {
                key: key::display(key),
            }),
        }
    }

    /// The query of `folder`'s partition for what may hold keys in `start..end` (`end`
    /// empty: no end), or `None` if nothing there can.
    fn partition_query(&self, folder: &[u8], start: &[u8], end: &[u8], page: u32) -> Option<Query> {
        // A name bound: the segment up to its `/` stands for the whole folder.
        let lower = if let Some(rest) = start.strip_prefix(folder) {
            match rest.iter().position(|b| *b == b'/') {
                Some(i) => Some(rest[..=i].to_vec()),
                None => Some(rest.to_vec()).filter(|r| !r.is_empty()),
            }
        } else if start < folder {
            None
        } else {
            return None;
        };
        let upper = if end.is_empty() {
            None
        } else if let Some(rest) = end.strip_prefix(folder) {
            match rest.iter().position(|b| *b == b'/') {
                // Every shard of that folder's counter: `name/` + one byte.
                Some(i) => Some([&rest[..=i], &[u8::MAX][..]].concat()),
                None if rest.is_empty() => return None,
                None => Some(rest.to_vec()),
            }
        } else if end <= folder {
            return None;
        } else {
            None
        };
        let condition = match (&lower, &upper) {
            (Some(lo), Some(hi)) if lo > hi => return None,
            (Some(_), Some(_)) => "#pk = :pk AND #sk BETWEEN :lo AND :hi",
            (Some(_), None) => "#pk = :pk AND #sk >= :lo",
            (None, Some(_)) => "#pk = :pk AND #sk <= :hi",
            (None, None) => "#pk = :pk",
        };
        let mut query = Query::new(&self.table, condition)
            .name("#pk", "pk")
            .value(":pk", AttributeValue::B(self.partition(folder)))
            .limit(page);
        if lower.is_some() || upper.is_some() {
            query = query.name("#sk", "sk");
        }
        if let Some(lo) = lower {
            query = query.value(":lo", AttributeValue::B(Bytes::from(lo)));
        }
        if let Some(hi) = upper {
            query = query.value(":hi", AttributeValue::B(Bytes::from(hi)));
        }
        Some(query)
    }

    /// Hands every stored key with `start <= key < end` (`end` empty: no end), expired
    /// ones too, to `visit` in key order, until `visit` says stop (returns `false`).
    ///
    /// Every key in the range starts with the longest common prefix of `start` and `end`,
    /// so the walk begins in the folder of that prefix and descends, depth first, into
    /// each folder with a counter, where that counter sorts. It descends whatever the
    /// counter's sum: its shards are read one by one, not as one snapshot, so a sum of
    /// zero does not prove the folder empty.
    async fn walk(
        &self,
        start: &[u8],
        end: &[u8],
        page: u32,
        visit: &mut (dyn FnMut(Stored) -> bool + Send),
    ) -> Result<(), KvError> {
        if !end.is_empty() && end <= start {
            return Ok(());
        }
        let common = start
            .iter()
            .zip(end.iter())
            .take_while(|(a, b)| a == b)
            .count();
        let common = if end.is_empty() { 0 } else { common };
        let folder = key::split(&start[..common]).0.to_vec();
        self.walk_folder(folder, start, end, page, visit)
            .await
            .map(|_| ())
    }

    /// One folder of [`walk`](Self::walk); `Ok(false)` once `visit` said stop.
    fn walk_folder<'a>(
        &'a self,
        folder: Vec<u8>,
        start: &'a [u8],
        end: &'a [u8],
        page: u32,
        visit: &'a mut (dyn FnMut(Stored) -> bool + Send),
    ) -> futures::future::BoxFuture<'a, Result<bool, KvError>> {
        Box::pin(async move {
            let Some(query) = self.partition_query(&folder, start, end, page) else {
                return Ok(true);
            };
            let mut pages = Box::pin(self.client.query_pages(query));
            // The shards of one folder's counter sort together; their sum decides.
            let mut group: Option<(Vec<u8>, Counts)> = None;
            while let Some(result) = pages.next().await {
                for item in result?.items {
                    let row = self.row(&item)?;
                    let same_group =
                        matches!((&group, &row), (Some((g, _)), Row::Counter(n, _)) if g == n);
                    // A group of shards ends here: walk its folder before going on.
                    if !same_group && let Some((name, _)) = group.take() {
                        let child = [folder.as_slice(), name.as_slice()].concat();
                        if !self.walk_folder(child, start, end, page, visit).await? {
                            return Ok(false);
                        }
                    }
                    match row {
                        Row::Counter(name, n) => {
                            group = Some(match group.take() {
                                Some((g, mut sum)) => {
                                    sum += n;
                                    (g, sum)
                                }
                                None => (name, n),
                            });
                        }
                        Row::Key(stored) => {
                            let k = stored.key.as_slice();
                            let in_range = k >= start && (end.is_empty() || k < end);
                            if in_range && !visit(stored) {
                                return Ok(false);
                            }
                        }
                    }
                }
            }
            if let Some((name, _)) = group.take() {
                let child = [folder.as_slice(), name.as_slice()].concat();
                return self.walk_folder(child, start, end, page, visit).await;
            }
            Ok(true)
        })
    }

    /// Every stored key in `start..end` that `pick` wants, as read.
    async fn collect(
        &self,
        start: &[u8],
        end: &[u8],
        pick: impl Fn(&Stored) -> bool + Send + Sync,
    ) -> Result<Vec<Stored>, KvError> {
        let mut found = Vec::new();
        self.walk(start, end, 1000, &mut |stored| {
            if pick(&stored) {
                found.push(stored);
            }
            true
        })
        .await?;
        Ok(found)
    }

    /// Removes `items` as read, in transactions of [`DELETE_BATCH`]; a key that changed
    /// meanwhile is read again and removed if `pick` still wants it. Returns what was
    /// removed.
    async fn remove_all(
        &self,
        items: Vec<Stored>,
        pick: &(dyn Fn(&Stored) -> bool + Send + Sync),
    ) -> Result<Vec<Stored>, KvError> {
        let mut removed = Vec::new();
        for batch in batches(items) {
            if self.remove_pinned(&batch).await? {
                removed.extend(batch);
                continue;
            }
            // Something in the batch changed: one key at a time, each from a fresh read.
            for stored in batch {
                let mut attempt = 0;
                let mut current = self.read(&stored.key).await?;
                while let Some(item) = current.filter(|s| pick(s)) {
                    attempt += 1;
                    if self.remove_pinned(std::slice::from_ref(&item)).await? {
                        removed.push(item);
                        break;
                    }
                    if attempt >= ATTEMPTS {
                        return Err(KvError::Contention {
                            key: key::display(&item.key),
                            attempts: attempt,
                        });
                    }
                    current = self.read(&item.key).await?;
                }
            }
        }
        Ok(removed)
    }
}

/// The placeholders that pin a key to its item as read: its revision (and that it is
/// still live, if `live_needed`), or its absence.
fn pin(before: Option<&Stored>, live_needed: bool, now: u64) -> ExpressionAttributes {
    let mut expressions = ExpressionAttributes::default();
    let names = &mut expressions.expression_attribute_names;
    let values = &mut expressions.expression_attribute_values;
    match before {
        Some(s) => {
            names.insert("#rev".into(), "rev".into());
            values.insert(":rev".into(), s.revision.as_str().into());
            if live_needed && s.is_live(now) {
                names.insert("#exp".into(), "exp".into());
                values.insert(":now".into(), now.into());
            }
        }
        None => {
            names.insert("#pk".into(), "pk".into());
        }
    }
    expressions
}

/// The condition that goes with [`pin`]'s placeholders.
fn pin_condition(expressions: &ExpressionAttributes) -> String {
    let values = &expressions.expression_attribute_values;
    match (values.contains_key(":rev"), values.contains_key(":now")) {
        (true, true) => format!("#rev = :rev AND {LIVE}"),
        (true, false) => "#rev = :rev".to_owned(),
        (false, _) => "attribute_not_exists(#pk)".to_owned(),
    }
}

/// `items` in batches for one transaction each: at most [`DELETE_BATCH`] keys, and no more
/// than DynamoDB's 100 items counting one counter update per distinct folder the keys sit
/// in (keys deep in different branches share few).
fn batches(items: Vec<Stored>) -> Vec<Vec<Stored>> {
    let mut out: Vec<Vec<Stored>> = Vec::new();
    let mut folders: std::collections::BTreeSet<Vec<u8>> = Default::default();
    for stored in items {
        let mine: Vec<Vec<u8>> = key::folders(&stored.key)
            .into_iter()
            .map(|(parent, name)| [parent, name].concat())
            .collect();
        let fits = out.last().is_some_and(|batch| {
            let new = mine.iter().filter(|f| !folders.contains(*f)).count();
            batch.len() < DELETE_BATCH && batch.len() + 1 + folders.len() + new <= TRANSACTION_MAX
        });
        if !fits {
            out.push(Vec::new());
            folders.clear();
        }
        folders.extend(mine);
        if let Some(batch) = out.last_mut() {
            batch.push(stored);
        }
    }
    out
}

/// Whether a transaction item's condition names the current time (`:now`).
fn names_the_clock(item: &TransactWriteItem) -> bool {
    let values = match item {
        TransactWriteItem::Put(p) => &p.expressions,
        TransactWriteItem::Update(u) => &u.expressions,
        TransactWriteItem::Delete(d) => &d.expressions,
        TransactWriteItem::ConditionCheck(c) => &c.expressions,
    };
    values.expression_attribute_values.contains_key(":now")
}

/// Counter changes per folder: (the folder holding it, its name).
type FolderCounts = BTreeMap<(Vec<u8>, Vec<u8>), Counts>;

/// How a transaction ended, short of an error.
enum Transacted {
    Applied,
    /// A condition failed, or (for a transaction naming the time) it was refused for now:
    /// read again and build it again.
    NotApplied,
}

/// A short random pause before attempt `attempt + 1`, growing with the attempts.
async fn backoff(attempt: u32) {
    let cap = 5u64 << attempt.min(6);
    tokio::time::sleep(Duration::from_millis(rand::random_range(1..=cap))).await;
}

#[async_trait]
impl KvStore for DynamoKv {
    #[tracing::instrument(level = "debug", skip_all, fields(key = %key::display(key)))]
    async fn get(&self, key: &[u8]) -> Result<Option<Entry>, KvError> {
        key::validate(key, self.namespace.len())?;
        let now = unix_ms(SystemTime::now());
        Ok(self
            .read(key)
            .await?
            .filter(|s| s.is_live(now))
            .map(Stored::entry))
    }

    #[tracing::instrument(level = "debug", skip_all, fields(key = %key::display(key)))]
    async fn write(
        &self,
        key: &[u8],
        value: Bytes,
        expires: Option<SystemTime>,
        condition: Condition,
    ) -> Result<Revision, KvError> {
        check_write(key, &value, self.namespace.len())?;
        let expiring = expires.is_some();
        for _ in 0..ATTEMPTS {
            let revision = Revision::fresh();
            let item = self.item_of(key, &value, &revision, expires, expiring);
            if let (Condition::Value(expected), false) =
                (&condition, self.safeguards.compare_and_swap_conditional())
            {
                let now = unix_ms(SystemTime::now());
                self.planted_compare_and_swap(key, item, expected, now)
                    .await?;
                return Ok(revision);
            }
            if matches!(condition, Condition::Absent) {
                if self
                    .create_new(key, item.clone(), expiring)
                    .await?
                    .is_some()
                {
                    return Ok(revision);
                }
            } else if self
                .overwrite(key, &item, &condition, expiring)
                .await?
                .is_ok()
            {
                return Ok(revision);
            } else if matches!(condition, Condition::Always)
                && self
                    .create_new(key, item.clone(), expiring)
                    .await?
                    .is_some()
            {
                // Most often an overwrite is refused for want of an item: create it.
                return Ok(revision);
            }
            // Refused: find out why from the item itself.
            let Some(before) = self.read(key).await? else {
                match condition {
                    // Gone again since the create was refused: start over.
                    Condition::Always | Condition::Absent => continue,
                    _ => return Err(condition.failure(key)),
                }
            };
            let live = before.is_live(unix_ms(SystemTime::now()));
            let current = live.then_some((before.value.as_ref(), &before.revision));
            if !condition.holds(current) {
                return Err(condition.failure(key));
            }
            // The condition holds: the item is an expired one that `create` may replace,
            // or it is counted as expiring and the new one is not (or the reverse).
            let live_needed = !matches!(condition, Condition::Always | Condition::Absent);
            let item = self.item_of(
                key,
                &value,
                &revision,
                expires,
                expiring || before.counted_expiring,
            );
            if expiring && !before.counted_expiring {
                if self.overwrite_counting(&before, item, live_needed).await? {
                    return Ok(revision);
                }
            } else {
                // Pinned to the item as read, so its counters are right as they stand.
                let sent = self
                    .send_fresh(|now| {
                        let expressions = pin(Some(&before), live_needed, now);
                        let mut put = PutItem::new(&self.table, item.clone())
                            .condition(pin_condition(&expressions));
                        put.expressions = expressions;
                        async move { self.client.put_item_once(&put).await }
                    })
                    .await;
                match sent {
                    Ok(_) => return Ok(revision),
                    Err(e) if e.is_condition_failure() && !e.is_ambiguous() => {}
                    Err(e) => return Err(e.into()),
                }
            }
        }
        Err(KvError::Contention {
            key: key::display(key),
            attempts: ATTEMPTS,
        })
    }

    #[tracing::instrument(level = "debug", skip_all, fields(key = %key::display(key)))]
    async fn remove(&self, key: &[u8], condition: Condition) -> Result<bool, KvError> {
        key::validate(key, self.namespace.len())?;
        for _ in 0..ATTEMPTS {
            let now = unix_ms(SystemTime::now());
            let Some(stored) = self.read(key).await? else {
                return match condition {
                    Condition::Always | Condition::Absent => Ok(false),
                    _ => Err(condition.failure(key)),
                };
            };
            let live = stored.is_live(now);
            let current = live.then_some((stored.value.as_ref(), &stored.revision));
            if !condition.holds(current) {
                return Err(condition.failure(key));
            }
            if matches!(condition, Condition::Absent) {
                return Ok(false);
            }
            // Pinned to the revision read, so the check above still holds when it applies.
            if self.remove_pinned(std::slice::from_ref(&stored)).await? {
                return Ok(live);
            }
        }
        Err(KvError::Contention {
            key: key::display(key),
            attempts: ATTEMPTS,
        })
    }

    #[tracing::instrument(level = "debug", skip_all, fields(key = %key::display(key)))]
    async fn keep_alive(
        &self,
        key: &[u8],
        expires: Option<SystemTime>,
    ) -> Result<Revision, KvError> {
        key::validate(key, self.namespace.len())?;
        let revision = Revision::fresh();
        // The new revision and expiry; an item that gains an expiry is marked counted as
        // expiring (`cx`), and a sweep's mark left on a live item goes.
        let update = |condition: String| {
            let mut set = vec!["#rev = :new"];
            let mut remove = vec!["#sw"];
            let mut update = UpdateItem::new(&self.table, self.key_of(key), "")
                .name("#rev", "rev")
                .name("#sw", SWEPT)
                .value(":new", revision.as_str());
            match expires.map(unix_ms) {
                Some(ms) => {
                    set.extend(["#exp = :e", "#cx = :true"]);
                    update = update
                        .name("#exp", "exp")
                        .name("#cx", "cx")
                        .name("#ttl", "ttl")
                        .value(":e", ms)
                        .value(":true", true);
                    match self.ttl_seconds(ms) {
                        Some(t) => {
                            set.push("#ttl = :t");
                            update = update.value(":t", t);
                        }
                        None => remove.push("#ttl"),
                    }
                }
                None => {
                    remove.extend(["#exp", "#ttl"]);
                    update = update.name("#exp", "exp").name("#ttl", "ttl");
                }
            }
            update.update_expression =
                format!("SET {} REMOVE {}", set.join(", "), remove.join(", "));
            update.condition(condition)
        };
        for _ in 0..ATTEMPTS {
            // Sent once per attempt: its condition would not refuse a second application,
            // and it names the time.
            let sent = self
                .send_fresh(|now| {
                    let counted = if expires.is_some() {
                        " AND attribute_exists(#cx)"
                    } else {
                        ""
                    };
                    let mut fast = update(format!("attribute_exists(#pk) AND {LIVE}{counted}"))
                        .name("#pk", "pk")
                        .name("#exp", "exp")
                        .value(":now", now);
                    if expires.is_some() {
                        fast = fast.name("#cx", "cx");
                    }
                    async move { self.client.update_item_once(&fast).await }
                })
                .await;
            match sent {
                Ok(_) => return Ok(revision),
                Err(e) if e.is_condition_failure() && !e.is_ambiguous() => {}
                Err(e) => return Err(e.into()),
            }
            let now = unix_ms(SystemTime::now());
            let before = match self.read(key).await? {
                Some(s) if s.is_live(now) => s,
                _ => return Err(Condition::Exists.failure(key)),
            };
            if before.counted_expiring || expires.is_none() {
                continue;
            }
            // Gains an expiry for the first time: the update and `+1` on `x`, together.
            let expressions = pin(Some(&before), true, unix_ms(SystemTime::now()));
            let mut slow = update(pin_condition(&expressions));
            slow.expressions
                .expression_attribute_names
                .extend(expressions.expression_attribute_names);
            slow.expressions
                .expression_attribute_values
                .extend(expressions.expression_attribute_values);
            let mut counts = BTreeMap::new();
            self.count(key, Counts { n: 0, x: 1 }, &mut counts);
            let mut items = vec![TransactWriteItem::Update(slow)];
            items.extend(self.counter_updates(counts));
            if matches!(self.transact(&items).await?, Transacted::Applied) {
                return Ok(revision);
            }
        }
        Err(KvError::Contention {
            key: key::display(key),
            attempts: ATTEMPTS,
        })
    }

    #[tracing::instrument(level = "debug", skip_all, fields(prefix = %key::display(prefix)))]
    async fn list(&self, prefix: &[u8]) -> Result<Vec<Vec<u8>>, KvError> {
        let (folder, partial) = key::split(prefix);
        if folder.len() > key::max_folder_len(self.namespace.len()) {
            return Ok(Vec::new());
        }
        let mut query = Query::new(&self.table, "#pk = :pk")
            .name("#pk", "pk")
            .value(":pk", AttributeValue::B(self.partition(folder)));
        if !partial.is_empty() {
            query = Query::new(&self.table, "#pk = :pk AND begins_with(#sk, :p)")
                .name("#pk", "pk")
                .name("#sk", "sk")
                .value(":pk", AttributeValue::B(self.partition(folder)))
                .value(":p", AttributeValue::B(Bytes::copy_from_slice(partial)));
        }
        let now = unix_ms(SystemTime::now());
        // Names in order; a folder holding only keys counted as expiring is checked for a
        // live key before it is listed.
        let mut names: Vec<(Vec<u8>, bool)> = Vec::new();
        let mut group: Option<(Vec<u8>, Counts)> = None;
        let flush = |group: &mut Option<(Vec<u8>, Counts)>, names: &mut Vec<(Vec<u8>, bool)>| {
            if let Some((name, counts)) = group.take() {
                // The shards were read one by one, not as one snapshot: a sum at or below
                // zero proves nothing, so only a key that never expires spares the check.
                names.push((name, !counts.has_permanent()));
            }
        };
        let mut pages = Box::pin(self.client.query_pages(query));
        while let Some(page) = pages.next().await {
            for item in page?.items {
                match self.row(&item)? {
                    Row::Counter(name, counts) => match &mut group {
                        Some((g, sum)) if *g == name => *sum += counts,
                        _ => {
                            flush(&mut group, &mut names);
                            group = Some((name, counts));
                        }
                    },
                    Row::Key(stored) => {
                        flush(&mut group, &mut names);
                        if stored.is_live(now) {
                            let (_, name) = key::split(&stored.key);
                            names.push((name.to_vec(), false));
                        }
                    }
                }
            }
        }
        flush(&mut group, &mut names);
        let mut listed = Vec::with_capacity(names.len());
        for (name, check) in names {
            if check {
                let child = [folder, name.as_slice()].concat();
                let end = key::prefix_end(&child).unwrap_or_default();
                let mut live = false;
                self.walk_folder(child.clone(), &child, &end, 16, &mut |s| {
                    live = s.is_live(now);
                    !live
                })
                .await?;
                if !live {
                    continue;
                }
            }
            listed.push(name[partial.len()..].to_vec());
        }
        Ok(listed)
    }

    #[tracing::instrument(level = "debug", skip_all, fields(start = %key::display(start), end = %key::display(end)))]
    async fn range(
        &self,
        start: &[u8],
        end: &[u8],
        limit: Option<usize>,
    ) -> Result<Vec<Entry>, KvError> {
        let limit = limit.unwrap_or(usize::MAX);
        if limit == 0 {
            return Ok(Vec::new());
        }
        let now = unix_ms(SystemTime::now());
        let page = u32::try_from(limit.saturating_add(FOLDER_SHARDS as usize))
            .unwrap_or(1000)
            .min(1000);
        let mut entries = Vec::new();
        self.walk(start, end, page, &mut |stored| {
            if stored.is_live(now) {
                entries.push(stored.entry());
            }
            entries.len() < limit
        })
        .await?;
        Ok(entries)
    }

    #[tracing::instrument(level = "debug", skip_all, fields(start = %key::display(start), end = %key::display(end)))]
    async fn delete_range(&self, start: &[u8], end: &[u8]) -> Result<usize, KvError> {
        let now = unix_ms(SystemTime::now());
        let items = self.collect(start, end, |_| true).await?;
        let removed = self.remove_all(items, &|_| true).await?;
        Ok(removed.iter().filter(|s| s.is_live(now)).count())
    }

    #[tracing::instrument(level = "debug", skip_all, fields(ops = ops.len()))]
    async fn transaction(&self, ops: Vec<TxnOp>) -> Result<Vec<Option<Revision>>, KvError> {
        txn::check(&ops, self.namespace.len())?;
        let mut keys: Vec<&[u8]> = ops.iter().map(|op| op.key.as_slice()).collect();
        keys.sort_unstable();
        keys.dedup();
        for attempt in 1..=ATTEMPTS {
            // Read every key, run the steps on what is live, and pin each key's change to
            // its item as read: the transaction applies only if none of them changed.
            let stored = self.read_many(&keys).await?;
            let now = unix_ms(SystemTime::now());
            let live = stored
                .iter()
                .map(|(k, s)| {
                    let current = s
                        .as_ref()
                        .filter(|s| s.is_live(now))
                        .map(|s| (s.value.clone(), s.revision.clone()));
                    (k.to_vec(), current)
                })
                .collect();
            let plan = txn::plan(&ops, &live)?;
            let mut counts = BTreeMap::new();
            let mut items = Vec::with_capacity(plan.changes.len());
            for (k, net) in &plan.changes {
                let before = stored.get(k.as_slice()).cloned().flatten();
                // A live entry a condition relied on must still be live when this applies.
                let expressions = pin(before.as_ref(), txn::relies_on_live(&ops, k), now);
                let condition = pin_condition(&expressions);
                let item = match (net, &before) {
                    (
                        txn::Net::Put {
                            value,
                            revision,
                            expires,
                        },
                        _,
                    ) => {
                        let expiring = expires.is_some();
                        let was_counted = before.as_ref().is_some_and(|b| b.counted_expiring);
                        let delta = match &before {
                            None => Counts {
                                n: 1,
                                x: i64::from(expiring),
                            },
                            Some(_) => Counts {
                                n: 0,
                                x: i64::from(expiring && !was_counted),
                            },
                        };
                        self.count(k, delta, &mut counts);
                        let item =
                            self.item_of(k, value, revision, *expires, expiring || was_counted);
                        let mut put = PutItem::new(&self.table, item).condition(condition);
                        put.expressions = expressions;
                        TransactWriteItem::Put(put)
                    }
                    (txn::Net::Deleted, Some(b)) => {
                        let x = -i64::from(b.counted_expiring);
                        self.count(k, Counts { n: -1, x }, &mut counts);
                        let mut delete =
                            DeleteItem::new(&self.table, self.key_of(k)).condition(condition);
                        delete.expressions = expressions;
                        TransactWriteItem::Delete(delete)
                    }
                    (txn::Net::Deleted | txn::Net::Unchanged, _) => {
                        let mut check = ConditionCheck::new(&self.table, self.key_of(k), condition);
                        check.expressions = expressions;
                        TransactWriteItem::ConditionCheck(check)
                    }
                };
                items.push(item);
            }
            let counters = self.counter_updates(counts);
            if items.len() + counters.len() > TRANSACTION_MAX {
                return Err(KvError::InvalidTransaction {
                    problem: format!(
                        "its {} keys and the {} folder counters they change make {} items, over the {TRANSACTION_MAX} of one DynamoDB transaction: split it",
                        items.len(),
                        counters.len(),
                        items.len() + counters.len()
                    ),
                });
            }
            items.extend(counters);
            match self.transact(&items).await? {
                Transacted::Applied => return Ok(plan.revisions),
                // A key changed between the read and the write: read again.
                Transacted::NotApplied => backoff(attempt).await,
            }
        }
        Err(KvError::Contention {
            key: keys.first().map(|k| key::display(k)).unwrap_or_default(),
            attempts: ATTEMPTS,
        })
    }

    #[tracing::instrument(level = "debug", skip_all, fields(start = %key::display(start), end = %key::display(end)))]
    async fn sweep_expired(&self, start: &[u8], end: &[u8]) -> Result<usize, KvError> {
        let now = unix_ms(SystemTime::now());
        let expired = move |s: &Stored| !s.is_live(now);
        let items = self.collect(start, end, expired).await?;
        // Mark each first (its watchers then report an expiry, not a delete); a mark that
        // fails found the entry changed, and the pinned delete below skips it too.
        let requests: Vec<UpdateItem> = items
            .iter()
            .map(|s| {
                UpdateItem::new(&self.table, self.key_of(&s.key), "SET #sw = :true")
                    .condition("#rev = :rev AND #exp <= :now")
                    .name("#sw", SWEPT)
                    .name("#rev", "rev")
                    .name("#exp", "exp")
                    .value(":true", true)
                    .value(":rev", s.revision.as_str())
                    .value(":now", now)
            })
            .collect();
        let client = &self.client;
        // A few at a time: a sweep of many must not throttle the table for everyone else.
        futures::stream::iter(requests)
            .map(|mark| async move {
                match client.update_item(&mark).await {
                    Ok(_) => Ok(()),
                    Err(e) if e.is_condition_failure() => Ok(()),
                    Err(e) => Err(KvError::from(e)),
                }
            })
            .buffer_unordered(16)
            .collect::<Vec<Result<(), KvError>>>()
            .await
            .into_iter()
            .collect::<Result<Vec<()>, KvError>>()?;
        Ok(self.remove_all(items, &expired).await?.len())
    }

    fn watch(
        &self,
        prefix: &[u8],
        from: Option<Checkpoint>,
    ) -> BoxStream<'static, Result<WatchEvent, KvError>> {
        super::watch::watch(self.clone(), prefix.to_vec(), from)
    }

    fn describe(&self) -> String {
        format!("dynamodb table {}", self.table)
    }
}

impl DynamoKv {
    /// A stream record's item, as this store's key and (for puts) entry; `None` for
    /// counters and other namespaces.
    pub(crate) fn decode_record_key(&self, keys: &Item) -> Option<Vec<u8>> {
        let bytes = |name: &str| keys.get(name).and_then(AttributeValue::as_bytes);
        let (pk, sk) = (bytes("pk")?, bytes("sk")?);
        let folder = pk
            .strip_prefix(self.namespace.as_slice())?
            .strip_prefix(&[0][..])?;
        if sk.len() >= 2 && sk[sk.len() - 2] == b'/' {
            return None;
        }
        Some([folder, sk.as_ref()].concat())
    }

    /// A stream image as an entry (live or not: the watcher decides).
    pub(crate) fn decode_image(&self, image: &Item) -> Option<Entry> {
        match self.row(image) {
            Ok(Row::Key(stored)) => Some(stored.entry()),
            _ => None,
        }
    }
}
