//! dynacommit against object_store 0.12.5's DynamoCommit (the old protocol), the bare
//! store, and SeaweedFS's native conditional PUT (the floor), side by side in one run on
//! the local servers. Needs `scripts/services.sh start`; `scripts/bench.sh` does it all.
//! Prints the tables of `docs/benchmarks.md`.

#[path = "../tests/common/mod.rs"]
mod common;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use common::Counters;
use common::faults::{ScriptedStore, is_whole, pause_after_torn_read};
use common::old_protocol::OldWriter;
use common::s3::S3Server;
use dynacommit::bench::{
    self, CommitTarget, CountingTable, Order, StoreTarget, TableCounts, Target,
};
use dynacommit::lease::{DynamoLeaseTable, LeaseConfig, LeaseManager, LeaseTable};
use dynacommit::race::Percentiles;
use dynacommit::race::{LogWriter, StoreWriter};
use dynacommit::{CommitStore, Conditions};
use object_store::ObjectStore;
use object_store::aws::{S3ConditionalPut, S3CopyIfNotExists};
use object_store::path::Path;
use object_store_012 as old;

/// How much each scenario does.
#[derive(Debug, Clone, Copy)]
struct Sizes {
    /// Fresh paths created per run (scenario 1).
    creates: usize,
    /// Runs of scenario 1, each giving a ratio (the report gives their median).
    runs: usize,
    /// Copies to fresh targets (scenario 4).
    copies: usize,
    /// Puts, gets and listings (scenario 5).
    passthrough: usize,
    /// Delete-then-recreate rounds (scenario 3).
    recreates: usize,
    /// The lease timeout of the delete-then-recreate scenario, for both protocols (the
    /// old one waits timeout x 3 per re-create: 60 s at the default 20 s).
    short_timeout_ms: u64,
    /// object_store's race (scenario 2): workers, increments each, rounds.
    race: (usize, usize, usize),
    /// The log race (scenario 6): writers, commits each, rounds.
    log_race: (usize, usize, usize),
    /// The scale scenario (7): logs, writers per log, commits each.
    scale: (usize, usize, usize),
}

impl Sizes {
    /// The sizes of `docs/benchmarks.md`.
    const FULL: Self = Self {
        creates: 200,
        runs: 5,
        copies: 100,
        passthrough: 100,
        recreates: 3,
        short_timeout_ms: 1_000,
        race: (5, 10, 5),
        log_race: (16, 20, 3),
        scale: (16, 4, 10),
    };

    /// A smoke run (`DYNACOMMIT_BENCH_SMOKE=1`, as `scripts/test.sh` runs it): every
    /// scenario and every check of its results, on tiny sizes; its timings mean nothing.
    const SMOKE: Self = Self {
        creates: 5,
        runs: 1,
        copies: 5,
        passthrough: 5,
        recreates: 1,
        short_timeout_ms: 300,
        race: (3, 2, 1),
        log_race: (3, 2, 1),
        scale: (2, 2, 2),
    };

    /// The sizes of this run: [`FULL`](Self::FULL) or [`SMOKE`](Self::SMOKE), with the
    /// rounds of the races (2 and 6) set by `DYNACOMMIT_BENCH_ROUNDS` if given (a race's
    /// spread is 20-30% a round: telling a 10% change needs many).
    fn from_env() -> Self {
        let mut sizes = match std::env::var("DYNACOMMIT_BENCH_SMOKE") {
            Ok(v) if !v.is_empty() && v != "0" => Self::SMOKE,
            _ => Self::FULL,
        };
        if let Some(rounds) = std::env::var("DYNACOMMIT_BENCH_ROUNDS")
            .ok()
            .and_then(|v| v.trim().parse::<usize>().ok())
            .filter(|&n| n > 0)
        {
            sizes.race.2 = rounds;
            sizes.log_race.2 = rounds;
        }
        sizes
    }
}

/// object_store 0.12.5 as a benchmark target.
struct OldTarget(Arc<old::aws::AmazonS3>);

fn old_path(p: &Path) -> old::path::Path {
    old::path::Path::from(p.as_ref())
}

