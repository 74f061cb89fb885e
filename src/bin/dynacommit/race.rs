//! `dynacommit race`: the Delta-style commit race, or (`--mode pointer`) the Iceberg-style
//! pointer race.

use std::collections::HashSet;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use clap::{Args, ValueEnum};
use dynacommit::CommitStore;
use dynacommit::lease::{LeaseManager, Waiting};
use dynacommit::race::pointer::{self, PointerReport, PointerWriter};
use dynacommit::race::{self, LogWriter, RaceControl, RaceReport, StoreWriter};
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
    /// What the writers race on: `log`, Delta-style numbered log files each claimed with a
    /// create-if-absent; or `pointer`, Iceberg-style swaps of one pointer object to each
    /// writer's new metadata file, a compare-and-swap on the pointer's ETag.
    #[arg(long, value_enum, default_value_t = Mode::Log)]
    mode: Mode,
    /// Concurrent writers.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u16).range(1..=1024))]
    writers: u16,
    /// Commits each writer makes (with --mode pointer: acknowledged swaps).
    #[arg(long, default_value_t = 25, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    commits: u32,
    /// The log's location in the store (--mode log only): a fresh one per run by default;
    /// a given one must be empty (the race checks every version from 0).
    #[arg(long)]
    log: Option<String>,
    /// Race without dynacommit, as on a store that ignores conditional writes (s3rver,
    /// some MinIO and Ceph versions): each create or swap is a plain PUT that is told it
    /// won. Shows what the leases prevent: expect lost commits and FAILED (exit 1).
    #[arg(long)]
    unprotected: bool,
}

/// The race `--mode` picks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Mode {
    /// Delta-style: create-if-absent on numbered log files.
    Log,
    /// Iceberg-style: compare-and-swap of one pointer object.
    Pointer,
}

impl RaceArgs {
    /// The race mode asked for.
    pub fn mode(&self) -> Mode {
        self.mode
    }
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
    let fresh = format!("dynacommit-race/{:016x}", rand::random::<u64>());
    let location = match (args.mode, &args.log) {
        (Mode::Log, Some(log)) => {
            let log = Path::from(log.as_str());
            refuse_a_used_log(&*resolved.store, &log).await?;
            log
        }
        (Mode::Log, None) => Path::from(format!("{fresh}/_delta_log")),
        // --log is refused with this mode (main.rs), which always starts afresh.
        (Mode::Pointer, _) => Path::from(fresh),
    };
    // Each writer as a process of its own would be: a lease manager of its own, so that
    // writers meet in the lease table (tasks sharing one manager settle their races in
    // its queue first, without the table).
    let mut stores = Vec::with_capacity(usize::from(args.writers));
    for _ in 0..args.writers {
        let leases = LeaseManager::new(resolved.table.clone(), resolved.config.clone())
            .map_err(|e| e.to_string())?
            .on_wait(announce_waits());
        stores.push(
            Arc::new(CommitStore::new(resolved.store.clone(), leases)) as Arc<dyn ObjectStore>
        );
    }
    let (abandon, abandoned_signal) = watch::channel(false);
    let abandoned = Arc::new(AtomicU64::new(0));
    if args.unprotected && !json {
        eprintln!(
            "unprotected: no leases, and every create or swap a plain PUT told it won (what a \
             store that ignores If-None-Match and If-Match does)"
        );
    }
    let writers: Vec<Arc<dyn PointerWriter>> = stores
        .into_iter()
        .map(|store| {
            if args.unprotected {
                return Arc::new(Unprotected(resolved.store.clone())) as Arc<dyn PointerWriter>;
            }
            Arc::new(AbandonableWriter {
                inner: StoreWriter(store),
                reader: resolved.store.clone(),
                abandon: abandoned_signal.clone(),
                abandoned: abandoned.clone(),
            }) as Arc<dyn PointerWriter>
        })
        .collect();
    let total = u64::from(args.writers) * u64::from(args.commits);
    let control = Arc::new(RaceControl::default());
    let unit = match args.mode {
        Mode::Log => "commits",
        Mode::Pointer => "swaps",
    };
    let progress = (!json).then(|| spawn_progress(control.clone(), total, unit));
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
    let outcome = match args.mode {
        Mode::Log => {
            let writers = writers
                .into_iter()
                .map(|w| w as Arc<dyn LogWriter>)
                .collect();
            race::run(
                writers,
                resolved.store.clone(),
                &location,
                args.commits as usize,
                Some(control.clone()),
            )
            .await
            .map(Report::Log)
            .map_err(|e| e.to_string())
        }
        Mode::Pointer => pointer::run(
            writers,
            resolved.store.clone(),
            &location,
            args.commits as usize,
            Some(control.clone()),
        )
        .await
        .map(Report::Pointer)
        .map_err(|e| e.to_string()),
    };
    interrupt.abort();
    if let Some(progress) = progress {
        progress.abort();
        let _ = progress.await;
    }
    let report = outcome?;
    let abandoned = abandoned.load(Ordering::Relaxed);
    let (clean, interrupted) = match &report {
        Report::Log(report) => {
            print_log(report, &location, total, abandoned, json);
            (report.is_clean(), report.interrupted)
        }
        Report::Pointer(report) => {
            print_pointer(report, &location, total, abandoned, json);
            (report.is_clean(), report.interrupted)
        }
    };
    Ok(match (clean, interrupted) {
        (false, _) => ExitCode::FAILURE,
        (true, true) => ExitCode::from(INTERRUPTED),
        (true, false) => ExitCode::SUCCESS,
    })
}

