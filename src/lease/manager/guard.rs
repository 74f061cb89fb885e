//! The guard: the one place that orders a guarded operation's steps (check, lease,
//! re-check, operate, end the lease), and decides what becomes of the lease once the
//! operation was sent.

use std::future::Future;

use crate::lease::queue::Ahead;

use super::LeaseManager;
use super::acquire::Start;
use super::errors::{AcquireError, GuardError};
use super::etag::same_etag;

/// How a guarded operation of [`LeaseManager::run_conditional`] ends: what becomes of its
/// lease, and which of its errors say that nothing was sent.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ending<E> {
    /// What becomes of the lease once the operation has been sent.
    pub end: LeaseEnd,
    /// Whether an operation error says the operation sent nothing (it was itself a
    /// guarded call that failed before sending).
    pub sent_nothing: fn(&E) -> bool,
}

/// What becomes of a guarded operation's lease once the operation has been sent. (A lease
/// under which nothing was sent is released at once, whatever this says.)
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LeaseEnd {
    /// Released in the background after a success: the next writer takes it at once.
    /// After a failure, kept until it expires.
    Release,
    /// A create's lease: after a success, kept for [`LeaseManager::release_deferred`]
    /// where the manager [keeps create leases](LeaseManager::keep_create_leases), else
    /// released. After a failure, kept until it expires.
    KeepCreate,
    /// Left unrenewed, whatever the outcome, and released once `timeout x skew` has passed
    /// since its last write: an earlier attempt of the operation, which its client
    /// retried, may still land until then, and nobody else may write the path until it
    /// has.
    ReleaseOnceQuiet,
}

/// How an operation sent under a lease came out, for [`LeaseManager::end_sent`].
#[derive(Debug, Clone, Copy)]
pub(super) enum Sent {
    Succeeded,
    Failed,
    /// The lease was lost while it ran.
    Abandoned,
}

/// How a conditional write of [`LeaseManager::run_conditional`] that waited behind a
/// success of the same manager on its lease fails without a request (see `guard`).
pub(crate) struct Beaten<B, T> {
    /// Whose writes these are (one `CommitStore`, whose paths name its objects): only
    /// successes within one scope tell about each other's objects.
    pub(crate) scope: u64,
    /// The error the write's check would have given.
    pub(crate) error: B,
    /// The ETag an operation's output says it left, if it says.
    pub(crate) etag_after: fn(&T) -> Option<String>,
}

impl LeaseManager {
    /// The whole protocol around one operation on (path, etag): `check` the precondition,
    /// take the lease (waiting out other holders, re-running `check` on every poll), run
    /// `check` again if the lease was taken over from another holder, then `operation`;
    /// the re-check and the operation run while the lease is renewed and are never polled
    /// past its [usable](crate::lease::Lease::usable_until) time. The lease is released (in the
    /// background) once the operation succeeded, or the precondition failed under it
    /// (nothing sent); after a
    /// failed operation it is kept until it expires, since an earlier attempt of a retried
    /// request may still land.
    ///
    /// This is the one place that orders the steps: every guarantee of `docs/protocol.md`
    /// about data requests rests on it.
    pub async fn run_guarded<T, E, C, CF, W, WF>(
        &self,
        path: &str,
        etag: &str,
        check: C,
        operation: W,
    ) -> Result<T, GuardError<E>>
    where
        C: FnMut() -> CF,
        CF: Future<Output = Result<(), E>>,
        W: FnOnce() -> WF,
        WF: Future<Output = Result<T, E>>,
    {
        self.guard(
            path,
            etag,
            check,
            None::<Beaten<fn() -> E, T>>,
            operation,
            Ending {
                end: LeaseEnd::Release,
                sent_nothing: |_| false,
            },
        )
        .await
    }

    /// [`run_guarded`](Self::run_guarded) for a conditional write by a caller that calls
    /// [`release_deferred`](Self::release_deferred) when it deletes an object (as
    /// `CommitStore` does, for its puts, copies and renames):
    /// - once the operation has been sent, its lease goes as `ending.end` says; an
    ///   operation error for which `ending.sent_nothing` holds (the operation's own
    ///   guarded call failed before sending) counts as a failed check: the lease is
    ///   released at once, and the error is a [`GuardError::Check`];
    /// - `beaten`, if given, lets an operation that waited behind another of this
    ///   manager's on the same lease, which succeeded, fail without a request where that
    ///   success settles it (see `guard`); without it, `check` decides.
    pub(crate) async fn run_conditional<T, E, C, CF, B, W, WF>(
        &self,
        path: &str,
        etag: &str,
        check: C,
        beaten: Option<Beaten<B, T>>,
        operation: W,
        ending: Ending<E>,
    ) -> Result<T, GuardError<E>>
    where
        C: FnMut() -> CF,
        CF: Future<Output = Result<(), E>>,
        B: FnOnce() -> E,
        W: FnOnce() -> WF,
        WF: Future<Output = Result<T, E>>,
    {
        self.guard(path, etag, check, beaten, operation, ending)
            .await
    }

