//! `dynacommit bench`: the commit layer against the bare store it wraps, then the log race
//! and the scale scenario, on the configured backends. The comparison with object_store
//! 0.12.5's DynamoCommit needs that crate, a dev-dependency: `scripts/bench.sh` runs it
//! (docs/benchmarks.md).

use std::process::ExitCode;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use clap::Args;
use dynacommit::CommitStore;
use dynacommit::bench::{self, CommitTarget, CountingTable, Order, StoreTarget, Target};
use dynacommit::lease::LeaseManager;
use dynacommit::race::LogWriter;
use dynacommit::race::Percentiles;
use object_store::path::Path;

use crate::backends::BackendArgs;
use crate::fail::Fail;
use crate::report::{ms, print_table};

#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Operations per scenario.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    ops: u32,
    /// Writers of the log race, each with a lease manager of its own (as separate
    /// processes would be).
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..=1_000))]
    race_writers: u32,
    /// Commits each writer of the log race makes.
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    race_commits: u32,
    /// Logs of the scale scenario, raced at once.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..=1_000))]
    scale_logs: u32,
    /// Writers per log of the scale scenario.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=1_000))]
    scale_writers: u32,
    /// Commits each writer of the scale scenario makes.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    scale_commits: u32,
}

/// The bare store's floor for a create: an unconditional put (the store may not support
/// a conditional one, or, like s3rver, may ignore it).
struct PlainPuts(StoreTarget);

#[async_trait]
impl Target for PlainPuts {
    async fn create(&self, path: &Path, body: Bytes) -> Result<bool, String> {
        self.0.put(path, body).await.map(|()| true)
    }
    async fn update(&self, path: &Path, body: Bytes, _etag: &str) -> Result<bool, String> {
        self.0.put(path, body).await.map(|()| true)
    }
    async fn copy_if_absent(&self, from: &Path, to: &Path) -> Result<bool, String> {
        self.0.copy_if_absent(from, to).await
    }
    async fn get(&self, path: &Path) -> Result<Option<(Bytes, String)>, String> {
        self.0.get(path).await
    }
    async fn put(&self, path: &Path, body: Bytes) -> Result<(), String> {
        self.0.put(path, body).await
    }
    async fn delete(&self, path: &Path) -> Result<(), String> {
        self.0.delete(path).await
    }
    async fn list(&self, prefix: &Path) -> Result<usize, String> {
        self.0.list(prefix).await
    }
}

