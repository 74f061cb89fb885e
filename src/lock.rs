//! A high-availability leader lock with fencing tokens, on the lease core.
//!
//! One holder at a time per key. The holder advertises a value (its address, say) that
//! anyone can read with [`LockClient::value`]; renews in the background; learns through
//! [`LockGuard::lost`] the moment it can no longer be sure it holds the lock, which is
//! always before anyone else can take it (for clock rates within the skew rate); and
//! carries a [fencing token](LockGuard::fencing_token), strictly increasing across
//! holders, for storage that can refuse a deposed leader's writes. See `docs/lock.md`.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;

use crate::lease::{AcquireError, Lease, LeaseConfig, LeaseError, LeaseManager, LeaseTable};

/// The range key of lock records. S3 ETags are quoted and commit leases use `*` for
/// creates, so lock records never collide with commit leases when a table is shared.
pub const LOCK_ETAG: &str = "#lock";

/// The default lock table.
pub const DEFAULT_LOCK_TABLE: &str = "dynacommit_locks";

/// Lease settings for locks: Vault's HA defaults (a 15 s lease renewed every 5 s, a third
/// of it), a skew rate of 3, polling every 100 ms. The renew interval is derived, so it
/// follows a timeout set later:
///
/// ```
/// use std::time::Duration;
/// use dynacommit::lock::default_lock_config;
///
/// let quick = default_lock_config().with_timeout(Duration::from_secs(3));
/// assert_eq!(quick.renew_interval(), Duration::from_secs(1));
/// assert!(quick.validate().is_ok());
/// ```
pub fn default_lock_config() -> LeaseConfig {
    LeaseConfig::new(DEFAULT_LOCK_TABLE).with_timeout(Duration::from_secs(15))
}

/// A lock operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LockError {
    /// The lease protocol or its table failed.
    #[error(transparent)]
    Lease(#[from] LeaseError),
    /// The lock was already lost when asked to release it.
    #[error("the lock on {key} was lost before release: {reason}")]
    LostBeforeRelease {
        /// The key.
        key: String,
        /// Why it was lost.
        reason: String,
    },
}

/// What a reader sees of a lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockState {
    /// Whether a holder's record stands unreleased. A holder that died less than
    /// `timeout x skew` ago still shows as holding it: only waiting that long can tell.
    pub held: bool,
    /// The holder's advertised value, while held.
    pub value: Option<String>,
    /// The holder's current lease generation, while held.
    pub generation: Option<u64>,
}

/// Takes and inspects locks in one lease table. Cheap to clone.
///
/// ```
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// use std::sync::Arc;
/// use dynacommit::lease::MemoryLeaseTable;
/// use dynacommit::lock::{LockClient, default_lock_config};
///
/// let locks = LockClient::new(Arc::new(MemoryLeaseTable::new()), default_lock_config())?;
/// let mut leader = locks.acquire("cluster/leader", "10.0.0.7:8200").await?;
/// println!("leading with fencing token {}", leader.fencing_token());
/// assert_eq!(locks.value("cluster/leader").await?.value.as_deref(), Some("10.0.0.7:8200"));
/// leader.release().await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct LockClient {
    leases: LeaseManager,
}

type Never = std::convert::Infallible;

impl LockClient {
    /// Locks in `table`, timed by `config` (see [`default_lock_config`]).
    pub fn new(
        table: Arc<dyn LeaseTable>,
        config: LeaseConfig,
    ) -> Result<Self, crate::lease::ConfigError> {
        Ok(Self::with_leases(LeaseManager::new(table, config)?))
    }

    /// Locks through `leases` (its table, settings and clock), which are switched to
    /// [fencing-token records](LeaseManager::for_fencing_tokens): no TTL, and first
    /// generations from the wall clock, so tokens never repeat or go back within the table
    /// (`docs/lock.md` says what a restored or replicated table does to them).
    pub fn with_leases(leases: LeaseManager) -> Self {
        Self {
            leases: leases.for_fencing_tokens(),
        }
    }

