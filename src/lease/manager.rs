//! The lease protocol: acquire (waiting out or reclaiming others' leases), run an operation
//! while the lease is renewed and fenced by its deadline, release when the outcome is known.

use std::future::Future;
use std::pin::pin;
use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::time::Duration;

use tokio::time::Instant;

use super::clock::{Clock, SystemClock};
use super::config::{LeaseConfig, safety_margin, stale_after};
use super::lock;
use super::planted::{Planted, PlantedBug};
use super::pressure::{Pressure, Slot};
use super::queue::{Ahead, Queues};
use super::record::{Expect, Holder, LeaseRecord, PutOutcome};
use super::table::{LeaseTable, TableError};

/// Runs the lease protocol against one [`LeaseTable`]. Cheap to clone.
///
/// [`run_guarded`](Self::run_guarded) is the whole protocol around one operation (check,
/// lease, re-check, operate, release); the other methods are its pieces, for callers
/// (such as the leader lock) that hold a lease for longer than one operation.
///
/// ```
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// use std::sync::Arc;
/// use dynacommit::lease::{LeaseConfig, LeaseManager, MemoryLeaseTable};
///
/// let leases = LeaseManager::new(Arc::new(MemoryLeaseTable::new()), LeaseConfig::default())?;
/// // Nothing to check before taking this lease: the check always passes.
/// let written = leases
///     .run_guarded(
///         "log/00000.json",
///         "*",
///         || async { Ok::<(), std::io::Error>(()) },
///         || async { Ok::<_, std::io::Error>("the guarded write") },
///     )
///     .await?;
/// # let _ = written; Ok(()) }
/// ```
#[derive(Clone)]
pub struct LeaseManager {
    table: Arc<dyn LeaseTable>,
    config: Arc<LeaseConfig>,
    clock: Arc<dyn Clock>,
    /// Records for fencing tokens: no TTL, and first generations from the wall clock.
    fencing: bool,
    planted: Planted,
    /// Told when a wait grows long (see [`LeaseManager::on_wait`]).
    on_wait: Option<WaitObserver>,
    /// `HOST pid PID`, written into records for people inspecting the table.
    process: Arc<str>,
    /// Releases sent in the background and not yet answered (see [`LeaseManager::settled`]).
    background: Arc<Background>,
    /// What contention each directory of keys met lately: whether its next operation
    /// checks first and reads the record, and pauses (see `pressure.rs` and `guard`).
    pressure: Arc<Pressure>,
    /// How long this manager's guarded operations hold their lease, in microseconds: a
    /// moving average (zero until the first). A waiter on a commit in progress looks
    /// first after about this long, when the holder's outcome is likely known.
    hold_micros: Arc<std::sync::atomic::AtomicU64>,
    /// Finished creates' leases awaiting their object's deletion, if the manager keeps
    /// them ([`LeaseManager::keep_create_leases`]); `None`: released at once, the default.
    deferred: Option<Arc<Mutex<Deferred>>>,
    /// The guarded operations in progress, one at a time per lease (see `queue.rs`).
    queues: Arc<Queues>,
}

/// Background releases in flight, and a way to wait for none.
#[derive(Debug, Default)]
struct Background {
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
struct Deferred {
    by_key: std::collections::HashMap<String, Lease>,
    /// Keys in the order they came, with when: the oldest go first.
    order: std::collections::VecDeque<(String, String, Instant)>,
}

/// How many finished creates' leases a manager keeps for release on delete.
const DEFERRED_MAX: usize = 10_000;

impl Deferred {
    fn keep(&mut self, lease: Lease, now: Instant, ttl: Duration) {
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

/// What [`LeaseManager::on_wait`] keeps.
type WaitObserver = Arc<dyn Fn(&Waiting) + Send + Sync>;

/// A writer waiting for another's lease, as told to the observer set with
/// [`LeaseManager::on_wait`]: once a wait has lasted a second, and again each time the
/// record it waits on changes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Waiting {
    /// The path (the lease key).
    pub path: String,
    /// The ETag the lease guards (`*` for a create).
    pub etag: String,
    /// The record's generation.
    pub generation: u64,
    /// What the holder advertises (a lock holder's address), if anything.
    pub holder: Option<String>,
    /// How long this writer has waited in all.
    pub waited: Duration,
    /// How long the record has stood unchanged, as far as this writer has seen.
    pub unchanged_for: Duration,
    /// How long until it may be reclaimed, if it stays unchanged.
    pub reclaimable_in: Duration,
}

impl std::fmt::Debug for LeaseManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaseManager")
            .field("table", &self.table.describe())
            .field("config", &self.config)
            .field("fencing", &self.fencing)
            .finish()
    }
}

