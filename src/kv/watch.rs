//! Watches of the DynamoDB store, read from the table's DynamoDB Stream.
//!
//! The stream is a set of shards; a shard is closed after a while (on AWS, about every
//! four hours) and replaced by children that carry on its key ranges. All changes to one
//! item are in one line of shards, in order. So the watcher reads every open shard, and
//! starts a child only when its parent has been read to its end: changes to one key come
//! out in order, none lost, none twice.
//!
//! A checkpoint holds, for each shard, the sequence number of the last record handed out
//! (for a child shard with no record handed out yet, the sequence number of its first
//! record; for a shard open when the watch began with no record handed out yet, an iterator
//! at the place the watch started in it, good for 15 minutes), and the shards read to
//! their end. A watch resumed from it reads every shard from exactly that place; one that
//! cannot (an iterator older than 15 minutes, a record past the stream's 24 hours, a shard
//! gone from the stream) fails with [`KvError::WatchLost`] rather than skip anything. So a
//! checkpoint never resumes "from the oldest record kept", which after a day would pass
//! over trimmed records in silence.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use futures::StreamExt;
use futures::stream::BoxStream;
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

use super::layout::{Layout, SWEPT};
use super::{Checkpoint, EventKind, KvError, WatchEvent};
use crate::dynamo::{DynamoClient, DynamoError, EventName, Shard, ShardPosition, StreamRecord};

/// The pause between polls of shards that had nothing new. DynamoDB Streams serves about
/// five GetRecords a second per shard, shared by all its readers: an idle watch takes two.
const IDLE_POLL: Duration = Duration::from_millis(500);
/// The pause after the stream refused a read for too many readers.
const THROTTLED_POLL: Duration = Duration::from_secs(2);
/// How often the shard list is read again, to find children of closed shards.
const SHARD_REFRESH: Duration = Duration::from_secs(10);
/// How far apart the reader's clock and the stream's creation times can be: AWS refuses a
/// request signed more than five minutes off its clock, and DynamoDB Local rounds creation
/// times down to the minute.
const CLOCK_MARGIN: Duration = Duration::from_secs(6 * 60);
/// How old an iterator can be: AWS expires them after 15 minutes.
const ITERATOR_LIFE: Duration = Duration::from_secs(15 * 60);
/// A shard younger than this has lost no record to the stream's 24 hours of keeping.
const UNTRIMMED_AGE: Duration = Duration::from_secs(23 * 3600);
/// Events buffered for a slow consumer before the reader waits.
const BUFFER: usize = 256;
/// How often shards held only by an iterator (nothing handed out from them yet) are read a
/// step further while the reader waits for a slow consumer or for a parent shard, so that
/// their iterators (good for 15 minutes) never expire.
const KEEP_ALIVE: Duration = Duration::from_secs(5 * 60);