/// What either race found.
enum Report {
    Log(RaceReport),
    Pointer(PointerReport),
}

/// Latency percentiles in milliseconds, for JSON.
fn latency_json(l: race::Percentiles) -> serde_json::Value {
    serde_json::json!({
        "p50": l.p50.as_secs_f64() * 1e3,
        "p90": l.p90.as_secs_f64() * 1e3,
        "p99": l.p99.as_secs_f64() * 1e3,
        "max": l.max.as_secs_f64() * 1e3,
    })
}

/// Latency percentiles, for people.
fn latency_text(l: race::Percentiles) -> String {
    format!(
        "p50 {}  p90 {}  p99 {}  max {}",
        ms(l.p50),
        ms(l.p90),
        ms(l.p99),
        ms(l.max)
    )
}

/// Prints the log race's report.
fn print_log(report: &RaceReport, log: &Path, total: u64, abandoned: u64, json: bool) {
    let clean = report.is_clean();
    if json {
        let value = serde_json::json!({
            "mode": "log",
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
            "latency_ms": latency_json(report.latency),
            "elapsed_s": report.elapsed.as_secs_f64(),
            "ok": clean,
        });
        println!("{value}");
        return;
    }
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
        ("commit latency", latency_text(report.latency)),
        ("elapsed", format!("{:.2} s", report.elapsed.as_secs_f64())),
    ]);
    if report.interrupted {
        println!("interrupted after {} of {total} commits", report.committed);
    }
    say_abandoned(abandoned, "commit", "conflicts");
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

/// Prints the pointer race's report.
fn print_pointer(report: &PointerReport, prefix: &Path, total: u64, abandoned: u64, json: bool) {
    let clean = report.is_clean();
    let target = |t: &Option<Path>| t.as_ref().map(Path::to_string);
    if json {
        let lost: Vec<serde_json::Value> = report
            .lost
            .iter()
            .map(|swap| {
                serde_json::json!({
                    "writer": swap.writer,
                    "metadata": swap.metadata.to_string(),
                    "replaced": target(&swap.replaced),
                })
            })
            .collect();
        let doubles: Vec<Option<String>> = report.double_references.iter().map(target).collect();
        let value = serde_json::json!({
            "mode": "pointer",
            "pointer": pointer::pointer_path(prefix).to_string(),
            "writers": report.writers,
            "swaps_per_writer": report.swaps_per_writer,
            "acknowledged": report.acknowledged.len(),
            "expected_swaps": total,
            "interrupted": report.interrupted,
            "chain_length": report.chain.len(),
            "lost": lost,
            "double_references": doubles,
            "broken": report.broken,
            "retries": report.retries,
            "torn_reads": report.torn_reads,
            "digest_etags": report.digest_etags,
            "abandoned": abandoned,
            "latency_ms": latency_json(report.latency),
            "elapsed_s": report.elapsed.as_secs_f64(),
            "ok": clean,
        });
        println!("{value}");
        return;
    }
    print_table(&[
        ("pointer", pointer::pointer_path(prefix).to_string()),
        (
            "writers x swaps",
            format!("{} x {}", report.writers, report.swaps_per_writer),
        ),
        (
            "swaps acknowledged",
            format!("{} of {total}", report.acknowledged.len()),
        ),
        ("chain length", report.chain.len().to_string()),
        ("lost swaps", report.lost.len().to_string()),
        (
            "double references",
            report.double_references.len().to_string(),
        ),
        ("retries", report.retries.to_string()),
        ("swap latency", latency_text(report.latency)),
        ("elapsed", format!("{:.2} s", report.elapsed.as_secs_f64())),
    ]);
    if report.torn_reads > 0 {
        println!(
            "read the pointer again {} times: caught mid-write (the store writes objects in place)",
            report.torn_reads
        );
    }
    if let Some(broken) = &report.broken {
        println!("broken chain: {broken}");
    }
    if report.interrupted {
        println!(
            "interrupted after {} of {total} swaps",
            report.acknowledged.len()
        );
    }
    say_abandoned(abandoned, "swap", "retries");
    if clean && !report.acknowledged.is_empty() {
        println!(
            "OK: the chain behind the pointer holds every acknowledged swap, each target replaced once"
        );
    } else if clean {
        println!("OK: nothing was swapped");
    } else {
        println!(
            "FAILED: the chain behind the pointer does not hold every acknowledged swap exactly once"
        );
    }
}

