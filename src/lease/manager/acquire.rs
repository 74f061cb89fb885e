//! Acquisition: a conditional write of the record, and waiting out (or reclaiming) another
//! holder's lease: `timeout x max_clock_skew_rate` unchanged on this process's own clock.

use std::future::Future;
use std::time::Duration;

use crate::lease::config::stale_after;
use crate::lease::pressure::Slot;
use crate::lease::record::{Expect, LeaseRecord, PutOutcome};

use super::errors::{AcquireError, LeaseError};
use super::lease::Lease;
use super::{LeaseManager, Waiting};

/// What a waiter does next.
pub(super) enum Turn {
    /// Reclaim this record (expired or released).
    Reclaim(LeaseRecord),
    /// The record is gone: start afresh.
    Fresh,
    /// The record is our own: a write whose answer we lost has landed.
    Ours(LeaseRecord),
}

/// How an acquisition starts.
pub(super) enum Start<Fut> {
    /// With a PutItem.
    Attempt,
    /// With a PutItem, this check of the caller's sent beside it.
    Beside(Fut),
    /// With the record as read just now (the caller's check passed): waiting for it if
    /// there is one, without a PutItem bound to be refused; a PutItem otherwise.
    Seen(Option<LeaseRecord>),
}

/// The answer to one acquisition attempt.
pub(super) enum Attempt {
    /// Written by this attempt, answered directly.
    Won,
    /// Found to be ours: this or an earlier attempt landed though its answer was lost.
    Ours(LeaseRecord),
    /// Held by another (or gone, `None`).
    Held(Option<LeaseRecord>),
}

impl LeaseManager {
    /// Takes the lease on (path, etag), waiting as long as another writer holds it.
    ///
    /// `check` is the operation's precondition (for a create: the object is absent). It
    /// runs on every poll while waiting, so a waiter learns at once that the holder's
    /// write has made its own pointless; its error ends the wait. It is not run again once
    /// the lease is won: if the lease [was taken over](Lease::was_taken_over), the
    /// holder's write may have landed since, and the caller must re-check under
    /// [`run_while_held`](Self::run_while_held), as [`run_guarded`](Self::run_guarded)
    /// does.
    ///
    /// The future may be dropped at any point; at worst a lease it wrote stays until it
    /// expires.
    pub async fn acquire<E, F, Fut>(
        &self,
        path: &str,
        etag: &str,
        check: F,
    ) -> Result<Lease, AcquireError<E>>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<(), E>>,
    {
        self.acquire_lease(self.unwon(path, etag, None), Start::Attempt, check)
            .await
    }

    /// [`acquire`](Self::acquire), advertising `value` in the record for as long as the
    /// lease is held (readable by anyone through [`LeaseTable::get`](crate::lease::LeaseTable::get)).
    pub async fn acquire_with_value<E, F, Fut>(
        &self,
        path: &str,
        etag: &str,
        value: &str,
        check: F,
    ) -> Result<Lease, AcquireError<E>>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<(), E>>,
    {
        self.acquire_lease(self.unwon(path, etag, Some(value)), Start::Attempt, check)
            .await
    }