/// A watch's place in the stream, as it travels in a [`Checkpoint`].
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct Position {
    /// The stream.
    stream: String,
    /// Per shard being read: where to go on.
    shards: BTreeMap<String, Resume>,
    /// When the watch began (seconds since the epoch, by the reader's clock): the place of
    /// every shard held by an iterator was taken then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    since: Option<u64>,
    /// Shards read to their end, but for those whose descendants are in the checkpoint
    /// (being read, or read to their end): the stream's lineage says those are done, and
    /// leaving them out keeps a checkpoint to the frontier of the stream, not its day of
    /// closed shards.
    done: BTreeSet<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Resume {
    /// After this record.
    After(String),
    /// At this record: a child shard's first, nothing handed out from it yet. Resumed at
    /// that sequence number, so that a resume after the stream trimmed it fails.
    From(String),
    /// From the shard's oldest record kept: written by earlier versions for what is now
    /// [`Resume::From`]; resumed at the shard's first sequence number as the stream lists
    /// it.
    TrimHorizon,
    /// At this iterator (a shard open when the watch began, nothing handed out from it
    /// yet): good for 15 minutes.
    Iterator(String),
}

impl Position {
    fn checkpoint(&self) -> Checkpoint {
        // Serialising plain strings and maps cannot fail.
        Checkpoint(format!(
            "dynamodb:{}",
            serde_json::to_string(self).unwrap_or_default()
        ))
    }

    fn parse(checkpoint: &Checkpoint) -> Result<Self, KvError> {
        checkpoint
            .0
            .strip_prefix("dynamodb:")
            .and_then(|json| serde_json::from_str(json).ok())
            .ok_or_else(|| KvError::WatchLost {
                problem: format!(
                    "`{}` is not a checkpoint of a DynamoDB store",
                    super::key::display(checkpoint.0.as_bytes())
                ),
            })
    }
}

/// The events under `prefix` of the store laid out as `layout`, read through `client`,
/// from now or after `from`.
pub(crate) fn watch(
    client: DynamoClient,
    layout: Layout,
    prefix: Vec<u8>,
    from: Option<super::Checkpoint>,
    keep_alive: Option<Duration>,
) -> BoxStream<'static, Result<WatchEvent, KvError>> {
    let (sender, receiver) = mpsc::channel(BUFFER);
    let task = tokio::spawn(async move {
        let mut reader = Reader {
            client,
            layout,
            prefix,
            sender,
            position: Position::default(),
            iterators: BTreeMap::new(),
            waiting: BTreeMap::new(),
            passed_before: BTreeMap::new(),
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
    prefix: Vec<u8>,
    sender: mpsc::Sender<Result<WatchEvent, KvError>>,
    position: Position,
    /// The iterator to read each open shard from next.
    iterators: BTreeMap<String, String>,
    /// Children whose parent is still being read: shard id to parent id.
    waiting: BTreeMap<String, String>,
    /// Shards read again from their oldest record after a young iterator was refused as
    /// trimmed: records created before this time (seconds since the epoch) were before
    /// the iterator, and are passed over.
    passed_before: BTreeMap<String, f64>,
    /// Each shard's parent, as the stream has listed them.
    parents: BTreeMap<String, String>,
    /// How often shards held by an iterator are kept alive ([`KEEP_ALIVE`]).
    keep_alive: Duration,
    /// When they last were.
    kept_alive: tokio::time::Instant,
}

/// Why reading stopped without an error: the consumer went away.
struct Gone;

impl Reader {
    async fn run(&mut self, from: Option<Checkpoint>) -> Result<(), KvError> {
        let stream = self.stream_arn().await?;
        match from {
            None => {
                self.position.stream = stream.clone();
                self.position.since = Some(seconds_now() as u64);
                for shard in self.describe(&stream).await? {
                    if shard.is_closed() {
                        self.position.done.insert(shard.shard_id);
                    } else {
                        self.open(&stream, &shard.shard_id, ShardPosition::Latest, None)
                            .await?;
                    }
                }
                self.prune_done();
            }
            Some(checkpoint) => {
                self.position = Position::parse(&checkpoint)?;
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

    /// The stream's shards, noting their lineage. Throttling that outlasts the client's
    /// retries is waited out here: a watch slows down under load, it does not end.
    async fn describe(&mut self, stream: &str) -> Result<Vec<Shard>, KvError> {
        let shards = loop {
            match self.client.describe_stream(stream).await {
                Ok(description) => break description.shards,
                Err(e) if is_throttled(&e) => {
                    tracing::debug!(error = %e, "stream description refused for now");
                    tokio::time::sleep(THROTTLED_POLL).await;
                }
                Err(e) => return Err(lost(e)),
            }
        };
        for shard in &shards {
            if let Some(parent) = &shard.parent_shard_id {
                self.parents.insert(shard.shard_id.clone(), parent.clone());
            }
        }
        Ok(shards)
    }

    /// The shards the stream's lineage says are done: every ancestor of a shard in the
    /// position (being read, or read to its end) that is not itself being read.
    fn finished_by_lineage(&self) -> BTreeSet<String> {
        let mut finished = BTreeSet::new();
        for start in self.position.shards.keys().chain(&self.position.done) {
            let mut at = start;
            // Bounded by the number of shards listed: lineage has no cycles, but a
            // malformed answer must not hang the reader.
            for _ in 0..=self.parents.len() {
                let Some(parent) = self.parents.get(at) else {
                    break;
                };
                if !self.position.shards.contains_key(parent) {
                    finished.insert(parent.clone());
                }
                at = parent;
            }
        }
        finished
    }

    /// Reads each shard held only by an iterator (nothing handed out from it yet) one
    /// record further, without handing anything out: an empty page gives a fresh iterator;
    /// a record makes the shard's place that record's sequence number, which does not
    /// expire. So a consumer that stalls, or a parent read for hours, never costs a
    /// shard its place.
    async fn keep_iterators_alive(&mut self) {
        self.kept_alive = tokio::time::Instant::now();
        let held: Vec<(String, String)> = self
            .position
            .shards
            .iter()
            .filter(|(_, r)| matches!(r, Resume::Iterator(_)))
            .filter_map(|(shard, _)| Some((shard.clone(), self.iterators.get(shard)?.clone())))
            .collect();
        let stream = self.position.stream.clone();
        for (shard, iterator) in held {
            let passing = self.passed_before.get(&shard).copied();
            let page = match self.client.get_records(&iterator, Some(1)).await {
                Ok(page) => page,
                // Left to the next poll, which deals with every failure.
                Err(e) => {
                    tracing::debug!(shard, error = %e, "keeping an iterator alive failed");
                    continue;
                }
            };
            match (page.records.first(), page.next_shard_iterator) {
                (Some(record), _) => {
                    let seq = record.sequence_number.clone();
                    let old = passing.is_some_and(|before| {
                        record.approximate_creation_time.is_some_and(|t| t < before)
                    });
                    // A record from before the watch is passed over; a later one is where
                    // the shard goes on.
                    let from = if old {
                        Resume::After(seq)
                    } else {
                        Resume::From(seq)
                    };
                    if let Err(e) = self.reopen(&stream, &shard, from.clone()).await {
                        // The next poll reopens it from there.
                        tracing::debug!(shard, error = %e, "reopening a kept shard failed");
                        self.position.shards.insert(shard, from);
                    }
                }
                (None, Some(next)) => {
                    // A shard read again from its oldest record keeps its refused iterator
                    // as its place: resumed, it is refused again and read so again.
                    if passing.is_none() {
                        self.position
                            .shards
                            .insert(shard.clone(), Resume::Iterator(next.clone()));
                    }
                    self.iterators.insert(shard, next);
                }
                // Closed with nothing after the iterator: the next poll finds it so.
                (None, None) => {}
            }
        }
    }

    /// Starts reading `shard` at `position`, to be resumed as `resume` says (`None`: at
    /// the iterator itself, good for 15 minutes).
    async fn open(
        &mut self,
        stream: &str,
        shard: &str,
        position: ShardPosition,
        resume: Option<Resume>,
    ) -> Result<(), KvError> {
        let iterator = self
            .client
            .get_shard_iterator(stream, shard, position)
            .await
            .map_err(|e| lost_shard(e, shard))?;
        let resume = resume.unwrap_or_else(|| Resume::Iterator(iterator.clone()));
        self.position.shards.insert(shard.to_owned(), resume);
        self.iterators.insert(shard.to_owned(), iterator);
        Ok(())
    }

    /// Reads `shard` again from where `resume` says, which must not be an iterator.
    async fn reopen(&mut self, stream: &str, shard: &str, resume: Resume) -> Result<(), KvError> {
        let position = match &resume {
            Resume::After(seq) => ShardPosition::AfterSequence(seq.clone()),
            Resume::From(seq) => return self.open_at_first(stream, shard, seq).await,
            Resume::TrimHorizon => {
                // An earlier version's checkpoint: the shard's first record as listed.
                let listed = self.describe(stream).await?;
                let Some(first) = listed
                    .into_iter()
                    .find(|s| s.shard_id == shard)
                    .map(|s| s.starting_sequence_number)
                else {
                    return Err(gone(shard));
                };
                return Box::pin(self.reopen(stream, shard, Resume::From(first))).await;
            }
            Resume::Iterator(_) => return Err(lost_iterator()),
        };
        self.open(stream, shard, position, Some(resume)).await
    }

    /// Starts reading `shard` at `first`, its first record (nothing handed out from it
    /// yet), to be resumed there. The stream lists a shard's first sequence number before
    /// any record has it; if it refuses that number, a shard younger than the stream's 24
    /// hours has lost nothing and is read from its oldest record, and an older one fails
    /// the watch rather than risk passing over trimmed records.
    async fn open_at_first(
        &mut self,
        stream: &str,
        shard: &str,
        first: &str,
    ) -> Result<(), KvError> {
        let at = ShardPosition::AtSequence(first.to_owned());
        let resume = Some(Resume::From(first.to_owned()));
        match self.client.get_shard_iterator(stream, shard, at).await {
            Ok(iterator) => {
                self.position
                    .shards
                    .insert(shard.to_owned(), Resume::From(first.to_owned()));
                self.iterators.insert(shard.to_owned(), iterator);
                Ok(())
            }
            Err(e) if e.code() == Some("ValidationException") => {
                if shard_age(shard, seconds_now()).is_some_and(|age| age < UNTRIMMED_AGE) {
                    self.open(stream, shard, ShardPosition::TrimHorizon, resume)
                        .await
                } else {
                    Err(KvError::WatchLost {
                        problem: format!(
                            "the stream refuses shard {shard}'s first sequence number ({e}), and the shard may be old enough to have lost records to the stream's 24 hours: start a new watch and re-read"
                        ),
                    })
                }
            }
            Err(e) => Err(lost_shard(e, shard)),
        }
    }

    /// Starts the shards that appeared since: each from its beginning, once its parent has
    /// been read to its end (or is gone from the stream, past its 24 hours).
    async fn adopt_new_shards(&mut self, stream: &str) -> Result<(), KvError> {
        let shards = self.describe(stream).await?;
        let known: BTreeSet<&str> = shards.iter().map(|s| s.shard_id.as_str()).collect();
        let lineage = self.finished_by_lineage();
        let finished = |id: &str| self.position.done.contains(id) || lineage.contains(id);
        let mut start = Vec::new();
        for shard in &shards {
            let id = &shard.shard_id;
            if finished(id) || self.iterators.contains_key(id) {
                continue;
            }
            let parent_pending = shard
                .parent_shard_id
                .as_ref()
                .is_some_and(|p| known.contains(p.as_str()) && !finished(p));
            if parent_pending {
                if let Some(parent) = &shard.parent_shard_id {
                    self.waiting.insert(id.clone(), parent.clone());
                }
            } else {
                start.push((id.clone(), shard.starting_sequence_number.clone()));
            }
        }
        for (id, first) in start {
            self.waiting.remove(&id);
            // Read from its first record, and resumed from exactly there: a child adopted
            // a day after its parent closed finds its trimmed head so, not in silence.
            self.open_at_first(stream, &id, &first).await?;
        }
        // Forget finished shards the stream no longer has (nothing can refer to them), and
        // those the lineage of the shards in the position says are done.
        self.position.done.retain(|id| known.contains(id.as_str()));
        self.prune_done();
        Ok(())
    }

    /// Leaves out of the position's finished shards those that are ancestors of another
    /// shard in it: [`finished_by_lineage`](Self::finished_by_lineage) finds them again.
    fn prune_done(&mut self) {
        let mut ancestors = BTreeSet::new();
        for start in self.position.shards.keys().chain(&self.position.done) {
            let mut at = start;
            for _ in 0..=self.parents.len() {
                let Some(parent) = self.parents.get(at) else {
                    break;
                };
                ancestors.insert(parent.clone());
                at = parent;
            }
        }
        self.position.done.retain(|id| !ancestors.contains(id));
    }

    /// One page of `shard`.
    async fn poll(&mut self, shard: &str) -> Result<Polled, KvError> {
        let Some(iterator) = self.iterators.get(shard).cloned() else {
            return Ok(Polled::Records(0));
        };
        let page = match self.client.get_records(&iterator, Some(1000)).await {
            Ok(page) => page,
            // A consumer slower than the iterator's 15 minutes: go on from the position.
            Err(e) if e.is_expired_iterator() => {
                let resume = self.position.shards.get(shard).cloned();
                let stream = self.position.stream.clone();
                match resume {
                    // Still passing over what came before the watch: from the oldest
                    // record again, with the same bound.
                    Some(Resume::Iterator(_)) if self.passed_before.contains_key(shard) => {
                        self.read_from_oldest(shard).await?;
                    }
                    Some(resume) => self.reopen(&stream, shard, resume).await?,
                    None => return Err(lost_shard(e, shard)),
                }
                return Ok(Polled::Records(0));
            }
            // An iterator younger than its 15 minutes refused as trimmed points before the
            // shard's first record: it was taken when the shard held none (DynamoDB Local
            // does this when other tables' writes move its shared counter on). Everything
            // in the shard came after it, so the shard is read from its oldest record.
            Err(e)
                if e.is_trimmed()
                    && matches!(self.position.shards.get(shard), Some(Resume::Iterator(_))) =>
            {
                self.read_from_oldest(shard).await?;
                return Ok(Polled::Records(0));
            }
            // Too many readers on the shard for now: slow down rather than give up.
            Err(e) if is_throttled(&e) => {
                tracing::debug!(shard, error = %e, "stream read refused for now");
                tokio::time::sleep(THROTTLED_POLL).await;
                return Ok(Polled::Records(0));
            }
            Err(e) => return Err(lost_shard(e, shard)),
        };
        let count = page.records.len();
        for record in page.records {
            let seq = record.sequence_number.clone();
            if let Some(before) = self.passed_before.get(shard) {
                if record
                    .approximate_creation_time
                    .is_some_and(|t| t < *before)
                {
                    // Passed over as if handed out: a checkpoint resumes after it.
                    self.position
                        .shards
                        .insert(shard.to_owned(), Resume::After(seq));
                    continue;
                }
                self.passed_before.remove(shard);
            }
            let event = self.event(record);
            self.position
                .shards
                .insert(shard.to_owned(), Resume::After(seq));
            if let Some(kind) = event
                && self.send(kind).await.is_err()
            {
                return Ok(Polled::Stopped);
            }
        }
        match page.next_shard_iterator {
            Some(next) => {
                if let Some(Resume::Iterator(at)) = self.position.shards.get_mut(shard)
                    && !self.passed_before.contains_key(shard)
                {
                    // Nothing handed out from this shard yet: keep the newest place.
                    *at = next.clone();
                }
                self.iterators.insert(shard.to_owned(), next);
                Ok(Polled::Records(count))
            }
            None => {
                self.iterators.remove(shard);
                self.passed_before.remove(shard);
                self.position.shards.remove(shard);
                self.position.done.insert(shard.to_owned());
                Ok(Polled::Closed)
            }
        }
    }

    /// Reads a shard held by an iterator from its oldest record, passing over the records
    /// created before the watch began (on AWS a shard can hold a day of them), less the
    /// clocks' margin: the watch may hand out a few minutes of records from before it
    /// began, never skip one from after. The shard's place stays the refused iterator, so
    /// that a resume does the same.
    async fn read_from_oldest(&mut self, shard: &str) -> Result<(), KvError> {
        let stream = self.position.stream.clone();
        let iterator = self
            .client
            .get_shard_iterator(&stream, shard, ShardPosition::TrimHorizon)
            .await
            .map_err(|e| lost_shard(e, shard))?;
        self.iterators.insert(shard.to_owned(), iterator);
        let began = match self.position.since {
            Some(since) => since as f64,
            // A checkpoint of an earlier version: the iterator is at most 15 minutes old.
            None => seconds_now() - ITERATOR_LIFE.as_secs_f64(),
        };
        self.passed_before
            .insert(shard.to_owned(), began - CLOCK_MARGIN.as_secs_f64());
        Ok(())
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
                // A sweep marks an expired entry before deleting it: the mark alone (the
                // revision unchanged) is no change to report.
                let marked = |i: &crate::dynamo::Item| i.contains_key(SWEPT);
                let rev = |i: &crate::dynamo::Item| i.get("rev").cloned();
                if let Some(old) = &record.old_image
                    && marked(&image)
                    && !marked(old)
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
    /// the buffer full, the shards held by an iterator are kept alive.
    async fn send(&mut self, kind: EventKind) -> Result<(), Gone> {
        let event = WatchEvent {
            kind,
            checkpoint: self.position.checkpoint(),
        };
        let sender = self.sender.clone();
        loop {
            let wait = self.keep_alive.saturating_sub(self.kept_alive.elapsed());
            tokio::select! {
                permit = sender.reserve() => {
                    permit.map_err(|_| Gone)?.send(Ok(event));
                    return Ok(());
                }
                () = tokio::time::sleep(wait) => self.keep_iterators_alive().await,
            }
        }
    }
}

enum Polled {
    Records(usize),
    Closed,
    Stopped,
}

/// Whether the stream refused a read for load (throttling that outlasted the client's
/// retries): nothing was lost, and a later read may succeed.
fn is_throttled(e: &DynamoError) -> bool {
    matches!(
        e.code(),
        Some(
            "LimitExceededException"
                | "ThrottlingException"
                | "ProvisionedThroughputExceededException"
                | "RequestLimitExceeded"
        )
    )
}

/// The reader's clock, in seconds since the epoch.
fn seconds_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// How old a shard is at `now` (seconds since the epoch), from its id: DynamoDB Streams
/// names shards `shardId-<creation time in milliseconds>-<suffix>`. `None` if the id says
/// nothing of the kind.
fn shard_age(shard: &str, now: f64) -> Option<Duration> {
    let millis: u64 = shard
        .strip_prefix("shardId-")?
        .split('-')
        .next()?
        .parse()
        .ok()?;
    Duration::try_from_secs_f64(now - millis as f64 / 1000.0).ok()
}

/// A checkpoint's shard that the stream no longer has (it drops a shard 24 hours after
/// the shard closed).
fn gone(shard: &str) -> KvError {
    KvError::WatchLost {
        problem: format!(
            "the checkpoint's shard {shard} is no longer in the stream (DynamoDB drops a shard 24 hours after it closes): start a new watch and re-read"
        ),
    }
}

/// [`lost`], for a read of `shard`: a shard the stream does not have is gone.
fn lost_shard(e: DynamoError, shard: &str) -> KvError {
    if e.code() == Some("ResourceNotFoundException") {
        gone(shard)
    } else {
        lost(e)
    }
}

fn lost_iterator() -> KvError {
    KvError::WatchLost {
        problem: "the checkpoint's shard iterator is over 15 minutes old (no event came from that shard since): start a new watch and re-read".into(),
    }
}

/// A read of the stream that can no longer go on from where it was.
fn lost(e: DynamoError) -> KvError {
    if e.is_expired_iterator() {
        lost_iterator()
    } else if e.is_trimmed() {
        KvError::WatchLost {
            problem: "the checkpoint points before the oldest record the stream keeps (24 hours): start a new watch and re-read".into(),
        }
    } else {
        e.into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shards_age_comes_from_its_id() {
        let shard = "shardId-00000001767225600000-0000000a";
        let day_later = 1_767_225_600.0 + 86_400.0;
        assert_eq!(
            shard_age(shard, day_later),
            Some(Duration::from_secs(86_400))
        );
        assert_eq!(shard_age("shardId-x-1", day_later), None);
        assert_eq!(shard_age("other", day_later), None);
        // A shard from the future (clocks apart) has no age, rather than a panic.
        assert_eq!(shard_age(shard, 0.0), None);
    }

    #[test]
    fn checkpoints_of_earlier_versions_still_parse() {
        let old = Checkpoint::from_text(
            r#"dynamodb:{"stream":"s","shards":{"a":"trim_horizon","b":{"after":"5"}},"done":["c"]}"#,
        );
        let position = Position::parse(&old).unwrap();
        assert!(matches!(position.shards["a"], Resume::TrimHorizon));
        assert_eq!(position.since, None);
    }
}
