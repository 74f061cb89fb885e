//! Writing the store's items: creates with their counters, transactions, overwrites and
//! removals pinned to what was read, retried afresh on contention.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use crate::dynamo::{
    AttributeValue, DeleteItem, DynamoError, ExpressionAttributes, Item, PutItem, TransactWriteItem,
};
use crate::kv::{Condition, KvError, TRANSACTION_MAX, key, unix_ms};

use super::{ATTEMPTS, DELETE_BATCH, DynamoKv};
use crate::kv::layout::{Counts, LIVE, Stored};

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
    let values = match item {
        TransactWriteItem::Put(p) => &p.expressions,
        TransactWriteItem::Update(u) => &u.expressions,
        TransactWriteItem::Delete(d) => &d.expressions,
        TransactWriteItem::ConditionCheck(c) => &c.expressions,
    };
    values.expression_attribute_values.contains_key(":now")
}

/// How a transaction ended, short of an error.
pub(super) enum Transacted {
    Applied,
    /// A condition failed, or (for a transaction naming the time) it was refused for now:
    /// read again and build it again.
    NotApplied,
}

/// A short random pause before attempt `attempt + 1`, growing with the attempts.
pub(super) async fn backoff(attempt: u32) {
    let cap = 5u64 << attempt.min(6);
    tokio::time::sleep(Duration::from_millis(rand::random_range(1..=cap))).await;
}

impl DynamoKv {
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
        items.extend(self.layout.counter_updates(counts));
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
    pub(super) async fn transact(
        &self,
        items: &[TransactWriteItem],
    ) -> Result<Transacted, KvError> {
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
    pub(super) async fn send_fresh<T, F, Fut>(&self, mut attempt: F) -> Result<T, DynamoError>
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
    pub(super) async fn remove_pinned(&self, items: &[Stored]) -> Result<bool, KvError> {
        let mut counts = BTreeMap::new();
        let mut writes = Vec::with_capacity(items.len());
        for stored in items {
            let x = -i64::from(stored.counted_expiring);
            self.layout
                .count(&stored.key, Counts { n: -1, x }, &mut counts);
            writes.push(TransactWriteItem::Delete(
                DeleteItem::new(&self.layout.table, self.layout.key_of(&stored.key))
                    .condition("#rev = :rev")
                    .name("#rev", "rev")
                    .value(":rev", stored.revision.as_str()),
            ));
        }
        writes.extend(self.layout.counter_updates(counts));
        Ok(matches!(self.transact(&writes).await?, Transacted::Applied))
    }

    /// An overwrite of an existing item (live or not, per `condition`), which leaves the
    /// counters alone: so it applies only over an item counted as expiring exactly when
    /// the new one is (`cx`); the caller handles the other case from a read. Sent once per
    /// attempt ([`send_fresh`](Self::send_fresh)): its condition is not refused by its own
    /// earlier application, and it names the time. `Ok(Err(_))`: refused.
    pub(super) async fn overwrite(
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
            let mut put = PutItem::new(&self.layout.table, item.clone())
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
    pub(super) async fn overwrite_counting(
        &self,
        before: &Stored,
        item: Item,
        live_needed: bool,
    ) -> Result<bool, KvError> {
        let expressions = pin(Some(before), live_needed, unix_ms(SystemTime::now()));
        let mut put = PutItem::new(&self.layout.table, item).condition(pin_condition(&expressions));
        put.expressions = expressions;
        let mut counts = BTreeMap::new();
        self.layout
            .count(&before.key, Counts { n: 0, x: 1 }, &mut counts);
        let mut items = vec![TransactWriteItem::Put(put)];
        items.extend(self.layout.counter_updates(counts));
        Ok(matches!(self.transact(&items).await?, Transacted::Applied))
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