    /// The lease settings.
    pub fn config(&self) -> &LeaseConfig {
        self.leases.config()
    }

    /// Waits until the lock on `key` is ours, advertising `value`. Cancel by dropping the
    /// future (or use [`acquire_until`](Self::acquire_until)).
    pub async fn acquire(&self, key: &str, value: &str) -> Result<LockGuard, LockError> {
        loop {
            let lease = self
                .leases
                .acquire_with_value(key, LOCK_ETAG, value, || async { Ok::<(), Never>(()) })
                .await
                .map_err(|e| match e {
                    AcquireError::Lease(e) => e,
                    AcquireError::Check(never) => match never {},
                })?;
            // If someone took it before it could be used, we wait our turn again.
            if let Some(guard) = self.guard_if_fresh(lease).await? {
                return Ok(guard);
            }
        }
    }

    /// A guard for `lease`, handed out only with a lease fresh enough to lead on: one won
    /// through a slow or lost answer is renewed first. `Ok(None)` if it was lost meanwhile.
    /// A lease that cannot be used is let go (the record may be ours still, say a renewal
    /// answered too late, and we would otherwise wait behind ourselves); the release is
    /// conditional, a no-op if the record is not ours.
    async fn guard_if_fresh(&self, mut lease: Lease) -> Result<Option<LockGuard>, LeaseError> {
        match self.leases.refresh(&mut lease).await {
            Ok(()) => Ok(Some(LockGuard::start(self.leases.clone(), lease))),
            Err(e) => {
                tracing::debug!(key = %lease.path(), error = %e, "lock not usable once won");
                self.leases.release_quietly(lease).await;
                match e {
                    LeaseError::Lost { .. } => Ok(None),
                    e => Err(e),
                }
            }
        }
    }

    /// [`acquire`](Self::acquire) until `cancelled` completes: `Ok(None)` if it did first.
    pub async fn acquire_until(
        &self,
        key: &str,
        value: &str,
        cancelled: impl Future<Output = ()>,
    ) -> Result<Option<LockGuard>, LockError> {
        tokio::select! {
            biased;
            () = cancelled => Ok(None),
            guard = self.acquire(key, value) => guard.map(Some),
        }
    }

    /// Takes the lock only if it is free (absent or released) right now; `Ok(None)` if
    /// someone holds it. A dead holder's lock is not free until someone has watched it
    /// stand for `timeout x skew`: [`acquire`](Self::acquire) does that.
    pub async fn try_acquire(
        &self,
        key: &str,
        value: &str,
    ) -> Result<Option<LockGuard>, LockError> {
        let Some(lease) = self.leases.try_acquire(key, LOCK_ETAG, Some(value)).await? else {
            return Ok(None);
        };
        Ok(self.guard_if_fresh(lease).await?)
    }

    /// Who holds the lock on `key`, as far as the table says.
    pub async fn value(&self, key: &str) -> Result<LockState, LockError> {
        let record = self
            .leases
            .table()
            .get(key, LOCK_ETAG)
            .await
            .map_err(LeaseError::from)?;
        Ok(match record {
            Some(r) if !r.released => LockState {
                held: true,
                value: r.value,
                generation: Some(r.generation),
            },
            _ => LockState {
                held: false,
                value: None,
                generation: None,
            },
        })
    }
}

/// A held lock. Renews in the background until released, dropped or lost.
///
/// Dropping the guard stops renewal and releases the lock in the background.
#[derive(Debug)]
pub struct LockGuard {
    key: String,
    value: Option<String>,
    token: u64,
    leases: LeaseManager,
    lost: watch::Receiver<Option<String>>,
    stop: Option<oneshot::Sender<()>>,
    renewal: Option<JoinHandle<Lease>>,
    /// A lease whose release failed, kept for the next call to try again.
    unreleased: Option<Lease>,
}