    /// Adds a guarded operation's hold (lease won to operation done) to the moving average
    /// of holds, weighing it 1/8.
    pub(super) fn note_hold(&self, held: Duration) {
        use std::sync::atomic::Ordering;
        let held = u64::try_from(held.as_micros()).unwrap_or(u64::MAX).max(1);
        let _ = self
            .hold_micros
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |avg| {
                Some(if avg == 0 {
                    held
                } else {
                    avg - avg / 8 + held / 8
                })
            });
    }

    /// Pauses, if the last guarded operation in this directory of keys lost to another
    /// writer's, for a random time below one hold times 2 to the power of the losses in a
    /// row (at most 16 holds), but at most the poll interval. A writer that lost a version
    /// of a log to a commit in progress would otherwise be back at the next version with the rest of the losers and the
    /// winner, all sending PutItems while it is absent: one is written, the rest refused,
    /// and the pack meets again at the version after. Spread apart at random, and further
    /// the more they lose, they let the winner commit on alone while they catch up, and
    /// arrive at the head of the log one at a time (the back-off of a shared channel: a
    /// winner, which never loses, never pauses). Losses are counted per directory of keys
    /// (`pressure`), so a loss on one log does not delay commits to another table.
    pub(super) async fn back_off(&self, pressure: &Slot) {
        let Some(losses) = pressure.take_owed_pause() else {
            return;
        };
        let poll = self.config.poll_interval;
        let hold = self.average_hold().unwrap_or(poll / 16);
        // Never longer than a lease: a pause is to spread writers, not to outwait them.
        let bound = (hold * (1 << losses)).min(poll).min(self.config.timeout);
        self.clock.sleep(self.clock.random_pause(bound)).await;
    }

    /// The first pause of a wait on `seen`. A record written once and not released is a
    /// commit in progress (a fresh record, never renewed: ours carry when it was first
    /// taken and when written, 0.12.5's start at generation 0), whose outcome
    /// is likely known after about one hold of this manager's own (at least 1 ms, at most
    /// the poll interval): look then, once, rather than several times early. Otherwise
    /// (no holds seen yet, or a holder of another kind) start at 1/16 of the poll
    /// interval.
    pub(super) fn first_pause(&self, seen: &LeaseRecord) -> Duration {
        let poll = self.config.poll_interval;
        match self.average_hold() {
            Some(hold) if seen.is_written_once() && !seen.released => {
                hold.clamp(Duration::from_millis(1).min(poll), poll)
            }
            _ => (poll / 16).max(Duration::from_millis(1)),
        }
    }

    /// The moving average of this manager's holds (see `note_hold`), once there is one.
    pub(super) fn average_hold(&self) -> Option<Duration> {
        match self.hold_micros.load(std::sync::atomic::Ordering::Relaxed) {
            0 => None,
            micros => Some(Duration::from_micros(micros)),
        }
    }

    /// Takes `lease`, starting as `start` says: a check beside the first attempt, or a
    /// record read beforehand.
    ///
    /// Why the first check's answer may be trusted when that attempt wins: it wrote a
    /// record where there was none (`attribute_not_exists`). Every protocol write to the
    /// object is made under a record at (path, etag), which stays until TTL deletes it long
    /// after its last write (assumption 5), or until a release (which keeps it, marked).
    /// So no protocol write can land between the check's read and our record's creation
    /// in either order: one landing before our PutItem would have left a record there,
    /// one landing after it needs our record. That holds while the two are close in time;
    /// a caller re-checks under the lease if the attempt was answered `timeout x skew` or
    /// more after the check was sent, as [`run_guarded`](Self::run_guarded) does. A
    /// failed first check ends the acquisition, releasing a lease its attempt won.
    pub(super) async fn acquire_lease<E, F, Fut>(
        &self,
        mut lease: Lease,
        start: Start<Fut>,
        mut check: F,
    ) -> Result<Lease, AcquireError<E>>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<(), E>>,
    {
        // Every attempt of this acquisition is sent after this instant: a lease recognised
        // as ours without a direct answer runs from here (conservatively early).
        let started = self.clock.now();
        let mut expect = Expect::Absent;
        let mut generation = self.first_generation();
        let mut taken_over = false;
        let mut start = Some(start);
        loop {
            let sent = self.clock.now();
            lease.since_ms = Some(self.wall_ms());
            let attempt = match start.take() {
                // Held by another, as read: wait for it without writing.
                Some(Start::Seen(Some(found))) => Attempt::Held(Some(found)),
                None | Some(Start::Attempt | Start::Seen(None)) => {
                    self.try_put(&lease, generation, &expect).await?
                }
                Some(Start::Beside(first)) => {
                    let (checked, attempt) =
                        futures::future::join(first, self.try_put(&lease, generation, &expect))
                            .await;
                    // A failed check: the PutItem was wasted, and the next calls in this
                    // directory check first. (A pass here leaves the count alone: it is
                    // already zero.)
                    if checked.is_err() {
                        self.pressure.of(&lease.path).note_first_check(false);
                    }
                    if let Err(e) = checked {
                        // Nothing is to be written: a lease the attempt won goes at once.
                        match attempt {
                            Ok(Attempt::Won) => {
                                lease.won(generation, sent, false);
                                self.release_in_background(lease);
                            }
                            Ok(Attempt::Ours(record)) => {
                                lease.won(record.generation, started, false);
                                self.release_in_background(lease);
                            }
                            Ok(Attempt::Held(_)) | Err(_) => {}
                        }
                        return Err(AcquireError::Check(e));
                    }
                    attempt?
                }
            };
            let found = match attempt {
                Attempt::Won => {
                    lease.won(generation, sent, taken_over);
                    return Ok(lease);
                }
                Attempt::Ours(record) => {
                    lease.won(record.generation, started, taken_over);
                    return Ok(lease);
                }
                Attempt::Held(found) => found,
            };
            taken_over = true;
            let turn = match found {
                Some(found) => self.wait_for_turn(&lease, found, &mut check).await?,
                None => Turn::Fresh,
            };
            if let Turn::Ours(record) = &turn {
                tracing::debug!(path = %lease.path, generation = record.generation, "a lost write of ours landed while waiting");
                lease.won(record.generation, started, taken_over);
                return Ok(lease);
            }
            (expect, generation) = self.next_attempt(&lease, turn)?;
        }
    }

    /// One attempt at writing `lease` at `generation`.
    pub(super) async fn try_put(
        &self,
        lease: &Lease,
        generation: u64,
        expect: &Expect,
    ) -> Result<Attempt, LeaseError> {
        let mut record = self.record(lease, generation, false);
        // An acquisition's record is written when its lease is taken: one instant, read
        // once. (Read twice, the wall clock could cross a millisecond between the two, and
        // a fresh record would look renewed: waiters then take a commit in progress for a
        // holder of another kind and look for its outcome at the wrong time.)
        if let (Some(since), Some(holder)) = (lease.since_ms, record.holder.as_mut()) {
            holder.written_ms = since;
        }
        let ours = |found: &LeaseRecord| {
            if self.safeguards.recognise_own_record() {
                lease.is_ours(found)
            } else {
                found.is_written_by(&lease.owner, generation)
            }
        };
        Ok(match self.table.put(&record, expect).await {
            Ok(PutOutcome::Written) => Attempt::Won,
            Ok(PutOutcome::Conflict(Some(found))) if ours(&found) => {
                tracing::debug!(path = %lease.path, generation, "recognised our own lease");
                Attempt::Ours(found)
            }
            Ok(PutOutcome::Conflict(found)) => Attempt::Held(found),
            Err(e) if e.is_ambiguous() => {
                // The write may have landed: look before deciding.
                match self.read_back(lease).await? {
                    Some(found) if ours(&found) => Attempt::Ours(found),
                    other => Attempt::Held(other),
                }
            }
            Err(e) => return Err(e.into()),
        })
    }

    /// Reads `lease`'s record after an ambiguous write, trying a few times: giving up
    /// after one failed read would leave a record we may have written standing unused.
    pub(super) async fn read_back(&self, lease: &Lease) -> Result<Option<LeaseRecord>, LeaseError> {
        let mut failures = 0;
        loop {
            match self.table.get(&lease.path, &lease.etag).await {
                Ok(found) => return Ok(found),
                Err(e) if failures < 3 => {
                    failures += 1;
                    tracing::debug!(path = %lease.path, error = %e, "read-back failed; trying again");
                    self.clock.sleep(self.config.poll_interval).await;
                }
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// The condition and generation of the attempt that follows `turn`.
    pub(super) fn next_attempt(
        &self,
        lease: &Lease,
        turn: Turn,
    ) -> Result<(Expect, u64), LeaseError> {
        Ok(match turn {
            Turn::Fresh => (Expect::Absent, self.first_generation()),
            Turn::Reclaim(stale) | Turn::Ours(stale) => {
                let expect = if self.safeguards.reclaim_exactly_as_seen() {
                    stale.unchanged()
                } else {
                    Expect::Generation(stale.generation)
                };
                (expect, lease.after(stale.generation)?)
            }
        })
    }

    /// Takes the lease only if nobody holds it: it is absent or released. Never waits (a
    /// lease left by a dead holder is only known stale after watching it for
    /// `timeout x skew`, which [`acquire`](Self::acquire) does). `Ok(None)` if held.
    pub async fn try_acquire(
        &self,
        path: &str,
        etag: &str,
        value: Option<&str>,
    ) -> Result<Option<Lease>, LeaseError> {
        let mut lease = self.unwon(path, etag, value);
        let started = self.clock.now();
        let mut expect = Expect::Absent;
        let mut generation = self.first_generation();
        // At most: absent (gone meanwhile), then released; each step at most once.
        for _ in 0..3 {
            let sent = self.clock.now();
            lease.since_ms = Some(self.wall_ms());
            let turn = match self.try_put(&lease, generation, &expect).await? {
                Attempt::Won => {
                    lease.won(generation, sent, !matches!(expect, Expect::Absent));
                    return Ok(Some(lease));
                }
                Attempt::Ours(record) => {
                    lease.won(record.generation, started, true);
                    return Ok(Some(lease));
                }
                Attempt::Held(None) => Turn::Fresh,
                Attempt::Held(Some(found)) if found.released => Turn::Reclaim(found),
                Attempt::Held(Some(_)) => return Ok(None),
            };
            (expect, generation) = self.next_attempt(&lease, turn)?;
        }
        Ok(None)
    }

    /// Waits until `seen` is released, has stood unchanged for its timeout x skew rate,
    /// is gone, or turns out to be our own; polling the caller's check and the record
    /// meanwhile.
    pub(super) async fn wait_for_turn<E, F, Fut>(
        &self,
        lease: &Lease,
        mut seen: LeaseRecord,
        check: &mut F,
    ) -> Result<Turn, AcquireError<E>>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<(), E>>,
    {
        // The timer starts when the record has arrived: later than it was written, so the
        // holder's deadline (from before it was written) always passes first.
        let mut seen_at = self.clock.now();
        let began = seen_at;
        let mut told = false;
        // Most holds are a commit's few milliseconds: look again soon, then back off to
        // the poll interval, so short holds cost little waiting and long ones little load.
        let mut pause = self.first_pause(&seen);
        let rate = if self.safeguards.wait_timeout_times_skew() {
            self.config.max_clock_skew_rate
        } else {
            1
        };
        loop {
            if seen.released {
                // Released: the holder's operation is over, and it may have written. Look
                // once more before taking the lease (a check from before the release could
                // predate that write): losers of a create learn here that it is done,
                // without a PutItem each and a release each after it.
                if self.safeguards.recheck_after_takeover()
                    && let Err(e) = check().await
                {
                    self.pressure.of(&lease.path).note_loss();
                    return Err(AcquireError::Check(e));
                }
                return Ok(Turn::Reclaim(seen));
            }
            // A record's own timeout decides, within the bound any writer may configure.
            let stale = stale_after(seen.timeout.min(crate::lease::MAX_TIMEOUT), rate);
            let waited = self.clock.now().saturating_duration_since(seen_at);
            if waited >= stale {
                tracing::debug!(path = %seen.path, generation = seen.generation, ?waited, "reclaiming a stale lease");
                return Ok(Turn::Reclaim(seen));
            }
            if !told
                && let Some(observer) = &self.on_wait
                && self.clock.now().saturating_duration_since(began) >= Duration::from_secs(1)
            {
                told = true;
                observer(&Waiting {
                    path: seen.path.clone(),
                    etag: seen.etag.clone(),
                    generation: seen.generation,
                    holder: seen.value.clone(),
                    waited: self.clock.now().saturating_duration_since(began),
                    unchanged_for: waited,
                    reclaimable_in: stale - waited,
                });
            }
            self.clock.sleep(pause.min(stale - waited)).await;
            pause = (pause * 2).min(self.config.poll_interval);
            if let Err(e) = check().await {
                self.pressure.of(&lease.path).note_loss();
                return Err(AcquireError::Check(e));
            }
            match self.table.get(&seen.path, &seen.etag).await {
                Ok(None) => return Ok(Turn::Fresh),
                Ok(Some(now)) if lease.is_ours(&now) && self.safeguards.recognise_own_record() => {
                    return Ok(Turn::Ours(now));
                }
                Ok(Some(now)) => {
                    let changed = if self.safeguards.reclaim_exactly_as_seen() {
                        now != seen
                    } else {
                        (now.generation, now.released) != (seen.generation, seen.released)
                    };
                    if changed {
                        // Renewed, reclaimed, released, or deleted and written afresh:
                        // the clock starts again.
                        seen = now;
                        seen_at = self.clock.now();
                        told = false;
                    }
                }
                // A failed read only delays noticing a change: the timer stays sound, and
                // the reclaim is conditional on the record being exactly as seen.
                Err(e) => tracing::debug!(error = %e, "lease read failed while waiting"),
            }
        }
    }
}
