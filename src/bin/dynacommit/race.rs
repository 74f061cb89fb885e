//! `dynacommit race`: the Delta-style commit race.

use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use clap::Args;
use dynacommit::CommitStore;
use dynacommit::lease::LeaseManager;
use dynacommit::race::{self, LogWriter, StoreWriter};
use object_store::ObjectStore;
use object_store::path::Path;

use crate::backends::BackendArgs;
use crate::report::{ms, print_table};

#[derive(Debug, Args)]
pub struct RaceArgs {
    /// Concurrent writers.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u16).range(1..=1024))]
    writers: u16,
    /// Commits each writer makes.
    #[arg(long, default_value_t = 25, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    commits: u32,
    /// The log's location in the store (a fresh one per run by default).
    #[arg(long)]
    log: Option<String>,
}

pub async fn run(backends: &BackendArgs, args: RaceArgs, json: bool) -> Result<ExitCode, String> {
    let resolved = backends.resolve().await?;
    if !json {
        eprintln!("{}", resolved.description);
    }
    let leases = LeaseManager::new(resolved.table.clone(), resolved.config.clone())
        .map_err(|e| e.to_string())?;
    let store: Arc<dyn ObjectStore> = Arc::new(CommitStore::new(resolved.store.clone(), leases));
    let log =
        Path::from(args.log.unwrap_or_else(|| {
            format!("dynacommit-race/{:016x}/_delta_log", rand::random::<u64>())
        }));
    let writers: Vec<Arc<dyn LogWriter>> = (0..args.writers)
        .map(|_| Arc::new(StoreWriter(store.clone())) as Arc<dyn LogWriter>)
        .collect();
    let total = u64::from(args.writers) * u64::from(args.commits);
    let progress = Arc::new(AtomicU64::new(0));
    let ticker = (!json).then(|| spawn_progress(progress.clone(), total));
    let outcome = race::run(
        writers,
        resolved.store.clone(),
        &log,
        args.commits as usize,
        Some(progress),
    )
    .await;
    if let Some(ticker) = ticker {
        ticker.abort();
    }
    let report = outcome.map_err(|e| e.to_string())?;
    let clean = report.is_clean();
    if json {
        let value = serde_json::json!({
            "writers": report.writers,
            "commits_per_writer": report.commits_per_writer,
            "versions": report.versions,
            "expected_versions": total,
            "duplicates": report.duplicates,
            "lost": report.lost,
            "gaps": report.gaps,
            "conflicts": report.conflicts,
            "latency_ms": {
                "p50": report.latency.p50.as_secs_f64() * 1e3,
                "p90": report.latency.p90.as_secs_f64() * 1e3,
                "p99": report.latency.p99.as_secs_f64() * 1e3,
                "max": report.latency.max.as_secs_f64() * 1e3,
            },
            "elapsed_s": report.elapsed.as_secs_f64(),
            "ok": clean,
        });
        println!("{value}");
    } else {
        let l = report.latency;
        print_table(&[
            ("log", log.to_string()),
            (
                "writers x commits",
                format!("{} x {}", report.writers, report.commits_per_writer),
            ),
            (
                "versions committed",
                format!("{} of {total}", report.versions),
            ),
            ("duplicates found", report.duplicates.len().to_string()),
            ("lost commits", report.lost.len().to_string()),
            ("gaps", report.gaps.len().to_string()),
            ("conflicts", report.conflicts.to_string()),
            (
                "commit latency",
                format!(
                    "p50 {}  p90 {}  p99 {}  max {}",
                    ms(l.p50),
                    ms(l.p90),
                    ms(l.p99),
                    ms(l.max)
                ),
            ),
            ("elapsed", format!("{:.2} s", report.elapsed.as_secs_f64())),
        ]);
        if clean {
            println!(
                "OK: every version from 0 to {} exists exactly once and holds its winner's bytes",
                total - 1
            );
        } else {
            println!("FAILED: the log does not hold exactly one winner per version");
        }
    }
    Ok(if clean {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// Prints progress on a terminal (stderr), every half second.
fn spawn_progress(done: Arc<AtomicU64>, total: u64) -> tokio::task::JoinHandle<()> {
    use std::io::IsTerminal;
    tokio::spawn(async move {
        if !std::io::stderr().is_terminal() {
            return;
        }
        loop {
            tokio::time::sleep(std::time::Duration::from_millis(500)).await;
            eprint!("\r{} / {total} commits", done.load(Ordering::Relaxed));
        }
    })
}
