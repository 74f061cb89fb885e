//! Ending a lease: releasing it now, in the background, once quiet, or (a create's lease
//! kept for its object's deletion) deferred.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::lease::lock;
use crate::lease::record::PutOutcome;

use super::LeaseManager;
use super::errors::LeaseError;
use super::guard::LeaseEnd;
use super::guard::Sent;
use super::lease::Lease;

/// Background releases in flight, and a way to wait for none.
#[derive(Debug, Default)]
pub(super) struct Background {
    in_flight: std::sync::atomic::AtomicUsize,
    done: tokio::sync::Notify,
}

/// One background release in flight: counted off when dropped.
struct InFlight(Arc<Background>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0
            .in_flight
            .fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
        self.0.done.notify_waiters();
    }
}

/// Leases of creates that succeeded, kept unreleased until their object is deleted (see
/// [`LeaseManager::keep_create_leases`]): at most [`DEFERRED_MAX`], the oldest
/// forgotten first, each for at most the record TTL.
#[derive(Debug, Default)]
pub(super) struct Deferred {
    by_key: std::collections::HashMap<String, Lease>,
    /// Keys in the order they came, with when: the oldest go first.
    order: std::collections::VecDeque<(String, String, Instant)>,
}

/// How many finished creates' leases a manager keeps for release on delete.
pub(super) const DEFERRED_MAX: usize = 10_000;

impl Deferred {
    pub(super) fn keep(&mut self, lease: Lease, now: Instant, ttl: Duration) {
        while let Some((key, owner, at)) = self.order.front()
            && (self.order.len() >= DEFERRED_MAX || now.saturating_duration_since(*at) >= ttl)
        {
            // Forgotten, not released: a re-create after a delete waits for it to expire.
            if self.by_key.get(key).is_some_and(|l| &l.owner == owner) {
                self.by_key.remove(key);
            }
            self.order.pop_front();
        }
        // Dated by the record's last write, not by now: a lease kept again (its path's
        // create checked and found the object there) is still forgotten once its record
        // may have expired.
        self.order
            .push_back((lease.path.clone(), lease.owner.clone(), lease.written_at));
        self.by_key.insert(lease.path.clone(), lease);
    }
}

impl LeaseManager {
    /// Keeps a successful create's lease (etag `*`) unreleased until `CommitStore`
    /// deletes the object (or renames it away), instead of releasing it in the background
    /// at once as every other lease is: one DynamoDB write per create instead of two, for
    /// logs of create-only files where nothing is deleted and created again by anyone but
    /// this manager (a Delta log).
    ///
    /// The object's existence already stops every later create of the path (their check
    /// fails at once), so the release serves only a re-create after a delete. With kept
    /// leases, a path deleted by anyone else (another process, a lifecycle rule, a plain
    /// S3 client, an object_store 0.12.5 writer) or after this process restarted, or
    /// after the manager forgot the lease (it keeps 10,000, each for the record TTL), is
    /// created again only once the record expires, `timeout x skew` (60 s by default)
    /// after the create, as with object_store 0.12.5. By default creates are released,
    /// off the critical path, and a re-create after a delete by anyone is immediate.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use dynacommit::lease::{LeaseConfig, LeaseManager, MemoryLeaseTable};
    /// let leases = LeaseManager::new(Arc::new(MemoryLeaseTable::new()), LeaseConfig::default())
    ///     .unwrap()
    ///     .keep_create_leases();
    /// # let _ = leases;
    /// ```
    pub fn keep_create_leases(mut self) -> Self {
        self.deferred = Some(Arc::default());
        self
    }

    /// Releases (in the background) the lease of the create of `path` (the lease key) that
    /// this manager kept unreleased, if any: call once the object is deleted, so that it
    /// can be created again at once. A no-op otherwise.
    pub fn release_deferred(&self, path: &str) {
        if let Some(lease) = self.take_deferred(path) {
            // Off the delete's path: a DynamoDB outage must not hold up deletes that
            // succeeded, and a re-create that comes first sees the release on its next
            // poll ([`settled`](Self::settled) waits for it).
            self.release_in_background(lease);
        }
    }

    /// Keeps a finished create's lease for [`release_deferred`](Self::release_deferred)
    /// (released at once if this manager keeps none).
    pub(super) fn keep(&self, lease: Lease) {
        match &self.deferred {
            Some(deferred) => lock(deferred).keep(lease, self.clock.now(), self.config.ttl),
            None => self.release_in_background(lease),
        }
    }

    /// The kept lease of the create of `path`, taken out of the keeping, if any.
    pub(super) fn take_deferred(&self, path: &str) -> Option<Lease> {
        let deferred = self.deferred.as_ref()?;
        lock(deferred).by_key.remove(path)
    }

