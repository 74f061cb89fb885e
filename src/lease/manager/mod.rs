//! The lease protocol: acquire (waiting out or reclaiming others' leases), run an operation
//! while the lease is renewed and fenced by its deadline, release when the outcome is known.

mod acquire;
mod errors;
mod etag;
mod guard;
mod hold;
mod lease;
mod release;

pub use errors::{AcquireError, GuardError, LeaseError};
pub(crate) use etag::{bare_etag, lease_etag, same_etag};
pub(crate) use guard::{Beaten, Ending, LeaseEnd};
pub use lease::Lease;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::clock::{Clock, SystemClock};
use super::config::LeaseConfig;
use super::pressure::Pressure;
use super::queue::Queues;
use super::record::{Holder, LeaseRecord};
use super::table::LeaseTable;
#[cfg(feature = "planted-bugs")]
use crate::safeguards::PlantedBug;
use crate::safeguards::Safeguards;
use release::{Background, Deferred};

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
    /// The protocol's safeguards: all in force, but where a test planted a bug.
    safeguards: Safeguards,
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
            safeguards: Safeguards::default(),
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
    pub fn with_planted_bug(mut self, bug: PlantedBug) -> Self {
        self.safeguards = self.safeguards.without(bug);
        if bug == PlantedBug::KeepCreateLeasesByDefault {
            return self.keep_create_leases();
        }
        self
    }

    /// The safeguards in force, for the store's writes under this manager's leases.
    pub(crate) fn safeguards(&self) -> Safeguards {
        self.safeguards
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
        let unpredictable = if self.fencing {
            self.safeguards.tokens_outlive_records()
        } else {
            self.safeguards.unpredictable_first_generation()
        };
        if !unpredictable {
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