#[async_trait]
impl Target for OldTarget {
    async fn create(&self, path: &Path, body: Bytes) -> Result<bool, String> {
        use old::ObjectStore as _;
        match self
            .0
            .put_opts(&old_path(path), body.into(), old::PutMode::Create.into())
            .await
        {
            Ok(_) => Ok(true),
            Err(old::Error::AlreadyExists { .. }) => Ok(false),
            Err(e) => Err(e.to_string()),
        }
    }
    async fn update(&self, path: &Path, body: Bytes, etag: &str) -> Result<bool, String> {
        use old::ObjectStore as _;
        let mode = old::PutMode::Update(old::UpdateVersion {
            e_tag: Some(etag.into()),
            version: None,
        });
        match self
            .0
            .put_opts(&old_path(path), body.into(), mode.into())
            .await
        {
            Ok(_) => Ok(true),
            Err(old::Error::Precondition { .. }) => Ok(false),
            Err(e) => Err(e.to_string()),
        }
    }
    async fn copy_if_absent(&self, from: &Path, to: &Path) -> Result<bool, String> {
        use old::ObjectStore as _;
        match self
            .0
            .copy_if_not_exists(&old_path(from), &old_path(to))
            .await
        {
            Ok(()) => Ok(true),
            Err(old::Error::AlreadyExists { .. }) => Ok(false),
            Err(e) => Err(e.to_string()),
        }
    }
    async fn get(&self, path: &Path) -> Result<Option<(Bytes, String)>, String> {
        use old::ObjectStore as _;
        match self.0.get(&old_path(path)).await {
            Ok(r) => {
                let etag = r.meta.e_tag.clone().unwrap_or_default();
                Ok(Some((r.bytes().await.map_err(|e| e.to_string())?, etag)))
            }
            Err(old::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(e.to_string()),
        }
    }
    async fn put(&self, path: &Path, body: Bytes) -> Result<(), String> {
        use old::ObjectStore as _;
        self.0
            .put(&old_path(path), body.into())
            .await
            .map(|_| ())
            .map_err(|e| e.to_string())
    }
    async fn delete(&self, path: &Path) -> Result<(), String> {
        use old::ObjectStore as _;
        self.0
            .delete(&old_path(path))
            .await
            .map_err(|e| e.to_string())
    }
    async fn list(&self, prefix: &Path) -> Result<usize, String> {
        use futures::TryStreamExt;
        use old::ObjectStore as _;
        let all: Vec<_> = self
            .0
            .list(Some(&old_path(prefix)))
            .try_collect()
            .await
            .map_err(|e| e.to_string())?;
        Ok(all.len())
    }
}

/// s3rver can tear a read that races a write (`../shared/SERVICES.md`): retry reads until
/// the body's MD5 matches its ETag, for every target alike.
struct WholeReads(Box<dyn Target>);

#[async_trait]
impl Target for WholeReads {
    async fn create(&self, p: &Path, b: Bytes) -> Result<bool, String> {
        self.0.create(p, b).await
    }
    async fn update(&self, p: &Path, b: Bytes, e: &str) -> Result<bool, String> {
        self.0.update(p, b, e).await
    }
    async fn copy_if_absent(&self, f: &Path, t: &Path) -> Result<bool, String> {
        self.0.copy_if_absent(f, t).await
    }
    async fn get(&self, p: &Path) -> Result<Option<(Bytes, String)>, String> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            match self.0.get(p).await {
                Ok(Some((body, etag))) if is_whole(&body, &etag) => {
                    return Ok(Some((body, etag)));
                }
                Ok(None) => return Ok(None),
                // Torn, or failed (a read stalled past the request timeout).
                _ if pause_after_torn_read(attempt).await => {}
                _ => return Err(format!("{p}: torn or failed {attempt} times in a row")),
            }
        }
    }
    async fn put(&self, p: &Path, b: Bytes) -> Result<(), String> {
        self.0.put(p, b).await
    }
    async fn delete(&self, p: &Path) -> Result<(), String> {
        self.0.delete(p).await
    }
    async fn list(&self, p: &Path) -> Result<usize, String> {
        self.0.list(p).await
    }
    async fn settled(&self) {
        self.0.settled().await
    }
}

/// Operations slower than this are counted (and, with `DYNACOMMIT_BENCH_TRACE=1`,
/// printed with what they were): a loopback operation takes milliseconds, so one this slow
/// waited for something (a server's error and the client's backoff, a lease).
const SLOW: Duration = Duration::from_millis(300);

fn tracing_slow() -> bool {
    std::env::var_os("DYNACOMMIT_BENCH_TRACE").is_some_and(|v| v != "0")
}

/// A target whose operations are timed; the slow ones counted, and traced on request.
struct Timed {
    name: &'static str,
    inner: Box<dyn Target>,
    slow: Arc<std::sync::atomic::AtomicU64>,
}

