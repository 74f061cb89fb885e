//! Commit races: many writers committing at once through conditional writes, and a check
//! afterwards that no acknowledged commit was lost.
//!
//! - The log race (here, [`run`]), Delta-style: writers append to one log, each claiming
//!   the next version with a create-if-absent ([`PutMode::Create`]); every version must be
//!   won exactly once.
//! - The pointer race ([`pointer`](mod@pointer)), Iceberg-style: writers swap one pointer
//!   object to their new metadata file with a compare-and-swap on its ETag
//!   (`PutMode::Update`); the chain of metadata files behind the final pointer must hold
//!   every acknowledged swap.
//!
//! This is the job a commit layer exists for, and the test of one: run either on a store
//! that ignores conditional writes and it finds lost commits at once; run it through
//! [`CommitStore`](crate::CommitStore) and it finds none.

pub mod pointer;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use futures::{StreamExt, TryStreamExt, stream};
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutMode};
use tokio::time::Instant;

/// One writer of the log: something that can create an object only if it is absent.
#[async_trait]
pub trait LogWriter: Send + Sync {
    /// Creates `path` with `body` unless an object is there: `Ok(true)` if this call
    /// wrote it, `Ok(false)` if one already existed.
    async fn create(&self, path: &Path, body: Bytes) -> Result<bool, String>;

    /// Waits for the writer's background work (a [`CommitStore`](crate::CommitStore)'s
    /// lease releases) to finish, so that a count of requests taken next is whole.
    async fn settled(&self) {}
}

/// A [`CommitStore`](crate::CommitStore) writes the log itself, and settles its leases.
#[async_trait]
impl LogWriter for crate::CommitStore {
    async fn create(&self, path: &Path, body: Bytes) -> Result<bool, String> {
        create_if_absent(self, path, body).await
    }

    async fn settled(&self) {
        self.leases().settled().await;
    }
}

/// A [`LogWriter`] over any `ObjectStore`, creating with [`PutMode::Create`].
#[derive(Debug, Clone)]
pub struct StoreWriter(pub Arc<dyn ObjectStore>);

#[async_trait]
impl LogWriter for StoreWriter {
    async fn create(&self, path: &Path, body: Bytes) -> Result<bool, String> {
        create_if_absent(&*self.0, path, body).await
    }
}

/// Creates `path` with `body` through [`PutMode::Create`]: `Ok(true)` if written,
/// `Ok(false)` if something was already there.
pub(crate) async fn create_if_absent(
    store: &dyn ObjectStore,
    path: &Path,
    body: Bytes,
) -> Result<bool, String> {
    match store
        .put_opts(path, body.into(), PutMode::Create.into())
        .await
    {
        Ok(_) => Ok(true),
        Err(object_store::Error::AlreadyExists { .. }) => Ok(false),
        Err(e) => Err(e.to_string()),
    }
}

/// The path of log version `version` under `prefix`: `prefix/00000000000000000042.json`.
pub fn version_path(prefix: &Path, version: u64) -> Path {
    prefix.clone().join(format!("{version:020}.json"))
}

/// What a race found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RaceReport {
    /// Writers that raced.
    pub writers: usize,
    /// Commits each writer was to make.
    pub commits_per_writer: usize,
    /// Commits the writers were told they won, in all.
    pub committed: u64,
    /// Whether the race was stopped early (see [`RaceControl::stop`]).
    pub interrupted: bool,
    /// Versions present in the store, from 0 without a gap.
    pub versions: u64,
    /// Versions missing below the highest one present.
    pub gaps: Vec<u64>,
    /// Versions that more than one writer was told it had won.
    pub duplicates: Vec<u64>,
    /// Versions won whose stored body is not the winner's (a lost commit).
    pub lost: Vec<u64>,
    /// Times a writer found its next version taken and moved on.
    pub conflicts: u64,
    /// Latency of each winning create.
    pub latency: Percentiles,
    /// Wall time of the race itself (not the check).
    pub elapsed: Duration,
}

impl RaceReport {
    /// Whether every invariant held: versions `0..committed` each exist once, each holds
    /// its one winner's bytes, and the wins add up (to `writers x commits_per_writer`
    /// unless interrupted).
    pub fn is_clean(&self) -> bool {
        let planned = (self.writers * self.commits_per_writer) as u64;
        self.gaps.is_empty()
            && self.duplicates.is_empty()
            && self.lost.is_empty()
            && self.versions == self.committed
            && (self.interrupted || self.committed == planned)
    }
}

/// Latency percentiles.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Percentiles {
    /// Median.
    pub p50: Duration,
    /// 90th percentile.
    pub p90: Duration,
    /// 99th percentile.
    pub p99: Duration,
    /// Slowest.
    pub max: Duration,
}

impl Percentiles {
    /// Percentiles of `samples` (nearest rank); zeros for no samples.
    pub fn of(mut samples: Vec<Duration>) -> Self {
        if samples.is_empty() {
            return Self::default();
        }
        samples.sort_unstable();
        let rank = |p: usize| samples[((samples.len() * p).div_ceil(100)).saturating_sub(1)];
        Self {
            p50: rank(50),
            p90: rank(90),
            p99: rank(99),
            max: samples[samples.len() - 1],
        }
    }
}

/// Watches and steers a running race from outside: a count of commits so far, and a flag
/// that stops it (writers finish the commit in flight, then stop; the log is checked as
/// far as it got).
#[derive(Debug, Default)]
pub struct RaceControl {
    /// Commits won so far.
    pub committed: AtomicU64,
    stopped: AtomicBool,
}

