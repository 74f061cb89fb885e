//! The in-process store: one ordered map behind a mutex, with the same semantics as the
//! DynamoDB store, for single-process use (the CLI's embedded default) and tests.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::ops::Bound;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::SystemTime;

use async_trait::async_trait;
use bytes::Bytes;
use futures::StreamExt;
use futures::stream::BoxStream;
use tokio::sync::broadcast;

use super::dynamo::DEFAULT_NAMESPACE;
use super::{
    Checkpoint, Condition, Entry, EventKind, KvError, KvStore, Revision, TxnOp, WatchEvent,
    check_write, key, txn, unix_ms,
};

/// Events kept for watches that resume from a checkpoint; older checkpoints are lost.
const RETAINED_EVENTS: usize = 65_536;

/// The in-process key-value store. Clones share one store.
///
/// ```
/// use bytes::Bytes;
/// use dynacommit::kv::{KvError, KvStore, MemoryKv};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), KvError> {
/// let kv = MemoryKv::new();
/// kv.create(b"/nodes/a", Bytes::from("up"), None).await?;
/// let again = kv.create(b"/nodes/a", Bytes::from("up"), None).await;
/// assert!(matches!(again, Err(KvError::AlreadyExists { .. })));
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct MemoryKv {
    inner: Arc<Inner>,
}

struct Inner {
    /// This store's identity in its checkpoints: a checkpoint of another store (or of an
    /// earlier one loaded from the same entries) is refused, not misread.
    id: u64,
    state: Mutex<State>,
    events: broadcast::Sender<(u64, EventKind)>,
}

#[derive(Default)]
struct State {
    entries: BTreeMap<Vec<u8>, Stored>,
    /// The sequence number of the last event.
    sequence: u64,
    /// The last events, for watches that resume.
    retained: VecDeque<(u64, EventKind)>,
}

#[derive(Clone)]
struct Stored {
    value: Bytes,
    revision: Revision,
    expires_ms: Option<u64>,
}

impl Stored {
    fn is_live(&self, now_ms: u64) -> bool {
        self.expires_ms.is_none_or(|e| e > now_ms)
    }

    fn entry(&self, key: &[u8]) -> Entry {
        Entry {
            key: key.to_vec(),
            value: self.value.clone(),
            revision: self.revision.clone(),
            expires: self.expires_ms.map(super::from_unix_ms),
        }
    }
}

impl std::fmt::Debug for MemoryKv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryKv").finish_non_exhaustive()
    }
}

impl Default for MemoryKv {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryKv {
    /// An empty store.
    pub fn new() -> Self {
        let (events, _) = broadcast::channel(RETAINED_EVENTS);
        Self {
            inner: Arc::new(Inner {
                id: rand::random(),
                state: Mutex::new(State::default()),
                events,
            }),
        }
    }

    /// A store holding `entries`, as [`snapshot`](Self::snapshot) gave them: each keeps
    /// its key, value, revision and expiry, so a conditional write made against the old
    /// store's revisions works against this one. A key given twice keeps its last entry;
    /// entries already expired are kept but absent, as in any store. Keys are taken as
    /// they are, unchecked (a store only ever hands out keys it accepted). Watches see
    /// only changes made after this: loading is no event.
    ///
    /// With [`snapshot`](Self::snapshot), this lets a process save the store and load it
    /// again later (the CLI's embedded default keeps it in a file this way):
    ///
    /// ```
    /// use bytes::Bytes;
    /// use dynacommit::kv::{KvError, KvStore, MemoryKv};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), KvError> {
    /// let kv = MemoryKv::new();
    /// let rev = kv.put(b"config/limits", Bytes::from("10"), None).await?;
    /// let saved = kv.snapshot();
    ///
    /// let loaded = MemoryKv::from_entries(saved);
    /// let entry = loaded.get(b"config/limits").await?;
    /// assert_eq!(entry.map(|e| e.revision), Some(rev.clone()));
    /// loaded.conditional_update(b"config/limits", &rev, Bytes::from("20"), None).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn from_entries(entries: impl IntoIterator<Item = Entry>) -> Self {
        let kv = Self::new();
        {
            let mut state = kv.state();
            for entry in entries {
                let stored = Stored {
                    value: entry.value,
                    revision: entry.revision,
                    expires_ms: entry.expires.map(unix_ms),
                };
                state.entries.insert(entry.key, stored);
            }
        }
        kv
    }