impl Timed {
    async fn time<T: std::fmt::Debug>(
        &self,
        op: &str,
        path: &Path,
        f: impl Future<Output = Result<T, String>>,
    ) -> Result<T, String> {
        let started = tokio::time::Instant::now();
        let out = f.await;
        let took = started.elapsed();
        if took >= SLOW {
            self.slow.fetch_add(1, Ordering::Relaxed);
            if tracing_slow() {
                eprintln!(
                    "slow: {} {op} {path}: {:.0} ms -> {out:?}",
                    self.name,
                    took.as_secs_f64() * 1e3
                );
            }
        }
        out
    }
}

#[async_trait]
impl Target for Timed {
    async fn create(&self, p: &Path, b: Bytes) -> Result<bool, String> {
        self.time("create", p, self.inner.create(p, b)).await
    }
    async fn update(&self, p: &Path, b: Bytes, e: &str) -> Result<bool, String> {
        self.time("update", p, self.inner.update(p, b, e)).await
    }
    async fn copy_if_absent(&self, f: &Path, t: &Path) -> Result<bool, String> {
        self.time("copy", t, self.inner.copy_if_absent(f, t)).await
    }
    async fn get(&self, p: &Path) -> Result<Option<(Bytes, String)>, String> {
        self.time("get", p, async { self.inner.get(p).await }).await
    }
    async fn put(&self, p: &Path, b: Bytes) -> Result<(), String> {
        self.time("put", p, self.inner.put(p, b)).await
    }
    async fn delete(&self, p: &Path) -> Result<(), String> {
        self.time("delete", p, self.inner.delete(p)).await
    }
    async fn list(&self, p: &Path) -> Result<usize, String> {
        self.time("list", p, self.inner.list(p)).await
    }
    async fn settled(&self) {
        self.inner.settled().await
    }
}

/// Makes a log-race writer (see [`Contender`]).
type NewWriter = Box<dyn Fn() -> Arc<dyn LogWriter>>;
/// Makes an increment-race worker (see [`Contender`]).
type NewTarget = Box<dyn Fn() -> Box<dyn Target>>;

struct Contender {
    name: &'static str,
    target: Box<dyn Target>,
    /// A writer of the log races (6, 7) as a process of its own would be: dynacommit's
    /// each with a lease manager of its own, over the same counted store and table (a
    /// manager adapts to what its own writes meet); the others share the target's store,
    /// having no such state.
    new_writer: NewWriter,
    /// A worker of the increment race (2b) as a process of its own would be, in the same
    /// sense as `new_writer`.
    new_target: NewTarget,
    /// A plain store on the same bucket, uncounted, for checking a race's outcome.
    reader: Arc<dyn ObjectStore>,
    /// Its S3 requests (and 0.12.5's DynamoDB requests, counted in its HTTP connector).
    counters: Arc<Counters>,
    /// dynacommit's DynamoDB requests.
    table: Option<Arc<CountingTable>>,
    /// Operations slower than [`SLOW`].
    slow: Arc<std::sync::atomic::AtomicU64>,
}

async fn lease_table(timeout_ms: u64) -> (Arc<CountingTable>, LeaseConfig) {
    let name = common::unique_name("bench");
    let table = DynamoLeaseTable::new(common::dynamodb().await, &name);
    table.ensure_table().await.unwrap();
    let config = LeaseConfig::new(&name).with_timeout(Duration::from_millis(timeout_ms));
    (Arc::new(CountingTable::new(Arc::new(table))), config)
}

/// dynacommit over `inner` (counted), with leases on a fresh table, in `conditions` mode.
async fn dynacommit(
    name: &'static str,
    inner: Arc<dyn ObjectStore>,
    reader: Arc<dyn ObjectStore>,
    timeout_ms: u64,
    conditions: Conditions,
) -> Contender {
    let counters = Arc::new(Counters::default());
    let inner: Arc<dyn ObjectStore> = Arc::new(ScriptedStore::counting(inner, counters.clone()));
    let (table, config) = lease_table(timeout_ms).await;
    let counted = table.clone();
    let commit_store = move || {
        Arc::new(
            CommitStore::new(
                inner.clone(),
                LeaseManager::new(table.clone(), config.clone()).unwrap(),
            )
            .with_conditions(conditions),
        )
    };
    let store = commit_store();
    let (new_writer, new_target): (NewWriter, NewTarget) = if conditions == Conditions::Auto {
        // Native writes keep no state; one probe serves every writer.
        eprintln!("{name}: {}", store.enforced().await.unwrap());
        let (writer, target) = (store.clone(), store.clone());
        (
            Box::new(move || writer.clone() as Arc<dyn LogWriter>),
            Box::new(move || Box::new(CommitTarget(target.clone())) as Box<dyn Target>),
        )
    } else {
        let commit_store = Arc::new(commit_store);
        let other = commit_store.clone();
        (
            Box::new(move || commit_store() as Arc<dyn LogWriter>),
            Box::new(move || Box::new(CommitTarget(other())) as Box<dyn Target>),
        )
    };
    Contender {
        name,
        target: Box::new(CommitTarget(store)),
        new_writer,
        new_target,
        reader,
        counters,
        table: Some(counted),
        slow: Arc::default(),
    }
}