/// A lease we hold on (path, etag), until its local deadline unless renewed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    path: String,
    etag: String,
    generation: u64,
    owner: String,
    /// What the holder advertises in the record (a lock holder's address, say).
    value: Option<String>,
    timeout: Duration,
    /// When the write that gave us the current generation was sent (or, when that is not
    /// known exactly, an earlier instant): the lease is ours for `timeout` from then, on
    /// our clock.
    written_at: Instant,
    /// Whether it was taken over from another holder (expired or released) rather than
    /// created fresh at the first try: the guarded state may have changed since it was
    /// last checked.
    taken_over: bool,
    /// When the acquisition that won was sent, by the wall clock (ms since the epoch): shown
    /// in the record to people inspecting the table.
    since_ms: Option<i64>,
    /// When the earliest renewal attempt not yet confirmed was sent. Kept in the lease, not
    /// in a call, so that an attempt dropped with its call (and landing later) still
    /// bounds the lease when a later renewal finds its record.
    unconfirmed_since: Option<Instant>,
}

impl Lease {
    /// The object path.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// The ETag the lease guards (`*` for a create).
    pub fn etag(&self) -> &str {
        &self.etag
    }

    /// The current generation: strictly increasing across holders, usable as a fencing
    /// token.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// The nonce naming this holder in the record.
    pub fn owner(&self) -> &str {
        &self.owner
    }

    /// The value the holder advertises in the record.
    pub fn value(&self) -> Option<&str> {
        self.value.as_deref()
    }

    /// When the lease runs out on the manager's clock, unless renewed.
    pub fn deadline(&self) -> Instant {
        self.written_at + self.timeout
    }

    /// The last instant at which a guarded request may be started or carried on: the
    /// deadline less a safety margin of a tenth of the lease (the time between deciding to
    /// send and the request leaving the process).
    pub fn usable_until(&self) -> Instant {
        self.deadline() - safety_margin(self.timeout)
    }

    /// Whether the lease was taken over from an expired or released holder.
    pub fn was_taken_over(&self) -> bool {
        self.taken_over
    }

    /// Records that the write of `generation` sent at `sent` made the lease ours.
    fn won(&mut self, generation: u64, sent: Instant, taken_over: bool) {
        self.generation = generation;
        self.written_at = sent;
        self.taken_over = taken_over;
    }

    /// The generation after `generation`, or an error at the counter's end.
    fn after(&self, generation: u64) -> Result<u64, LeaseError> {
        generation
            .checked_add(1)
            .ok_or_else(|| LeaseError::GenerationExhausted {
                path: self.path.clone(),
                etag: self.etag.clone(),
            })
    }

    /// The condition that the stored record is still this lease, as we last wrote it.
    fn still_ours(&self) -> Expect {
        Expect::Owned {
            generation: self.generation,
            owner: self.owner.clone(),
        }
    }