    /// Every live entry, in key order: what [`from_entries`](Self::from_entries) takes
    /// to rebuild the store. Expired entries are left out.
    pub fn snapshot(&self) -> Vec<Entry> {
        let now = unix_ms(SystemTime::now());
        let state = self.state();
        state
            .entries
            .iter()
            .filter(|(_, s)| s.is_live(now))
            .map(|(k, s)| s.entry(k))
            .collect()
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock cannot leave the map half-written (every change
        // is one insert or remove), so a poisoned lock is still a consistent map.
        self.inner.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records an event under the state lock, so that sequence order is change order.
    fn emit(&self, state: &mut State, kind: EventKind) {
        state.sequence += 1;
        if state.retained.len() == RETAINED_EVENTS {
            state.retained.pop_front();
        }
        state.retained.push_back((state.sequence, kind.clone()));
        // No receivers is fine: nobody is watching.
        let _ = self.inner.events.send((state.sequence, kind));
    }

    fn live<'a>(state: &'a State, key: &[u8], now_ms: u64) -> Option<&'a Stored> {
        state.entries.get(key).filter(|s| s.is_live(now_ms))
    }

    fn bounds(start: &[u8], end: &[u8]) -> (Bound<Vec<u8>>, Bound<Vec<u8>>) {
        let upper = if end.is_empty() {
            Bound::Unbounded
        } else {
            Bound::Excluded(end.to_vec())
        };
        (Bound::Included(start.to_vec()), upper)
    }

    /// Removes the entries in `start..end` that `pick` wants, reported to watchers as
    /// expiries if `swept`, else as deletes; returns how many of them were live and how
    /// many expired.
    fn remove_where(
        &self,
        start: &[u8],
        end: &[u8],
        swept: bool,
        pick: impl Fn(&Stored, u64) -> bool,
    ) -> (usize, usize) {
        if !end.is_empty() && end <= start {
            return (0, 0);
        }
        let now = unix_ms(SystemTime::now());
        let mut state = self.state();
        let doomed: Vec<Vec<u8>> = state
            .entries
            .range(Self::bounds(start, end))
            .filter(|(_, s)| pick(s, now))
            .map(|(k, _)| k.clone())
            .collect();
        let (mut live, mut expired) = (0, 0);
        for k in doomed {
            if let Some(stored) = state.entries.remove(&k) {
                if stored.is_live(now) {
                    live += 1;
                } else {
                    expired += 1;
                }
                let event = if swept {
                    EventKind::Expired { key: k }
                } else {
                    EventKind::Deleted { key: k }
                };
                self.emit(&mut state, event);
            }
        }
        (live, expired)
    }
}

#[async_trait]
impl KvStore for MemoryKv {
    async fn get(&self, key: &[u8]) -> Result<Option<Entry>, KvError> {
        key::validate(key, DEFAULT_NAMESPACE.len())?;
        let now = unix_ms(SystemTime::now());
        let state = self.state();
        Ok(Self::live(&state, key, now).map(|s| s.entry(key)))
    }

    async fn write(
        &self,
        key: &[u8],
        value: Bytes,
        expires: Option<SystemTime>,
        condition: Condition,
    ) -> Result<Revision, KvError> {
        check_write(key, &value, DEFAULT_NAMESPACE.len())?;
        let now = unix_ms(SystemTime::now());
        let mut state = self.state();
        let current = Self::live(&state, key, now).map(|s| (s.value.as_ref(), &s.revision));
        if !condition.holds(current) {
            return Err(condition.failure(key));
        }
        let stored = Stored {
            value,
            revision: Revision::fresh(),
            expires_ms: expires.map(unix_ms),
        };
        let revision = stored.revision.clone();
        let event = EventKind::Put(stored.entry(key));
        state.entries.insert(key.to_vec(), stored);
        self.emit(&mut state, event);
        Ok(revision)
    }

