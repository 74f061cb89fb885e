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
use common::faults::{ScriptedStore, is_whole};
use common::s3::S3Server;
use dynacommit::CommitStore;
use dynacommit::bench::{self, StoreTarget, Target};
use dynacommit::lease::{
    DynamoLeaseTable, Expect, LeaseConfig, LeaseManager, LeaseRecord, LeaseTable, PutOutcome,
    TableError,
};
use dynacommit::race::Percentiles;
use object_store::ObjectStore;
use object_store::aws::{S3ConditionalPut, S3CopyIfNotExists};
use object_store::path::Path;
use object_store_012 as old;

/// How much each scenario does.
#[derive(Debug, Clone, Copy)]
struct Sizes {
    /// Fresh paths created (scenario 1).
    creates: usize,
    /// Copies to fresh targets (scenario 4).
    copies: usize,
    /// Puts, gets and listings (scenario 5).
    passthrough: usize,
    /// Delete-then-recreate rounds (scenario 3).
    recreates: usize,
    /// The lease timeout of the delete-then-recreate scenario, for both protocols (the
    /// old one waits timeout x 3 per re-create: 60 s at the default 20 s).
    short_timeout_ms: u64,
    /// object_store's race (scenario 2): workers, increments each, rounds (best of).
    race: (usize, usize, usize),
}

impl Sizes {
    /// The sizes of `docs/benchmarks.md`.
    const FULL: Self = Self {
        creates: 200,
        copies: 100,
        passthrough: 100,
        recreates: 3,
        short_timeout_ms: 1_000,
        race: (5, 10, 3),
    };

    /// A smoke run (`DYNACOMMIT_BENCH_SMOKE=1`, as `scripts/test.sh` runs it): every
    /// scenario and every check of its results, on tiny sizes; its timings mean nothing.
    const SMOKE: Self = Self {
        creates: 5,
        copies: 5,
        passthrough: 5,
        recreates: 1,
        short_timeout_ms: 300,
        race: (3, 2, 1),
    };

    fn from_env() -> Self {
        match std::env::var("DYNACOMMIT_BENCH_SMOKE") {
            Ok(v) if !v.is_empty() && v != "0" => Self::SMOKE,
            _ => Self::FULL,
        }
    }
}

/// How long background releases may take to land before a scenario's request counts are
/// read without them.
const RELEASES_LAND_WITHIN: Duration = Duration::from_secs(10);

/// A lease table counting its calls.
#[derive(Debug)]
struct CountingTable {
    inner: DynamoLeaseTable,
    counters: Arc<Counters>,
}

