//! Watches of the DynamoDB store, read from the table's DynamoDB Stream.
//!
//! The stream is a set of shards; a shard is closed after a while (on AWS, about every
//! four hours) and replaced by children that carry on its key ranges. All changes to one
//! item are in one line of shards, in order. So the watcher reads every open shard, and
//! starts a child only when its parent has been read to its end: changes to one key come
//! out in order, none lost, none twice.
//!
//! A checkpoint holds, for each shard being read, its place: after the last record handed
//! out; at a record read but not handed out; at a child shard's first sequence number; at
//! its oldest record, passing over what came before the watch began; or, for a shard open
//! when the watch began with nothing handed out yet, an iterator at the place the watch
//! started in it, good for 15 minutes (kept alive while the watch runs). It also holds
//! the shards read to their end whose children it has not reached, and the parents of
//! the shards it names, so that their ancestors are known done. A watch resumed from it
//! reads every shard from exactly that place; one that cannot (an iterator older than 15
//! minutes, a record past the stream's 24 hours, a shard gone from the stream) fails with
//! [`KvError::WatchLost`] rather than skip anything. So a checkpoint never resumes "from
//! the oldest record kept" without a bound, which after a day would pass over trimmed
//! records in silence.
//!
//! `position` is the place and its checkpoint, `shards` the reading of shards, `errors`
//! which answers end a watch.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use futures::stream::BoxStream;
use tokio::sync::mpsc;

use self::position::{Position, Resume};
use super::layout::{Layout, SWEPT};
use super::{Checkpoint, EventKind, KvError, WatchEvent};
use crate::dynamo::{DynamoClient, EventName, ShardPosition, StreamRecord};
use crate::lease::Clock;
use crate::safeguards::Safeguards;

mod errors;
mod position;
mod shards;

/// The pause between polls of shards that had nothing new. DynamoDB Streams serves about
/// five GetRecords a second per shard, shared by all its readers: an idle watch takes two.
const IDLE_POLL: Duration = Duration::from_millis(500);
/// The pause after the stream refused a read for too many readers.
const THROTTLED_POLL: Duration = Duration::from_secs(2);
/// How often the shard list is read again, to find children of closed shards.
const SHARD_REFRESH: Duration = Duration::from_secs(10);
/// Events buffered for a slow consumer before the reader waits.
const BUFFER: usize = 256;
/// How often shards held only by an iterator (nothing handed out from them yet) are read a
/// step further while the reader waits for a slow consumer or for a parent shard, so that
/// their iterators (good for 15 minutes) never expire.
const KEEP_ALIVE: Duration = Duration::from_secs(5 * 60);

/// How a watch reads: the store's client and layout, its wall clock (which judges the
/// ages of shards and of the watch), and its safeguards.
pub(crate) struct Source {
    pub(crate) client: DynamoClient,
    pub(crate) layout: Layout,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) safeguards: Safeguards,
}

/// The events under `prefix` of the store `source` reads, from now or after `from`.
pub(crate) fn watch(
    source: Source,
    prefix: Vec<u8>,
    from: Option<super::Checkpoint>,
    keep_alive: Option<Duration>,
) -> BoxStream<'static, Result<WatchEvent, KvError>> {
    let (sender, receiver) = mpsc::channel(BUFFER);
    let task = tokio::spawn(async move {
        let Source {
            client,
            layout,
            clock,
            safeguards,
        } = source;
        let mut reader = Reader {
            client,
            layout,
            clock,
            safeguards,
            prefix,
            sender,
            position: Position::default(),
            iterators: BTreeMap::new(),
            parents: BTreeMap::new(),
            keep_alive: keep_alive.unwrap_or(KEEP_ALIVE),
            kept_alive: tokio::time::Instant::now(),
        };
        if let Err(e) = reader.run(from).await {
            // The consumer may be gone already; then nobody needs the error.
            let _ = reader.sender.send(Err(e)).await;
        }
    });
    // Dropping the stream stops the reader.
    let guard = AbortOnDrop(task);
    futures::stream::unfold((receiver, guard), |(mut receiver, guard)| async move {
        receiver
            .recv()
            .await
            .map(|event| (event, (receiver, guard)))
    })
    .boxed()
}

struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

struct Reader {
    client: DynamoClient,
    /// The store's layout, to decode its records by.
    layout: Layout,
    /// The store's wall clock.
    clock: Arc<dyn Clock>,
    safeguards: Safeguards,
    prefix: Vec<u8>,
    sender: mpsc::Sender<Result<WatchEvent, KvError>>,
    position: Position,
    /// The iterator to read each open shard from next.
    iterators: BTreeMap<String, String>,
    /// Each shard's parent, as the stream has listed them.
    parents: BTreeMap<String, String>,
    /// How often shards held by an iterator are kept alive ([`KEEP_ALIVE`]).
    keep_alive: Duration,
    /// When they last were.
    kept_alive: tokio::time::Instant,
}

/// Why reading stopped without an error: the consumer went away.
struct Gone;

/// How a poll of a shard ended.
enum Polled {
    /// This many records read.
    Records(usize),
    /// The shard was read to its end.
    Closed,
    /// The consumer went away.
    Stopped,
}