    /// Whether `record` was written by this acquisition (any of its attempts, or a renewal)
    /// and is not released.
    fn is_ours(&self, record: &LeaseRecord) -> bool {
        record.owner.as_deref() == Some(self.owner.as_str()) && !record.released
    }
}

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
enum Sent {
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

/// The lease protocol failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LeaseError {
    /// The lease table failed.
    #[error("lease table: {0}")]
    Table(#[from] TableError),
    /// The generation counter of a lease reached its maximum.
    #[error(
        "lease {path}#{etag} is at generation u64::MAX and cannot be taken again; delete the record (dynacommit lease break) once no writer uses it"
    )]
    GenerationExhausted {
        /// The path.
        path: String,
        /// The etag.
        etag: String,
    },
    /// The lease was lost while held: the guarded operation was abandoned.
    #[error(
        "lost the lease on {path}#{etag} at generation {generation}: {reason}; the operation was abandoned and may or may not have been applied"
    )]
    Lost {
        /// The path.
        path: String,
        /// The etag.
        etag: String,
        /// The generation we held.
        generation: u64,
        /// Why.
        reason: String,
    },
}

impl LeaseError {
    fn lost(lease: &Lease, reason: impl Into<String>) -> Self {
        Self::Lost {
            path: lease.path.clone(),
            etag: lease.etag.clone(),
            generation: lease.generation,
            reason: reason.into(),
        }
    }
}

/// Acquisition failed: the caller's check refused, or the protocol failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AcquireError<E> {
    /// The precondition check failed (the object changed, or could not be read).
    #[error(transparent)]
    Check(E),
    /// The lease protocol failed.
    #[error(transparent)]
    Lease(#[from] LeaseError),
}

/// [`LeaseManager::run_guarded`] failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GuardError<E> {
    /// The precondition failed, before or under the lease: nothing was sent.
    #[error(transparent)]
    Check(E),
    /// The operation failed. It may still land (an earlier attempt of a retried request),
    /// so its lease was kept until it expires.
    #[error(transparent)]
    Operation(E),
    /// The lease protocol failed before the operation was called: nothing was sent.
    #[error(transparent)]
    Lease(#[from] LeaseError),
    /// The lease was lost while the operation ran: the operation was dropped, and what it
    /// had sent may or may not have been applied.
    #[error(transparent)]
    Abandoned(LeaseError),
}

/// What a waiter does next.
enum Turn {
    /// Reclaim this record (expired or released).
    Reclaim(LeaseRecord),
    /// The record is gone: start afresh.
    Fresh,
    /// The record is our own: a write whose answer we lost has landed.
    Ours(LeaseRecord),
}

/// How an acquisition starts.
enum Start<Fut> {
    /// With a PutItem.
    Attempt,
    /// With a PutItem, this check of the caller's sent beside it.
    Beside(Fut),
    /// With the record as read just now (the caller's check passed): waiting for it if
    /// there is one, without a PutItem bound to be refused; a PutItem otherwise.
    Seen(Option<LeaseRecord>),
}

/// The answer to one acquisition attempt.
enum Attempt {
    /// Written by this attempt, answered directly.
    Won,
    /// Found to be ours: this or an earlier attempt landed though its answer was lost.
    Ours(LeaseRecord),
    /// Held by another (or gone, `None`).
    Held(Option<LeaseRecord>),
}

impl LeaseManager {
    /// A manager for `table` with `config`, once the config is checked. A DynamoDB table
    /// must have the name the config gives (see [`dynamodb`](Self::dynamodb), which takes
    /// it from there).
    pub fn new(
        table: Arc<dyn LeaseTable>,
        config: LeaseConfig,
    ) -> Result<Self, super::ConfigError> {
        config.validate()?;
        if let Some(name) = table.dynamodb_table()
            && name != config.table
        {
            return Err(super::ConfigError::new(format!(
                "the lease table is DynamoDB table {name:?} but the settings name {:?}: give \
                 both the same name, or build with LeaseManager::dynamodb(client, config), which \
                 takes the name from the settings",
                config.table
            )));
        }
        Ok(Self {
            table,
            config: Arc::new(config),
            clock: Arc::new(SystemClock),
            fencing: false,
            planted: Planted::default(),
            on_wait: None,
            process: this_process().into(),
            background: Arc::default(),
            pressure: Arc::default(),
            hold_micros: Arc::default(),
            deferred: None,
            queues: Arc::default(),
        })
    }

