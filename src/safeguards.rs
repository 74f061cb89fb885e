//! The protocol's safeguards, each named for the rule it keeps, and the planted bugs that
//! take them out again (feature `planted-bugs`), so that the tests can show the simulator
//! (and the linearizability check) catching each one missing.
//!
//! The protocol's lines read `if self.safeguards.recheck_after_takeover()`. Without the
//! feature [`Safeguards`] is a zero-sized type whose every check is a constant `true`, and
//! the compiler removes the branches that would take a safeguard out. This file is the one
//! place that says which planted bug turns off which safeguard.

/// A fix the simulator must be able to catch missing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum PlantedBug {
    /// Takes out `Safeguards::fence_by_usable_time`: the re-check after a takeover runs
    /// unrenewed, and the guarded write is polled before the deadline is checked (no
    /// fence, no renewal before a late start, no re-check after a slow first acquisition).
    WriteAfterDeadline,
    /// Takes out `Safeguards::keep_after_failed_write`: the lease is released after a
    /// failed write too, although an earlier attempt of that write may still land.
    ReleaseAfterFailedWrite,
    /// Takes out `Safeguards::tokens_outlive_records`: lock records start again at
    /// generation 0 once deleted.
    TokensFromZero,
    /// Takes out `Safeguards::reclaim_exactly_as_seen`: reclaims are conditional on the
    /// generation alone, and waiters notice only generation and release changes.
    ReclaimOnGenerationAlone,
    /// Takes out `Safeguards::release_bumps_generation`: a release rewrites the record at
    /// its own generation, so a renewal still in flight can land on it and resurrect the
    /// lease.
    ReleaseWithoutBump,
    /// Takes out `Safeguards::recognise_own_record`: a waiter does not recognise its own
    /// record when a write whose answer it lost lands later.
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
    /// Takes out `Safeguards::compare_and_swap_conditional` in the key-value store:
    /// [`DynamoKv`](crate::kv::DynamoKv)'s compare-and-swap reads, then writes
    /// unconditionally.
    KvSwapWithoutCondition,
    /// Takes out `Safeguards::refused_write_retried` in the key-value store: a write it
    /// sends itself, refused because a transaction in flight holds the item
    /// (`TransactionConflictException`), fails at once.
    KvTransactionConflictFinal,
    /// Takes out `Safeguards::throttled_transaction_retried` in the key-value store: a
    /// transaction cancelled for throttling (`ThrottlingError` reasons) fails at once.
    KvThrottledTransactionFinal,
    /// Takes out `Safeguards::retry_reads_the_clock_again` in the key-value store: a write
    /// it sends again after throttling names the time of its first attempt, so that a
    /// write needing a live entry can apply over one that expired meanwhile (issue 22's
    /// finding 1, in the form the code would regress to).
    KvRetryKeepsFirstClock,
    /// Takes out `Safeguards::child_resumed_at_its_first_number` in the key-value
    /// store's watches: a checkpoint's child shard with nothing handed out yet is resumed
    /// at `TRIM_HORIZON`, which never fails, so that records the stream trimmed meanwhile
    /// are passed over in silence (issue 22's finding 2).
    KvChildResumedAtTrimHorizon,
}

/// The safeguards in force for one lease manager or store: all of them, in production.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Safeguards {
    /// The planted bugs, one bit each.
    #[cfg(feature = "planted-bugs")]
    planted: u32,
}

impl Safeguards {
    /// With the safeguard that `bug` takes out, taken out.
    #[cfg(feature = "planted-bugs")]
    pub(crate) fn without(self, bug: PlantedBug) -> Self {
        Self {
            planted: self.planted | (1 << bug as u32),
        }
    }

    /// Whether `bug` is planted: never, without the feature.
    #[cfg(feature = "planted-bugs")]
    fn planted(self, bug: PlantedBug) -> bool {
        self.planted & (1 << bug as u32) != 0
    }

    #[cfg(not(feature = "planted-bugs"))]
    fn planted(self, _bug: PlantedBug) -> bool {
        false
    }

    /// Protocol step 6: the guarded operation is fenced by the lease's usable time and
    /// renewed from before it starts, and a takeover's re-check runs under the renewed
    /// lease.
    pub(crate) fn fence_by_usable_time(self) -> bool {
        !self.planted(PlantedBug::WriteAfterDeadline)
    }

    /// Protocol step 6: the lease is renewed while the operation runs (object_store 0.12.5
    /// drops its write at the deadline instead, and the write may land later).
    pub(crate) fn renew_while_writing(self) -> bool {
        !self.planted(PlantedBug::NoRenewalWhileWriting)
    }

