//! Planted bugs: each fix of the safety review, taken out again on request, so the tests
//! can show that the simulator catches every one of them. The switches exist only with
//! the `planted-bugs` feature; without it every check below is a constant `false` and the
//! compiler removes the buggy branches.

/// A fix the simulator must be able to catch missing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum PlantedBug {
    /// Hole 1: the re-check after a takeover runs unrenewed, and the guarded write is
    /// polled before the deadline is checked (no fence, no renewal before a late start,
    /// no re-check after a slow first acquisition).
    WriteAfterDeadline,
    /// Hole 2: the lease is released after a failed write too, although an earlier
    /// attempt of that write may still land.
    ReleaseAfterFailedWrite,
    /// Hole 3: lock records start again at generation 0 once deleted.
    TokensFromZero,
    /// Hole 4: reclaims are conditional on the generation alone, and waiters notice only
    /// generation and release changes.
    ReclaimOnGenerationAlone,
    /// Hole 5: a release rewrites the record at its own generation, so a renewal still in
    /// flight can land on it and resurrect the lease.
    ReleaseWithoutBump,
    /// Hole 6a: a waiter does not recognise its own record when a write whose answer it
    /// lost lands later.
    NoSelfRecognitionWhileWaiting,
    /// Waiters reclaim after one lease timeout instead of timeout x skew rate.
    ReclaimAfterOneTimeout,
    /// No renewal while the operation runs: it is dropped at the usable time, as
    /// object_store 0.12.5 drops its write at the lease deadline (zombie writes).
    NoRenewalWhileWriting,
    /// A lease taken over is trusted on a check made before the takeover: neither the
    /// check before reclaiming a released record nor the re-check under the lease runs,
    /// though the holder's write may have landed between the last check and its release.
    NoRecheckAfterTakeover,
    /// A put under a lease goes plain, as object_store 0.12.5's does (and as `lease` mode
    /// wrote before): on a store that enforces conditions, it can land on a native
    /// writer's commit.
    PlainWriteUnderLease,
    /// A commit lease (a create's or an update's) starts at generation 0, which a
    /// stranger can predict: object_store 0.12.5's reclaim on the generation alone then
    /// takes a record created afresh after TTL deleted the one it waited on.
    CommitLeasesFromZero,
    /// Creates keep their lease until a delete through the store, as the default was:
    /// after a delete by anyone else the next creator waits `timeout x skew`. (Planted by
    /// `with_planted_bug` itself, which switches the keeping on: no check names it.)
    #[cfg_attr(not(feature = "planted-bugs"), allow(dead_code))]
    KeepCreateLeasesByDefault,
    /// The check sent beside a fresh acquisition is trusted however late its PutItem was
    /// answered: a whole commit by another writer, and TTL's deletion of its record, can
    /// fit between the check's read and the PutItem.
    BesideCheckTrustedAnyTime,
    /// A task queued behind a success fails without a request even when that success's
    /// write was sent before the task joined the queue (it may have landed before the
    /// task came, and the object changed since).
    QueueTrustsAnEarlierSuccess,
    /// With paths held (`CommitStore::hold_paths`), a write's or a delete's lease is
    /// released once it succeeded, as elsewhere: an earlier attempt of it that its client
    /// retried may still land, after the next writer of the path went ahead.
    HeldPathReleasedAtOnce,
}

/// The set of planted bugs of one lease manager: empty in production.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Planted(u32);

impl Planted {
    /// Whether `bug` is planted.
    pub(crate) fn has(self, bug: PlantedBug) -> bool {
        cfg!(feature = "planted-bugs") && self.0 & (1 << bug as u32) != 0
    }

    /// With `bug` planted too.
    #[cfg(feature = "planted-bugs")]
    pub(crate) fn with(self, bug: PlantedBug) -> Self {
        Self(self.0 | (1 << bug as u32))
    }
}
