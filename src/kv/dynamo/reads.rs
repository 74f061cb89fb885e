//! Reading the store's items: one or many keys, a folder's partition, ordered walks across
//! folders.

use std::collections::HashMap;

use bytes::Bytes;
use futures::StreamExt;

use crate::dynamo::{AttributeValue, GetItem, Item, Query};
use crate::kv::{Entry, KvError, KvStore, key};

use super::DynamoKv;
use crate::kv::layout::{Counts, Judged, Row, Stored};

impl DynamoKv {
    /// The item at `key`, expired or not, read consistently.
    pub(super) async fn read(&self, key: &[u8]) -> Result<Option<Stored>, KvError> {
        let item = self
            .client
            .get_item(&GetItem::new(&self.layout.table, self.layout.key_of(key)))
            .await?;
        item.as_ref().map(|i| self.layout.stored(i)).transpose()
    }

    /// The items at `keys` (expired or not), read consistently in one BatchGetItem.
    pub(super) async fn read_many<'k>(
        &self,
        keys: &[&'k [u8]],
    ) -> Result<HashMap<&'k [u8], Option<Stored>>, KvError> {
        let requested: Vec<Item> = keys.iter().map(|k| self.layout.key_of(k)).collect();
        let mut found: HashMap<Vec<u8>, Stored> = HashMap::new();
        for item in self
            .client
            .batch_get_item(&self.layout.table, &requested)
            .await?
        {
            let stored = self.layout.stored(&item)?;
            found.insert(stored.key.clone(), stored);
        }
        Ok(keys.iter().map(|k| (*k, found.remove(*k))).collect())
    }

    /// The query of `folder`'s partition for what may hold keys in `start..end` (`end`
    /// empty: no end), or `None` if nothing there can.
    pub(super) fn partition_query(
        &self,
        folder: &[u8],
        start: &[u8],
        end: &[u8],
        page: u32,
    ) -> Option<Query> {
        // No key sits in a folder longer than a partition key leaves.
        if folder.len() > key::max_folder_len(self.layout.namespace.len()) {
            return None;
        }
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
        // Bounds cut to the longest sort key DynamoDB takes select the same stored names
        // (none is longer): a lower bound so cut lets in names just below the bound,
        // which the walk's own range check leaves out; an upper bound so cut is exact.
        let cut = |b: Vec<u8>| b[..b.len().min(key::SORT_KEY_MAX)].to_vec();
        let (lower, upper) = (lower.map(cut), upper.map(cut));
        let condition = match (&lower, &upper) {
            (Some(lo), Some(hi)) if lo > hi => return None,
            (Some(_), Some(_)) => "#pk = :pk AND #sk BETWEEN :lo AND :hi",
            (Some(_), None) => "#pk = :pk AND #sk >= :lo",
            (None, Some(_)) => "#pk = :pk AND #sk <= :hi",
            (None, None) => "#pk = :pk",
        };
        let mut query = Query::new(&self.layout.table, condition)
            .name("#pk", "pk")
            .value(":pk", AttributeValue::B(self.layout.partition(folder)))
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
    ///
    /// Each key comes with the store's clock when its page was asked for and when it came
    /// (see [`Stored::judge`]).
    pub(super) async fn walk(
        &self,
        start: &[u8],
        end: &[u8],
        page: u32,
        visit: &mut (dyn FnMut(Stored, (u64, u64)) -> bool + Send),
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
    pub(super) fn walk_folder<'a>(
        &'a self,
        folder: Vec<u8>,
        start: &'a [u8],
        end: &'a [u8],
        page: u32,
        visit: &'a mut (dyn FnMut(Stored, (u64, u64)) -> bool + Send),
    ) -> futures::future::BoxFuture<'a, Result<bool, KvError>> {
        Box::pin(async move {
            let Some(query) = self.partition_query(&folder, start, end, page) else {
                return Ok(true);
            };
            let mut pages = Box::pin(self.client.query_pages(query));
            // The shards of one folder's counter sort together; their sum decides.
            let mut group: Option<(Vec<u8>, Counts)> = None;
            loop {
                let asked = self.now_ms();
                let Some(result) = pages.next().await else {
                    break;
                };
                let window = (asked, self.now_ms());
                for item in result?.items {
                    let row = self.layout.row(&item)?;
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
                            if in_range && !visit(stored, window) {
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

    /// The live entries with `start <= key < end` (`end` empty: no end), in key order, at
    /// most `limit`. Each is live at a moment its read could have been made; an entry that
    /// expired while its page was in flight is read again on its own (a `get`), and the
    /// walk goes on after it. `folder`: the folder every key of the range is in, where
    /// the caller knows it (the walk then starts there, without reading its parent).
    pub(super) async fn live_entries(
        &self,
        folder: Option<&[u8]>,
        start: &[u8],
        end: &[u8],
        page: u32,
        limit: usize,
    ) -> Result<Vec<Entry>, KvError> {
        let mut entries = Vec::new();
        let mut from = start.to_vec();
        loop {
            let mut uncertain = None;
            let mut visit = |stored: Stored, (asked, answered): (u64, u64)| {
                match stored.judge(asked, answered) {
                    Judged::Live => entries.push(stored.entry()),
                    Judged::Gone => {}
                    Judged::Uncertain => {
                        uncertain = Some(stored.key);
                        return false;
                    }
                }
                entries.len() < limit
            };
            match folder {
                Some(folder) => {
                    self.walk_folder(folder.to_vec(), &from, end, page, &mut visit)
                        .await?;
                }
                None => self.walk(&from, end, page, &mut visit).await?,
            }
            let Some(key) = uncertain else {
                return Ok(entries);
            };
            if let Some(entry) = KvStore::get(self, &key).await? {
                entries.push(entry);
            }
            if entries.len() >= limit {
                return Ok(entries);
            }
            // Just after `key`: the least key above it.
            from = [key.as_slice(), &[0]].concat();
        }
    }

    /// Every stored key in `start..end` that `pick` wants, as read.
    pub(super) async fn collect(
        &self,
        start: &[u8],
        end: &[u8],
        pick: impl Fn(&Stored) -> bool + Send + Sync,
    ) -> Result<Vec<Stored>, KvError> {
        let mut found = Vec::new();
        self.walk(start, end, 1000, &mut |stored, _| {
            if pick(&stored) {
                found.push(stored);
            }
            true
        })
        .await?;
        Ok(found)
    }
}
