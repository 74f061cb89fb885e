//! Reading the stream's shards: listing them with their lineage, opening each at its place,
//! adopting children once their parents are read out, reading a page, and keeping the
//! places of shards held only by an iterator.

use std::collections::BTreeSet;
use std::time::Duration;

use super::errors::{gone, is_throttled, lost, lost_iterator, lost_shard};
use super::position::Resume;
use super::{Polled, Reader, THROTTLED_POLL};
use crate::dynamo::{DynamoError, Shard, ShardPosition};
use crate::kv::KvError;

/// How far apart the reader's clock and the stream's creation times can be: AWS refuses a
/// request signed more than five minutes off its clock, and DynamoDB Local rounds creation
/// times down to the minute.
const CLOCK_MARGIN: Duration = Duration::from_secs(6 * 60);
/// How old an iterator can be: AWS expires them after 15 minutes.
const ITERATOR_LIFE: Duration = Duration::from_secs(15 * 60);
/// A shard (or a watch) younger than this has lost no record to the stream's 24 hours of
/// keeping.
const UNTRIMMED_AGE: Duration = Duration::from_secs(23 * 3600);

impl Reader {
    /// The stream's shards, noting their lineage. Throttling that outlasts the client's
    /// retries is waited out here, keeping iterators alive meanwhile: a watch slows down
    /// under load, it does not end.
    pub(super) async fn describe(&mut self, stream: &str) -> Result<Vec<Shard>, KvError> {
        let shards = loop {
            match self.client.describe_stream(stream).await {
                Ok(description) => break description.shards,
                Err(e) if is_throttled(&e) => {
                    tracing::debug!(error = %e, "stream description refused for now");
                    self.wait_out_throttling().await;
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

    /// Reads each shard held only by an iterator (nothing handed out from it yet) one
    /// record further, without handing anything out: an empty page gives a fresh iterator;
    /// a record makes the shard's place that record, which does not expire; a refusal as
    /// trimmed sends the shard to be read from its oldest record. So a consumer that
    /// stalls, or a parent read for hours, never costs a shard its place.
    pub(super) async fn keep_iterators_alive(&mut self) {
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
            let page = match self.client.get_records(&iterator, Some(1)).await {
                Ok(page) => page,
                Err(e) if e.is_trimmed() => {
                    if let Err(e) = self.read_from_oldest(&shard).await {
                        tracing::debug!(shard, error = %e, "reading from the oldest failed");
                    }
                    continue;
                }
                // Left to the next poll, which deals with every failure.
                Err(e) => {
                    tracing::debug!(shard, error = %e, "keeping an iterator alive failed");
                    continue;
                }
            };
            match (page.records.first(), page.next_shard_iterator) {
                (Some(record), _) => {
                    let at = Resume::At(record.sequence_number.clone());
                    if let Err(e) = self.reopen(&stream, &shard, at.clone()).await {
                        // The next poll reopens it from there.
                        tracing::debug!(shard, error = %e, "reopening a kept shard failed");
                        self.position.shards.insert(shard, at);
                    }
                }
                (None, Some(next)) => {
                    self.position
                        .shards
                        .insert(shard.clone(), Resume::Iterator(next.clone()));
                    self.iterators.insert(shard, next);
                }
                // Closed with nothing after the iterator: the next poll finds it so.
                (None, None) => {}
            }
        }
    }

    /// Starts reading `shard` at `position`, to be resumed as `resume` says (`None`: at
    /// the iterator itself, good for 15 minutes).
    pub(super) async fn open(
        &mut self,
        stream: &str,
        shard: &str,
        position: ShardPosition,
        resume: Option<Resume>,
    ) -> Result<(), KvError> {
        let iterator = self
            .shard_iterator(stream, shard, position)
            .await
            .map_err(|e| lost_shard(e, shard))?;
        let resume = resume.unwrap_or_else(|| Resume::Iterator(iterator.clone()));
        self.position.shards.insert(shard.to_owned(), resume);
        self.iterators.insert(shard.to_owned(), iterator);
        Ok(())
    }

    /// An iterator over `shard` at `position`. Throttling that outlasts the client's
    /// retries is waited out, as for [`describe`](Self::describe): a watch slows down
    /// under load, it does not end.
    async fn shard_iterator(
        &mut self,
        stream: &str,
        shard: &str,
        position: ShardPosition,
    ) -> Result<String, DynamoError> {
        loop {
            match self
                .client
                .get_shard_iterator(stream, shard, position.clone())
                .await
            {
                Err(e) if is_throttled(&e) => {
                    tracing::debug!(shard, error = %e, "shard iterator refused for now");
                    self.wait_out_throttling().await;
                }
                other => return other,
            }
        }
    }

    /// The pause after a call refused for load that outlasted the client's retries,
    /// keeping the iterators alive when they are due.
    async fn wait_out_throttling(&mut self) {
        tokio::time::sleep(THROTTLED_POLL).await;
        if self.kept_alive.elapsed() >= self.keep_alive {
            // Boxed: keeping alive reopens shards, which may list the stream and ask for
            // iterators, both of which wait out throttling here.
            Box::pin(self.keep_iterators_alive()).await;
        }
    }

    /// Reads `shard` again from where `resume` says, which must not be an iterator.
    pub(super) async fn reopen(
        &mut self,
        stream: &str,
        shard: &str,
        resume: Resume,
    ) -> Result<(), KvError> {
        let position = match &resume {
            Resume::After(seq) => ShardPosition::AfterSequence(seq.clone()),
            Resume::At(seq) => ShardPosition::AtSequence(seq.clone()),
            Resume::From(_) if !self.safeguards.child_resumed_at_its_first_number() => {
                ShardPosition::TrimHorizon
            }
            Resume::From(seq) => return self.open_at_first(stream, shard, seq).await,
            Resume::Oldest => return self.read_from_oldest(shard).await,
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
                return self.open_at_first(stream, shard, &first).await;
            }
            Resume::Iterator(_) => return Err(lost_iterator()),
        };
        self.open(stream, shard, position, Some(resume)).await
    }

    /// Starts reading `shard` at `first`, its first sequence number as the stream listed
    /// it (nothing handed out from it yet), to be resumed there. The stream lists a
    /// shard's first sequence number before any record has it; if it refuses that
    /// number, a shard younger than the stream's 24 hours has lost nothing and is read
    /// from its oldest record, and an older one fails the watch rather than risk passing
    /// over trimmed records.
    pub(super) async fn open_at_first(
        &mut self,
        stream: &str,
        shard: &str,
        first: &str,
    ) -> Result<(), KvError> {
        let at = ShardPosition::AtSequence(first.to_owned());
        let resume = Some(Resume::From(first.to_owned()));
        match self.shard_iterator(stream, shard, at).await {
            Ok(iterator) => {
                self.position
                    .shards
                    .insert(shard.to_owned(), Resume::From(first.to_owned()));
                self.iterators.insert(shard.to_owned(), iterator);
                Ok(())
            }
            Err(e) if e.code() == Some("ValidationException") => {
                if shard_age(shard, self.seconds_now()).is_some_and(|age| age < UNTRIMMED_AGE) {
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
    pub(super) async fn adopt_new_shards(&mut self, stream: &str) -> Result<(), KvError> {
        let shards = self.describe(stream).await?;
        let known: BTreeSet<&str> = shards.iter().map(|s| s.shard_id.as_str()).collect();
        let lineage = self.position.finished_by_lineage(&self.parents);
        let finished = |id: &str| self.position.done.contains(id) || lineage.contains(id);
        let mut start = Vec::new();
        for shard in &shards {
            let id = &shard.shard_id;
            if finished(id) || self.iterators.contains_key(id) {
                continue;
            }
            // A new shard descends from shards this watch knows: those it read, is
            // reading or found finished. One listed under a parent the stream no longer
            // has and this watch never saw has lost that parent's records (dropped a day
            // after it closed, when this shard was created): adopting it would pass over
            // them in silence. A shard younger than that (by its id) cannot have lost its
            // parent yet: a listing that leaves the parent out is waited out.
            if let Some(parent) = &shard.parent_shard_id
                && !known.contains(parent.as_str())
                && !finished(parent)
                && !self.position.shards.contains_key(parent)
            {
                if shard_age(id, self.seconds_now()).is_some_and(|age| age < UNTRIMMED_AGE) {
                    continue;
                }
                return Err(KvError::WatchLost {
                    problem: format!(
                        "shard {id} is listed under shard {parent}, which the stream no longer has and this watch never read (the stream drops a shard a day after it closes): start a new watch and re-read"
                    ),
                });
            }
            let parent_pending = shard
                .parent_shard_id
                .as_ref()
                .is_some_and(|p| known.contains(p.as_str()) && !finished(p));
            // A child whose parent is still being read waits for a later listing.
            if !parent_pending {
                start.push((
                    id.clone(),
                    shard.starting_sequence_number.clone(),
                    self.may_predate_the_watch(shard),
                ));
            }
        }
        for (id, first, before_the_start) in start {
            if before_the_start {
                // A shard from before the watch began, which a listing too stale to show it
                // then left to now: what it holds from before the watch is no event of
                // this watch.
                self.read_from_oldest(&id).await?;
            } else {
                // Read from its first record, and resumed from exactly there: a child
                // adopted a day after its parent closed finds its trimmed head so, not in
                // silence.
                self.open_at_first(stream, &id, &first).await?;
            }
        }
        // Forget finished shards the stream no longer has (nothing can refer to them), and
        // those the lineage of the shards in the position says are done.
        self.position.done.retain(|id| known.contains(id.as_str()));
        self.position.prune(&self.parents);
        Ok(())
    }

    /// Whether a shard being adopted may hold records from before a fresh watch began: it
    /// was created (by its id) before the watch began, within the clocks' margin, or, for
    /// an id that does not say, its parent was closed when the watch began.
    fn may_predate_the_watch(&self, shard: &Shard) -> bool {
        let Some(since) = self.position.since else {
            // A watch resumed from an earlier version's checkpoint: as before.
            return false;
        };
        match shard_created(&shard.shard_id) {
            Some(created) => created < since as f64 + CLOCK_MARGIN.as_secs_f64(),
            None => shard
                .parent_shard_id
                .as_ref()
                .is_some_and(|p| self.position.unread.contains(p)),
        }
    }

    /// One page of `shard`.
    pub(super) async fn poll(&mut self, shard: &str) -> Result<Polled, KvError> {
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
                    Some(resume) => self.reopen(&stream, shard, resume).await?,
                    None => return Err(lost_shard(e, shard)),
                }
                return Ok(Polled::Records(0));
            }
            // An iterator younger than its 15 minutes refused as trimmed points before the
            // shard's first record: it was taken when the shard held none (DynamoDB Local
            // does this when other tables' writes move its shared counter on). Everything
            // in the shard came after it, so the shard is read from its oldest record (as
            // is one so read already whose oldest record has been trimmed meanwhile).
            Err(e)
                if e.is_trimmed()
                    && matches!(
                        self.position.shards.get(shard),
                        Some(Resume::Iterator(_) | Resume::Oldest)
                    ) =>
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
            if let Some(before) = self.passing_over(shard)
                && record.approximate_creation_time.is_some_and(|t| t < before)
            {
                // From before the watch began: passed over. The shard's place stays its
                // oldest record until one is handed out, so that a resume passes over the
                // same records.
                continue;
            }
            let seq = record.sequence_number.clone();
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
                if let Some(Resume::Iterator(at)) = self.position.shards.get_mut(shard) {
                    // Nothing handed out from this shard yet: keep the newest place.
                    *at = next.clone();
                }
                self.iterators.insert(shard.to_owned(), next);
                Ok(Polled::Records(count))
            }
            None => {
                self.iterators.remove(shard);
                self.position.shards.remove(shard);
                self.position.done.insert(shard.to_owned());
                Ok(Polled::Closed)
            }
        }
    }

    /// Reads a shard from its oldest record, passing over the records created before the
    /// watch began (on AWS a shard can hold a day of them), less the clocks' margin: the
    /// watch may hand out a few minutes of records from before it began, never skip one
    /// from after. Its place is [`Resume::Oldest`] until a record is handed out, so that a
    /// resume passes over the same records; a watch over a day old can no longer tell
    /// trimmed records from passed ones, and is lost.
    pub(super) async fn read_from_oldest(&mut self, shard: &str) -> Result<(), KvError> {
        let now = self.seconds_now();
        // A watch resumed from an earlier version's checkpoint: its iterators' places were
        // taken at most 15 minutes ago.
        let since = *self
            .position
            .since
            .get_or_insert((now - ITERATOR_LIFE.as_secs_f64()).max(0.0) as u64);
        if now - since as f64 > UNTRIMMED_AGE.as_secs_f64() {
            return Err(KvError::WatchLost {
                problem: format!(
                    "shard {shard} must be read from its oldest record, passing over what came before the watch began, but the watch began over a day ago and the stream may have trimmed what came after: start a new watch and re-read"
                ),
            });
        }
        let stream = self.position.stream.clone();
        self.open(
            &stream,
            shard,
            ShardPosition::TrimHorizon,
            Some(Resume::Oldest),
        )
        .await
    }

    /// The store's wall clock, in seconds since the epoch.
    pub(super) fn seconds_now(&self) -> f64 {
        self.clock.unix_time().as_secs_f64()
    }

    /// For a shard read from its oldest record (its place [`Resume::Oldest`]), the
    /// creation time (seconds since the epoch) before which its records came before the
    /// watch and are passed over: the watch's start, less the clocks' margin.
    fn passing_over(&self, shard: &str) -> Option<f64> {
        let since = self.position.since?;
        matches!(self.position.shards.get(shard), Some(Resume::Oldest))
            .then(|| since as f64 - CLOCK_MARGIN.as_secs_f64())
    }
}

/// When a shard was created (seconds since the epoch), from its id: DynamoDB Streams names
/// shards `shardId-<creation time in milliseconds>-<suffix>`. `None` if the id says
/// nothing of the kind.
fn shard_created(shard: &str) -> Option<f64> {
    let millis: u64 = shard
        .strip_prefix("shardId-")?
        .split('-')
        .next()?
        .parse()
        .ok()?;
    Some(millis as f64 / 1000.0)
}

/// How old a shard is at `now` (seconds since the epoch), from its id.
fn shard_age(shard: &str, now: f64) -> Option<Duration> {
    Duration::try_from_secs_f64(now - shard_created(shard)?).ok()
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
}