/// dynacommit over the server (conditions disabled in the inner store, so its writes
/// under the lease are plain, as 0.12.5's are), and 0.12.5 over the same bucket and a
/// table of its own; plus, on SeaweedFS, dynacommit in `auto` mode and the native floor,
/// over a store that sends the conditions.
async fn contenders(server: S3Server, timeout_ms: u64) -> Vec<Contender> {
    let bucket = server.fresh_bucket().await;
    let reader: Arc<dyn ObjectStore> = Arc::new(server.store(&bucket, S3ConditionalPut::Disabled));
    let mut out = vec![
        dynacommit(
            "dynacommit",
            Arc::new(server.store(&bucket, S3ConditionalPut::Disabled)),
            reader.clone(),
            timeout_ms,
            Conditions::Lease,
        )
        .await,
    ];

    let counters = Arc::new(Counters::default());
    let name = common::unique_name("bench-old");
    DynamoLeaseTable::new(common::dynamodb().await, &name)
        .ensure_table()
        .await
        .unwrap();
    let store = Arc::new(common::old_protocol::store_via(
        server,
        &bucket,
        &name,
        timeout_ms,
        &common::dynamodb_url(),
        counters.clone(),
        None,
    ));
    out.push(Contender {
        name: "object_store 0.12.5",
        target: Box::new(OldTarget(store.clone())),
        new_writer: {
            let writer: Arc<dyn LogWriter> = Arc::new(OldWriter(store.clone()));
            Box::new(move || writer.clone())
        },
        new_target: Box::new(move || Box::new(OldTarget(store.clone()))),
        reader: reader.clone(),
        counters,
        table: None,
        slow: Arc::default(),
    });

    if matches!(server, S3Server::SeaweedFs) {
        let enforcing = || {
            Arc::new(server.store_with(
                &bucket,
                S3ConditionalPut::ETagMatch,
                Some(S3CopyIfNotExists::Header(
                    "If-None-Match".into(),
                    "*".into(),
                )),
            ))
        };
        out.push(
            dynacommit(
                "dynacommit auto",
                enforcing(),
                reader.clone(),
                timeout_ms,
                Conditions::Auto,
            )
            .await,
        );
        let counters = Arc::new(Counters::default());
        let store: Arc<dyn ObjectStore> =
            Arc::new(ScriptedStore::counting(enforcing(), counters.clone()));
        out.push(Contender {
            name: "native conditional PUT",
            target: Box::new(StoreTarget(store.clone())),
            new_writer: {
                let writer: Arc<dyn LogWriter> = Arc::new(StoreWriter(store.clone()));
                Box::new(move || writer.clone())
            },
            new_target: Box::new(move || Box::new(StoreTarget(store.clone()))),
            reader: reader.clone(),
            counters,
            table: None,
            slow: Arc::default(),
        });
    }
    if matches!(server, S3Server::S3rver) {
        out = out
            .into_iter()
            .map(|c| {
                let new_target = c.new_target;
                Contender {
                    target: Box::new(WholeReads(c.target)),
                    new_target: Box::new(move || Box::new(WholeReads(new_target()))),
                    ..c
                }
            })
            .collect();
    }
    out.into_iter()
        .map(|c| {
            let (name, slow, new_target) = (c.name, c.slow.clone(), c.new_target);
            Contender {
                target: Box::new(Timed {
                    name: c.name,
                    inner: c.target,
                    slow: c.slow.clone(),
                }),
                new_target: Box::new(move || {
                    Box::new(Timed {
                        name,
                        inner: new_target(),
                        slow: slow.clone(),
                    })
                }),
                ..c
            }
        })
        .collect()
}