    /// Calls `observer` when a wait for another writer's lease grows long (a second), and
    /// again each time the record waited on changes: for progress messages such as
    /// "waiting for the lease on PATH (reclaimable in ~N s)".
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use dynacommit::lease::{LeaseConfig, LeaseManager, MemoryLeaseTable};
    /// let leases = LeaseManager::new(Arc::new(MemoryLeaseTable::new()), LeaseConfig::default())
    ///     .unwrap()
    ///     .on_wait(|w| eprintln!("waiting for the lease on {} (reclaimable in ~{} s)",
    ///         w.path, w.reclaimable_in.as_secs()));
    /// # let _ = leases;
    /// ```
    pub fn on_wait(mut self, observer: impl Fn(&Waiting) + Send + Sync + 'static) -> Self {
        self.on_wait = Some(Arc::new(observer));
        self
    }

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
    fn keep(&self, lease: Lease) {
        match &self.deferred {
            Some(deferred) => lock(deferred).keep(lease, self.clock.now(), self.config.ttl),
            None => self.release_in_background(lease),
        }
    }

    /// The kept lease of the create of `path`, taken out of the keeping, if any.
    fn take_deferred(&self, path: &str) -> Option<Lease> {
        let deferred = self.deferred.as_ref()?;
        lock(deferred).by_key.remove(path)
    }

