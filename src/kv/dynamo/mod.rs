//! The DynamoDB store.
//!
//! Its items are laid out as `super::layout` says; reading them is `reads`, writing them
//! `writes`; the [`KvStore`] contract itself is here.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use bytes::Bytes;
use futures::StreamExt;
use futures::stream::BoxStream;

use self::writes::{Removal, Transacted, pin, pin_condition};
use super::{
    Checkpoint, Condition, Entry, KvError, KvStore, Revision, TxnOp, WatchEvent, check_write, key,
    txn, unix_ms,
};
use crate::dynamo::{
    AttributeValue, ConditionCheck, DeleteItem, DynamoClient, DynamoError, EnsureReport, PutItem,
    Query, TransactWriteItem, UpdateItem,
};
use crate::kv::layout::{Counts, FOLDER_SHARDS, Judged, LIVE, Layout, Row, SWEPT, Stored};
use crate::lease::{Clock, SystemClock};
use crate::safeguards::Safeguards;

mod reads;
mod writes;

/// The namespace of a [`DynamoKv`] unless told otherwise.
pub const DEFAULT_NAMESPACE: &str = "kv";

/// How long after an entry expires DynamoDB's TTL may delete it, unless told otherwise:
/// long enough that [`KvStore::sweep_expired`] normally gets there first (its deletes keep
/// the folder counters right; DynamoDB's do not).
pub const DEFAULT_TTL_GRACE: Duration = Duration::from_secs(3600);

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
    /// Where its items go.
    layout: Layout,
    /// All in force, but where a test planted a bug.
    safeguards: Safeguards,
    /// How often a watch keeps its shard iterators alive, if not every five minutes.
    watch_keep_alive: Option<Duration>,
    /// How many items each folder counter's changes are spread over ([`FOLDER_SHARDS`];
    /// another number only in a benchmark of the choice).
    folder_shards: u8,
    /// Whether a transaction refused for a counter shard held by another in flight moves
    /// to another shard (always, but in the benchmark that compares).
    move_conflicting_shards: bool,
    /// The wall clock that judges expiry, and the back-off pauses: the system's, or a
    /// simulation's (its seed replays them).
    clock: Arc<dyn Clock>,
}

impl std::fmt::Debug for DynamoKv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DynamoKv")
            .field("table", &self.layout.table)
            .field("namespace", &key::display(&self.layout.namespace))
            .field("endpoint", &self.client.endpoint())
            .finish()
    }
}