fn ms(d: Duration) -> String {
    format!("{:.2}", d.as_secs_f64() * 1e3)
}

fn ratio(a: Duration, b: Duration) -> String {
    if b.is_zero() {
        "-".into()
    } else {
        format!("{:.2}", a.as_secs_f64() / b.as_secs_f64())
    }
}

/// Whether scenario `n` is to run: all, unless `DYNACOMMIT_BENCH_SCENARIOS` lists some
/// (`1,3`).
fn wanted(n: u32) -> bool {
    std::env::var("DYNACOMMIT_BENCH_SCENARIOS")
        .map(|v| v.split(',').any(|s| s.trim() == n.to_string()))
        .unwrap_or(true)
}

/// The median of `xs` (sorted in place) and its spread, as `median (min-max)`.
fn spread(xs: &mut [f64]) -> (f64, f64, f64) {
    xs.sort_by(f64::total_cmp);
    (xs[xs.len() / 2], xs[0], xs[xs.len() - 1])
}

fn show((median, low, high): (f64, f64, f64)) -> String {
    format!("{median:.2} ({low:.2}-{high:.2})")
}

/// (S3 requests, DynamoDB writes, failed DynamoDB writes, DynamoDB reads, S3 5xx) so far.
fn counts(c: &Contender) -> [u64; 5] {
    let load = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::SeqCst);
    let k = &c.counters;
    let dynamo = c.table.as_ref().map_or(
        TableCounts {
            writes: load(&k.dynamo_writes),
            refused: load(&k.dynamo_failed_writes),
            reads: load(&k.dynamo_reads),
        },
        |t| t.counts(),
    );
    [
        load(&k.s3),
        dynamo.writes,
        dynamo.refused,
        dynamo.reads,
        load(&k.s3_server_errors),
    ]
}

fn since(before: [u64; 5], after: [u64; 5]) -> [u64; 5] {
    std::array::from_fn(|i| after[i] - before[i])
}

fn add(total: &mut [u64; 5], counted: [u64; 5]) {
    for (t, c) in total.iter_mut().zip(counted) {
        *t += c;
    }
}

/// The targets' indices in the order of `round`: each round starts one further along, so
/// no target always follows another.
fn rotated(round: usize, targets: usize) -> impl Iterator<Item = usize> {
    (0..targets).cycle().skip(round).take(targets)
}

/// Prints, for every target but ours, the median and spread of the per-round ratios of
/// ours to it of `values` (one list of per-round figures per target).
fn round_ratios(cs: &[Contender], ours: usize, values: &[Vec<f64>], what: &str) {
    for (k, c) in cs.iter().enumerate().filter(|(k, _)| *k != ours) {
        let mut per_round: Vec<f64> = values[ours]
            .iter()
            .zip(&values[k])
            .map(|(a, b)| a / b)
            .collect();
        println!(
            "dynacommit / {}: {what} {} over {} rounds\n",
            c.name,
            show(spread(&mut per_round)),
            per_round.len()
        );
    }
}

