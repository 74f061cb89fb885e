//! Benchmark scenarios, run side by side on any number of targets (this crate's
//! `CommitStore`, a bare store, object_store 0.12.5's DynamoCommit, a store's native
//! conditional PUT) so that their ratios come from one run on one machine.
//!
//! Targets implement [`Target`]; [`StoreTarget`] adapts any object_store 0.14 store.
//! `benches/protocols.rs` adds 0.12.5 and prints the tables of `docs/benchmarks.md`.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use futures::TryStreamExt;
use object_store::path::Path;
use object_store::{CopyMode, CopyOptions, ObjectStore, ObjectStoreExt, PutMode, UpdateVersion};
use tokio::time::Instant;

use crate::race::{LogWriter, Percentiles, RaceReport};

/// What a benchmark target can do. Errors are text: targets come from different crates.
#[async_trait]
pub trait Target: Send + Sync {
    /// Creates `path` unless it exists: `Ok(true)` if this call wrote it.
    async fn create(&self, path: &Path, body: Bytes) -> Result<bool, String>;
    /// Replaces `path` if its ETag is `etag`: `Ok(false)` if it was not.
    async fn update(&self, path: &Path, body: Bytes, etag: &str) -> Result<bool, String>;
    /// Copies `from` to `to` unless `to` exists: `Ok(true)` if this call wrote it.
    async fn copy_if_absent(&self, from: &Path, to: &Path) -> Result<bool, String>;
    /// The body and ETag at `path`, if any.
    async fn get(&self, path: &Path) -> Result<Option<(Bytes, String)>, String>;
    /// Writes `path` unconditionally.
    async fn put(&self, path: &Path, body: Bytes) -> Result<(), String>;
    /// Deletes `path`.
    async fn delete(&self, path: &Path) -> Result<(), String>;
    /// Counts the objects under `prefix`.
    async fn list(&self, prefix: &Path) -> Result<usize, String>;
    /// Waits until work the target does in the background after an operation (a lease
    /// release) is done, so that it does not weigh on the next target's timing. Not timed.
    async fn settled(&self) {}
}

/// A [`Target`] over a [`CommitStore`](crate::CommitStore): its operations are
/// [`StoreTarget`]'s, and it settles by waiting for the background lease releases.
#[derive(Debug, Clone)]
pub struct CommitTarget(pub Arc<crate::CommitStore>);

#[async_trait]
impl Target for CommitTarget {
    async fn create(&self, path: &Path, body: Bytes) -> Result<bool, String> {
        self.store().create(path, body).await
    }
    async fn update(&self, path: &Path, body: Bytes, etag: &str) -> Result<bool, String> {
        self.store().update(path, body, etag).await
    }
    async fn copy_if_absent(&self, from: &Path, to: &Path) -> Result<bool, String> {
        self.store().copy_if_absent(from, to).await
    }
    async fn get(&self, path: &Path) -> Result<Option<(Bytes, String)>, String> {
        self.store().get(path).await
    }
    async fn put(&self, path: &Path, body: Bytes) -> Result<(), String> {
        self.store().put(path, body).await
    }
    async fn delete(&self, path: &Path) -> Result<(), String> {
        self.store().delete(path).await
    }
    async fn list(&self, prefix: &Path) -> Result<usize, String> {
        self.store().list(prefix).await
    }
    async fn settled(&self) {
        self.0.leases().settled().await;
    }
}

impl CommitTarget {
    fn store(&self) -> StoreTarget {
        StoreTarget(self.0.clone())
    }
}

/// In which order the targets take their turn at each operation of a latency scenario.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Order {
    /// Rotated every operation (lane 0 first, then lane 1 first, ...): no target always
    /// follows another. What the reported figures use.
    #[default]
    Rotated,
    /// Always lane 0, lane 1, ...
    Forward,
    /// Always the last lane first.
    Reversed,
}

