//! How [`DynamoKv`](crate::kv::DynamoKv) lays out its items in the table (the table's own
//! shape is `crate::schema`'s): rows, partitions, folder counters, and decoding them back,
//! for the store and for its watches.
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

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use bytes::Bytes;

use super::{Entry, KvError, Revision, from_unix_ms, key, unix_ms};
use crate::dynamo::{AttributeValue, Item, TransactWriteItem, UpdateItem};

/// How many items each folder's counter is spread over.
pub const FOLDER_SHARDS: u8 = 8;

/// Where a store's items go: its table, its namespace, and how long TTL waits.
#[derive(Debug, Clone)]
pub(super) struct Layout {
    pub(super) table: String,
    pub(super) namespace: Vec<u8>,
    pub(super) ttl_grace: Option<Duration>,
}

/// The attribute a sweep marks an expired entry with before deleting it, so that watchers
/// tell its removal from a delete. A user's delete takes the mark off first and requires
/// it absent, so that its removal is reported as a delete whatever a sweep did before.
pub(super) const SWEPT: &str = "swept";

/// A stored item of this store, expired or not.
#[derive(Debug, Clone)]
pub(super) struct Stored {
    pub(super) key: Vec<u8>,
    pub(super) value: Bytes,
    pub(super) revision: Revision,
    pub(super) expires_ms: Option<u64>,
    /// Counted in its folders' `x` (see the module's layout notes).
    pub(super) counted_expiring: bool,
    /// Marked by a sweep about to delete it (see [`SWEPT`]).
    pub(super) swept: bool,
}

/// What a read can say of an entry's liveness, knowing only that DynamoDB read it at
/// some moment between `asked` and `answered` (ms since the epoch, the store's clock).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Judged {
    /// Live at that moment: it expires after the answer, or never.
    Live,
    /// Expired by then: it expired before the asking.
    Gone,
    /// It expired in between, on one side of that moment or the other. "Gone" could name
    /// a moment that never was (a later write may have replaced it before it expired):
    /// read it again.
    Uncertain,
}

impl Stored {
    pub(super) fn is_live(&self, now_ms: u64) -> bool {
        self.expires_ms.is_none_or(|e| e > now_ms)
    }

    /// This entry's liveness as read between `asked` and `answered`.
    pub(super) fn judge(&self, asked: u64, answered: u64) -> Judged {
        match self.expires_ms {
            None => Judged::Live,
            Some(e) if e > answered => Judged::Live,
            Some(e) if e <= asked => Judged::Gone,
            Some(_) => Judged::Uncertain,
        }
    }

    pub(super) fn entry(self) -> Entry {
        Entry {
            key: self.key,
            value: self.value,
            revision: self.revision,
            expires: self.expires_ms.map(from_unix_ms),
        }
    }
}

/// One item of a partition walk, in sort key order.
pub(super) enum Row {
    Key(Stored),
    /// A folder counter shard: the folder's name (with its `/`) and the shard's counts.
    Counter(Vec<u8>, Counts),
}

/// A folder counter's counts (or a change to them): `n` keys stored beneath, `x` of them
/// counted as expiring.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Counts {
    pub(super) n: i64,
    pub(super) x: i64,
}

impl std::ops::AddAssign for Counts {
    fn add_assign(&mut self, other: Self) {
        self.n += other.n;
        self.x += other.x;
    }
}

impl Counts {
    /// Certainly a live key beneath: one that never expires.
    pub(super) fn has_permanent(self) -> bool {
        self.n - self.x > 0
    }
}

/// The condition that an item is live, for expressions with `#exp` and `:now`.
pub(super) const LIVE: &str = "(attribute_not_exists(#exp) OR #exp > :now)";

/// Counter changes per folder: (the folder holding it, its name).
pub(super) type FolderCounts = BTreeMap<(Vec<u8>, Vec<u8>), Counts>;