async fn run_server(server: S3Server, label: &str, sizes: Sizes) {
    let Sizes {
        creates,
        runs,
        copies,
        passthrough,
        recreates,
        short_timeout_ms,
        race: (workers, increments, rounds),
        log_race: (log_writers, log_commits, log_rounds),
        scale: (logs, per_log, scale_commits),
    } = sizes;
    println!("\n## {label}\n");
    let cs = contenders(server, 20_000).await;
    let base = Path::from(format!("bench-{:08x}", rand::random::<u32>()));
    // Where a target's objects of one scenario (or round) go.
    let under =
        |c: &Contender, scenario: &str| base.clone().join(c.name.replace(' ', "_")).join(scenario);
    let lanes = |cs: &[Contender], scenario: &str| -> Vec<(String, Path)> {
        cs.iter()
            .map(|c| (c.name.to_owned(), under(c, scenario)))
            .collect()
    };
    let ours = cs.iter().position(|c| c.name == "dynacommit").unwrap();

    if wanted(1) {
        println!(
            "### 1. Uncontended create ({runs} runs x {creates} fresh paths; targets take turns, the order rotated every create, background work settled between turns)\n"
        );
        println!(
            "| target | p50 ms, median of runs (spread) | p99 ms, median | S3 req/commit | DynamoDB writes/commit | DynamoDB reads/commit |"
        );
        println!("|---|---|---|---|---|---|");
        let before: Vec<_> = cs.iter().map(counts).collect();
        let mut p50s = vec![Vec::new(); cs.len()];
        let mut p99s = vec![Vec::new(); cs.len()];
        for run in 0..runs {
            let paths = lanes(&cs, &format!("create-{run}"));
            let results =
                bench::uncontended_create(&lane_refs(&cs, &paths), creates, Order::Rotated)
                    .await
                    .unwrap();
            for (k, p) in results.iter().enumerate() {
                p50s[k].push(p.p50.as_secs_f64() * 1e3);
                p99s[k].push(p.p99.as_secs_f64() * 1e3);
            }
        }
        let made = (runs * creates) as f64;
        for (k, c) in cs.iter().enumerate() {
            let [s3, w, _, r, _] = since(before[k], counts(c));
            println!(
                "| {} | {} | {:.2} | {:.2} | {:.2} | {:.2} |",
                c.name,
                show(spread(&mut p50s[k].clone())),
                spread(&mut p99s[k].clone()).0,
                s3 as f64 / made,
                w as f64 / made,
                r as f64 / made
            );
        }
        // The ratio per run, then its median and spread; and one run each in a fixed
        // order, both ways, to show what the order alone does.
        let mut fixed = Vec::new();
        for order in [Order::Forward, Order::Reversed] {
            let paths = lanes(&cs, &format!("create-{order:?}"));
            fixed.push(
                bench::uncontended_create(&lane_refs(&cs, &paths), creates, order)
                    .await
                    .unwrap(),
            );
        }
        println!();
        for (k, c) in cs.iter().enumerate().filter(|(k, _)| *k != ours) {
            for (label, mine) in [("dynacommit", ours)].into_iter().chain(
                cs.iter()
                    .position(|c| c.name == "dynacommit auto")
                    .filter(|_| c.name == "native conditional PUT")
                    .map(|a| ("dynacommit auto", a)),
            ) {
                let mut per_run: Vec<f64> = p50s[mine]
                    .iter()
                    .zip(&p50s[k])
                    .map(|(a, b)| a / b)
                    .collect();
                let r = |f: &[Percentiles]| f[mine].p50.as_secs_f64() / f[k].p50.as_secs_f64();
                println!(
                    "{label} / {}: p50 {} over {runs} rotated runs; fixed order {:.2} with {label} first, {:.2} with it last\n",
                    c.name,
                    show(spread(&mut per_run)),
                    if mine < k { r(&fixed[0]) } else { r(&fixed[1]) },
                    if mine < k { r(&fixed[1]) } else { r(&fixed[0]) },
                );
            }
        }
    }

    if wanted(2) {
        // 2: the workers share one store, as object_store's race helper does (so
        // dynacommit's share one lease manager, whose queue settles their races); 2b:
        // each has a store of its own, as processes would.
        for (label, own) in [
            (
                "2. object_store's race, the workers sharing one store",
                false,
            ),
            ("2b. The same race, each worker a store of its own", true),
        ] {
            println!(
                "\n### {label}: {workers} workers x {increments} increments ({rounds} rounds, the order rotated)\n"
            );
            println!(
                "| target | wall ms, median (spread) | hand-overs/commit | DynamoDB writes/commit | failed DynamoDB writes/commit | DynamoDB reads/commit | S3 5xx answers | operations over {} ms |",
                SLOW.as_millis()
            );
            println!("|---|---|---|---|---|---|---|---|");
            let slow_before: Vec<u64> = cs.iter().map(|c| c.slow.load(Ordering::Relaxed)).collect();
            let mut walls = vec![Vec::new(); cs.len()];
            let mut handovers = vec![0; cs.len()];
            let mut totals = vec![[0; 5]; cs.len()];
            for round in 0..rounds {
                for k in rotated(round, cs.len()) {
                    let c = &cs[k];
                    let before = counts(c);
                    let path = under(c, &format!("RACE-{}{round}", if own { "OWN-" } else { "" }));
                    let targets: Vec<Box<dyn Target>> = if own {
                        (0..workers).map(|_| (c.new_target)()).collect()
                    } else {
                        Vec::new()
                    };
                    let refs: Vec<&dyn Target> = if own {
                        targets.iter().map(|t| &**t).collect()
                    } else {
                        vec![&*c.target; workers]
                    };
                    let run = bench::increment_race(&refs, &path, increments)
                        .await
                        .unwrap();
                    for t in &refs {
                        t.settled().await;
                    }
                    walls[k].push(run.elapsed.as_secs_f64() * 1e3);
                    handovers[k] += run.handovers;
                    add(&mut totals[k], since(before, counts(c)));
                }
            }
            let commits = (rounds * workers * increments) as f64;
            for (k, c) in cs.iter().enumerate() {
                let [_, w, f, r, errors] = totals[k];
                println!(
                    "| {} | {} | {:.2} | {:.2} | {:.2} | {:.2} | {} | {} |",
                    c.name,
                    show(spread(&mut walls[k].clone())),
                    handovers[k] as f64 / commits,
                    w as f64 / commits,
                    f as f64 / commits,
                    r as f64 / commits,
                    if c.name == "object_store 0.12.5" {
                        errors.to_string()
                    } else {
                        "-".into()
                    },
                    c.slow.load(Ordering::Relaxed) - slow_before[k]
                );
            }
            println!();
            round_ratios(&cs, ours, &walls, "wall");
        }
    }

    if wanted(6) {
        println!(
            "\n### 6. Log race: {log_writers} writers x {log_commits} commits on one log ({log_rounds} rounds, the order rotated)\n"
        );
        println!(
            "| target | commits/s, median (spread) | DynamoDB writes/commit | failed DynamoDB writes/commit | conflicts/commit |"
        );
        println!("|---|---|---|---|---|");
        let mut rates = vec![Vec::new(); cs.len()];
        let mut totals = vec![[0; 5]; cs.len()];
        let mut conflicts = vec![0; cs.len()];
        for round in 0..log_rounds {
            for k in rotated(round, cs.len()) {
                let c = &cs[k];
                let before = counts(c);
                let prefix = under(c, &format!("LOG-{round}"));
                let writers: Vec<_> = (0..log_writers).map(|_| (c.new_writer)()).collect();
                let report = bench::log_race(writers, c.reader.clone(), &prefix, log_commits)
                    .await
                    .unwrap_or_else(|e| panic!("{}: {e}", c.name));
                rates[k].push(report.committed as f64 / report.elapsed.as_secs_f64());
                conflicts[k] += report.conflicts;
                add(&mut totals[k], since(before, counts(c)));
            }
        }
        let commits = (log_rounds * log_writers * log_commits) as f64;
        for (k, c) in cs.iter().enumerate() {
            let [_, w, f, _, _] = totals[k];
            println!(
                "| {} | {} | {:.2} | {:.2} | {:.2} |",
                c.name,
                show(spread(&mut rates[k].clone())),
                w as f64 / commits,
                f as f64 / commits,
                conflicts[k] as f64 / commits
            );
        }
        println!();
        round_ratios(&cs, ours, &rates, "commits/s");
    }

    if wanted(7) {
        println!(
            "\n### 7. Scale: {} writers over {logs} logs ({per_log} per log) x {scale_commits} commits each, one lease table (each target alone, in turn)\n",
            logs * per_log
        );
        println!(
            "| target | commits/s | DynamoDB requests/commit | CPU ms/commit (user+sys) | peak RSS MiB during the run |"
        );
        println!("|---|---|---|---|---|");
        for c in cs
            .iter()
            .filter(|c| c.name == "dynacommit" || c.name == "object_store 0.12.5")
        {
            let before = counts(c);
            let scale = bench::scale(
                &*c.new_writer,
                c.reader.clone(),
                &under(c, "SCALE"),
                logs,
                per_log,
                scale_commits,
            )
            .await
            .unwrap_or_else(|e| panic!("{}: {e}", c.name));
            let [_, w, _, r, _] = since(before, counts(c));
            let n = scale.commits as f64;
            println!(
                "| {} | {:.1} | {:.2} | {:.3} | {:.1} |",
                c.name,
                n / scale.wall.as_secs_f64(),
                (w + r) as f64 / n,
                scale.cpu.as_secs_f64() * 1e3 / n,
                scale.peak_rss as f64 / (1 << 20) as f64
            );
        }
        println!(
            "\n(CPU and RSS are the benchmark process's, which runs the writers only: the servers are other processes.)"
        );
    }

    if wanted(4) {
        println!("\n### 4. Copy-if-not-exists ({copies} fresh targets, the order rotated)\n");
        println!("| target | p50 ms | p99 ms |");
        println!("|---|---|---|");
        let paths = lanes(&cs, "copy");
        let results = bench::copy_if_absent(&lane_refs(&cs, &paths), copies)
            .await
            .unwrap();
        for (c, p) in cs.iter().zip(&results) {
            println!("| {} | {} | {} |", c.name, ms(p.p50), ms(p.p99));
        }
        ratios(&cs, &results);
    }

    if wanted(5) {
        println!(
            "\n### 5. Passthrough ({passthrough} x 1 KiB puts, gets, listings of {passthrough}; the order rotated)\n"
        );
        let bucket = server.fresh_bucket().await;
        let bare: Box<dyn Target> = Box::new(StoreTarget(Arc::new(
            server.store(&bucket, S3ConditionalPut::Disabled),
        )));
        let (table, config) = lease_table(20_000).await;
        let wrapped: Box<dyn Target> = Box::new(CommitTarget(Arc::new(CommitStore::new(
            Arc::new(server.store(&bucket, S3ConditionalPut::Disabled)),
            LeaseManager::new(table as Arc<dyn LeaseTable>, config).unwrap(),
        ))));
        let lanes = [
            (&*bare, Path::from("pass/bare")),
            (&*wrapped, Path::from("pass/wrapped")),
        ];
        let results = bench::passthrough(&lanes, passthrough).await.unwrap();
        println!("| operation | bare p50 ms | wrapper p50 ms | wrapper / bare |");
        println!("|---|---|---|---|");
        for (op, r) in ["put", "get", "list"].iter().zip(&results) {
            println!(
                "| {op} | {} | {} | {} |",
                ms(r[0].p50),
                ms(r[1].p50),
                ratio(r[1].p50, r[0].p50)
            );
        }
    }

    if wanted(3) {
        println!(
            "\n### 3. Delete then re-create at one path ({recreates} rounds, {short_timeout_ms} ms lease for both; each round: create, delete, re-create, delete)\n"
        );
        println!("| target | round p50 ms | max ms |");
        println!("|---|---|---|");
        let cs: Vec<Contender> = contenders(server, short_timeout_ms)
            .await
            .into_iter()
            .filter(|c| c.name == "dynacommit" || c.name == "object_store 0.12.5")
            .collect();
        let paths = lanes(&cs, "recreate");
        let results = bench::delete_then_recreate(&lane_refs(&cs, &paths), recreates)
            .await
            .unwrap();
        for (c, p) in cs.iter().zip(&results) {
            println!("| {} | {} | {} |", c.name, ms(p.p50), ms(p.max));
        }
        ratios(&cs, &results);
    }
}