    /// The protocol of [`run_guarded`](Self::run_guarded); `beaten` as in
    /// [`run_conditional`](Self::run_conditional), as is `ending`.
    pub(super) async fn guard<T, E, C, CF, B, W, WF>(
        &self,
        path: &str,
        etag: &str,
        mut check: C,
        beaten: Option<Beaten<B, T>>,
        operation: W,
        ending: Ending<E>,
    ) -> Result<T, GuardError<E>>
    where
        C: FnMut() -> CF,
        CF: Future<Output = Result<(), E>>,
        B: FnOnce() -> E,
        W: FnOnce() -> WF,
        WF: Future<Output = Result<T, E>>,
    {
        let Ending { end, sent_nothing } = ending;
        let mut waited = crate::lease::waited::Wait::start(&self.clock);
        // Tasks of this manager racing for this lease go one at a time (`queue.rs`): their
        // race is settled here, before any lease request. One queued before a successful
        // write ahead of it was sent overlapped that write's landing, so it may fail as if
        // it came just after it: a create then finds the object there, an update finds the
        // ETag the write left. Where that settles it, and its caller says how to fail
        // (`beaten`), it fails without a request. Otherwise, behind a success, the object
        // has likely changed all the same: its check alone tells, before any lease
        // request (and if it passes, as when the same bytes were written again, it goes
        // on as any other).
        let (scope, lost, etag_after) = match beaten {
            Some(Beaten {
                scope,
                error,
                etag_after,
            }) => (scope, Some(error), Some(etag_after)),
            None => (0, None, None),
        };
        let place = self.queues.join(scope, path, etag);
        let front = place.front().await;
        if let Ahead::Succeeded {
            etag_after: after,
            sent_after_joining,
        } = front.ahead()
        {
            let settled = (*sent_after_joining
                || !self.safeguards.queue_trusts_later_successes_only())
                && (etag == crate::lease::CREATE_ETAG
                    || after
                        .as_deref()
                        .is_some_and(|after| !same_etag(after, etag)));
            if let Some(lost) = lost.filter(|_| settled) {
                return Err(GuardError::Check(lost()));
            }
            check().await.map_err(GuardError::Check)?;
        }
        let pressure = self.pressure.of(path);
        self.back_off(pressure).await;
        // A create of a path whose earlier create's lease this manager still keeps: the
        // object was deleted behind our back (a delete through this store releases it), or
        // the check fails. Check first: where the object is there (a writer retrying a
        // version it holds) the lease stays kept, and nothing is written. Otherwise our own
        // record would be waited out like a stranger's, for timeout x skew; releasing it
        // is as safe as any release of a finished create's lease.
        let kept = if end == LeaseEnd::KeepCreate {
            self.take_deferred(path)
        } else {
            None
        };
        if let Some(kept) = kept {
            if let Err(e) = check().await {
                self.keep(kept);
                return Err(GuardError::Check(e));
            }
            self.release_quietly(kept).await;
        }
        let checked_at = self.clock.now();
        // The first check goes out beside the first acquisition attempt (two round trips on
        // the critical path, not three). Its answer still holds under a lease won fresh:
        // see `acquire_lease`. Under contention (checks failing lately, each having cost a
        // PutItem for nothing) it goes first instead, and a check that passes is followed
        // by a read of the lease record: a writer arriving while another holds the lease
        // learns it from the read (a fifth of a write's price), not from a refused write.
        // The read waits for the check, not beside it: a writer catching up on a log
        // meets many versions already there, and each then costs one HEAD alone.
        let start = if pressure.is_contended() {
            let checked = check().await;
            pressure.note_first_check(checked.is_ok());
            checked.map_err(GuardError::Check)?;
            match self.table.get(path, etag).await {
                Ok(seen) => Start::Seen(seen),
                Err(e) => {
                    // Only a hint lost: the PutItem's answer says the same.
                    tracing::debug!(path, error = %e, "lease read before acquiring failed");
                    Start::Attempt
                }
            }
        } else {
            Start::Beside(check())
        };
        let mut lease = self
            .acquire_lease(self.unwon(path, etag, None), start, &mut check)
            .await
            .map_err(|e| match e {
                AcquireError::Check(e) => GuardError::Check(e),
                AcquireError::Lease(e) => GuardError::Lease(e),
            })?;
        // Re-check if another holder may have written since the first check: the lease was
        // taken over, or so much time passed that a whole commit by someone else, and the
        // deletion of its record by TTL, could have fitted in between.
        let fence = self.safeguards.fence_by_usable_time();
        let recheck = (lease.was_taken_over() && self.safeguards.recheck_after_takeover())
            || (fence
                && self.clock.now().saturating_duration_since(checked_at)
                    >= self.config.beside_check_window()
                && self.safeguards.beside_check_within_window());
        if recheck
            && !fence
            && let Err(e) = check().await
        {
            self.release_in_background(lease);
            return Err(GuardError::Check(e));
        }
        let holding = self.clock.now();
        let guarded = async {
            if recheck && fence {
                check().await.map_err(GuardError::Check)?;
            }
            waited.sending();
            front.sending();
            operation().await.map_err(GuardError::Operation)
        };
        match self.run_while_held(&mut lease, guarded).await {
            Ok(Ok(out)) => {
                front.succeeded(etag_after.and_then(|after| after(&out)));
                self.note_hold(self.clock.now().saturating_duration_since(holding));
                pressure.note_success();
                self.end_sent(lease, end, Sent::Succeeded);
                Ok(out)
            }
            Ok(Err(GuardError::Operation(e))) if sent_nothing(&e) => {
                self.release_in_background(lease);
                Err(GuardError::Check(e))
            }
            Ok(Err(GuardError::Operation(e))) => {
                self.end_sent(lease, end, Sent::Failed);
                Err(GuardError::Operation(e))
            }
            Ok(Err(e)) => {
                // The precondition failed under the lease: nothing was sent.
                self.release_in_background(lease);
                Err(e)
            }
            Err(lost) => {
                if front.has_sent() {
                    self.end_sent(lease, end, Sent::Abandoned);
                    return Err(GuardError::Abandoned(lost));
                }
                // Lost before the operation was called: nothing was sent, so the lease (if
                // still ours; the release is conditional) can go at once.
                self.release_in_background(lease);
                Err(GuardError::Lease(lost))
            }
        }
    }
}
