//! `dynacommit race`: the Delta-style commit race.

use std::collections::HashSet;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use clap::Args;
use dynacommit::CommitStore;
use dynacommit::lease::{LeaseManager, Waiting};
use dynacommit::race::{self, LogWriter, RaceControl, StoreWriter};
use futures::StreamExt;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};
use tokio::sync::watch;

use crate::backends::BackendArgs;
use crate::fail::Fail;
use crate::report::{ms, print_table};
use crate::signals::{INTERRUPTED, Interrupt};

#[derive(Debug, Args)]
pub struct RaceArgs {
    /// Concurrent writers.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u16).range(1..=1024))]
    writers: u16,
    /// Commits each writer makes.
    #[arg(long, default_value_t = 25, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    commits: u32,
    /// The log's location in the store: a fresh one per run by default; a given one must
    /// be empty (the race checks every version from 0).
    #[arg(long)]
    log: Option<String>,
    /// Race without dynacommit, as on a store that ignores conditional writes (s3rver,
    /// some MinIO and Ceph versions): each create is a plain PUT that is told it won.
    /// Shows what the leases prevent: expect lost commits and FAILED (exit 1).
    #[arg(long)]
    unprotected: bool,
}

/// How long, after the first interrupt, commits in flight get to finish before they are
/// abandoned (dropped: a commit still running by then is almost surely waiting for a
/// lease, which can take lease timeout x skew).
const GRACE: Duration = Duration::from_millis(500);