impl LockGuard {
    fn start(leases: LeaseManager, mut lease: Lease) -> Self {
        let (lost_tx, lost) = watch::channel(None);
        let (stop, stop_rx) = oneshot::channel::<()>();
        let key = lease.path().to_owned();
        let value = lease.value().map(str::to_owned);
        let token = lease.generation();
        let renewer = leases.clone();
        let renewal = tokio::spawn(async move {
            let stopped = async {
                let _ = stop_rx.await;
            };
            if let Err(e) = renewer.run_while_held(&mut lease, stopped).await {
                tracing::warn!(key = %lease.path(), error = %e, "lock lost");
                let _ = lost_tx.send(Some(e.to_string()));
            }
            lease
        });
        Self {
            key,
            value,
            token,
            leases,
            lost,
            stop: Some(stop),
            renewal: Some(renewal),
            unreleased: None,
        }
    }

    /// The key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The advertised value.
    pub fn value(&self) -> Option<&str> {
        self.value.as_deref()
    }

    /// The fencing token: the lease generation this holder acquired at. Every later
    /// holder's token is larger, so storage that remembers the largest token it has seen
    /// can refuse a deposed holder's writes.
    pub fn fencing_token(&self) -> u64 {
        self.token
    }

    /// Whether the lock has been lost.
    pub fn is_lost(&self) -> bool {
        self.lost.borrow().is_some()
    }

    /// Completes when the lock is lost (renewal not confirmed by the lease's usable time,
    /// a tenth of the lease before its local deadline,
    /// another holder took it, the record was deleted), with the reason. Never completes
    /// while the lock is held; completes at once if already lost or released.
    pub async fn lost(&self) -> String {
        let mut lost = self.lost.clone();
        match lost.wait_for(Option::is_some).await {
            Ok(reason) => reason.clone().unwrap_or_default(),
            Err(_) => "the lock was released".to_owned(),
        }
    }

    /// Stops renewing and releases the lock, conditional on our own generation: never
    /// touches another holder's record. Idempotent once it has succeeded; a release that
    /// failed (the table did not answer) is tried again by the next call. A lock already
    /// lost is still released if its record turns out to be ours, and reported as
    /// [`LockError::LostBeforeRelease`].
    pub async fn release(&mut self) -> Result<(), LockError> {
        if self.unreleased.is_none() {
            self.unreleased = self.stop_renewal().await;
        }
        // Kept in `unreleased` until the release succeeds, so a dropped or failed call
        // leaves it for the next call, or for Drop.
        let Some(lease) = self.unreleased.clone() else {
            return Ok(());
        };
        let lost = self.lost.borrow().clone();
        if let Some(reason) = lost {
            // The record may still be ours (a renewal not confirmed in time is not a
            // renewal refused): release it if so; the release is conditional.
            self.leases.release_quietly(lease).await;
            self.unreleased = None;
            return Err(LockError::LostBeforeRelease {
                key: self.key.clone(),
                reason,
            });
        }
        match self.leases.release(lease).await {
            Ok(()) => {
                self.unreleased = None;
                Ok(())
            }
            Err(e) => {
                if matches!(e, LeaseError::Lost { .. }) {
                    self.unreleased = None;
                }
                Err(e.into())
            }
        }
    }

    /// Stops renewing without releasing, as a crashed holder would: the others take over
    /// once the lease has stood for `timeout x skew`. For failover drills and tests.
    pub async fn abandon(mut self) {
        self.stop_renewal().await;
        self.unreleased = None;
    }

    /// Stops the renewal task and takes back the lease; `None` once already stopped.
    async fn stop_renewal(&mut self) -> Option<Lease> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let renewal = self.renewal.take()?;
        renewal.await.ok()
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let (unreleased, renewal) = (self.unreleased.take(), self.renewal.take());
        if unreleased.is_none() && renewal.is_none() {
            return;
        }
        let leases = self.leases.clone();
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let lease = match (unreleased, renewal) {
                    (Some(lease), _) => Some(lease),
                    (None, Some(renewal)) => renewal.await.ok(),
                    (None, None) => None,
                };
                // Conditional on our generation and nonce: a no-op if someone else holds it.
                if let Some(lease) = lease {
                    leases.release_quietly(lease).await;
                }
            });
        }
    }
}