impl Reader {
    async fn run(&mut self, from: Option<Checkpoint>) -> Result<(), KvError> {
        let stream = self.stream_arn().await?;
        match from {
            None => {
                self.position.stream = stream.clone();
                self.position.since = Some(self.seconds_now() as u64);
                for shard in self.describe(&stream).await? {
                    if shard.is_closed() {
                        self.position.unread.insert(shard.shard_id.clone());
                        self.position.done.insert(shard.shard_id);
                    } else {
                        self.open(&stream, &shard.shard_id, ShardPosition::Latest, None)
                            .await?;
                    }
                }
                self.position.prune(&self.parents);
            }
            Some(checkpoint) => {
                self.position = Position::parse(&checkpoint)?;
                // The lineage the checkpoint relied on, whatever the first listing shows.
                self.parents.extend(self.position.parents.clone());
                if self.position.stream != stream {
                    return Err(KvError::WatchLost {
                        problem: format!(
                            "the checkpoint is of stream {}, but the table's stream is now {stream} (it was turned off and on): start a new watch and re-read",
                            self.position.stream
                        ),
                    });
                }
                let resumes: Vec<(String, Resume)> = std::mem::take(&mut self.position.shards)
                    .into_iter()
                    .collect();
                for (shard, resume) in resumes {
                    match resume {
                        Resume::Iterator(iterator) => {
                            self.iterators.insert(shard.clone(), iterator.clone());
                            self.position
                                .shards
                                .insert(shard, Resume::Iterator(iterator));
                        }
                        other => self.reopen(&stream, &shard, other).await?,
                    }
                }
                self.adopt_new_shards(&stream).await?;
            }
        }
        if self.send(EventKind::Ready).await.is_err() {
            return Ok(());
        }
        let mut refreshed = tokio::time::Instant::now();
        loop {
            let mut any = false;
            let mut closed = false;
            let shards: Vec<String> = self.iterators.keys().cloned().collect();
            for shard in shards {
                // A child waits until its parent has been read to its end (a fresh watch
                // can find both open: DescribeStream is eventually consistent), so that
                // one key's changes come out in order.
                if self
                    .parents
                    .get(&shard)
                    .is_some_and(|p| self.iterators.contains_key(p))
                {
                    continue;
                }
                match self.poll(&shard).await? {
                    Polled::Records(n) => any |= n > 0,
                    Polled::Closed => closed = true,
                    Polled::Stopped => return Ok(()),
                }
            }
            if closed || refreshed.elapsed() >= SHARD_REFRESH {
                self.adopt_new_shards(&stream).await?;
                refreshed = tokio::time::Instant::now();
            }
            if self.kept_alive.elapsed() >= self.keep_alive {
                self.keep_iterators_alive().await;
            }
            if !any {
                if self.sender.is_closed() {
                    return Ok(());
                }
                tokio::time::sleep(IDLE_POLL).await;
            }
        }
    }

    /// The table's stream, which must show new and old images.
    async fn stream_arn(&self) -> Result<String, KvError> {
        let table = self.client.describe_table(&self.layout.table).await?;
        match (table.latest_stream_arn, table.stream_view_type) {
            (Some(arn), Some(crate::dynamo::StreamViewType::NewAndOldImages)) => Ok(arn),
            _ => Err(KvError::WatchLost {
                problem: format!(
                    "table {} has no stream of new and old images: run `DynamoKv::ensure_table` (or `dynacommit kv` once) to turn it on",
                    &self.layout.table
                ),
            }),
        }
    }

    /// What a record means to this watch, if anything.
    fn event(&self, record: StreamRecord) -> Option<EventKind> {
        let key = self.layout.decode_record_key(&record.keys)?;
        if !key.starts_with(&self.prefix) {
            return None;
        }
        match record.event_name {
            EventName::Insert | EventName::Modify => {
                let image = record.new_image?;
                // Every change of an entry gives it a new revision. What keeps the
                // revision is bookkeeping: a sweep's mark on an expired entry before it
                // deletes it, or a user's delete taking that mark off first. No event.
                let rev = |i: &crate::dynamo::Item| i.get("rev").cloned();
                if let Some(old) = &record.old_image
                    && rev(old) == rev(&image)
                {
                    return None;
                }
                self.layout.decode_image(&image).map(EventKind::Put)
            }
            EventName::Remove => {
                let swept = record
                    .old_image
                    .as_ref()
                    .is_some_and(|old| old.contains_key(SWEPT));
                if swept || record.by_ttl {
                    Some(EventKind::Expired { key })
                } else {
                    Some(EventKind::Deleted { key })
                }
            }
            EventName::Other(_) => None,
        }
    }

    /// Hands `kind` out with the checkpoint right after it. While a slow consumer keeps
    /// the buffer full, the shards held by an iterator are kept alive; the checkpoint is
    /// taken once the event has a place in the buffer, so that it carries their newest
    /// places (those places only change for equivalent ones meanwhile).
    async fn send(&mut self, kind: EventKind) -> Result<(), Gone> {
        let sender = self.sender.clone();
        loop {
            let wait = self.keep_alive.saturating_sub(self.kept_alive.elapsed());
            tokio::select! {
                permit = sender.reserve() => {
                    let event = WatchEvent {
                        kind,
                        checkpoint: self.position.checkpoint(),
                    };
                    permit.map_err(|_| Gone)?.send(Ok(event));
                    return Ok(());
                }
                () = tokio::time::sleep(wait) => self.keep_iterators_alive().await,
            }
        }
    }
}