    /// Marks `lease` released, so the next writer of (path, etag) takes it at once instead
    /// of waiting for it to expire. Call only when the guarded operation's outcome is
    /// known (it succeeded, or nothing was sent): a write that may still land must keep
    /// its lease until it expires.
    ///
    /// The release writes the next generation, so a renewal of ours still in flight (one
    /// dropped when the operation finished) cannot land after it and resurrect the lease:
    /// its condition names the generation before.
    pub async fn release(&self, mut lease: Lease) -> Result<(), LeaseError> {
        // A few times: a renewal dropped in flight may have moved our record one generation
        // on (it is still ours, the owner nonce says so, to release), and an answer may be
        // lost.
        let mut unanswered = None;
        for _ in 0..4 {
            let generation = if self.safeguards.release_bumps_generation() {
                lease.after(lease.generation)?
            } else {
                lease.generation
            };
            let record = self.record(&lease, generation, true);
            let answer = match self.table.put(&record, &lease.still_ours()).await {
                Ok(answer) => answer,
                // It may have landed: the next attempt's conflict answer will say so.
                Err(e) if e.is_ambiguous() => {
                    tracing::debug!(path = %lease.path, error = %e, "release answer lost; trying again");
                    unanswered = Some(e);
                    continue;
                }
                Err(e) => return Err(e.into()),
            };
            match answer {
                PutOutcome::Written => return Ok(()),
                PutOutcome::Conflict(Some(found))
                    if found.owner.as_deref() == Some(lease.owner.as_str())
                        && found.generation > lease.generation =>
                {
                    if found.released {
                        // An earlier attempt of this release landed.
                        return Ok(());
                    }
                    lease.generation = found.generation;
                }
                PutOutcome::Conflict(_) => {
                    return Err(LeaseError::lost(&lease, "it was no longer ours to release"));
                }
            }
            unanswered = None;
        }
        // Out of attempts: the last one's answer was lost (the release may have landed), or
        // renewals kept moving the record on.
        Err(match unanswered {
            Some(e) => e.into(),
            None => LeaseError::lost(&lease, "it was no longer ours to release"),
        })
    }

    /// [`release`](Self::release), logging instead of failing: a release that does not
    /// land only makes the next writer wait for expiry.
    pub async fn release_quietly(&self, lease: Lease) {
        let path = lease.path.clone();
        if let Err(e) = self.release(lease).await {
            tracing::debug!(%path, error = %e, "lease release failed; it will expire instead");
        }
    }

    /// Releases `lease` in the background (off the caller's critical path) when a Tokio
    /// runtime is running; otherwise leaves it to expire.
    pub fn release_in_background(&self, lease: Lease) {
        use std::sync::atomic::Ordering;
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let manager = self.clone();
            self.background.in_flight.fetch_add(1, Ordering::SeqCst);
            // Counted off by a guard, so a task cancelled at runtime shutdown still counts.
            let guard = InFlight(self.background.clone());
            runtime.spawn(async move {
                let _guard = guard;
                manager.release_quietly(lease).await;
            });
        }
    }

    /// What becomes of a lease under which the operation was sent, by `end` and how the
    /// operation came out: the one place that decides it. After a failure or an
    /// abandonment an earlier attempt may still land, so the lease is kept until it
    /// expires, or (held paths) released once every attempt has landed; a release there
    /// is conditional on our generation, harmless if another holder has it now.
    pub(super) fn end_sent(&self, lease: Lease, end: LeaseEnd, outcome: Sent) {
        match (end, outcome) {
            (LeaseEnd::KeepCreate, Sent::Succeeded) if self.deferred.is_some() => self.keep(lease),
            (LeaseEnd::ReleaseOnceQuiet, Sent::Succeeded)
                if !self.safeguards.hold_until_quiet() =>
            {
                self.release_in_background(lease)
            }
            (_, Sent::Failed) if !self.safeguards.keep_after_failed_write() => {
                self.release_in_background(lease)
            }
            (LeaseEnd::ReleaseOnceQuiet, _) => self.release_once_quiet(lease),
            (_, Sent::Succeeded) => self.release_in_background(lease),
            (_, Sent::Failed | Sent::Abandoned) => drop(lease),
        }
    }

    /// Releases `lease`, unrenewed from now, in the background once `timeout x skew` has
    /// passed on this manager's clock since its last write: by then every request sent
    /// under it has landed (assumption 4 bounds a request's landing by the earliest
    /// reclaim, and this manager itself, waiting on the record, would reclaim no sooner).
    /// Until then waiters wait as for a live holder; after, they take it at once, rather
    /// than `timeout x skew` from whenever they first see the record (which may be long
    /// after it went quiet). Lost with the process: then waiters wait for expiry.
    /// [`settled`](Self::settled) waits for it.
    pub(super) fn release_once_quiet(&self, lease: Lease) {
        use std::sync::atomic::Ordering;
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let quiet = self
            .clock
            .sleep_until(lease.written_at + lease.timeout * self.config.max_clock_skew_rate);
        let manager = self.clone();
        self.background.in_flight.fetch_add(1, Ordering::SeqCst);
        let guard = InFlight(self.background.clone());
        runtime.spawn(async move {
            let _guard = guard;
            quiet.await;
            manager.release_quietly(lease).await;
        });
    }

    /// Waits until every release this manager (or a clone) sent in the background has
    /// been answered (held paths' releases too, each `timeout x skew` after its lease's
    /// last write: `CommitStore::hold_paths`): before a process exits (so the next writer
    /// of a path whose operation just finished, or whose object was just deleted, need not
    /// wait for expiry), and in benchmarks, so that one target's background work does not weigh
    /// on the next one's timing.
    ///
    /// ```
    /// # async fn run(leases: dynacommit::lease::LeaseManager) {
    /// leases.settled().await;
    /// # }
    /// ```
    pub async fn settled(&self) {
        use std::sync::atomic::Ordering;
        loop {
            let done = self.background.done.notified();
            if self.background.in_flight.load(Ordering::SeqCst) == 0 {
                return;
            }
            done.await;
        }
    }
}