pub async fn run(backends: &BackendArgs, args: BenchArgs, json: bool) -> Result<ExitCode, Fail> {
    let resolved = backends.resolve().await?;
    if !json {
        eprintln!("{}", resolved.description);
    }
    for warning in &resolved.warnings {
        eprintln!("dynacommit: {warning}");
    }
    let n = args.ops as usize;
    let counted = Arc::new(CountingTable::new(resolved.table.clone()));
    let leases =
        LeaseManager::new(counted.clone(), resolved.config.clone()).map_err(|e| e.to_string())?;
    let wrapped = CommitTarget(Arc::new(CommitStore::new(resolved.store.clone(), leases)));
    let bare = PlainPuts(StoreTarget(resolved.store.clone()));
    let base = Path::from(format!("dynacommit-bench/{:016x}", rand::random::<u64>()));
    let lanes = |scenario: &str| {
        [
            (
                &wrapped as &dyn Target,
                base.clone().join("wrapped").join(scenario),
            ),
            (
                &bare as &dyn Target,
                base.clone().join("bare").join(scenario),
            ),
        ]
    };
    let creates = bench::uncontended_create(&lanes("create"), n, Order::Rotated).await?;
    let [puts, gets, lists] = bench::passthrough(&lanes("plain"), n.min(200)).await?;
    let recreate = bench::delete_then_recreate(&lanes("recreate")[..1], n.min(20)).await?;
    let copies = bench::copy_if_absent(&lanes("copy")[..1], n).await?;

    // The races: every writer a store and lease manager of its own, over one counted table.
    let new_writer = || -> Arc<dyn LogWriter> {
        let leases = LeaseManager::new(counted.clone(), resolved.config.clone())
            .expect("the settings were checked by the first LeaseManager::new above");
        Arc::new(CommitStore::new(resolved.store.clone(), leases))
    };
    let (writers, commits) = (args.race_writers as usize, args.race_commits as usize);
    let before = counted.counts();
    let race = bench::log_race(
        (0..writers).map(|_| new_writer()).collect(),
        resolved.store.clone(),
        &base.clone().join("log-race"),
        commits,
    )
    .await?;
    let race_counts = counted.counts() - before;
    let (logs, per_log) = (args.scale_logs as usize, args.scale_writers as usize);
    let before = counted.counts();
    let scale = bench::scale(
        &new_writer,
        resolved.store.clone(),
        &base.clone().join("scale"),
        logs,
        per_log,
        args.scale_commits as usize,
    )
    .await?;
    let scale_counts = counted.counts() - before;
    let per = |count: u64, commits: u64| count as f64 / commits.max(1) as f64;
    let race_rate = race.committed as f64 / race.elapsed.as_secs_f64().max(1e-9);
    let scale_rate = scale.commits as f64 / scale.wall.as_secs_f64().max(1e-9);
    let scale_requests = per(scale_counts.writes + scale_counts.reads, scale.commits);
    let cpu_ms = scale.cpu.as_secs_f64() * 1e3 / scale.commits.max(1) as f64;
    let rss_mib = scale.peak_rss as f64 / f64::from(1 << 20);

    // (JSON key, label, dynacommit, bare store)
    let rows: Vec<(&str, &str, Percentiles, Percentiles)> = vec![
        (
            "create",
            "create (bare: unconditional put)",
            creates[0],
            creates[1],
        ),
        ("put", "put (passthrough)", puts[0], puts[1]),
        ("get", "get (passthrough)", gets[0], gets[1]),
        ("list", "list (passthrough)", lists[0], lists[1]),
    ];
    let ratio =
        |a: &Percentiles, b: &Percentiles| a.p50.as_secs_f64() / b.p50.as_secs_f64().max(1e-9);
    if json {
        let mut value = serde_json::json!({});
        for (key, _, ours, theirs) in &rows {
            value[*key] = serde_json::json!({
                "dynacommit_p50_ms": ours.p50.as_secs_f64() * 1e3,
                "bare_p50_ms": theirs.p50.as_secs_f64() * 1e3,
                "ratio": ratio(ours, theirs),
            });
        }
        value["delete_then_recreate_round_p50_ms"] =
            serde_json::json!(recreate[0].p50.as_secs_f64() * 1e3);
        value["copy_if_not_exists_p50_ms"] = serde_json::json!(copies[0].p50.as_secs_f64() * 1e3);
        value["log_race"] = serde_json::json!({
            "writers": writers,
            "commits": race.committed,
            "commits_per_s": race_rate,
            "dynamodb_writes_per_commit": per(race_counts.writes, race.committed),
            "dynamodb_refused_writes_per_commit": per(race_counts.refused, race.committed),
            "dynamodb_reads_per_commit": per(race_counts.reads, race.committed),
            "conflicts_per_commit": per(race.conflicts, race.committed),
            "commit_p50_ms": race.latency.p50.as_secs_f64() * 1e3,
            "commit_p99_ms": race.latency.p99.as_secs_f64() * 1e3,
        });
        value["scale"] = serde_json::json!({
            "logs": logs,
            "writers": logs * per_log,
            "commits": scale.commits,
            "commits_per_s": scale_rate,
            "dynamodb_requests_per_commit": scale_requests,
            "cpu_ms_per_commit": cpu_ms,
            "peak_rss_mib": rss_mib,
        });
        println!("{value}");
    } else {
        let mut table: Vec<(&str, String)> = rows
            .iter()
            .map(|(_, label, ours, theirs)| {
                (
                    *label,
                    format!(
                        "dynacommit {} / bare {} = {:.2}",
                        ms(ours.p50),
                        ms(theirs.p50),
                        ratio(ours, theirs)
                    ),
                )
            })
            .collect();
        table.push((
            "delete then re-create",
            format!("{} per round (p50)", ms(recreate[0].p50)),
        ));
        table.push(("copy-if-not-exists", format!("{} (p50)", ms(copies[0].p50))));
        println!("p50 latency over {n} operations each, interleaved:");
        print_table(&table);
        println!(
            "\nlog race, {writers} writers x {commits} commits on one log: {race_rate:.1} commits/s"
        );
        print_table(&[
            (
                "DynamoDB per commit",
                format!(
                    "{:.2} writes ({:.2} refused), {:.2} reads",
                    per(race_counts.writes, race.committed),
                    per(race_counts.refused, race.committed),
                    per(race_counts.reads, race.committed)
                ),
            ),
            (
                "conflicts per commit",
                format!("{:.2}", per(race.conflicts, race.committed)),
            ),
            (
                "commit latency",
                format!("p50 {}, p99 {}", ms(race.latency.p50), ms(race.latency.p99)),
            ),
        ]);
        println!(
            "\nscale, {} writers over {logs} logs x {} commits: {scale_rate:.1} commits/s",
            logs * per_log,
            args.scale_commits
        );
        print_table(&[
            (
                "DynamoDB per commit",
                format!("{scale_requests:.2} requests"),
            ),
            (
                "CPU per commit",
                format!("{cpu_ms:.3} ms (user + system, this process)"),
            ),
            ("peak RSS", format!("{rss_mib:.1} MiB")),
        ]);
        println!(
            "(against object_store 0.12.5's DynamoCommit: scripts/bench.sh, see docs/benchmarks.md)"
        );
    }
    Ok(ExitCode::SUCCESS)
}