pub async fn run(
    backends: &BackendArgs,
    args: RaceArgs,
    json: bool,
    interrupt: Interrupt,
) -> Result<ExitCode, Fail> {
    let resolved = backends.resolve().await?;
    if !json {
        eprintln!("{}", resolved.description);
    }
    for warning in &resolved.warnings {
        eprintln!("dynacommit: {warning}");
    }
    let log = match &args.log {
        Some(log) => {
            let log = Path::from(log.as_str());
            refuse_a_used_log(&*resolved.store, &log).await?;
            log
        }
        None => Path::from(format!(
            "dynacommit-race/{:016x}/_delta_log",
            rand::random::<u64>()
        )),
    };
    let leases = LeaseManager::new(resolved.table.clone(), resolved.config.clone())
        .map_err(|e| e.to_string())?
        .on_wait(announce_waits());
    let store: Arc<dyn ObjectStore> = Arc::new(CommitStore::new(resolved.store.clone(), leases));
    let (abandon, abandoned_signal) = watch::channel(false);
    let abandoned = Arc::new(AtomicU64::new(0));
    if args.unprotected && !json {
        eprintln!(
            "unprotected: no leases, and every create a plain PUT told it won (what a store that \
             ignores If-None-Match does)"
        );
    }
    let writers: Vec<Arc<dyn LogWriter>> = (0..args.writers)
        .map(|_| {
            if args.unprotected {
                return Arc::new(Unprotected(resolved.store.clone())) as Arc<dyn LogWriter>;
            }
            Arc::new(AbandonableWriter {
                inner: StoreWriter(store.clone()),
                reader: resolved.store.clone(),
                abandon: abandoned_signal.clone(),
                abandoned: abandoned.clone(),
            }) as Arc<dyn LogWriter>
        })
        .collect();
    let total = u64::from(args.writers) * u64::from(args.commits);
    let control = Arc::new(RaceControl::default());
    let progress = (!json).then(|| spawn_progress(control.clone(), total));
    let interrupt = {
        // Ctrl-C or SIGTERM: writers stop starting commits; those in flight get GRACE to
        // finish (and release their leases), then are abandoned; the log is checked as
        // far as it got. A second interrupt exits at once (signals.rs).
        let control = control.clone();
        tokio::spawn(async move {
            interrupt.wait().await;
            control.stop();
            if !json {
                eprintln!(
                    "interrupted: stopping the writers (commits still waiting after {} ms are \
                     abandoned; Ctrl-C again to exit at once)",
                    GRACE.as_millis()
                );
            }
            tokio::time::sleep(GRACE).await;
            let _ = abandon.send(true);
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
    let abandoned = abandoned.load(Ordering::Relaxed);
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
            "abandoned": abandoned,
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
        if abandoned > 0 {
            println!(
                "abandoned {abandoned} commit attempts still waiting at the interrupt (counted as conflicts)"
            );
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
        (true, true) => ExitCode::from(INTERRUPTED),
        (true, false) => ExitCode::SUCCESS,
    })
}

/// Refuses a log that already holds objects: the race proves that every version from 0
/// was won exactly once by this run's writers, which an old log's versions would fail.
async fn refuse_a_used_log(store: &dyn ObjectStore, log: &Path) -> Result<(), Fail> {
    match store.list(Some(log)).next().await {
        None => Ok(()),
        Some(Ok(found)) => Err(Fail::Usage(format!(
            "--log {log} already holds versions (e.g. {}): the race checks that every version \
             from 0 was won exactly once by this run's writers, so it needs an empty log; give \
             a new --log path, or leave --log out for a fresh one",
            found.location
        ))),
        Some(Err(e)) => Err(Fail::Failure(format!(
            "--log {log}: cannot list it to check that it is empty: {e}"
        ))),
    }
}

/// Says on stderr when a writer has waited a second for another's lease, and again when
/// the record it waits on changes; once per record, however many writers wait on it.
fn announce_waits() -> impl Fn(&Waiting) + Send + Sync + 'static {
    let announced: Mutex<HashSet<(String, String, u64)>> = Mutex::new(HashSet::new());
    move |wait: &Waiting| {
        let key = (wait.path.clone(), wait.etag.clone(), wait.generation);
        let new = announced
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(key);
        if new {
            let holder = wait
                .holder
                .as_deref()
                .map(|h| format!(", held by {h}"))
                .unwrap_or_default();
            eprintln!(
                "waiting for the lease on {} (reclaimable in ~{} s{holder})",
                wait.path,
                wait.reclaimable_in.as_secs_f64().ceil() as u64
            );
        }
    }
}

/// A writer whose commit in flight is dropped when told to abandon it: dropping cancels
/// a wait for another's lease (which can last lease timeout x skew). An abandoned commit
/// whose put landed before the drop still counts as won: the path is read back.
struct AbandonableWriter {
    inner: StoreWriter,
    reader: Arc<dyn ObjectStore>,
    abandon: watch::Receiver<bool>,
    abandoned: Arc<AtomicU64>,
}

#[async_trait]
impl LogWriter for AbandonableWriter {
    async fn create(&self, path: &Path, body: Bytes) -> Result<bool, String> {
        let mut abandon = self.abandon.clone();
        let told = async move {
            // An error means the sender is gone, and with it any reason to abandon.
            if abandon.wait_for(|&a| a).await.is_err() {
                std::future::pending::<()>().await;
            }
        };
        tokio::select! {
            won = self.inner.create(path, body.clone()) => won,
            () = told => {
                self.abandoned.fetch_add(1, Ordering::Relaxed);
                let landed = async {
                    let stored = self.reader.get(path).await.ok()?.bytes().await.ok()?;
                    Some(stored == body)
                };
                Ok(tokio::time::timeout(Duration::from_secs(5), landed)
                    .await
                    .ok()
                    .flatten()
                    .unwrap_or(false))
            }
        }
    }
}

/// A writer on a store that ignores conditional writes: every create is a plain PUT, and
/// the store says it won (s3rver answers `If-None-Match: *` with 200 and overwrites).
struct Unprotected(Arc<dyn ObjectStore>);

#[async_trait]
impl LogWriter for Unprotected {
    async fn create(&self, path: &Path, body: Bytes) -> Result<bool, String> {
        self.0
            .put(path, body.into())
            .await
            .map(|_| true)
            .map_err(|e| e.to_string())
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