/// Each contender's target with its path.
fn lane_refs<'a>(cs: &'a [Contender], paths: &[(String, Path)]) -> Vec<(&'a dyn Target, Path)> {
    cs.iter()
        .zip(paths)
        .map(|(c, (_, p))| (&*c.target, p.clone()))
        .collect()
}

/// Prints dynacommit's ratio to each other target.
fn ratios(cs: &[Contender], results: &[Percentiles]) {
    let Some(ours) = cs.iter().position(|c| c.name == "dynacommit") else {
        return;
    };
    for (c, theirs) in cs
        .iter()
        .zip(results)
        .filter(|(c, _)| c.name != "dynacommit")
    {
        println!(
            "\ndynacommit / {}: p50 {}, p99 {}",
            c.name,
            ratio(results[ours].p50, theirs.p50),
            ratio(results[ours].p99, theirs.p99)
        );
    }
}

#[tokio::main]
async fn main() {
    // Every target's S3 client retries alike, backing off briefly (see the setting).
    common::BOUNDED_RETRIES.store(true, Ordering::Relaxed);
    let sizes = Sizes::from_env();
    println!("# dynacommit benchmarks");
    if sizes.creates < Sizes::FULL.creates {
        println!("\nsmoke run (DYNACOMMIT_BENCH_SMOKE): tiny sizes, timings mean nothing");
    }
    println!(
        "\nmachine: {} cores; {}",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        std::env::consts::ARCH
    );
    // `DYNACOMMIT_BENCH_SERVERS=seaweedfs` (or `s3rver`) runs on one server only.
    let servers = std::env::var("DYNACOMMIT_BENCH_SERVERS").unwrap_or_default();
    let on = |name: &str| servers.is_empty() || servers.split(',').any(|s| s.trim() == name);
    if on("seaweedfs") {
        run_server(
            S3Server::SeaweedFs,
            "SeaweedFS 4.48 + DynamoDB Local",
            sizes,
        )
        .await;
    }
    if on("s3rver") {
        run_server(S3Server::S3rver, "s3rver 3.7.1 + DynamoDB Local", sizes).await;
    }
}