impl RaceControl {
    /// Asks the writers to stop after their current commit.
    pub fn stop(&self) {
        self.stopped.store(true, Ordering::SeqCst);
    }

    /// Whether [`stop`](Self::stop) was called.
    pub fn is_stopped(&self) -> bool {
        self.stopped.load(Ordering::SeqCst)
    }
}

/// A writer failed with something other than "already exists".
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("writer {writer} failed creating version {version}: {message}")]
pub struct RaceError {
    /// The writer's index.
    pub writer: usize,
    /// The version it was creating.
    pub version: u64,
    /// The store's error.
    pub message: String,
}

/// One writer's wins: version, body and latency of each.
type Wins = Vec<(u64, Bytes, Duration)>;

/// Races `writers` (each making `commits_per_writer` commits) on the log at `prefix`, then
/// reads every version back through `reader` and checks the invariants. `control`, if
/// given, counts commits as they land and can stop the race.
///
/// ```
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// use std::sync::Arc;
/// use dynacommit::CommitStore;
/// use dynacommit::lease::{LeaseConfig, LeaseManager, MemoryLeaseTable};
/// use dynacommit::race::{self, LogWriter, StoreWriter};
/// use object_store::{ObjectStore, memory::InMemory, path::Path};
///
/// let inner: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
/// let leases = LeaseManager::new(Arc::new(MemoryLeaseTable::new()), LeaseConfig::default())?;
/// let store: Arc<dyn ObjectStore> = Arc::new(CommitStore::new(inner.clone(), leases));
/// let writers: Vec<Arc<dyn LogWriter>> =
///     (0..4).map(|_| Arc::new(StoreWriter(store.clone())) as Arc<dyn LogWriter>).collect();
/// let report = race::run(writers, inner, &Path::from("_log"), 5, None).await?;
/// assert!(report.is_clean() && report.versions == 20);
/// # Ok(()) }
/// ```
pub async fn run(
    writers: Vec<Arc<dyn LogWriter>>,
    reader: Arc<dyn ObjectStore>,
    prefix: &Path,
    commits_per_writer: usize,
    control: Option<Arc<RaceControl>>,
) -> Result<RaceReport, RaceError> {
    let count = writers.len();
    let started = Instant::now();
    let conflicts = Arc::new(AtomicU64::new(0));
    let tasks = writers.into_iter().enumerate().map(|(index, writer)| {
        let prefix = prefix.clone();
        let conflicts = conflicts.clone();
        let control = control.clone();
        async move {
            let mut wins: Wins = Vec::with_capacity(commits_per_writer);
            let mut version = 0u64;
            while wins.len() < commits_per_writer
                && !control.as_ref().is_some_and(|c| c.is_stopped())
            {
                let body = Bytes::from(format!(
                    "{{\"writer\":{index},\"commit\":{},\"nonce\":\"{:016x}\"}}",
                    wins.len(),
                    rand::random::<u64>()
                ));
                let path = version_path(&prefix, version);
                let attempt = Instant::now();
                match writer.create(&path, body.clone()).await {
                    Ok(true) => {
                        wins.push((version, body, attempt.elapsed()));
                        if let Some(c) = &control {
                            c.committed.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    Ok(false) => {
                        conflicts.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(message) => {
                        return Err(RaceError {
                            writer: index,
                            version,
                            message,
                        });
                    }
                }
                version += 1;
            }
            Ok(wins)
        }
    });
    let all_wins: Vec<Wins> = futures::future::try_join_all(tasks).await?;
    let elapsed = started.elapsed();

    let mut claims: HashMap<u64, Vec<Bytes>> = HashMap::new();
    let mut latencies = Vec::new();
    for (version, body, latency) in all_wins.into_iter().flatten() {
        claims.entry(version).or_default().push(body);
        latencies.push(latency);
    }
    let highest = claims.keys().copied().max().map_or(0, |v| v + 1);
    let stored: Vec<(u64, Option<Bytes>)> = stream::iter(0..highest)
        .map(|version| {
            let reader = reader.clone();
            let path = version_path(prefix, version);
            async move {
                match reader.get(&path).await {
                    Ok(r) => r.bytes().await.map(|b| (version, Some(b))),
                    Err(object_store::Error::NotFound { .. }) => Ok((version, None)),
                    Err(e) => Err(e),
                }
            }
        })
        .buffered(8)
        .try_collect()
        .await
        .map_err(|e| RaceError {
            writer: usize::MAX,
            version: 0,
            message: format!("reading the log back: {e}"),
        })?;

    let committed = latencies.len() as u64;
    let mut report = RaceReport {
        writers: count,
        commits_per_writer,
        committed,
        interrupted: control.as_ref().is_some_and(|c| c.is_stopped()),
        versions: 0,
        gaps: Vec::new(),
        duplicates: Vec::new(),
        lost: Vec::new(),
        conflicts: conflicts.load(Ordering::Relaxed),
        latency: Percentiles::of(latencies),
        elapsed,
    };
    for (version, body) in stored {
        let Some(body) = body else {
            report.gaps.push(version);
            continue;
        };
        report.versions += 1;
        let winners = claims.get(&version).map_or(&[][..], Vec::as_slice);
        if winners.len() > 1 {
            report.duplicates.push(version);
        }
        if !winners.contains(&body) {
            report.lost.push(version);
        }
    }
    Ok(report)
}