    /// Protocol step 7: a lease whose write failed is kept until it expires, since an
    /// earlier attempt of the write may still land.
    pub(crate) fn keep_after_failed_write(self) -> bool {
        !self.planted(PlantedBug::ReleaseAfterFailedWrite)
    }

    /// Protocol step 7: a release writes the next generation, so that no renewal in
    /// flight can land on it.
    pub(crate) fn release_bumps_generation(self) -> bool {
        !self.planted(PlantedBug::ReleaseWithoutBump)
    }

    /// Held paths: a held path's lease is released only once quiet, whatever the outcome.
    pub(crate) fn hold_until_quiet(self) -> bool {
        !self.planted(PlantedBug::HeldPathReleasedAtOnce)
    }

    /// Protocol step 4: a waiter reclaims only a record exactly as it saw it (generation,
    /// owner and `ttl`), and notices any change of those.
    pub(crate) fn reclaim_exactly_as_seen(self) -> bool {
        !self.planted(PlantedBug::ReclaimOnGenerationAlone)
    }

    /// Protocol step 4: a waiter reclaims only after `timeout x max_clock_skew_rate`
    /// unchanged on its own clock.
    pub(crate) fn wait_timeout_times_skew(self) -> bool {
        !self.planted(PlantedBug::ReclaimAfterOneTimeout)
    }

    /// Protocol step 4: a waiter recognises its own record, written by an attempt whose
    /// answer it lost.
    pub(crate) fn recognise_own_record(self) -> bool {
        !self.planted(PlantedBug::NoSelfRecognitionWhileWaiting)
    }

    /// Protocol step 5: a lease taken over is checked again, before reclaiming a released
    /// record and under the lease.
    pub(crate) fn recheck_after_takeover(self) -> bool {
        !self.planted(PlantedBug::NoRecheckAfterTakeover)
    }

    /// Protocol steps 1 and 2: the check sent beside a fresh acquisition counts only if
    /// the PutItem was answered within the beside-check window.
    pub(crate) fn beside_check_within_window(self) -> bool {
        !self.planted(PlantedBug::BesideCheckTrustedAnyTime)
    }

    /// Tasks of one process take a lease in turn: a task fails without a request only on
    /// a success sent after it joined the queue.
    pub(crate) fn queue_trusts_later_successes_only(self) -> bool {
        !self.planted(PlantedBug::QueueTrustsAnEarlierSuccess)
    }

    /// The table: a lock record's generation (its fencing token) never starts again once
    /// the record is deleted.
    pub(crate) fn tokens_outlive_records(self) -> bool {
        !self.planted(PlantedBug::TokensFromZero)
    }

    /// The table: a commit lease's first generation is unpredictable, so a reclaim on the
    /// generation alone (object_store 0.12.5's) cannot take a record created afresh.
    pub(crate) fn unpredictable_first_generation(self) -> bool {
        !self.planted(PlantedBug::CommitLeasesFromZero)
    }

    /// Condition modes: a write under a lease carries its condition, so that on a store
    /// enforcing it the write cannot land on a commit made without a lease.
    pub(crate) fn condition_under_lease(self) -> bool {
        !self.planted(PlantedBug::PlainWriteUnderLease)
    }

    /// The key-value store: a compare-and-swap is one conditional write.
    pub(crate) fn compare_and_swap_conditional(self) -> bool {
        !self.planted(PlantedBug::KvSwapWithoutCondition)
    }

    /// The key-value store: a write refused for a transaction in flight is sent again.
    pub(crate) fn refused_write_retried(self) -> bool {
        !self.planted(PlantedBug::KvTransactionConflictFinal)
    }

    /// The key-value store: a transaction cancelled for throttling is sent again.
    pub(crate) fn throttled_transaction_retried(self) -> bool {
        !self.planted(PlantedBug::KvThrottledTransactionFinal)
    }

    /// The key-value store: a write sent again after throttling is built with a fresh
    /// reading of the clock, so that the entry it needs live is judged live when it lands.
    pub(crate) fn retry_reads_the_clock_again(self) -> bool {
        !self.planted(PlantedBug::KvRetryKeepsFirstClock)
    }

    /// The key-value store's watches: a child shard with nothing handed out yet resumes
    /// at its first sequence number, which the stream refuses once it has been trimmed.
    pub(crate) fn child_resumed_at_its_first_number(self) -> bool {
        !self.planted(PlantedBug::KvChildResumedAtTrimHorizon)
    }
}
