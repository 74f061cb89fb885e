//! `dynacommit race`: the Delta-style commit race.

use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use clap::Args;
use dynacommit::CommitStore;
use dynacommit::lease::LeaseManager;
use dynacommit::race::{self, LogWriter, RaceControl, StoreWriter};
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
    // Listen for Ctrl-C before saying anything, so that whoever reads our first line can
    // rely on an interrupt being handled.
    let interrupted = interrupt_signal()?;
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
    let control = Arc::new(RaceControl::default());
    let progress = (!json).then(|| spawn_progress(control.clone(), total));
    let interrupt = {
        // Ctrl-C: writers finish the commit in flight (and release its lease), then stop;
        // the log is checked as far as it got.
        let control = control.clone();
        tokio::spawn(async move {
            interrupted.await;
            control.stop();
        })
    };
    let outcome = race::run(
        writers,
        resolved.store.clone(),
        &log,
        args.commits as usize,
        Some(control.clone()),
    )
    .await;
    interrupt.abort();
    if let Some(progress) = progress {
        progress.abort();
        let _ = progress.await;
    }
    let report = outcome.map_err(|e| e.to_string())?;
    let clean = report.is_clean();
    if json {
        let value = serde_json::json!({
            "writers": report.writers,
            "commits_per_writer": report.commits_per_writer,
            "versions": report.versions,
            "committed": report.committed,
            "interrupted": report.interrupted,
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
        if report.interrupted {
            println!("interrupted after {} of {total} commits", report.committed);
        }
        if clean && report.committed > 0 {
            println!(
                "OK: every version from 0 to {} exists exactly once and holds its winner's bytes",
                report.committed - 1
            );
        } else if clean {
            println!("OK: nothing was committed");
        } else {
            println!("FAILED: the log does not hold exactly one winner per version");
        }
    }
    Ok(match (clean, report.interrupted) {
        (false, _) => ExitCode::FAILURE,
        (true, true) => ExitCode::from(130),
        (true, false) => ExitCode::SUCCESS,
    })
}

/// Completes on Ctrl-C (SIGINT); the handler is in place when this returns.
fn interrupt_signal() -> Result<impl Future<Output = ()>, String> {
    #[cfg(unix)]
    {
        let mut sigint = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())
            .map_err(|e| format!("cannot listen for Ctrl-C: {e}"))?;
        Ok(async move {
            sigint.recv().await;
        })
    }
    #[cfg(not(unix))]
    {
        Ok(async {
            let _ = tokio::signal::ctrl_c().await;
        })
    }
}

/// A progress bar on stderr while the race runs, if stderr is a terminal (indicatif draws
/// nothing otherwise).
fn spawn_progress(control: Arc<RaceControl>, total: u64) -> tokio::task::JoinHandle<()> {
    let bar = indicatif::ProgressBar::new(total);
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{bar:40} {pos}/{len} commits, {per_sec}, eta {eta}",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    tokio::spawn(async move {
        let _clear = ClearOnDrop(bar.clone());
        loop {
            bar.set_position(control.committed.load(Ordering::Relaxed));
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    })
}

/// Clears the bar when the progress task ends (it is aborted when the race is done).
struct ClearOnDrop(indicatif::ProgressBar);

impl Drop for ClearOnDrop {
    fn drop(&mut self) {
        self.0.finish_and_clear();
    }
}