impl CountingTable {
    /// Waits (uncounted) until every lease record in the table is released: the
    /// releases dynacommit sends in the background after a write have landed, so the
    /// request counts read next include them. Bounded: a release may legitimately fail
    /// (the lease then expires instead), so after `RELEASES_LAND_WITHIN` this says how
    /// many are left and goes on.
    async fn releases_landed(&self) {
        let started = tokio::time::Instant::now();
        loop {
            let records = self.inner.list("").await.unwrap();
            let held = records.iter().filter(|r| !r.released).count();
            if held == 0 {
                return;
            }
            if started.elapsed() > RELEASES_LAND_WITHIN {
                eprintln!(
                    "warning: {held} of {} lease records still unreleased after {:?}; \
                     the request counts miss their releases",
                    records.len(),
                    RELEASES_LAND_WITHIN
                );
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

#[async_trait]
impl LeaseTable for CountingTable {
    async fn put(&self, record: &LeaseRecord, expect: &Expect) -> Result<PutOutcome, TableError> {
        self.counters.dynamo_writes.fetch_add(1, Ordering::SeqCst);
        self.inner.put(record, expect).await
    }
    async fn get(&self, path: &str, etag: &str) -> Result<Option<LeaseRecord>, TableError> {
        self.counters.dynamo_reads.fetch_add(1, Ordering::SeqCst);
        self.inner.get(path, etag).await
    }
    fn describe(&self) -> String {
        self.inner.describe()
    }
}

/// object_store 0.12.5 as a benchmark target.
struct OldTarget(old::aws::AmazonS3);

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
        for _ in 0..20 {
            match self.0.get(p).await {
                Ok(Some((body, etag))) if is_whole(&body, &etag) => {
                    return Ok(Some((body, etag)));
                }
                Ok(Some(_)) => {}
                Ok(None) => return Ok(None),
                Err(_) => {}
            }
        }
        Err(format!("{p}: torn 20 times"))
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
}

struct Contender {
    name: &'static str,
    target: Box<dyn Target>,
    counters: Arc<Counters>,
    /// dynacommit's lease table, whose background releases a count waits for.
    leases: Option<Arc<CountingTable>>,
}

impl Contender {
    /// Waits until the target's background work (dynacommit's lease releases) is done.
    async fn settled(&self) {
        if let Some(leases) = &self.leases {
            leases.releases_landed().await;
        }
    }
}

async fn lease_table(
    counters: Arc<Counters>,
    timeout_ms: u64,
) -> (Arc<CountingTable>, LeaseConfig) {
    let name = common::unique_name("bench");
    let table = DynamoLeaseTable::new(common::dynamodb().await, &name);
    table.ensure_table().await.unwrap();
    let config = LeaseConfig::new(&name).with_timeout(Duration::from_millis(timeout_ms));
    (
        Arc::new(CountingTable {
            inner: table,
            counters,
        }),
        config,
    )
}

/// dynacommit over the server (conditional puts disabled in the inner store), and
/// 0.12.5 over the same bucket and a table of its own; plus, on SeaweedFS, the native floor.
async fn contenders(server: S3Server, timeout_ms: u64) -> Vec<Contender> {
    let bucket = server.fresh_bucket().await;
    let mut out = Vec::new();

    let counters = Arc::new(Counters::default());
    let inner: Arc<dyn ObjectStore> = Arc::new(ScriptedStore::counting(
        Arc::new(server.store(&bucket, S3ConditionalPut::Disabled)),
        counters.clone(),
    ));
    let (table, config) = lease_table(counters.clone(), timeout_ms).await;
    let store = Arc::new(CommitStore::new(
        inner,
        LeaseManager::new(table.clone(), config).unwrap(),
    ));
    out.push(Contender {
        name: "dynacommit",
        target: Box::new(StoreTarget(store)),
        counters,
        leases: Some(table),
    });

    let counters = Arc::new(Counters::default());
    let name = common::unique_name("bench-old");
    DynamoLeaseTable::new(common::dynamodb().await, &name)
        .ensure_table()
        .await
        .unwrap();
    let store = common::old_protocol::store_via(
        server,
        &bucket,
        &name,
        timeout_ms,
        &common::dynamodb_url(),
        counters.clone(),
        None,
    );
    out.push(Contender {
        name: "object_store 0.12.5",
        target: Box::new(OldTarget(store)),
        counters,
        leases: None,
    });

    if matches!(server, S3Server::SeaweedFs) {
        let counters = Arc::new(Counters::default());
        let native = server.store_with(
            &bucket,
            S3ConditionalPut::ETagMatch,
            Some(S3CopyIfNotExists::Header(
                "If-None-Match".into(),
                "*".into(),
            )),
        );
        let store = Arc::new(ScriptedStore::counting(Arc::new(native), counters.clone()));
        out.push(Contender {
            name: "native conditional PUT",
            target: Box::new(StoreTarget(store)),
            counters,
            leases: None,
        });
    }
    if matches!(server, S3Server::S3rver) {
        out = out
            .into_iter()
            .map(|c| Contender {
                target: Box::new(WholeReads(c.target)),
                ..c
            })
            .collect();
    }
    out
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

fn per(n: u64, of: usize) -> String {
    format!("{:.2}", n as f64 / of as f64)
}

fn delta(before: (u64, u64, u64), after: (u64, u64, u64)) -> (u64, u64, u64) {
    (after.0 - before.0, after.1 - before.1, after.2 - before.2)
}

/// Whether scenario `n` is to run: all, unless `DYNACOMMIT_BENCH_SCENARIOS` lists some
/// (`1,3`).
fn wanted(n: u32) -> bool {
    std::env::var("DYNACOMMIT_BENCH_SCENARIOS")
        .map(|v| v.split(',').any(|s| s.trim() == n.to_string()))
        .unwrap_or(true)
}

async fn run_server(server: S3Server, label: &str, sizes: Sizes) {
    let Sizes {
        creates,
        copies,
        passthrough,
        recreates,
        short_timeout_ms,
        race: (workers, increments, rounds),
    } = sizes;
    println!("\n## {label}\n");
    let cs = contenders(server, 20_000).await;
    let base = Path::from(format!("bench-{:08x}", rand::random::<u32>()));
    let lanes = |cs: &[Contender], scenario: &str| -> Vec<(String, Path)> {
        cs.iter()
            .map(|c| {
                (
                    c.name.to_owned(),
                    base.clone().join(c.name.replace(' ', "_")).join(scenario),
                )
            })
            .collect()
    };

    if wanted(1) {
        println!("### 1. Uncontended create ({creates} fresh paths, targets interleaved)\n");
        println!(
            "| target | p50 ms | p99 ms | S3 req/commit | DynamoDB writes/commit | DynamoDB reads/commit |"
        );
        println!("|---|---|---|---|---|---|");
        let before: Vec<_> = cs.iter().map(|c| c.counters.snapshot()).collect();
        let paths = lanes(&cs, "create");
        let results = bench::uncontended_create(&lane_refs(&cs, &paths), creates)
            .await
            .unwrap();
        for c in &cs {
            c.settled().await;
        }
        for ((c, p), before) in cs.iter().zip(&results).zip(before) {
            let (s3, w, r) = delta(before, c.counters.snapshot());
            println!(
                "| {} | {} | {} | {} | {} | {} |",
                c.name,
                ms(p.p50),
                ms(p.p99),
                per(s3, creates),
                per(w, creates),
                per(r, creates)
            );
        }
        ratios(&cs, &results);
    }

    if wanted(2) {
        println!(
            "\n### 2. object_store's race: {workers} workers x {increments} increments (best of {rounds}, order rotated)\n"
        );
        println!("| target | wall time ms | DynamoDB writes/commit | DynamoDB reads/commit |");
        println!("|---|---|---|---|");
        let mut walls = vec![Duration::MAX; cs.len()];
        let mut counts = vec![(0, 0, 0); cs.len()];
        for round in 0..rounds {
            for k in (0..cs.len()).cycle().skip(round).take(cs.len()) {
                let c = &cs[k];
                let before = c.counters.snapshot();
                let path = base
                    .clone()
                    .join(c.name.replace(' ', "_"))
                    .join(format!("RACE-{round}"));
                let wall = bench::increment_race(&*c.target, &path, workers, increments)
                    .await
                    .unwrap();
                c.settled().await;
                walls[k] = walls[k].min(wall);
                if round == 0 {
                    counts[k] = delta(before, c.counters.snapshot());
                }
            }
        }
        for ((c, wall), (_, w, r)) in cs.iter().zip(&walls).zip(&counts) {
            println!(
                "| {} | {} | {} | {} |",
                c.name,
                ms(*wall),
                per(*w, workers * increments),
                per(*r, workers * increments)
            );
        }
        let as_p: Vec<Percentiles> = walls
            .iter()
            .map(|w| Percentiles {
                p50: *w,
                p90: *w,
                p99: *w,
                max: *w,
            })
            .collect();
        ratios(&cs, &as_p);
    }

    if wanted(4) {
        println!("\n### 4. Copy-if-not-exists ({copies} fresh targets, interleaved)\n");
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
            "\n### 5. Passthrough ({passthrough} x 1 KiB puts, gets, listings of {passthrough}; interleaved)\n"
        );
        let bucket = server.fresh_bucket().await;
        let bare: Box<dyn Target> = Box::new(StoreTarget(Arc::new(
            server.store(&bucket, S3ConditionalPut::Disabled),
        )));
        let (table, config) = lease_table(Arc::default(), 20_000).await;
        let wrapped: Box<dyn Target> = Box::new(StoreTarget(Arc::new(CommitStore::new(
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
            .filter(|c| c.name != "native conditional PUT")
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
    run_server(
        S3Server::SeaweedFs,
        "SeaweedFS 4.48 + DynamoDB Local",
        sizes,
    )
    .await;
    run_server(S3Server::S3rver, "s3rver 3.7.1 + DynamoDB Local", sizes).await;
}