impl DynamoKv {
    /// The store in `table`, under the namespace [`DEFAULT_NAMESPACE`].
    pub fn new(client: DynamoClient, table: impl Into<String>) -> Self {
        Self {
            client,
            layout: Layout {
                table: table.into(),
                namespace: DEFAULT_NAMESPACE.as_bytes().to_vec(),
                ttl_grace: Some(DEFAULT_TTL_GRACE),
            },
            safeguards: Safeguards::default(),
            watch_keep_alive: None,
            folder_shards: FOLDER_SHARDS,
            move_conflicting_shards: true,
            clock: Arc::new(SystemClock),
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
        self.layout.namespace = namespace.as_bytes().to_vec();
        Ok(self)
    }

    /// How long after expiry DynamoDB's TTL may delete an entry (`None`: never; only
    /// [`KvStore::sweep_expired`] and deletes remove expired entries then).
    pub fn with_ttl_grace(mut self, grace: Option<Duration>) -> Self {
        self.layout.ttl_grace = grace;
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

    /// Keeps a watch's shard iterators alive this often instead of every five minutes, so
    /// that a test can outlast an iterator's life (15 minutes on AWS) in seconds. Not for
    /// production use.
    #[cfg(feature = "harness")]
    #[doc(hidden)]
    pub fn with_watch_keep_alive(mut self, every: Duration) -> Self {
        self.watch_keep_alive = Some(every);
        self
    }

    /// Spreads each folder counter's changes over `shards` items (at least 1) instead of
    /// [`FOLDER_SHARDS`], for the benchmark that chose that number
    /// (`benches/kv_hot_folder.rs`). Reads count every shard they find, so stores of
    /// different settings share a table. Not for production use.
    #[cfg(feature = "harness")]
    #[doc(hidden)]
    pub fn with_folder_shards(mut self, shards: u8) -> Self {
        self.folder_shards = shards.max(1);
        self
    }

    /// Keeps a transaction refused for a folder counter shard held by another in flight
    /// on that shard, backing off as for any contention, instead of moving it to another
    /// shard at once: what the store did before, for the benchmark that compares the two.
    /// Not for production use.
    #[cfg(feature = "harness")]
    #[doc(hidden)]
    pub fn without_shard_moves(mut self) -> Self {
        self.move_conflicting_shards = false;
        self
    }

    /// Judges expiry by `clock`'s wall clock instead of the system's, so that the
    /// simulator can run the store on its paused time. Not for production use.
    #[cfg(feature = "harness")]
    #[doc(hidden)]
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Now, in milliseconds since the epoch, by the store's wall clock.
    fn now_ms(&self) -> u64 {
        unix_ms(SystemTime::UNIX_EPOCH + self.clock.unix_time())
    }

    /// The table's name.
    pub fn table_name(&self) -> &str {
        &self.layout.table
    }

    /// The client.
    pub fn client(&self) -> &DynamoClient {
        &self.client
    }

    /// Creates the table if missing, waits for it, turns TTL and the stream on; refuses a
    /// table of another shape.
    pub async fn ensure_table(&self) -> Result<EnsureReport, DynamoError> {
        self.client
            .ensure_table(&crate::schema::kv_table(&self.layout.table))
            .await
    }
}

#[async_trait]
impl KvStore for DynamoKv {
    #[tracing::instrument(level = "debug", skip_all, fields(key = %key::display(key)))]
    async fn get(&self, key: &[u8]) -> Result<Option<Entry>, KvError> {
        key::validate(key, self.layout.namespace.len())?;
        // DynamoDB read the item at some moment between the asking and the answer. An
        // entry that expires after the answer was live then; one that expired before the
        // asking was gone then. One that expired in between may have been either, and
        // "gone" could claim a moment that never was (a later write may have replaced it
        // before it expired): read again, from after its expiry.
        for _ in 0..ATTEMPTS {
            let asked = self.now_ms();
            let stored = self.read(key).await?;
            let answered = self.now_ms();
            match stored.map(|s| (s.judge(asked, answered), s)) {
                None => return Ok(None),
                Some((Judged::Live, s)) => return Ok(Some(s.entry())),
                Some((Judged::Gone, _)) => return Ok(None),
                Some((Judged::Uncertain, _)) => {}
            }
        }
        Err(KvError::Contention {
            key: key::display(key),
            attempts: ATTEMPTS,
        })
    }

    #[tracing::instrument(level = "debug", skip_all, fields(key = %key::display(key)))]
    async fn write(
        &self,
        key: &[u8],
        value: Bytes,
        expires: Option<SystemTime>,
        condition: Condition,
    ) -> Result<Revision, KvError> {
        check_write(key, &value, self.layout.namespace.len())?;
        for _ in 0..ATTEMPTS {
            let revision = Revision::fresh();
            let applied = self
                .write_attempt(key, &value, expires, &condition, &revision)
                .await
                .map_err(|e| e.attempted(key, Some(&revision)))?;
            if applied {
                return Ok(revision);
            }
        }
        Err(KvError::Contention {
            key: key::display(key),
            attempts: ATTEMPTS,
        })
    }

    #[tracing::instrument(level = "debug", skip_all, fields(key = %key::display(key)))]
    async fn remove(&self, key: &[u8], condition: Condition) -> Result<bool, KvError> {
        key::validate(key, self.layout.namespace.len())?;
        for _ in 0..ATTEMPTS {
            let Some(stored) = self.read(key).await? else {
                return match condition {
                    Condition::Always | Condition::Absent => Ok(false),
                    _ => Err(condition.failure(key)),
                };
            };
            let live = stored.is_live(self.now_ms());
            let current = live.then_some((stored.value.as_ref(), &stored.revision));
            if !condition.holds(current) {
                return Err(condition.failure(key));
            }
            if matches!(condition, Condition::Absent) {
                return Ok(false);
            }
            // Pinned to the revision read, so the check above still holds when it applies.
            if self
                .remove_pinned(std::slice::from_ref(&stored), Removal::User)
                .await
                .map_err(|e| e.attempted(key, None))?
            {
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
        key::validate(key, self.layout.namespace.len())?;
        let revision = Revision::fresh();
        // The new revision and expiry; an item that gains an expiry is marked counted as
        // expiring (`cx`), and a sweep's mark left on a live item goes.
        let update = |condition: String| {
            self.layout
                .revise(key, &revision, None, expires, true)
                .condition(condition)
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
                Err(e) => return Err(KvError::from(e).attempted(key, Some(&revision))),
            }
            let now = self.now_ms();
            let before = match self.read(key).await? {
                Some(s) if s.is_live(now) => s,
                _ => return Err(Condition::Exists.failure(key)),
            };
            if before.counted_expiring || expires.is_none() {
                continue;
            }
            // Gains an expiry for the first time: the update and `+1` on `x`, together.
            let expressions = pin(Some(&before), true, self.now_ms());
            let mut slow = update(pin_condition(&expressions));
            slow.expressions
                .expression_attribute_names
                .extend(expressions.expression_attribute_names);
            slow.expressions
                .expression_attribute_values
                .extend(expressions.expression_attribute_values);
            let mut counts = BTreeMap::new();
            self.layout.count(key, Counts { n: 0, x: 1 }, &mut counts);
            let mut items = vec![TransactWriteItem::Update(slow)];
            items.extend(self.layout.counter_updates(counts, || self.pick_shard()));
            let sent = self.transact(&items).await;
            if sent
                .map_err(|e| e.attempted(key, Some(&revision)))?
                .applied()
            {
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
        // No stored name is longer than a segment, nor any folder longer than a partition
        // key leaves: nothing to list (and nothing to send DynamoDB, which would refuse
        // such a key condition).
        if folder.len() > key::max_folder_len(self.layout.namespace.len())
            || partial.len() > key::MAX_SEGMENT_LEN
        {
            return Ok(Vec::new());
        }
        let mut query = Query::new(&self.layout.table, "#pk = :pk")
            .name("#pk", "pk")
            .value(":pk", AttributeValue::B(self.layout.partition(folder)));
        if !partial.is_empty() {
            query = Query::new(&self.layout.table, "#pk = :pk AND begins_with(#sk, :p)")
                .name("#pk", "pk")
                .name("#sk", "sk")
                .value(":pk", AttributeValue::B(self.layout.partition(folder)))
                .value(":p", AttributeValue::B(Bytes::copy_from_slice(partial)));
        }
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
        loop {
            let asked = self.now_ms();
            let Some(page) = pages.next().await else {
                break;
            };
            let page = page?;
            let answered = self.now_ms();
            for item in page.items {
                match self.layout.row(&item)? {
                    Row::Counter(name, counts) => match &mut group {
                        Some((g, sum)) if *g == name => *sum += counts,
                        _ => {
                            flush(&mut group, &mut names);
                            group = Some((name, counts));
                        }
                    },
                    Row::Key(stored) => {
                        flush(&mut group, &mut names);
                        let live = match stored.judge(asked, answered) {
                            Judged::Live => true,
                            Judged::Gone => false,
                            // Expired while the page was in flight: read it on its own.
                            Judged::Uncertain => KvStore::get(self, &stored.key).await?.is_some(),
                        };
                        if live {
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
                if self
                    .live_entries(Some(&child), &child, &end, 16, 1)
                    .await?
                    .is_empty()
                {
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
        let page = u32::try_from(limit.saturating_add(FOLDER_SHARDS as usize))
            .unwrap_or(1000)
            .min(1000);
        self.live_entries(None, start, end, page, limit).await
    }

    #[tracing::instrument(level = "debug", skip_all, fields(start = %key::display(start), end = %key::display(end)))]
    async fn delete_range(&self, start: &[u8], end: &[u8]) -> Result<usize, KvError> {
        let now = self.now_ms();
        let items = self.collect(start, end, |_| true).await?;
        let removed = self.remove_all(items, &|_| true, Removal::User).await?;
        Ok(removed.iter().filter(|s| s.is_live(now)).count())
    }

    #[tracing::instrument(level = "debug", skip_all, fields(ops = ops.len()))]
    async fn transaction(&self, ops: Vec<TxnOp>) -> Result<Vec<Option<Revision>>, KvError> {
        txn::check(&ops, self.layout.namespace.len())?;
        let mut keys: Vec<&[u8]> = ops.iter().map(|op| op.key.as_slice()).collect();
        keys.sort_unstable();
        keys.dedup();
        // The key whose change refused the last attempt.
        let mut contended = None;
        for attempt in 1..=ATTEMPTS {
            // Read every key, run the steps on what is live, and pin each key's change to
            // its item as read: the transaction applies only if none of them changed.
            let stored = self.read_many(&keys).await?;
            let now = self.now_ms();
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
                        self.layout.count(k, delta, &mut counts);
                        let item = self.layout.item_of(
                            k,
                            value,
                            revision,
                            *expires,
                            expiring || was_counted,
                        );
                        let mut put = PutItem::new(&self.layout.table, item).condition(condition);
                        put.expressions = expressions;
                        TransactWriteItem::Put(put)
                    }
                    (txn::Net::Deleted, Some(b)) => {
                        let x = -i64::from(b.counted_expiring);
                        self.layout.count(k, Counts { n: -1, x }, &mut counts);
                        // A user's delete: reported as one, even of an item a sweep
                        // marked (see `remove_pinned`).
                        self.unmark(std::slice::from_ref(b)).await?;
                        let mut delete = DeleteItem::new(&self.layout.table, self.layout.key_of(k))
                            .condition(format!("{condition} AND attribute_not_exists(#sw)"));
                        delete.expressions = expressions;
                        TransactWriteItem::Delete(delete.name("#sw", SWEPT))
                    }
                    (txn::Net::Deleted | txn::Net::Unchanged, _) => {
                        let mut check = ConditionCheck::new(
                            &self.layout.table,
                            self.layout.key_of(k),
                            condition,
                        );
                        check.expressions = expressions;
                        TransactWriteItem::ConditionCheck(check)
                    }
                };
                items.push(item);
            }
            // Within DynamoDB's 100 items: `txn::check` counted every counter it may change.
            let counters = self.layout.counter_updates(counts, || self.pick_shard());
            items.extend(counters);
            let sent = self.transact(&items).await;
            match sent.map_err(|e| e.attempted_transaction(&plan.revisions))? {
                Transacted::Applied => return Ok(plan.revisions),
                // A key changed between the read and the write: read again.
                Transacted::NotApplied { refused } => {
                    contended = refused;
                    self.backoff(attempt).await;
                }
            }
        }
        Err(KvError::Contention {
            key: contended
                .or_else(|| keys.first().map(|k| key::display(k)))
                .unwrap_or_default(),
            attempts: ATTEMPTS,
        })
    }

    #[tracing::instrument(level = "debug", skip_all, fields(start = %key::display(start), end = %key::display(end)))]
    async fn sweep_expired(&self, start: &[u8], end: &[u8]) -> Result<usize, KvError> {
        let now = self.now_ms();
        let expired = move |s: &Stored| !s.is_live(now);
        let items = self.collect(start, end, expired).await?;
        // Mark each first (its watchers then report an expiry, not a delete); a mark that
        // fails found the entry changed, and the pinned delete below skips it too.
        let requests: Vec<UpdateItem> = items
            .iter()
            .map(|s| {
                UpdateItem::new(
                    &self.layout.table,
                    self.layout.key_of(&s.key),
                    "SET #sw = :true",
                )
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
        // Deleted only while marked (see `remove_pinned`): an entry whose mark a user's
        // delete took off is that delete's to remove, and is reported as one.
        let marked_and_expired = move |s: &Stored| s.swept && expired(s);
        Ok(self
            .remove_all(items, &marked_and_expired, Removal::Sweep)
            .await?
            .len())
    }

    fn watch(
        &self,
        prefix: &[u8],
        from: Option<Checkpoint>,
    ) -> BoxStream<'static, Result<WatchEvent, KvError>> {
        let source = super::watch::Source {
            client: self.client.clone(),
            layout: self.layout.clone(),
            clock: self.clock.clone(),
            safeguards: self.safeguards,
        };
        super::watch::watch(source, prefix.to_vec(), from, self.watch_keep_alive)
    }

    fn describe(&self) -> String {
        format!("dynamodb table {}", self.layout.table)
    }
}