/// A [`Target`] over an object_store 0.14 store, using its conditional put and copy modes
/// (so a `CommitStore` goes through leases, and a store with native conditions uses them).
#[derive(Debug, Clone)]
pub struct StoreTarget(pub Arc<dyn ObjectStore>);

#[async_trait]
impl Target for StoreTarget {
    async fn create(&self, path: &Path, body: Bytes) -> Result<bool, String> {
        crate::race::create_if_absent(&*self.0, path, body).await
    }

    async fn update(&self, path: &Path, body: Bytes, etag: &str) -> Result<bool, String> {
        let mode = PutMode::Update(UpdateVersion {
            e_tag: Some(etag.to_owned()),
            version: None,
        });
        match self.0.put_opts(path, body.into(), mode.into()).await {
            Ok(_) => Ok(true),
            Err(object_store::Error::Precondition { .. }) => Ok(false),
            Err(e) => Err(e.to_string()),
        }
    }

    async fn copy_if_absent(&self, from: &Path, to: &Path) -> Result<bool, String> {
        let options = CopyOptions::new().with_mode(CopyMode::Create);
        match self.0.copy_opts(from, to, options).await {
            Ok(()) => Ok(true),
            Err(object_store::Error::AlreadyExists { .. }) => Ok(false),
            Err(e) => Err(e.to_string()),
        }
    }

    async fn get(&self, path: &Path) -> Result<Option<(Bytes, String)>, String> {
        match self.0.get(path).await {
            Ok(result) => {
                let etag = result.meta.e_tag.clone().unwrap_or_default();
                let body = result.bytes().await.map_err(|e| e.to_string())?;
                Ok(Some((body, etag)))
            }
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(e.to_string()),
        }
    }

    async fn put(&self, path: &Path, body: Bytes) -> Result<(), String> {
        self.0
            .put(path, body.into())
            .await
            .map(|_| ())
            .map_err(|e| e.to_string())
    }

    async fn delete(&self, path: &Path) -> Result<(), String> {
        self.0.delete(path).await.map_err(|e| e.to_string())
    }

    async fn list(&self, prefix: &Path) -> Result<usize, String> {
        let listed: Vec<_> = self
            .0
            .list(Some(prefix))
            .try_collect()
            .await
            .map_err(|e| e.to_string())?;
        Ok(listed.len())
    }
}

/// One target and the prefix its objects go under.
pub type Lane<'a> = (&'a dyn Target, Path);

