//! Writing the store's items: creates with their counters, transactions, overwrites and
//! removals pinned to what was read, retried afresh on contention.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use bytes::Bytes;

use crate::dynamo::{
    AttributeValue, DeleteItem, DynamoClient, DynamoError, ExpressionAttributes, Item, PutItem,
    TransactWriteItem, UpdateItem,
};
use crate::kv::{Condition, KvError, Revision, TRANSACTION_MAX, key};

use super::{ATTEMPTS, DELETE_BATCH, DynamoKv};
use crate::kv::layout::{Counts, LIVE, SWEPT, Stored};

/// The placeholders that pin a key to its item as read: its revision (and that it is
/// still live at `now`, if `live_needed`), or its absence.
///
/// Liveness is left to the server whenever the write needs it, also for an item that has
/// expired between its read and `now`: the write is then refused as its condition would
/// refuse it. (Leaving the liveness out for an item no longer live at build time, as this
/// once did, let a retry after throttling write over an entry that a reader had already
/// seen gone, and bring it back.)
pub(super) fn pin(before: Option<&Stored>, live_needed: bool, now: u64) -> ExpressionAttributes {
    let mut expressions = ExpressionAttributes::default();
    let names = &mut expressions.expression_attribute_names;
    let values = &mut expressions.expression_attribute_values;
    match before {
        Some(s) => {
            names.insert("#rev".into(), "rev".into());
            values.insert(":rev".into(), s.revision.as_str().into());
            if live_needed {
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
pub(super) fn pin_condition(expressions: &ExpressionAttributes) -> String {
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
pub(super) fn batches(items: Vec<Stored>) -> Vec<Vec<Stored>> {
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
pub(super) fn names_the_clock(item: &TransactWriteItem) -> bool {
    item.expressions()
        .expression_attribute_values
        .contains_key(":now")
}

/// `items` with the current time they name (`:now`) set to `now`.
///
/// Safe for any later `now` where `:now` stands only in the condition that an entry is
/// live ([`LIVE`]): an entry that was expired stays expired, so a later time only refuses
/// more (a live entry the write relies on that has expired since), never less. An item
/// naming the time in any other way keeps the time it was built with.
fn at_time(items: &[TransactWriteItem], now: u64) -> Vec<TransactWriteItem> {
    let mut items = items.to_vec();
    for item in &mut items {
        let (condition, values) = item.condition_and_expressions();
        let only_liveness = condition.is_some_and(|c| !c.replace(LIVE, "").contains(":now"));
        if only_liveness && let Some(at) = values.expression_attribute_values.get_mut(":now") {
            *at = now.into();
        }
    }
    items
}

/// Who removes an item, which decides what its watchers are told.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Removal {
    /// A user's delete (`delete`, `delete_range`, a transaction's delete): `Deleted`.
    User,
    /// `sweep_expired`, after marking the item: `Expired`.
    Sweep,
}

/// How a transaction ended, short of an error.
pub(super) enum Transacted {
    Applied,
    /// A condition failed: something read changed. Read again and build it again.
    NotApplied {
        /// The first item whose condition failed, as a user names it.
        refused: Option<String>,
    },
}

impl Transacted {
    pub(super) fn applied(&self) -> bool {
        matches!(self, Self::Applied)
    }
}

/// Why a transaction that did not apply may apply when sent again unchanged.
enum Again {
    /// Throttled (as a whole, or an item's write): within the client's retry budget.
    Throttled,
    /// Another transaction in flight holds this item: contention, with backoff.
    Conflict(usize),
}

/// Whether (and why) a transaction that failed with `error`, which did not apply, may apply
/// when sent again as it is. `sent_once`: the client did not already retry top-level
/// throttling itself.
fn again(error: &DynamoError, sent_once: bool) -> Option<Again> {
    match error {
        DynamoError::TransactionCanceled { reasons, .. } => {
            if let Some(conflict) = reasons.iter().find(|r| r.is_conflict()) {
                Some(Again::Conflict(conflict.index))
            } else if reasons.iter().any(|r| r.is_throttling()) {
                Some(Again::Throttled)
            } else {
                None
            }
        }
        e if sent_once && e.is_retryable() => Some(Again::Throttled),
        _ => None,
    }
}

/// The client's retry policy kept for requests the store sends once per attempt and builds
/// again itself: attempts and time as the policy bounds them, and connections that could
/// not be opened at most `max_connect_attempts` times, as the client counts them.
struct Budget<'a> {
    client: &'a DynamoClient,
    started: tokio::time::Instant,
    attempts: u32,
    unreachable: u32,
}

impl<'a> Budget<'a> {
    fn new(client: &'a DynamoClient) -> Self {
        Self {
            client,
            started: tokio::time::Instant::now(),
            attempts: 0,
            unreachable: 0,
        }
    }

    /// The pause before sending again after `error`, or `None` once the policy says stop.
    fn next(&mut self, error: &DynamoError) -> Option<Duration> {
        self.attempts += 1;
        if matches!(error, DynamoError::Unreachable { .. }) {
            self.unreachable += 1;
        }
        self.client
            .next_delay(self.attempts, self.started)
            .filter(|_| self.unreachable < self.client.retry_config().max_connect_attempts)
    }
}

impl DynamoKv {
    /// Takes a sweep's mark off those of `items` that carry it, pinned to their
    /// revision, so that a user's delete of them is reported as a delete (the mark alone
    /// coming or going is no event). A mark that cannot come off found the item changed:
    /// the pinned delete after it fails too, and its caller reads again.
    pub(super) async fn unmark(&self, items: &[Stored]) -> Result<(), KvError> {
        for stored in items.iter().filter(|s| s.swept) {
            let unmark = UpdateItem::new(
                &self.layout.table,
                self.layout.key_of(&stored.key),
                "REMOVE #sw",
            )
            .condition("#rev = :rev")
            .name("#sw", SWEPT)
            .name("#rev", "rev")
            .value(":rev", stored.revision.as_str());
            match self.client.update_item(&unmark).await {
                Ok(_) => {}
                Err(e) if e.is_condition_failure() => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    /// A random folder counter shard, drawn from the store's clock like its pauses (a
    /// simulation's seed then picks the same shards again).
    pub(super) fn pick_shard(&self) -> u8 {
        let shards = Duration::from_nanos(u64::from(self.folder_shards));
        let drawn = self.clock.random_pause(shards).as_nanos();
        // Below the count whatever a clock answers.
        u8::try_from(drawn % u128::from(self.folder_shards)).unwrap_or(0)
    }

    /// A pause before trying again after `attempt` lost races, random within a bound that
    /// doubles each time, drawn from the store's clock (a simulation's seed replays it).
    pub(super) async fn backoff(&self, attempt: u32) {
        let cap = Duration::from_millis(5 << attempt.min(6));
        let pause = Duration::from_millis(1) + self.clock.random_pause(cap);
        tokio::time::sleep(pause).await;
    }
}

impl DynamoKv {
    /// One attempt of [`KvStore::write`] at leaving `revision`: `Ok(true)` applied,
    /// `Ok(false)` to be tried again (the key changed under it), or why it cannot apply.
    pub(super) async fn write_attempt(
        &self,
        key: &[u8],
        value: &Bytes,
        expires: Option<SystemTime>,
        condition: &Condition,
        revision: &Revision,
    ) -> Result<bool, KvError> {
        let expiring = expires.is_some();
        let item = self.layout.item_of(key, value, revision, expires, expiring);
        if let (Condition::Value(expected), false) =
            (condition, self.safeguards.compare_and_swap_conditional())
        {
            let now = self.now_ms();
            self.planted_compare_and_swap(key, item, expected, now)
                .await?;
            return Ok(true);
        }
        // The item as a refusal showed it, if it did.
        let mut shown = None;
        if matches!(condition, Condition::Absent) {
            if self
                .create_new(key, item.clone(), expiring)
                .await?
                .is_some()
            {
                return Ok(true);
            }
        } else {
            match self
                .overwrite(key, value, revision, expires, condition)
                .await?
            {
                Ok(()) => return Ok(true),
                Err(refusal) => {
                    shown = refusal
                        .old_item()
                        .map(|i| self.layout.stored(i))
                        .transpose()?;
                }
            }
            // No item came back: most often there is none (an emulator may leave the item
            // out of its answer, and then the create is refused): create it.
            if shown.is_none()
                && matches!(condition, Condition::Always)
                && self
                    .create_new(key, item.clone(), expiring)
                    .await?
                    .is_some()
            {
                return Ok(true);
            }
        }
        // Refused: find out why from the item itself.
        let before = match shown {
            Some(item) => Some(item),
            None => self.read(key).await?,
        };
        let Some(before) = before else {
            match condition {
                // Gone again since the create was refused: start over.
                Condition::Always | Condition::Absent => return Ok(false),
                _ => return Err(condition.failure(key)),
            }
        };
        let live = before.is_live(self.now_ms());
        let current = live.then_some((before.value.as_ref(), &before.revision));
        if !condition.holds(current) {
            return Err(condition.failure(key));
        }
        // The condition holds: the item is an expired one that `create` may replace, the
        // new entry gains an expiry the item is not counted for, or the item changed
        // between the refusal and the read.
        let live_needed = !matches!(condition, Condition::Always | Condition::Absent);
        let item = self.layout.item_of(
            key,
            value,
            revision,
            expires,
            expiring || before.counted_expiring,
        );
        if expiring && !before.counted_expiring {
            if self.overwrite_counting(&before, item, live_needed).await? {
                return Ok(true);
            }
        } else {
            // Pinned to the item as read, so its counters are right as they stand.
            let sent = self
                .send_fresh(|now| {
                    let expressions = pin(Some(&before), live_needed, now);
                    let mut put = PutItem::new(&self.layout.table, item.clone())
                        .condition(pin_condition(&expressions));
                    put.expressions = expressions;
                    async move { self.client.put_item_once(&put).await }
                })
                .await;
            match sent {
                Ok(_) => return Ok(true),
                Err(e) if e.is_condition_failure() && !e.is_ambiguous() => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(false)
    }

    /// Creates `key` (it has no item): the item and its counters, in one transaction.
    /// `Ok(None)`: an item appeared meanwhile.
    pub(super) async fn create_new(
        &self,
        key: &[u8],
        item: Item,
        expiring: bool,
    ) -> Result<Option<()>, KvError> {
        let mut counts = BTreeMap::new();
        let x = i64::from(expiring);
        self.layout.count(key, Counts { n: 1, x }, &mut counts);
        let mut items = vec![TransactWriteItem::Put(
            PutItem::new(&self.layout.table, item)
                .condition("attribute_not_exists(#pk)")
                .name("#pk", "pk"),
        )];
        items.extend(self.layout.counter_updates(counts, || self.pick_shard()));
        Ok(self.transact(&items).await?.applied().then_some(()))
    }

    /// Sends a transaction until it applies or a condition refuses it.
    ///
    /// Throttling (a top-level answer, or an item's cancellation reason) is retried within
    /// the client's retry policy, as the client retries a throttled single write; another
    /// transaction in flight on an item (a `TransactionConflict` reason) is contention,
    /// retried with backoff up to [`ATTEMPTS`] times and then reported as
    /// [`KvError::Contention`] naming that item. A transaction whose conditions name the
    /// current time (`:now`) is sent anew each time with the time it is sent; others are
    /// sent through the client, which resends a lost attempt with the same idempotency
    /// token. A failed condition comes back as [`Transacted::NotApplied`] for the caller
    /// to read again.
    pub(super) async fn transact(
        &self,
        items: &[TransactWriteItem],
    ) -> Result<Transacted, KvError> {
        let clocked = items.iter().any(names_the_clock);
        let mut budget = Budget::new(&self.client);
        let mut conflicts = 0;
        // Counter updates move to another shard when one in flight holds theirs, at most
        // this many times in all.
        const MOVES: u32 = 4 * ATTEMPTS;
        let mut moves = 0;
        let mut items = items.to_vec();
        loop {
            let sent = if clocked {
                let fresh = at_time(&items, self.now_ms());
                self.client.transact_write_items_once(&fresh).await
            } else {
                self.client.transact_write_items(&items).await
            };
            let error = match sent {
                Ok(()) => return Ok(Transacted::Applied),
                Err(e) => e,
            };
            if error.is_ambiguous() {
                return Err(error.into());
            }
            if let DynamoError::TransactionCanceled { reasons, .. } = &error
                && let Some(refused) = reasons.iter().find(|r| r.code == "ConditionalCheckFailed")
            {
                let refused = items
                    .get(refused.index)
                    .map(|i| self.layout.name_of(i.key()));
                return Ok(Transacted::NotApplied { refused });
            }
            let again = again(&error, clocked).filter(|a| {
                self.safeguards.throttled_transaction_retried()
                    || !matches!(
                        (a, &error),
                        (Again::Throttled, DynamoError::TransactionCanceled { .. })
                    )
            });
            match again {
                Some(Again::Throttled) => match budget.next(&error) {
                    Some(delay) => tokio::time::sleep(delay).await,
                    None => return Err(error.into()),
                },
                Some(Again::Conflict(index)) => {
                    // A folder counter's shard held by another transaction: any other
                    // shard serves, so go there at once rather than wait for this one.
                    // (Bounded: shards all held for that long is contention after all.)
                    if self.move_conflicting_shards
                        && moves < MOVES
                        && let Some(item) = items.get_mut(index)
                        && self.layout.reshard(item, || self.pick_shard())
                    {
                        moves += 1;
                        // A moment's pause, so that writers refused together do not all
                        // come back together.
                        self.backoff(0).await;
                        continue;
                    }
                    conflicts += 1;
                    if conflicts >= ATTEMPTS {
                        let key = items.get(index).map(|i| self.layout.name_of(i.key()));
                        return Err(KvError::Contention {
                            key: key.unwrap_or_else(|| format!("item {index} of a transaction")),
                            attempts: conflicts,
                        });
                    }
                    self.backoff(conflicts).await;
                }
                None => return Err(error.into()),
            }
        }
    }

    /// Sends a write built for the time it is sent, once per attempt, building it again
    /// with a fresh reading of the clock after a failure that did not apply it
    /// (throttling), within the client's retry policy. An ambiguous failure is returned at
    /// once: the write may have applied, and sending it again could apply it twice.
    pub(super) async fn send_fresh<T, F, Fut>(&self, mut attempt: F) -> Result<T, DynamoError>
    where
        F: FnMut(u64) -> Fut,
        Fut: Future<Output = Result<T, DynamoError>>,
    {
        let mut budget = Budget::new(&self.client);
        // The first attempt's reading, kept only for the planted bug that reuses it.
        let mut first = None;
        loop {
            let now = self.now_ms();
            let now = if self.safeguards.retry_reads_the_clock_again() {
                now
            } else {
                *first.get_or_insert(now)
            };
            match attempt(now).await {
                Err(e)
                    if !self.safeguards.refused_write_retried()
                        && e.code() == Some("TransactionConflictException") =>
                {
                    return Err(e);
                }
                Err(e) if e.is_retryable() && !e.is_ambiguous() => match budget.next(&e) {
                    Some(delay) => tokio::time::sleep(delay).await,
                    None => return Err(e),
                },
                other => return other,
            }
        }
    }

    /// Removes stored items exactly as read (pinned by revision), with their counters,
    /// in one transaction. `Ok(false)`: one of them changed meanwhile; nothing applied.
    /// `by`: a user's delete is reported to watchers as one even where a sweep marked the
    /// item (the mark comes off first, and must stay off); a sweep's as an expiry.
    pub(super) async fn remove_pinned(
        &self,
        items: &[Stored],
        by: Removal,
    ) -> Result<bool, KvError> {
        if by == Removal::User {
            self.unmark(items).await?;
        }
        // A sweep deletes only while its mark stays, a user's delete only while none is
        // there: whichever removes the item, its watchers are told who did.
        let condition = match by {
            Removal::User => "#rev = :rev AND attribute_not_exists(#sw)",
            Removal::Sweep => "#rev = :rev AND attribute_exists(#sw)",
        };
        let mut counts = BTreeMap::new();
        let mut writes = Vec::with_capacity(items.len());
        for stored in items {
            let x = -i64::from(stored.counted_expiring);
            self.layout
                .count(&stored.key, Counts { n: -1, x }, &mut counts);
            let delete = DeleteItem::new(&self.layout.table, self.layout.key_of(&stored.key))
                .condition(condition)
                .name("#rev", "rev")
                .name("#sw", SWEPT)
                .value(":rev", stored.revision.as_str());
            writes.push(TransactWriteItem::Delete(delete));
        }
        writes.extend(self.layout.counter_updates(counts, || self.pick_shard()));
        Ok(self.transact(&writes).await?.applied())
    }

    /// An overwrite of an existing item (live or not, per `condition`) by an update that
    /// leaves its counting as expiring (`cx`) as it is, so that the counters stay right
    /// without a read: a write without expiry applies whatever the item's `cx`; one with
    /// an expiry only over an item already counted as expiring (the caller handles the
    /// first expiry, which changes a counter, from a read). Sent once per attempt
    /// ([`send_fresh`](Self::send_fresh)): its condition is not refused by its own earlier
    /// application, and it names the time. `Ok(Err(_))`: refused, with the item as it
    /// stood if the server sent it.
    pub(super) async fn overwrite(
        &self,
        key: &[u8],
        value: &Bytes,
        revision: &Revision,
        expires: Option<SystemTime>,
        condition: &Condition,
    ) -> Result<Result<(), DynamoError>, KvError> {
        let counted = if expires.is_some() {
            " AND attribute_exists(#cx)"
        } else {
            ""
        };
        let build = |now: u64| {
            let mut update = self
                .layout
                .revise(key, revision, Some(value), expires, false)
                .name("#pk", "pk")
                .return_old_item_on_condition_failure();
            if expires.is_some() {
                update = update.name("#cx", "cx");
            }
            update = match condition {
                Condition::Always => update.condition(format!("attribute_exists(#pk){counted}")),
                Condition::Exists => {
                    update.condition(format!("attribute_exists(#pk) AND {LIVE}{counted}"))
                }
                Condition::Value(v) => update
                    .condition(format!(
                        "attribute_exists(#pk) AND #v = :expected AND {LIVE}{counted}"
                    ))
                    .value(":expected", AttributeValue::B(v.clone())),
                Condition::Revision(r) => update
                    .condition(format!(
                        "attribute_exists(#pk) AND #rev = :expected AND {LIVE}{counted}"
                    ))
                    .value(":expected", r.as_str()),
                Condition::Absent => update,
            };
            if !matches!(condition, Condition::Always) {
                update = update.value(":now", now);
            }
            update
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
                let update = build(now);
                async move { self.client.update_item_once(&update).await }
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
    pub(super) async fn overwrite_counting(
        &self,
        before: &Stored,
        item: Item,
        live_needed: bool,
    ) -> Result<bool, KvError> {
        let expressions = pin(Some(before), live_needed, self.now_ms());
        let mut put = PutItem::new(&self.layout.table, item).condition(pin_condition(&expressions));
        put.expressions = expressions;
        let mut counts = BTreeMap::new();
        self.layout
            .count(&before.key, Counts { n: 0, x: 1 }, &mut counts);
        let mut items = vec![TransactWriteItem::Put(put)];
        items.extend(self.layout.counter_updates(counts, || self.pick_shard()));
        Ok(self.transact(&items).await?.applied())
    }

    /// The planted bug: compare-and-swap as a read and a blind write.
    pub(super) async fn planted_compare_and_swap(
        &self,
        key: &[u8],
        item: Item,
        expected: &[u8],
        now: u64,
    ) -> Result<(), KvError> {
        match self.read(key).await? {
            Some(s) if s.is_live(now) && s.value.as_ref() == expected => {
                self.client
                    .put_item(&PutItem::new(&self.layout.table, item))
                    .await?;
                Ok(())
            }
            _ => Err(KvError::CompareFailed {
                key: key::display(key),
            }),
        }
    }

    /// Removes `items` as read, in transactions of [`DELETE_BATCH`]; a key that changed
    /// meanwhile is read again and removed if `pick` still wants it. Returns what was
    /// removed.
    pub(super) async fn remove_all(
        &self,
        items: Vec<Stored>,
        pick: &(dyn Fn(&Stored) -> bool + Send + Sync),
        by: Removal,
    ) -> Result<Vec<Stored>, KvError> {
        let mut removed = Vec::new();
        for batch in batches(items) {
            if self.remove_pinned(&batch, by).await? {
                removed.extend(batch);
                continue;
            }
            // Something in the batch changed: one key at a time, each from a fresh read.
            for stored in batch {
                let mut attempt = 0;
                let mut current = self.read(&stored.key).await?;
                while let Some(item) = current.filter(|s| pick(s)) {
                    attempt += 1;
                    if self.remove_pinned(std::slice::from_ref(&item), by).await? {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dynamo::{ConditionCheck, UpdateItem};

    fn key() -> Item {
        Item::from([("pk".to_owned(), AttributeValue::from("k"))])
    }

    #[test]
    fn only_the_liveness_condition_takes_a_later_time() {
        let live = ConditionCheck::new("t", key(), format!("#rev = :rev AND {LIVE}"))
            .value(":now", 1u64)
            .value(":rev", "r");
        let expired = UpdateItem::new("t", key(), "SET #sw = :true")
            .condition("#exp <= :now")
            .value(":now", 1u64);
        let items = [
            TransactWriteItem::ConditionCheck(live),
            TransactWriteItem::Update(expired),
        ];
        let later = at_time(&items, 7);
        let now_of = |item: &TransactWriteItem| {
            item.expressions().expression_attribute_values[":now"].clone()
        };
        assert_eq!(now_of(&later[0]), AttributeValue::from(7u64));
        // `#exp <= :now` would admit more at a later time: left as built.
        assert_eq!(now_of(&later[1]), AttributeValue::from(1u64));
    }
}