    /// Reads time from `clock` instead of the system's (a simulation gives every writer a
    /// clock of its own).
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Writes records whose generations are fencing tokens (the leader lock's): they carry
    /// no TTL, so DynamoDB never deletes them, and a first acquisition (no record) starts
    /// at the wall clock's microseconds since the epoch instead of 0, so a record deleted
    /// by hand is followed by larger generations still (each generation step is a round
    /// trip, far slower than a microsecond; see `docs/lock.md`).
    pub fn for_fencing_tokens(mut self) -> Self {
        self.fencing = true;
        self
    }

    /// Takes out one of the safety fixes again, so a test can show the simulator
    /// catching its absence. Never for production use.
    #[cfg(feature = "planted-bugs")]
    #[doc(hidden)]
    pub fn with_planted_bug(mut self, bug: super::PlantedBug) -> Self {
        self.planted = self.planted.with(bug);
        if bug == PlantedBug::KeepCreateLeasesByDefault {
            return self.keep_create_leases();
        }
        self
    }

    pub(crate) fn planted(&self, bug: PlantedBug) -> bool {
        self.planted.has(bug)
    }

    /// The settings.
    pub fn config(&self) -> &LeaseConfig {
        &self.config
    }

    /// The table.
    pub fn table(&self) -> &Arc<dyn LeaseTable> {
        &self.table
    }

    /// The clock.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    /// The record `lease` is stored as at `generation`.
    fn record(&self, lease: &Lease, generation: u64, released: bool) -> LeaseRecord {
        let now = self.clock.unix_time();
        let ttl = (!self.fencing).then(|| {
            i64::try_from(now.saturating_add(self.config.ttl).as_secs()).unwrap_or(i64::MAX)
        });
        let now_ms = i64::try_from(now.as_millis()).unwrap_or(i64::MAX);
        LeaseRecord {
            path: lease.path.clone(),
            etag: lease.etag.clone(),
            generation,
            timeout: lease.timeout,
            ttl,
            owner: Some(lease.owner.clone()),
            value: lease.value.clone(),
            released,
            holder: Some(Holder {
                process: self.process.to_string(),
                since_ms: lease.since_ms.unwrap_or(now_ms),
                written_ms: now_ms,
            }),
        }
    }

    /// The wall clock in milliseconds since the epoch.
    fn wall_ms(&self) -> i64 {
        i64::try_from(self.clock.unix_time().as_millis()).unwrap_or(i64::MAX)
    }

    /// The generation a first acquisition (no record) writes: the wall clock's
    /// microseconds since the epoch, for every kind of lease. A lock's record deleted by
    /// hand is then followed by larger generations still (`docs/lock.md`), and a commit
    /// record created afresh after TTL deleted an earlier one never repeats the earlier
    /// one's generation: object_store 0.12.5 reclaims on `generation = :g` alone, and a
    /// record starting at 0 again would let its stale wait take a live lease. 0.12.5 only
    /// compares generations for equality, so the wire format stays compatible.
    fn first_generation(&self) -> u64 {
        let from_zero = if self.fencing {
            self.planted(PlantedBug::TokensFromZero)
        } else {
            self.planted(PlantedBug::CommitLeasesFromZero)
        };
        if from_zero {
            0
        } else {
            u64::try_from(self.clock.unix_time().as_micros()).unwrap_or(u64::MAX / 2)
        }
    }

    /// A lease on (path, etag) not yet won: a fresh owner nonce.
    fn unwon(&self, path: &str, etag: &str, value: Option<&str>) -> Lease {
        Lease {
            path: path.to_owned(),
            etag: etag.to_owned(),
            generation: 0,
            owner: new_owner(),
            value: value.map(str::to_owned),
            timeout: self.config.timeout,
            written_at: self.clock.now(),
            taken_over: false,
            since_ms: None,
            unconfirmed_since: None,
        }
    }

    /// The whole protocol around one operation on (path, etag): `check` the precondition,
    /// take the lease (waiting out other holders, re-running `check` on every poll), run
    /// `check` again if the lease was taken over from another holder, then `operation`;
    /// the re-check and the operation run while the lease is renewed and are never polled
    /// past its [usable](Lease::usable_until) time. The lease is released (in the
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
    async fn guard<T, E, C, CF, B, W, WF>(
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
                || self.planted(PlantedBug::QueueTrustsAnEarlierSuccess))
                && (etag == super::CREATE_ETAG
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
        let unfenced = self.planted(PlantedBug::WriteAfterDeadline);
        let recheck = (lease.was_taken_over() && !self.planted(PlantedBug::NoRecheckAfterTakeover))
            || (!unfenced
                && self.clock.now().saturating_duration_since(checked_at)
                    >= self.config.beside_check_window()
                && !self.planted(PlantedBug::BesideCheckTrustedAnyTime));
        if recheck
            && unfenced
            && let Err(e) = check().await
        {
            self.release_in_background(lease);
            return Err(GuardError::Check(e));
        }
        let holding = self.clock.now();
        let guarded = async {
            if recheck && !unfenced {
                check().await.map_err(GuardError::Check)?;
            }
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
    /// lease is held (readable by anyone through [`LeaseTable::get`]).
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
    fn note_hold(&self, held: Duration) {
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
    async fn back_off(&self, pressure: &Slot) {
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
    fn first_pause(&self, seen: &LeaseRecord) -> Duration {
        let poll = self.config.poll_interval;
        match self.average_hold() {
            Some(hold) if seen.is_written_once() && !seen.released => {
                hold.clamp(Duration::from_millis(1).min(poll), poll)
            }
            _ => (poll / 16).max(Duration::from_millis(1)),
        }
    }

    /// The moving average of this manager's holds (see `note_hold`), once there is one.
    fn average_hold(&self) -> Option<Duration> {
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
    async fn acquire_lease<E, F, Fut>(
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
    async fn try_put(
        &self,
        lease: &Lease,
        generation: u64,
        expect: &Expect,
    ) -> Result<Attempt, LeaseError> {
        let record = self.record(lease, generation, false);
        let ours = |found: &LeaseRecord| {
            if self.planted(PlantedBug::NoSelfRecognitionWhileWaiting) {
                found.is_written_by(&lease.owner, generation)
            } else {
                lease.is_ours(found)
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
    async fn read_back(&self, lease: &Lease) -> Result<Option<LeaseRecord>, LeaseError> {
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
    fn next_attempt(&self, lease: &Lease, turn: Turn) -> Result<(Expect, u64), LeaseError> {
        Ok(match turn {
            Turn::Fresh => (Expect::Absent, self.first_generation()),
            Turn::Reclaim(stale) | Turn::Ours(stale) => {
                let expect = if self.planted(PlantedBug::ReclaimOnGenerationAlone) {
                    Expect::Generation(stale.generation)
                } else {
                    stale.unchanged()
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
    async fn wait_for_turn<E, F, Fut>(
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
        let rate = if self.planted(PlantedBug::ReclaimAfterOneTimeout) {
            1
        } else {
            self.config.max_clock_skew_rate
        };
        loop {
            if seen.released {
                // Released: the holder's operation is over, and it may have written. Look
                // once more before taking the lease (a check from before the release could
                // predate that write): losers of a create learn here that it is done,
                // without a PutItem each and a release each after it.
                if !self.planted(PlantedBug::NoRecheckAfterTakeover)
                    && let Err(e) = check().await
                {
                    self.pressure.of(&lease.path).note_loss();
                    return Err(AcquireError::Check(e));
                }
                return Ok(Turn::Reclaim(seen));
            }
            // A record's own timeout decides, within the bound any writer may configure.
            let stale = stale_after(seen.timeout.min(super::MAX_TIMEOUT), rate);
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
                Ok(Some(now))
                    if lease.is_ours(&now)
                        && !self.planted(PlantedBug::NoSelfRecognitionWhileWaiting) =>
                {
                    return Ok(Turn::Ours(now));
                }
                Ok(Some(now)) => {
                    let changed = if self.planted(PlantedBug::ReclaimOnGenerationAlone) {
                        (now.generation, now.released) != (seen.generation, seen.released)
                    } else {
                        now != seen
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

    /// Runs `op` while keeping `lease` renewed, and returns its output.
    ///
    /// `op` is polled only while the lease is [usable](Lease::usable_until), so no request
    /// it makes can start after the lease runs out: if the lease is already past that
    /// point (a slow acquisition answer, a slow step before this one), it is first won
    /// back with a renewal, which applies only if nobody took the record meanwhile. If
    /// renewal cannot be confirmed in time, or another writer holds the lease, `op` is
    /// dropped and [`LeaseError::Lost`] returned, before any waiter could reclaim (for
    /// clock rates within the skew rate).
    ///
    /// `op` is never dropped merely for running long: a slow write keeps its lease for as
    /// long as it runs, so a late write cannot land on top of another writer's.
    pub async fn run_while_held<T>(
        &self,
        lease: &mut Lease,
        op: impl Future<Output = T>,
    ) -> Result<T, LeaseError> {
        let unfenced = self.planted(PlantedBug::WriteAfterDeadline);
        if !unfenced {
            self.refresh(lease).await?;
        }
        // The usable time, moved on by each confirmed renewal and read by the fence.
        let usable = Mutex::new(lease.usable_until());
        let outcome = {
            let mut op = pin!(op);
            let fenced = std::future::poll_fn(|cx| {
                if !unfenced && self.clock.now() >= *lock(&usable) {
                    return Poll::Ready(None);
                }
                op.as_mut().poll(cx).map(Some)
            });
            let until = lease.usable_until();
            let renewal = pin!(async {
                if self.planted(PlantedBug::NoRenewalWhileWriting) {
                    self.clock.sleep_until(until).await;
                    return LeaseError::lost(lease, "not renewed (planted bug)");
                }
                self.keep_renewed(lease, &usable).await
            });
            if unfenced {
                tokio::select! {
                    biased;
                    out = fenced => Ok(out),
                    lost = renewal => Err(lost),
                }
            } else {
                tokio::select! {
                    biased;
                    lost = renewal => Err(lost),
                    out = fenced => Ok(out),
                }
            }
        };
        match outcome {
            Ok(Some(out)) => Ok(out),
            Ok(None) => Err(LeaseError::lost(
                lease,
                "renewal not confirmed before the lease deadline",
            )),
            Err(lost) => Err(lost),
        }
    }

    /// Makes sure `lease` has at least `timeout - renew interval` left before something
    /// starts under it: renews it first if it is older than the renew interval (a slow
    /// acquisition answer, a lease recognised as ours without a direct answer, a slow step
    /// before). A renewal is safe at any time, even past the deadline: it applies only if
    /// nobody took the record meanwhile. Ambiguous answers are retried a few times.
    pub async fn refresh(&self, lease: &mut Lease) -> Result<(), LeaseError> {
        if self.clock.now() < lease.written_at + self.config.renew_interval() {
            return Ok(());
        }
        let mut failures = 0;
        loop {
            match self.renew(lease).await {
                Ok(()) => break,
                Err(e @ (LeaseError::Lost { .. } | LeaseError::GenerationExhausted { .. })) => {
                    return Err(e);
                }
                Err(e) if failures < 3 => {
                    failures += 1;
                    tracing::debug!(path = %lease.path, error = %e, "refreshing the lease failed; trying again");
                    self.clock.sleep(self.config.poll_interval).await;
                }
                Err(e) => return Err(e),
            }
        }
        if self.clock.now() >= lease.usable_until() {
            return Err(LeaseError::lost(
                lease,
                "the lease had run out, and its renewal was answered too late to start \
                 anything under it; nothing was sent",
            ));
        }
        Ok(())
    }

    /// Renews `lease` every renew interval, forever, publishing each new usable time in
    /// `usable`; returns only when the lease is lost.
    async fn keep_renewed(&self, lease: &mut Lease, usable: &Mutex<Instant>) -> LeaseError {
        loop {
            self.clock
                .sleep_until(lease.written_at + self.config.renew_interval())
                .await;
            loop {
                let until = lease.usable_until();
                let now = self.clock.now();
                if now >= until {
                    // Woken late (a paused process): a renewal sent now would make the
                    // record look held for another timeout x skew, for an operation that
                    // is about to be dropped.
                    return LeaseError::lost(
                        lease,
                        "renewal not confirmed before the lease deadline",
                    );
                }
                // One attempt may take half the time left, so a request that hangs leaves
                // room for another.
                let attempt_until = now + (until - now) / 2;
                let attempt = tokio::select! {
                    biased;
                    renewed = self.renew(lease) => Some(renewed),
                    () = self.clock.sleep_until(attempt_until) => None,
                };
                let error = match attempt {
                    Some(Ok(())) => {
                        *lock(usable) = lease.usable_until();
                        break;
                    }
                    Some(Err(
                        e @ (LeaseError::Lost { .. } | LeaseError::GenerationExhausted { .. }),
                    )) => return e,
                    Some(Err(e)) => e.to_string(),
                    None => "no answer in time".to_owned(),
                };
                tracing::warn!(path = %lease.path, error = %error, "lease renewal failed; retrying until the deadline");
                let pause = self.config.poll_interval;
                if self.clock.now() + pause >= until {
                    self.clock.sleep_until(until).await;
                    return LeaseError::lost(
                        lease,
                        format!(
                            "renewal not confirmed before the lease deadline (last error: {error})"
                        ),
                    );
                }
                self.clock.sleep(pause).await;
            }
        }
    }

    /// Renews `lease` once: writes the next generation if the record is still ours.
    ///
    /// If the record turns out to hold that next generation already (an earlier attempt,
    /// perhaps of a call that was dropped, landed after all), the lease runs from when the
    /// earliest unconfirmed attempt was sent.
    pub async fn renew(&self, lease: &mut Lease) -> Result<(), LeaseError> {
        let next = lease.after(lease.generation)?;
        let record = self.record(lease, next, false);
        let expect = lease.still_ours();
        let sent = self.clock.now();
        // Before the request leaves: if this call is dropped, the attempt may still land.
        let earliest = *lease.unconfirmed_since.get_or_insert(sent);
        let answer = self.table.put(&record, &expect).await;
        let round_trip = self.clock.now().saturating_duration_since(sent);
        if round_trip > lease.timeout / 3 {
            // Safe still, but close to the edge: one more slow answer and the holder gives
            // up its operation. The lease timeout should be far above the table's latency.
            tracing::warn!(
                path = %lease.path,
                ?round_trip,
                timeout = ?lease.timeout,
                "lease renewal took over a third of the lease; raise the lease timeout"
            );
        }
        let written_at = match answer? {
            PutOutcome::Written => sent,
            PutOutcome::Conflict(Some(found))
                if found.is_written_by(&lease.owner, next) && !found.released =>
            {
                earliest
            }
            PutOutcome::Conflict(found) => {
                let reason = match found {
                    Some(f) => format!(
                        "the record is now generation {} of {}",
                        f.generation,
                        f.owner.as_deref().unwrap_or("an object_store 0.12 writer")
                    ),
                    None => "the record was deleted".to_owned(),
                };
                return Err(LeaseError::lost(lease, reason));
            }
        };
        lease.generation = next;
        lease.written_at = written_at;
        lease.unconfirmed_since = None;
        Ok(())
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
            let generation = if self.planted(PlantedBug::ReleaseWithoutBump) {
                lease.generation
            } else {
                lease.after(lease.generation)?
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
    fn end_sent(&self, lease: Lease, end: LeaseEnd, outcome: Sent) {
        match (end, outcome) {
            (LeaseEnd::KeepCreate, Sent::Succeeded) if self.deferred.is_some() => self.keep(lease),
            (LeaseEnd::ReleaseOnceQuiet, Sent::Succeeded)
                if self.planted(PlantedBug::HeldPathReleasedAtOnce) =>
            {
                self.release_in_background(lease)
            }
            (_, Sent::Failed) if self.planted(PlantedBug::ReleaseAfterFailedWrite) => {
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
    fn release_once_quiet(&self, lease: Lease) {
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

/// Whether two ETags name the same version, whatever their quoting or weak mark: a
/// store's answers to a PUT and to a HEAD need not write them alike. The one comparison
/// of ETags in the crate (the queue's and `CommitStore`'s checks alike).
pub(crate) fn same_etag(a: &str, b: &str) -> bool {
    bare_etag(a) == bare_etag(b)
}

/// The form of `etag` a lease key names: quoted, without a weak mark, as S3 writes ETags
/// and object_store hands them on (so object_store 0.12.5's keys, which take the ETag
/// as given, are the same on a store that follows S3); `*` (a create) as it is.
pub(crate) fn lease_etag(etag: &str) -> String {
    if etag == super::CREATE_ETAG {
        etag.to_owned()
    } else {
        format!("\"{}\"", bare_etag(etag))
    }
}

/// `etag` without its weak mark and quotes.
pub(crate) fn bare_etag(etag: &str) -> &str {
    etag.trim_start_matches("W/").trim_matches('"')
}

/// `HOST pid PID` of this process, for people reading the table.
fn this_process() -> String {
    format!("{} pid {}", host_name(), std::process::id())
}

/// This machine's host name.
#[cfg(unix)]
fn host_name() -> String {
    let mut name = [0u8; 256];
    // SAFETY: the buffer is valid for its whole length, which is what we pass; the name is
    // cut at the first NUL (or the buffer's end) below.
    if unsafe { libc::gethostname(name.as_mut_ptr().cast(), name.len()) } == 0 {
        let end = name.iter().position(|&b| b == 0).unwrap_or(name.len());
        String::from_utf8_lossy(&name[..end]).into_owned()
    } else {
        "unknown-host".to_owned()
    }
}

/// This machine's host name, as Windows names it in the environment.
#[cfg(not(unix))]
fn host_name() -> String {
    std::env::var("COMPUTERNAME").unwrap_or_else(|_| "unknown-host".to_owned())
}

/// A fresh random owner nonce: 128 bits, so two acquisitions never share one.
fn new_owner() -> String {
    format!("{:032x}", rand::random::<u128>())
}