/// Runs `op` `n` times on every lane, interleaved (each operation on every lane, in
/// `order`, then the next), so that drift in the servers over the run weighs on every lane
/// alike; after each lane's turn its background work settles, untimed, so that it does not
/// slow the next lane's. Returns each lane's latencies.
async fn interleaved<'a, F, Fut>(
    lanes: &[Lane<'a>],
    n: usize,
    order: Order,
    mut op: F,
) -> Result<Vec<Percentiles>, String>
where
    F: FnMut(&'a dyn Target, &Path, usize) -> Fut,
    Fut: Future<Output = Result<(), String>>,
{
    let mut samples = vec![Vec::with_capacity(n); lanes.len()];
    let count = lanes.len();
    for i in 0..n {
        for turn in 0..count {
            let k = match order {
                Order::Rotated => (i + turn) % count,
                Order::Forward => turn,
                Order::Reversed => count - 1 - turn,
            };
            let (target, prefix) = &lanes[k];
            let started = Instant::now();
            op(*target, prefix, i).await?;
            samples[k].push(started.elapsed());
            target.settled().await;
        }
    }
    Ok(samples.into_iter().map(Percentiles::of).collect())
}

/// Scenario 1: `n` creates of fresh paths, one at a time per lane, the lanes taking turns
/// in `order`.
pub async fn uncontended_create(
    lanes: &[Lane<'_>],
    n: usize,
    order: Order,
) -> Result<Vec<Percentiles>, String> {
    interleaved(lanes, n, order, |t, prefix, i| {
        let path = prefix.clone().join(format!("create-{i}"));
        async move {
            let won = t.create(&path, Bytes::from_static(b"{}")).await?;
            if won {
                Ok(())
            } else {
                Err(format!("{path}: a fresh path was taken"))
            }
        }
    })
    .await
}

/// Scenario 2: object_store's own race: a worker per target in `workers`, each
/// incrementing a counter at `path` `increments` times with read-then-conditional-update.
/// Checks the final count. The workers may share one target (as object_store's race
/// helper shares one store) or each have one of its own (as processes would).
pub async fn increment_race(
    workers: &[&dyn Target],
    path: &Path,
    increments: usize,
) -> Result<IncrementRace, String> {
    let Some(&first) = workers.first() else {
        return Err("the increment race needs at least one worker".into());
    };
    let started = Instant::now();
    // Which worker made each increment, in the order they succeeded.
    let winners = std::sync::Mutex::new(Vec::with_capacity(workers.len() * increments));
    futures::future::try_join_all(
        workers
            .iter()
            .enumerate()
            .map(|(me, t)| increment(*t, me, path, increments, &winners)),
    )
    .await?;
    let elapsed = started.elapsed();
    let final_count = first.get(path).await?.map(|(b, _)| b).unwrap_or_default();
    let expected = (workers.len() * increments).to_string();
    if final_count.as_ref() != expected.as_bytes() {
        return Err(format!(
            "the counter ended at {final_count:?}, not {expected}: increments were lost"
        ));
    }
    let winners = winners
        .into_inner()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    Ok(IncrementRace {
        elapsed,
        handovers: winners.windows(2).filter(|w| w[0] != w[1]).count(),
    })
}

/// One worker of [`increment_race`]: `increments` increments of the counter at `path`,
/// each noted in `winners` as worker `me`'s.
async fn increment(
    t: &dyn Target,
    me: usize,
    path: &Path,
    increments: usize,
    winners: &std::sync::Mutex<Vec<usize>>,
) -> Result<(), String> {
    for _ in 0..increments {
        loop {
            let done = match t.get(path).await? {
                Some((body, etag)) => {
                    let n: usize = std::str::from_utf8(&body)
                        .ok()
                        .and_then(|s| s.parse().ok())
                        .ok_or_else(|| format!("counter holds {body:?}"))?;
                    t.update(path, Bytes::from((n + 1).to_string()), &etag)
                        .await?
                }
                None => t.create(path, Bytes::from_static(b"1")).await?,
            };
            if done {
                winners
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .push(me);
                break;
            }
        }
    }
    Ok(())
}

/// What one [`increment_race`] measured.
#[derive(Debug, Clone, Copy)]
pub struct IncrementRace {
    /// The race's wall time.
    pub elapsed: Duration,
    /// How often the next increment was another worker's than the last: each is a
    /// contended hand-over (the losers' retries met the winner's next try), where a run of
    /// one worker's increments in a row costs no waiting at all.
    pub handovers: usize,
}

/// Scenario 3: `rounds` of create, delete, create again at one path per lane; returns
/// the time of each re-create.
pub async fn delete_then_recreate(
    lanes: &[Lane<'_>],
    rounds: usize,
) -> Result<Vec<Percentiles>, String> {
    interleaved(lanes, rounds, Order::Rotated, |t, prefix, _| {
        let path = prefix.clone().join("recreated");
        async move {
            t.create(&path, Bytes::from_static(b"v1")).await?;
            t.delete(&path).await?;
            // Only the re-create is timed in the report's sense; the first create and
            // delete cost the same on every lane.
            let recreated = t.create(&path, Bytes::from_static(b"v2")).await?;
            t.delete(&path).await?;
            if recreated {
                Ok(())
            } else {
                Err(format!("{path}: the re-create found the deleted object"))
            }
        }
    })
    .await
}

/// Scenario 4: `n` copies of one source to fresh targets, each if absent.
pub async fn copy_if_absent(lanes: &[Lane<'_>], n: usize) -> Result<Vec<Percentiles>, String> {
    for (t, prefix) in lanes {
        t.put(
            &prefix.clone().join("copy-source"),
            Bytes::from_static(b"source"),
        )
        .await?;
    }
    interleaved(lanes, n, Order::Rotated, |t, prefix, i| {
        let (from, to) = (
            prefix.clone().join("copy-source"),
            prefix.clone().join(format!("copy-{i}")),
        );
        async move {
            let won = t.copy_if_absent(&from, &to).await?;
            if won {
                Ok(())
            } else {
                Err(format!("{to}: a fresh target was taken"))
            }
        }
    })
    .await
}

/// Scenario 5's three passthrough operations, per lane: `n` unconditional 1 KiB puts,
/// `n` gets, and `n` listings of the `n` objects.
pub async fn passthrough(lanes: &[Lane<'_>], n: usize) -> Result<[Vec<Percentiles>; 3], String> {
    let path = |prefix: &Path, i: usize| prefix.clone().join(format!("plain-{i}"));
    let puts = interleaved(lanes, n, Order::Rotated, |t, prefix, i| {
        let path = path(prefix, i);
        async move { t.put(&path, Bytes::from(vec![7u8; 1024])).await }
    })
    .await?;
    let gets = interleaved(lanes, n, Order::Rotated, |t, prefix, i| {
        let path = path(prefix, i);
        async move {
            t.get(&path)
                .await?
                .map(|_| ())
                .ok_or_else(|| format!("{path} vanished"))
        }
    })
    .await?;
    let lists = interleaved(lanes, n, Order::Rotated, |t, prefix, _| {
        let prefix = prefix.clone();
        async move {
            let count = t.list(&prefix).await?;
            if count == n {
                Ok(())
            } else {
                Err(format!("listed {count} of {n}"))
            }
        }
    })
    .await?;
    Ok([puts, gets, lists])
}

/// A [`LeaseTable`](crate::lease::LeaseTable) counting the requests sent through it: the
/// DynamoDB requests per commit of a race.
#[derive(Debug)]
pub struct CountingTable {
    inner: Arc<dyn crate::lease::LeaseTable>,
    writes: std::sync::atomic::AtomicU64,
    refused: std::sync::atomic::AtomicU64,
    reads: std::sync::atomic::AtomicU64,
}

/// What a [`CountingTable`] counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TableCounts {
    /// Writes sent (PutItem), refused ones included.
    pub writes: u64,
    /// Writes refused by their condition (DynamoDB bills them all the same).
    pub refused: u64,
    /// Reads (consistent GetItem).
    pub reads: u64,
}

impl std::ops::Sub for TableCounts {
    type Output = Self;
    fn sub(self, earlier: Self) -> Self {
        Self {
            writes: self.writes.saturating_sub(earlier.writes),
            refused: self.refused.saturating_sub(earlier.refused),
            reads: self.reads.saturating_sub(earlier.reads),
        }
    }
}

impl CountingTable {
    /// Counts the requests to `inner`.
    pub fn new(inner: Arc<dyn crate::lease::LeaseTable>) -> Self {
        Self {
            inner,
            writes: Default::default(),
            refused: Default::default(),
            reads: Default::default(),
        }
    }

    /// The counts so far.
    pub fn counts(&self) -> TableCounts {
        use std::sync::atomic::Ordering::SeqCst;
        TableCounts {
            writes: self.writes.load(SeqCst),
            refused: self.refused.load(SeqCst),
            reads: self.reads.load(SeqCst),
        }
    }
}

#[async_trait]
impl crate::lease::LeaseTable for CountingTable {
    async fn put(
        &self,
        record: &crate::lease::LeaseRecord,
        expect: &crate::lease::Expect,
    ) -> Result<crate::lease::PutOutcome, crate::lease::TableError> {
        use std::sync::atomic::Ordering::SeqCst;
        self.writes.fetch_add(1, SeqCst);
        let outcome = self.inner.put(record, expect).await;
        if let Ok(crate::lease::PutOutcome::Conflict(_)) = outcome {
            self.refused.fetch_add(1, SeqCst);
        }
        outcome
    }

    async fn get(
        &self,
        path: &str,
        etag: &str,
    ) -> Result<Option<crate::lease::LeaseRecord>, crate::lease::TableError> {
        self.reads.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        self.inner.get(path, etag).await
    }

    fn describe(&self) -> String {
        self.inner.describe()
    }

    fn dynamodb_table(&self) -> Option<&str> {
        self.inner.dynamodb_table()
    }
}

/// Scenario 6, the log race: `writers` (each as a process of its own would be) make
/// `commits` commits each on the log at `prefix`; their background work is settled before
/// this returns, and a race that lost or duplicated a commit is an error.
pub async fn log_race(
    writers: Vec<Arc<dyn LogWriter>>,
    reader: Arc<dyn ObjectStore>,
    prefix: &Path,
    commits: usize,
) -> Result<RaceReport, String> {
    let report = crate::race::run(writers.clone(), reader, prefix, commits, None)
        .await
        .map_err(|e| e.to_string())?;
    for writer in &writers {
        writer.settled().await;
    }
    if report.is_clean() {
        Ok(report)
    } else {
        Err(format!("the log race lost commits: {report:?}"))
    }
}

/// What scenario 7 ([`scale`]) measured.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Scale {
    /// Commits made in all.
    pub commits: u64,
    /// Wall time of the races (not of the checks after).
    pub wall: Duration,
    /// CPU time (user + system) of this process meanwhile, checks included.
    pub cpu: Duration,
    /// This process's largest resident set seen meanwhile, in bytes (0 where unknown).
    pub peak_rss: u64,
}

/// Scenario 7: `logs` log races at once under `base`, each of `per_log` writers from
/// `new_writer` making `commits` commits, measuring this process's CPU time and peak RSS.
pub async fn scale(
    new_writer: &dyn Fn() -> Arc<dyn LogWriter>,
    reader: Arc<dyn ObjectStore>,
    base: &Path,
    logs: usize,
    per_log: usize,
    commits: usize,
) -> Result<Scale, String> {
    let cpu_before = cpu_time();
    let peak = Arc::new(std::sync::atomic::AtomicU64::new(rss_bytes()));
    let sampler = {
        let peak = peak.clone();
        tokio::spawn(async move {
            loop {
                peak.fetch_max(rss_bytes(), std::sync::atomic::Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
    };
    let started = Instant::now();
    let races = (0..logs).map(|log| {
        let writers: Vec<_> = (0..per_log).map(|_| new_writer()).collect();
        let prefix = base.clone().join(format!("log-{log}"));
        let reader = reader.clone();
        async move { log_race(writers, reader, &prefix, commits).await }
    });
    let reports = futures::future::join_all(races).await;
    let wall = started.elapsed();
    sampler.abort();
    let mut committed = 0;
    for report in reports {
        committed += report?.committed;
    }
    Ok(Scale {
        commits: committed,
        wall,
        cpu: cpu_time().saturating_sub(cpu_before),
        peak_rss: peak.load(std::sync::atomic::Ordering::Relaxed),
    })
}

/// CPU time (user + system) this process has used; zero where it cannot be read.
#[cfg(unix)]
pub fn cpu_time() -> Duration {
    // SAFETY: `usage` is a plain C struct, valid when zeroed, that the call fills.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: a valid pointer to a writable rusage.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) } != 0 {
        return Duration::ZERO;
    }
    let tv = |t: libc::timeval| {
        Duration::from_secs(u64::try_from(t.tv_sec).unwrap_or(0))
            + Duration::from_micros(u64::try_from(t.tv_usec).unwrap_or(0))
    };
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

/// CPU time this process has used: not read outside Unix, so zero.
#[cfg(not(unix))]
pub fn cpu_time() -> Duration {
    Duration::ZERO
}

/// This process's resident set size in bytes (Linux: `/proc/self/status`); zero elsewhere.
pub fn rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}