    async fn remove(&self, key: &[u8], condition: Condition) -> Result<bool, KvError> {
        key::validate(key, DEFAULT_NAMESPACE.len())?;
        let now = unix_ms(SystemTime::now());
        let mut state = self.state();
        let current = Self::live(&state, key, now).map(|s| (s.value.as_ref(), &s.revision));
        if !condition.holds(current) {
            return Err(condition.failure(key));
        }
        let Some(stored) = state.entries.remove(key) else {
            return Ok(false);
        };
        self.emit(&mut state, EventKind::Deleted { key: key.to_vec() });
        Ok(stored.is_live(now))
    }

    async fn keep_alive(
        &self,
        key: &[u8],
        expires: Option<SystemTime>,
    ) -> Result<Revision, KvError> {
        key::validate(key, DEFAULT_NAMESPACE.len())?;
        let now = unix_ms(SystemTime::now());
        let mut state = self.state();
        let Some(stored) = state.entries.get_mut(key).filter(|s| s.is_live(now)) else {
            return Err(Condition::Exists.failure(key));
        };
        stored.expires_ms = expires.map(unix_ms);
        stored.revision = Revision::fresh();
        let revision = stored.revision.clone();
        let event = EventKind::Put(stored.entry(key));
        self.emit(&mut state, event);
        Ok(revision)
    }

    async fn list(&self, prefix: &[u8]) -> Result<Vec<Vec<u8>>, KvError> {
        let now = unix_ms(SystemTime::now());
        let state = self.state();
        let mut names = BTreeSet::new();
        let end = key::prefix_end(prefix).unwrap_or_default();
        for (k, stored) in state.entries.range(Self::bounds(prefix, &end)) {
            if !stored.is_live(now) {
                continue;
            }
            let rest = &k[prefix.len()..];
            let name = match rest.iter().position(|b| *b == b'/') {
                Some(slash) => &rest[..=slash],
                None => rest,
            };
            names.insert(name.to_vec());
        }
        Ok(names.into_iter().collect())
    }

    async fn range(
        &self,
        start: &[u8],
        end: &[u8],
        limit: Option<usize>,
    ) -> Result<Vec<Entry>, KvError> {
        if !end.is_empty() && end <= start {
            return Ok(Vec::new());
        }
        let now = unix_ms(SystemTime::now());
        let state = self.state();
        Ok(state
            .entries
            .range(Self::bounds(start, end))
            .filter(|(_, s)| s.is_live(now))
            .take(limit.unwrap_or(usize::MAX))
            .map(|(k, s)| s.entry(k))
            .collect())
    }

    async fn delete_range(&self, start: &[u8], end: &[u8]) -> Result<usize, KvError> {
        Ok(self.remove_where(start, end, false, |_, _| true).0)
    }

    async fn transaction(&self, ops: Vec<TxnOp>) -> Result<Vec<Option<Revision>>, KvError> {
        txn::check(&ops, DEFAULT_NAMESPACE.len())?;
        let now = unix_ms(SystemTime::now());
        let mut state = self.state();
        let live: HashMap<Vec<u8>, Option<(Bytes, Revision)>> = ops
            .iter()
            .map(|op| {
                let current =
                    Self::live(&state, &op.key, now).map(|s| (s.value.clone(), s.revision.clone()));
                (op.key.clone(), current)
            })
            .collect();
        let plan = txn::plan(&ops, &live)?;
        for (k, net) in plan.changes {
            match net {
                txn::Net::Unchanged => {}
                txn::Net::Put {
                    value,
                    revision,
                    expires,
                } => {
                    let stored = Stored {
                        value,
                        revision,
                        expires_ms: expires.map(unix_ms),
                    };
                    let event = EventKind::Put(stored.entry(&k));
                    state.entries.insert(k, stored);
                    self.emit(&mut state, event);
                }
                txn::Net::Deleted => {
                    if state.entries.remove(&k).is_some() {
                        self.emit(&mut state, EventKind::Deleted { key: k });
                    }
                }
            }
        }
        Ok(plan.revisions)
    }

    async fn sweep_expired(&self, start: &[u8], end: &[u8]) -> Result<usize, KvError> {
        Ok(self
            .remove_where(start, end, true, |s, now| !s.is_live(now))
            .1)
    }

