//! The lease protocol: acquire (waiting out or reclaiming others' leases), renew while an
//! operation runs, release when its outcome is known.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::config::{LeaseConfig, stale_after};
use super::record::{Expect, LeaseRecord, PutOutcome};
use super::table::{LeaseTable, TableError};

/// Runs the lease protocol against one [`LeaseTable`]. Cheap to clone.
///
/// ```
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// use std::sync::Arc;
/// use dynacommit::lease::{LeaseConfig, LeaseManager, MemoryLeaseTable};
///
/// let leases = LeaseManager::new(Arc::new(MemoryLeaseTable::new()), LeaseConfig::default())?;
/// // Nothing to check before taking this lease: the check always passes.
/// let mut lease = leases
///     .acquire("log/00000.json", "*", || async { Ok::<(), std::convert::Infallible>(()) })
///     .await?;
/// let written = leases.run_while_held(&mut lease, async { "the guarded write" }).await?;
/// leases.release(lease).await?;
/// # let _ = written; Ok(()) }
/// ```
#[derive(Clone)]
pub struct LeaseManager {
    table: Arc<dyn LeaseTable>,
    config: Arc<LeaseConfig>,
}

impl std::fmt::Debug for LeaseManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaseManager")
            .field("table", &self.table.describe())
            .field("config", &self.config)
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
    /// When the write that gave us the current generation was sent: the lease is ours
    /// for `timeout` from then, on our clock.
    written_at: Instant,
    /// Whether it was taken over from another holder (expired or released) rather than
    /// created fresh at the first try: the guarded state may have changed since it was
    /// last checked.
    taken_over: bool,
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

    /// When the lease runs out on this process's monotonic clock, unless renewed.
    pub fn deadline(&self) -> Instant {
        self.written_at + self.timeout
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
pub enum AcquireError<E> {
    /// The precondition check failed (the object changed, or could not be read).
    #[error(transparent)]
    Check(E),
    /// The lease protocol failed.
    #[error(transparent)]
    Lease(#[from] LeaseError),
}

/// What a waiter does next.
enum Turn {
    /// Reclaim this record (expired or released).
    Reclaim(LeaseRecord),
    /// The record is gone: start afresh.
    Fresh,
}

impl LeaseManager {
    /// A manager for `table` with `config`, once the config is checked.
    pub fn new(
        table: Arc<dyn LeaseTable>,
        config: LeaseConfig,
    ) -> Result<Self, super::ConfigError> {
        config.validate()?;
        Ok(Self {
            table,
            config: Arc::new(config),
        })
    }

    /// The settings.
    pub fn config(&self) -> &LeaseConfig {
        &self.config
    }

    /// The table.
    pub fn table(&self) -> &Arc<dyn LeaseTable> {
        &self.table
    }

    /// The record `lease` is stored as at `generation`.
    fn record(&self, lease: &Lease, generation: u64, released: bool) -> LeaseRecord {
        let ttl = chrono::Utc::now()
            + chrono::Duration::from_std(self.config.ttl).unwrap_or(chrono::Duration::MAX);
        LeaseRecord {
            path: lease.path.clone(),
            etag: lease.etag.clone(),
            generation,
            timeout: lease.timeout,
            ttl: ttl.timestamp(),
            owner: Some(lease.owner.clone()),
            value: lease.value.clone(),
            released,
        }
    }

    /// A lease on (path, etag) not yet won: a fresh owner nonce, generation 0.
    fn unwon(&self, path: &str, etag: &str, value: Option<&str>) -> Lease {
        Lease {
            path: path.to_owned(),
            etag: etag.to_owned(),
            generation: 0,
            owner: new_owner(),
            value: value.map(str::to_owned),
            timeout: self.config.timeout,
            written_at: Instant::now(),
            taken_over: false,
        }
    }

    /// Takes the lease on (path, etag), waiting as long as another writer holds it.
    ///
    /// `check` is the operation's precondition (for a create: the object is absent). It
    /// runs on every poll while waiting, so a waiter learns at once that the holder's
    /// write has made its own pointless; and once more after taking the lease over from
    /// another holder, whose write may have landed since the caller's first check. Its
    /// error ends the wait. The caller checks once before calling.
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
        self.acquire_lease(self.unwon(path, etag, None), check)
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
        self.acquire_lease(self.unwon(path, etag, Some(value)), check)
            .await
    }

    async fn acquire_lease<E, F, Fut>(
        &self,
        mut lease: Lease,
        mut check: F,
    ) -> Result<Lease, AcquireError<E>>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<(), E>>,
    {
        let mut expect = Expect::Absent;
        let mut generation = 0;
        let mut taken_over = false;
        loop {
            let sent = Instant::now();
            let found = match self.try_put(&lease, generation, &expect).await? {
                None => {
                    lease.won(generation, sent, taken_over);
                    break;
                }
                Some(found) => found,
            };
            taken_over = true;
            let turn = match found {
                Some(found) => self.wait_for_turn(found, &mut check).await?,
                None => Turn::Fresh,
            };
            (expect, generation) = self.next_attempt(&lease, turn)?;
        }
        if lease.taken_over
            && let Err(e) = check().await
        {
            // Nothing was written under this lease: hand it straight back.
            self.release_quietly(lease).await;
            return Err(AcquireError::Check(e));
        }
        Ok(lease)
    }

    /// One attempt at writing `lease` at `generation`: `None` if it is ours now (written,
    /// or found written by an earlier attempt whose answer was lost), else the record that
    /// stands (`Some(None)` when there is none).
    async fn try_put(
        &self,
        lease: &Lease,
        generation: u64,
        expect: &Expect,
    ) -> Result<Option<Option<LeaseRecord>>, LeaseError> {
        let record = self.record(lease, generation, false);
        Ok(match self.table.put(&record, expect).await {
            Ok(PutOutcome::Written) => None,
            Ok(PutOutcome::Conflict(Some(found)))
                if found.is_written_by(&lease.owner, generation) =>
            {
                tracing::debug!(path = %lease.path, generation, "recognised our own lease");
                None
            }
            Ok(PutOutcome::Conflict(found)) => Some(found),
            Err(e) if e.is_ambiguous() => {
                // The write may have landed: look before deciding.
                match self.table.get(&lease.path, &lease.etag).await? {
                    Some(found) if found.is_written_by(&lease.owner, generation) => None,
                    other => Some(other),
                }
            }
            Err(e) => return Err(e.into()),
        })
    }

    /// The condition and generation of the attempt that follows `turn`.
    fn next_attempt(&self, lease: &Lease, turn: Turn) -> Result<(Expect, u64), LeaseError> {
        Ok(match turn {
            Turn::Fresh => (Expect::Absent, 0),
            Turn::Reclaim(stale) => (
                Expect::Generation(stale.generation),
                lease.after(stale.generation)?,
            ),
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
        let mut expect = Expect::Absent;
        let mut generation = 0;
        // At most: absent (gone meanwhile), then released; each step at most once.
        for _ in 0..3 {
            let sent = Instant::now();
            let turn = match self.try_put(&lease, generation, &expect).await? {
                None => {
                    lease.won(generation, sent, generation > 0);
                    return Ok(Some(lease));
                }
                Some(None) => Turn::Fresh,
                Some(Some(found)) if found.released => Turn::Reclaim(found),
                Some(Some(_)) => return Ok(None),
            };
            (expect, generation) = self.next_attempt(&lease, turn)?;
        }
        Ok(None)
    }

    /// Waits until `seen` is released, has stood unchanged for its timeout x skew rate,
    /// or is gone; polling the caller's check and the record meanwhile.
    async fn wait_for_turn<E, F, Fut>(
        &self,
        mut seen: LeaseRecord,
        check: &mut F,
    ) -> Result<Turn, AcquireError<E>>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<(), E>>,
    {
        let mut seen_at = Instant::now();
        // Most holds are a commit's few milliseconds: look again soon, then back off to
        // the poll interval, so short holds cost little waiting and long ones little load.
        let mut pause = (self.config.poll_interval / 16).max(Duration::from_millis(1));
        loop {
            if seen.released {
                return Ok(Turn::Reclaim(seen));
            }
            let stale = stale_after(seen.timeout, self.config.max_clock_skew_rate);
            let waited = seen_at.elapsed();
            if waited >= stale {
                tracing::debug!(path = %seen.path, generation = seen.generation, ?waited, "reclaiming a stale lease");
                return Ok(Turn::Reclaim(seen));
            }
            tokio::time::sleep(pause.min(stale - waited)).await;
            pause = (pause * 2).min(self.config.poll_interval);
            check().await.map_err(AcquireError::Check)?;
            match self.table.get(&seen.path, &seen.etag).await {
                Ok(None) => return Ok(Turn::Fresh),
                Ok(Some(now)) => {
                    if (now.generation, &now.owner, now.released)
                        != (seen.generation, &seen.owner, seen.released)
                    {
                        // Renewed, reclaimed or released: the clock starts again.
                        seen = now;
                        seen_at = Instant::now();
                    }
                }
                // A failed read only delays noticing a change; the timer stays sound.
                Err(e) => tracing::debug!(error = %e, "lease read failed while waiting"),
            }
        }
    }

    /// Runs `op` while keeping `lease` renewed, and returns its output. If renewal cannot
    /// be confirmed before the lease's local deadline, or another writer holds the lease,
    /// `op` is dropped and [`LeaseError::Lost`] returned, before any waiter could reclaim
    /// (for clock rates within the skew rate).
    ///
    /// `op` is never dropped merely for running long: a slow write keeps its lease for as
    /// long as it runs, so a late write cannot land on top of another writer's.
    pub async fn run_while_held<T>(
        &self,
        lease: &mut Lease,
        op: impl Future<Output = T>,
    ) -> Result<T, LeaseError> {
        let op = std::pin::pin!(op);
        let renewal = std::pin::pin!(self.keep_renewed(lease));
        tokio::select! {
            biased;
            out = op => Ok(out),
            lost = renewal => Err(lost),
        }
    }

    /// Renews `lease` every renew interval, forever; returns only when it is lost.
    async fn keep_renewed(&self, lease: &mut Lease) -> LeaseError {
        loop {
            tokio::time::sleep_until(lease.written_at + self.config.renew_interval()).await;
            let first_sent = Instant::now();
            loop {
                let deadline = lease.deadline();
                match tokio::time::timeout_at(deadline, self.renew_since(lease, first_sent)).await {
                    Ok(Ok(())) => break,
                    Ok(Err(
                        e @ (LeaseError::Lost { .. } | LeaseError::GenerationExhausted { .. }),
                    )) => {
                        return e;
                    }
                    Ok(Err(e)) => {
                        tracing::warn!(path = %lease.path, error = %e, "lease renewal failed; retrying until the deadline");
                        let pause = self.config.poll_interval;
                        if Instant::now() + pause >= deadline {
                            tokio::time::sleep_until(deadline).await;
                            return LeaseError::lost(
                                lease,
                                format!(
                                    "renewal not confirmed before the lease deadline (last error: {e})"
                                ),
                            );
                        }
                        tokio::time::sleep(pause).await;
                    }
                    Err(_) => {
                        return LeaseError::lost(
                            lease,
                            "renewal not confirmed before the lease deadline",
                        );
                    }
                }
            }
        }
    }

    /// Renews `lease` once: writes the next generation if the record is still ours.
    pub async fn renew(&self, lease: &mut Lease) -> Result<(), LeaseError> {
        self.renew_since(lease, Instant::now()).await
    }

    /// Renewal, where `first_sent` is when the first of a series of attempts (earlier
    /// ones ambiguous) was sent: if one of those landed, the lease runs from then.
    async fn renew_since(&self, lease: &mut Lease, first_sent: Instant) -> Result<(), LeaseError> {
        let next = lease.after(lease.generation)?;
        let record = self.record(lease, next, false);
        let expect = lease.still_ours();
        let sent = Instant::now();
        let answer = self.table.put(&record, &expect).await;
        let round_trip = sent.elapsed();
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
            PutOutcome::Conflict(Some(found)) if found.is_written_by(&lease.owner, next) => {
                first_sent
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
        Ok(())
    }

    /// Marks `lease` released, so the next writer of (path, etag) takes it at once instead
    /// of waiting for it to expire. Call only when the guarded operation's outcome is
    /// known (it succeeded, or failed without writing): a write that may still land must
    /// keep its lease until it expires.
    pub async fn release(&self, mut lease: Lease) -> Result<(), LeaseError> {
        // At most twice: a renewal dropped in flight may have moved our record one
        // generation on; it is still ours (the owner nonce says so) to release.
        for _ in 0..2 {
            let record = self.record(&lease, lease.generation, true);
            match self.table.put(&record, &lease.still_ours()).await? {
                PutOutcome::Written => return Ok(()),
                PutOutcome::Conflict(Some(found))
                    if found.owner.as_deref() == Some(lease.owner.as_str())
                        && found.generation > lease.generation =>
                {
                    lease.generation = found.generation;
                }
                PutOutcome::Conflict(_) => break,
            }
        }
        Err(LeaseError::lost(&lease, "it was no longer ours to release"))
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
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let manager = self.clone();
            runtime.spawn(async move { manager.release_quietly(lease).await });
        }
    }
}

/// A fresh random owner nonce: 128 bits, so two acquisitions never share one.
fn new_owner() -> String {
    format!("{:032x}", rand::random::<u128>())
}