/// Says how many attempts (`kind`: commit or swap) were abandoned at an interrupt, and
/// what they were `counted` as, if any.
fn say_abandoned(abandoned: u64, kind: &str, counted: &str) {
    if abandoned > 0 {
        println!(
            "abandoned {abandoned} {kind} attempts still waiting at the interrupt (counted as {counted})"
        );
    }
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

impl AbandonableWriter {
    /// Runs `write` of `body` to `path` until told to abandon it; then whether `path` holds
    /// `body`, read back.
    async fn abandonable(
        &self,
        write: impl Future<Output = Result<bool, String>>,
        path: &Path,
        body: &Bytes,
    ) -> Result<bool, String> {
        let mut abandon = self.abandon.clone();
        let told = async move {
            // An error means the sender is gone, and with it any reason to abandon.
            if abandon.wait_for(|&a| a).await.is_err() {
                std::future::pending::<()>().await;
            }
        };
        tokio::select! {
            won = write => won,
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

#[async_trait]
impl LogWriter for AbandonableWriter {
    async fn create(&self, path: &Path, body: Bytes) -> Result<bool, String> {
        self.abandonable(self.inner.create(path, body.clone()), path, &body)
            .await
    }
}

#[async_trait]
impl PointerWriter for AbandonableWriter {
    async fn swap(
        &self,
        pointer: &Path,
        body: Bytes,
        expected: Option<&str>,
    ) -> Result<bool, String> {
        self.abandonable(
            self.inner.swap(pointer, body.clone(), expected),
            pointer,
            &body,
        )
        .await
    }
}

/// A writer on a store that ignores conditional writes: every create or swap is a plain
/// PUT, and the store says it won (s3rver answers `If-None-Match: *` and `If-Match` with
/// 200 and overwrites).
struct Unprotected(Arc<dyn ObjectStore>);

impl Unprotected {
    async fn put(&self, path: &Path, body: Bytes) -> Result<bool, String> {
        self.0
            .put(path, body.into())
            .await
            .map(|_| true)
            .map_err(|e| e.to_string())
    }
}

#[async_trait]
impl LogWriter for Unprotected {
    async fn create(&self, path: &Path, body: Bytes) -> Result<bool, String> {
        self.put(path, body).await
    }
}

#[async_trait]
impl PointerWriter for Unprotected {
    async fn swap(&self, pointer: &Path, body: Bytes, _: Option<&str>) -> Result<bool, String> {
        self.put(pointer, body).await
    }
}

/// A progress bar on stderr while the race runs, if stderr is a terminal (indicatif draws
/// nothing otherwise).
fn spawn_progress(
    control: Arc<RaceControl>,
    total: u64,
    unit: &str,
) -> tokio::task::JoinHandle<()> {
    let bar = indicatif::ProgressBar::new(total);
    bar.set_style(
        indicatif::ProgressStyle::with_template(&format!(
            "{{bar:40}} {{pos}}/{{len}} {unit}, {{per_sec}}, eta {{eta}}"
        ))
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