impl Layout {
    pub(super) fn partition(&self, folder: &[u8]) -> Bytes {
        crate::schema::partition_key(&self.namespace, folder)
    }

    pub(super) fn item_key(&self, folder: &[u8], sort: &[u8]) -> Item {
        Item::from([
            ("pk".to_owned(), AttributeValue::B(self.partition(folder))),
            (
                "sk".to_owned(),
                AttributeValue::B(Bytes::copy_from_slice(sort)),
            ),
        ])
    }

    pub(super) fn key_of(&self, key: &[u8]) -> Item {
        let (folder, name) = key::split(key);
        self.item_key(folder, name)
    }

    /// The item of an entry; `counted` marks it counted in its folders' `x`.
    pub(super) fn item_of(
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

    /// An update of `key`'s existing item to `revision`, `value` (if given) and `expires`,
    /// leaving its counting as expiring (`cx`) as it is, or marking it counted when
    /// `mark_counted` and it gains an expiry; a sweep's mark on it goes. Its condition is
    /// the caller's.
    pub(super) fn revise(
        &self,
        key: &[u8],
        revision: &Revision,
        value: Option<&Bytes>,
        expires: Option<SystemTime>,
        mark_counted: bool,
    ) -> UpdateItem {
        let mut set = vec!["#rev = :new"];
        let mut remove = vec!["#sw"];
        let mut update = UpdateItem::new(&self.table, self.key_of(key), "")
            .name("#rev", "rev")
            .name("#sw", SWEPT)
            .name("#exp", "exp")
            .name("#ttl", "ttl")
            .value(":new", revision.as_str());
        if let Some(value) = value {
            set.push("#v = :v");
            update = update
                .name("#v", "v")
                .value(":v", AttributeValue::B(value.clone()));
        }
        match expires.map(unix_ms) {
            Some(ms) => {
                set.push("#exp = :e");
                update = update.value(":e", ms);
                if mark_counted {
                    set.push("#cx = :true");
                    update = update.name("#cx", "cx").value(":true", true);
                }
                match self.ttl_seconds(ms) {
                    Some(t) => {
                        set.push("#ttl = :t");
                        update = update.value(":t", t);
                    }
                    None => remove.push("#ttl"),
                }
            }
            None => remove.extend(["#exp", "#ttl"]),
        }
        update.update_expression = format!("SET {} REMOVE {}", set.join(", "), remove.join(", "));
        update
    }

    /// The TTL attribute for an entry expiring at `ms`: the expiry plus the grace, in whole
    /// seconds rounded up (`None`: no TTL deletion).
    pub(super) fn ttl_seconds(&self, ms: u64) -> Option<u64> {
        let grace = u64::try_from(self.ttl_grace?.as_millis()).unwrap_or(u64::MAX);
        Some(ms.saturating_add(grace).div_ceil(1000))
    }

    /// Reads an item of this store back: a key, a counter, or an error for a stranger.
    pub(super) fn row(&self, item: &Item) -> Result<Row, KvError> {
        let bytes = |name: &str| item.get(name).and_then(AttributeValue::as_bytes);
        let (Some(pk), Some(sk)) = (bytes("pk"), bytes("sk")) else {
            return Err(KvError::Malformed {
                key: "?".into(),
                problem: "no binary pk and sk".into(),
            });
        };
        let folder = self.folder_of(pk).ok_or_else(|| KvError::Malformed {
            key: key::display(pk),
            problem: "its partition is not in this store's namespace".into(),
        })?;
        let mut full = folder.to_vec();
        full.extend_from_slice(sk);
        let malformed = |problem: &str| KvError::Malformed {
            key: key::display(&full),
            problem: problem.to_owned(),
        };
        if is_counter(sk) {
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
            swept: item.contains_key(SWEPT),
        }))
    }

    pub(super) fn stored(&self, item: &Item) -> Result<Stored, KvError> {
        match self.row(item)? {
            Row::Key(stored) => Ok(stored),
            Row::Counter(name, _) => Err(KvError::Malformed {
                key: key::display(&name),
                problem: "a folder counter where a key was expected".into(),
            }),
        }
    }

    /// Moves `item`, if it is a folder counter update, to the shard of its folder that
    /// `shard` picks: for a transaction refused because another in flight holds its
    /// shard, which any other shard serves as well. `false` for any other item (a key:
    /// true contention).
    pub(super) fn reshard(&self, item: &mut TransactWriteItem, shard: impl FnOnce() -> u8) -> bool {
        let TransactWriteItem::Update(update) = item else {
            return false;
        };
        let Some(AttributeValue::B(sk)) = update.key.get("sk") else {
            return false;
        };
        if !is_counter(sk) {
            return false;
        }
        let mut moved = sk.to_vec();
        if let Some(last) = moved.last_mut() {
            *last = shard();
        }
        update
            .key
            .insert("sk".to_owned(), AttributeValue::B(Bytes::from(moved)));
        true
    }

    /// `delta` on one shard of each folder `key` sits in.
    pub(super) fn count(&self, key: &[u8], delta: Counts, counts: &mut FolderCounts) {
        for (parent, name) in key::folders(key) {
            *counts.entry((parent.to_vec(), name.to_vec())).or_default() += delta;
        }
    }

    /// The counter updates for `counts`, each on the shard of its folder that `shard`
    /// picks (at random; below [`FOLDER_SHARDS`] but in a benchmark of that number).
    pub(super) fn counter_updates(
        &self,
        counts: FolderCounts,
        mut shard: impl FnMut() -> u8,
    ) -> Vec<TransactWriteItem> {
        counts
            .into_iter()
            .filter(|(_, delta)| *delta != Counts::default())
            .map(|((parent, name), delta)| {
                let mut sort = name;
                sort.push(shard());
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

    /// The folder a partition key of this store's namespace names.
    fn folder_of<'p>(&self, pk: &'p [u8]) -> Option<&'p [u8]> {
        pk.strip_prefix(self.namespace.as_slice())?
            .strip_prefix(&[0][..])
    }

    /// An item's folder and sort key, and whether it is a folder counter; `None` for an
    /// item outside this store's namespace.
    fn place<'i>(&self, keys: &'i Item) -> Option<(&'i [u8], &'i [u8], bool)> {
        let bytes = |name: &str| keys.get(name).and_then(AttributeValue::as_bytes);
        let (pk, sk) = (bytes("pk")?, bytes("sk")?);
        Some((self.folder_of(pk)?, sk, is_counter(sk)))
    }

    /// An item's key as a user names it: the entry's key, or a folder counter's folder
    /// (`a/b/ (folder counter)`); for errors.
    pub(super) fn name_of(&self, item: &Item) -> String {
        match self.place(item) {
            Some((folder, sk, false)) => key::display(&[folder, sk].concat()),
            Some((folder, sk, true)) => {
                let name = &sk[..sk.len() - 1];
                format!(
                    "{} (folder counter)",
                    key::display(&[folder, name].concat())
                )
            }
            None => "an item of another application".to_owned(),
        }
    }

    /// A stream record's item, as this store's key; `None` for counters and other
    /// namespaces.
    pub(super) fn decode_record_key(&self, keys: &Item) -> Option<Vec<u8>> {
        let (folder, sk, counter) = self.place(keys)?;
        (!counter).then(|| [folder, sk].concat())
    }

    /// A stream image as an entry (live or not: the watcher decides).
    pub(super) fn decode_image(&self, image: &Item) -> Option<Entry> {
        match self.row(image) {
            Ok(Row::Key(stored)) => Some(stored.entry()),
            _ => None,
        }
    }
}

/// Whether a sort key names a folder counter's shard: the folder's name, its `/` and one
/// byte of shard (a key's name holds no `/`).
fn is_counter(sk: &[u8]) -> bool {
    sk.len() >= 2 && sk[sk.len() - 2] == b'/'
}