    fn watch(
        &self,
        prefix: &[u8],
        from: Option<Checkpoint>,
    ) -> BoxStream<'static, Result<WatchEvent, KvError>> {
        let prefix = prefix.to_vec();
        let id = self.inner.id;
        let resumed = from.as_ref().and_then(|c| parse_checkpoint(id, c).ok());
        // Subscribe and read the position under the lock: no event falls between them.
        let (receiver, now_at, replay) = {
            let state = self.state();
            let receiver = self.inner.events.subscribe();
            let replay = match from.as_ref().map(|c| parse_checkpoint(id, c)) {
                None => Ok(Vec::new()),
                Some(Err(e)) => Err(e),
                Some(Ok(after)) => {
                    let oldest = state.retained.front().map_or(state.sequence + 1, |e| e.0);
                    if after + 1 < oldest && after < state.sequence {
                        Err(KvError::WatchLost {
                            problem: format!(
                                "checkpoint {after} is older than the {RETAINED_EVENTS} events this store keeps; start a new watch and re-read"
                            ),
                        })
                    } else {
                        Ok(state
                            .retained
                            .iter()
                            .filter(|(seq, _)| *seq > after)
                            .cloned()
                            .collect())
                    }
                }
            };
            (receiver, state.sequence, replay)
        };
        let replay = match replay {
            Ok(events) => events,
            Err(e) => return futures::stream::iter([Err(e)]).boxed(),
        };
        // Resumed, Ready stands where the checkpoint did: the replay follows it.
        let ready = WatchEvent {
            kind: EventKind::Ready,
            checkpoint: checkpoint(id, resumed.unwrap_or(now_at)),
        };
        let head = futures::stream::iter(std::iter::once(Ok(ready)).chain(replay.into_iter().map(
            move |(seq, kind)| {
                Ok(WatchEvent {
                    kind,
                    checkpoint: checkpoint(id, seq),
                })
            },
        )));
        let tail = futures::stream::unfold(Some(receiver), move |receiver| async move {
            let mut receiver = receiver?;
            loop {
                match receiver.recv().await {
                    Ok((seq, kind)) if seq > now_at => {
                        return Some((
                            Ok(WatchEvent {
                                kind,
                                checkpoint: checkpoint(id, seq),
                            }),
                            Some(receiver),
                        ));
                    }
                    Ok(_) => continue,
                    // Events were dropped: end here, so that no consumer goes on past a gap.
                    Err(broadcast::error::RecvError::Lagged(n)) => {
                        return Some((
                            Err(KvError::WatchLost {
                                problem: format!(
                                    "the watcher fell {n} events behind; resume from its last checkpoint"
                                ),
                            }),
                            None,
                        ));
                    }
                    Err(broadcast::error::RecvError::Closed) => return None,
                }
            }
        });
        head.chain(tail)
            .filter(move |event| {
                let keep = match event {
                    Ok(e) => e.key().is_none_or(|k| k.starts_with(&prefix)),
                    Err(_) => true,
                };
                futures::future::ready(keep)
            })
            .boxed()
    }

    fn describe(&self) -> String {
        "in-process key-value store".to_owned()
    }
}

fn checkpoint(store: u64, sequence: u64) -> Checkpoint {
    Checkpoint(format!("memory:{store:016x}:{sequence}"))
}

fn parse_checkpoint(store: u64, checkpoint: &Checkpoint) -> Result<u64, KvError> {
    let (id, sequence) = checkpoint
        .0
        .strip_prefix("memory:")
        .and_then(|rest| rest.split_once(':'))
        .and_then(|(id, n)| Some((u64::from_str_radix(id, 16).ok()?, n.parse().ok()?)))
        .ok_or_else(|| KvError::WatchLost {
            problem: format!(
                "`{}` is not a checkpoint of an in-process store",
                checkpoint.0
            ),
        })?;
    if id != store {
        return Err(KvError::WatchLost {
            problem: "the checkpoint is of another in-process store (or of this one before it was reloaded): start a new watch and re-read".into(),
        });
    }
    Ok(sequence)
}
