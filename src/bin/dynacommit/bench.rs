//! `dynacommit bench`: the commit layer against the bare store it wraps, on the configured
//! backends. The comparison with object_store 0.12.5's DynamoCommit needs that crate, a
//! dev-dependency: `scripts/bench.sh` runs it (docs/benchmarks.md).

use std::process::ExitCode;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use clap::Args;
use dynacommit::CommitStore;
use dynacommit::bench::{self, CommitTarget, Order, StoreTarget, Target};
use dynacommit::lease::LeaseManager;
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
    let leases = LeaseManager::new(resolved.table.clone(), resolved.config.clone())
        .map_err(|e| e.to_string())?;
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
            "(against object_store 0.12.5's DynamoCommit: scripts/bench.sh, see docs/benchmarks.md)"
        );
    }
    Ok(ExitCode::SUCCESS)
}
