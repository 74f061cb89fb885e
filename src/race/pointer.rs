//! The pointer race: Iceberg-style commits, where each writer writes a new metadata file
//! and then swaps one pointer object over to it with a compare-and-swap on its ETag, and a
//! check that the chain of metadata files behind the final pointer holds every swap.
//!
//! Each writer loops: read [`POINTER`] (its target and ETag; absent at the start), create
//! the next metadata file `metadata/<writer>-<attempt>.json` with [`PutMode::Create`],
//! naming the target it replaces, then swap the pointer to it with
//! [`PutMode::Update`] on the ETag it read ([`PutMode::Create`] while the pointer is
//! absent). A swap refused (the pointer moved, or appeared) is retried from a fresh read.
//! On a store that ignores `If-Match` two writers that read the same pointer both swap,
//! and the first one's metadata file drops out of the chain: a lost swap.
//!
//! A read of the pointer that does not name a whole metadata file is a read caught in the
//! middle of a write (s3rver writes objects in place: truncate, then write), and is read
//! again; such reads are counted apart ([`PointerReport::torn_reads`]). Only a whole
//! metadata path is taken for a target, never a partial or interleaved one; a pointer that
//! stays unreadable is corrupt, and stops the race ([`PointerReport::broken`]).

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, UpdateVersion};
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use super::{LogWriter, Percentiles, RaceControl, StoreWriter};

/// The pointer object's name under the race's prefix.
pub const POINTER: &str = "POINTER";

/// How long a writer keeps reading a pointer that names no metadata file (a read caught
/// mid-write) before giving up on it as corrupt.
const TORN_PATIENCE: Duration = Duration::from_secs(2);

/// One writer of the pointer race: creates metadata files ([`LogWriter::create`]) and
/// swaps the pointer.
#[async_trait]
pub trait PointerWriter: LogWriter {
    /// Replaces the object at `pointer` with `body` if its ETag is still `expected`, or
    /// creates it if `expected` is `None`: `Ok(true)` if this call swapped it,
    /// `Ok(false)` if the precondition failed (the pointer moved, or appeared).
    async fn swap(
        &self,
        pointer: &Path,
        body: Bytes,
        expected: Option<&str>,
    ) -> Result<bool, String>;
}

#[async_trait]
impl PointerWriter for StoreWriter {
    async fn swap(
        &self,
        pointer: &Path,
        body: Bytes,
        expected: Option<&str>,
    ) -> Result<bool, String> {
        swap_if_unchanged(&*self.0, pointer, body, expected).await
    }
}

/// Writes `body` at `path` with [`PutMode::Update`] on the ETag `expected`, or with
/// [`PutMode::Create`] if `expected` is `None`: `Ok(true)` if written, `Ok(false)` on
/// `Precondition` or `AlreadyExists`.
pub(crate) async fn swap_if_unchanged(
    store: &dyn ObjectStore,
    path: &Path,
    body: Bytes,
    expected: Option<&str>,
) -> Result<bool, String> {
    let mode = match expected {
        None => PutMode::Create,
        Some(etag) => PutMode::Update(UpdateVersion {
            e_tag: Some(etag.to_owned()),
            version: None,
        }),
    };
    match store.put_opts(path, body.into(), mode.into()).await {
        Ok(_) => Ok(true),
        Err(
            object_store::Error::Precondition { .. } | object_store::Error::AlreadyExists { .. },
        ) => Ok(false),
        Err(e) => Err(e.to_string()),
    }
}

/// The pointer's path under `prefix`.
pub fn pointer_path(prefix: &Path) -> Path {
    prefix.clone().join(POINTER)
}

/// The path of `writer`'s metadata file for its attempt `attempt` under `prefix`:
/// `prefix/metadata/3-17.json`.
pub fn metadata_path(prefix: &Path, writer: usize, attempt: u64) -> Path {
    prefix
        .clone()
        .join("metadata")
        .join(format!("{writer}-{attempt}.json"))
}

/// A metadata file's content: who wrote it, and the metadata file it replaces (`None`:
/// the first, which created the pointer).
#[derive(Debug, Serialize, Deserialize)]
struct Metadata {
    writer: usize,
    replaces: Option<String>,
}

/// One acknowledged swap.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Swap {
    /// The writer's index.
    pub writer: usize,
    /// The metadata file the pointer was swapped to.
    pub metadata: Path,
    /// The pointer's target it replaced (`None`: the pointer was absent, and this swap
    /// created it).
    pub replaced: Option<Path>,
}

/// What a pointer race found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PointerReport {
    /// Writers that raced.
    pub writers: usize,
    /// Swaps each writer was to make.
    pub swaps_per_writer: usize,
    /// Every swap a writer was told succeeded: writer by writer, each in its own order.
    pub acknowledged: Vec<Swap>,
    /// Whether the race was stopped early (see [`RaceControl::stop`]).
    pub interrupted: bool,
    /// The chain read back: the final pointer's target first, then each file it replaces,
    /// back to the first.
    pub chain: Vec<Path>,
    /// Acknowledged swaps whose metadata file is not in the chain.
    pub lost: Vec<Swap>,
    /// Targets that more than one acknowledged swap replaced (`None`: the absent pointer,
    /// created more than once).
    pub double_references: Vec<Option<Path>>,
    /// Why the chain could not be followed to its start, if it could not (a metadata file
    /// missing or unreadable, a loop, a pointer naming no metadata file), or else why the
    /// writers stopped early: the pointer stayed unreadable (concurrent plain PUTs on
    /// s3rver can interleave into one corrupt object).
    pub broken: Option<String>,
    /// Attempts that found the pointer moved (or its metadata path taken) and started again
    /// from a fresh read.
    pub retries: u64,
    /// Reads of the pointer that named no whole metadata file, caught in the middle of a
    /// write on a store that writes in place (s3rver), and read again.
    pub torn_reads: u64,
    /// Whether the store was found to name an object's bytes by their MD5, so that a read
    /// whose ETag is another MD5 counted as torn.
    pub digest_etags: bool,
    /// Latency of each acknowledged swap's conditional write.
    pub latency: Percentiles,
    /// Wall time of the race itself (not the check).
    pub elapsed: Duration,
}

impl PointerReport {
    /// Whether every invariant held: the chain reaches its start, holds every acknowledged
    /// swap and nothing else (its length is the number acknowledged), no target was
    /// replaced twice, and the swaps add up (to `writers x swaps_per_writer` unless
    /// interrupted).
    pub fn is_clean(&self) -> bool {
        let planned = self.writers * self.swaps_per_writer;
        self.broken.is_none()
            && self.lost.is_empty()
            && self.double_references.is_empty()
            && self.chain.len() == self.acknowledged.len()
            && (self.interrupted || self.acknowledged.len() == planned)
    }
}

/// A writer failed with something other than a refused precondition, or the chain could
/// not be read back.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{doing}: {message}")]
pub struct PointerRaceError {
    /// The writer's index (`None`: the check afterwards).
    pub writer: Option<usize>,
    /// What it was doing.
    pub doing: String,
    /// The store's error.
    pub message: String,
}

/// One writer's acknowledged swaps, with the latency of each.
type Acks = Vec<(Swap, Duration)>;

/// What the writers of one race share.
struct Shared {
    prefix: Path,
    pointer: Path,
    reader: Arc<dyn ObjectStore>,
    swaps_per_writer: usize,
    control: Option<Arc<RaceControl>>,
    retries: AtomicU64,
    torn_reads: AtomicU64,
    /// Set when a writer found the pointer corrupt: every writer stops.
    halted: Mutex<Option<String>>,
    /// Whether the reader's store names an object's bytes by their MD5 (see
    /// [`is_md5_of`]).
    digest_etags: bool,
}

impl Shared {
    fn halted(&self) -> Option<String> {
        self.halted
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    fn halt(&self, why: String) {
        self.halted
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get_or_insert(why);
    }

    fn stopped(&self) -> bool {
        self.control.as_ref().is_some_and(|c| c.is_stopped()) || self.halted().is_some()
    }

    /// One writer's loop: read, create the next metadata file, swap; again from a fresh
    /// read when refused; until `swaps_per_writer` swaps are acknowledged.
    async fn write(
        &self,
        index: usize,
        writer: &dyn PointerWriter,
    ) -> Result<Acks, PointerRaceError> {
        let failed = |doing: String, message: String| PointerRaceError {
            writer: Some(index),
            doing: format!("writer {index} {doing}"),
            message,
        };
        let pointer = &self.pointer;
        let mut acks: Acks = Vec::with_capacity(self.swaps_per_writer);
        let mut attempt = 0u64;
        while acks.len() < self.swaps_per_writer && !self.stopped() {
            let (replaced, etag) = match self.read_whole_pointer().await {
                Ok(Read::Absent) => (None, None),
                Ok(Read::Target(target, etag)) => (Some(target), Some(etag)),
                Ok(Read::Torn(_) | Read::Cut(_)) => break, // halted
                Err(e) => return Err(failed(format!("reading {pointer}"), e)),
            };
            // Lets the other writers run between this read and the swap, as I/O does on
            // any real store; on one whose calls never suspend (InMemory) the writers would
            // otherwise take turns, whole loops at a time, and never collide.
            tokio::task::yield_now().await;
            let metadata = metadata_path(&self.prefix, index, attempt);
            attempt += 1;
            let body = metadata_body(index, replaced.as_ref())
                .map_err(|e| failed(format!("writing {metadata}"), e))?;
            let created = writer
                .create(&metadata, body)
                .await
                .map_err(|e| failed(format!("creating {metadata}"), e))?;
            if !created {
                self.retries.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            let swap_started = Instant::now();
            let body = Bytes::from(metadata.to_string());
            let swapped = writer
                .swap(pointer, body, etag.as_deref())
                .await
                .map_err(|e| failed(format!("swapping {pointer} to {metadata}"), e))?;
            if !swapped {
                self.retries.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            let swap = Swap {
                writer: index,
                metadata,
                replaced,
            };
            acks.push((swap, swap_started.elapsed()));
            if let Some(c) = &self.control {
                c.committed.fetch_add(1, Ordering::Relaxed);
            }
        }
        Ok(acks)
    }

    /// Reads the pointer until it is absent or names a metadata file. A torn read is
    /// counted and read again; a pointer still torn [`TORN_PATIENCE`] after the first torn
    /// read is corrupt, and halts the race. [`Read::Torn`] once halted.
    async fn read_whole_pointer(&self) -> Result<Read, String> {
        // Since the first of the torn reads in a row. A body cut short proves a write under
        // way, and starts the count again (object_store retries one for seconds before it
        // fails, so it must not count as time spent on a corrupt pointer).
        let mut torn_since: Option<Instant> = None;
        loop {
            if let Some(why) = self.halted() {
                return Ok(Read::Torn(why));
            }
            match read_pointer(
                &*self.reader,
                &self.prefix,
                &self.pointer,
                self.digest_etags,
            )
            .await?
            {
                Read::Torn(e) if torn_since.is_some_and(|t| t.elapsed() >= TORN_PATIENCE) => {
                    self.halt(format!(
                        "{} stayed unreadable for {} s, so the writers stopped: {e}",
                        self.pointer,
                        TORN_PATIENCE.as_secs()
                    ));
                }
                Read::Torn(_) => {
                    torn_since.get_or_insert_with(Instant::now);
                    self.torn_reads.fetch_add(1, Ordering::Relaxed);
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
                Read::Cut(_) => {
                    torn_since = None;
                    self.torn_reads.fetch_add(1, Ordering::Relaxed);
                }
                whole => return Ok(whole),
            }
        }
    }
}

/// Races `writers` (each making `swaps_per_writer` acknowledged swaps) on the pointer at
/// `prefix/POINTER`, reading it through `reader`, then follows the chain back through
/// `reader` and checks the invariants. `control`, if given, counts swaps as they land and
/// can stop the race. `reader` must reach the store the writers write, configured alike:
/// whether its ETags are its objects' MD5 is learnt through it, and holds for every read.
///
/// ```
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// use std::sync::Arc;
/// use dynacommit::CommitStore;
/// use dynacommit::lease::{LeaseConfig, LeaseManager, MemoryLeaseTable};
/// use dynacommit::race::StoreWriter;
/// use dynacommit::race::pointer::{self, PointerWriter};
/// use object_store::{ObjectStore, memory::InMemory, path::Path};
///
/// let inner: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
/// let leases = LeaseManager::new(Arc::new(MemoryLeaseTable::new()), LeaseConfig::default())?;
/// let store: Arc<dyn ObjectStore> = Arc::new(CommitStore::new(inner.clone(), leases));
/// let writers: Vec<Arc<dyn PointerWriter>> =
///     (0..4).map(|_| Arc::new(StoreWriter(store.clone())) as Arc<dyn PointerWriter>).collect();
/// let report = pointer::run(writers, inner, &Path::from("table"), 5, None).await?;
/// assert!(report.is_clean() && report.chain.len() == 20);
/// # Ok(()) }
/// ```
pub async fn run(
    writers: Vec<Arc<dyn PointerWriter>>,
    reader: Arc<dyn ObjectStore>,
    prefix: &Path,
    swaps_per_writer: usize,
    control: Option<Arc<RaceControl>>,
) -> Result<PointerReport, PointerRaceError> {
    let count = writers.len();
    let digest_etags = etags_are_digests(&*reader, prefix)
        .await
        .map_err(|message| PointerRaceError {
            writer: None,
            doing: "probing whether the store's ETags are its objects' digests".into(),
            message,
        })?;
    let shared = Shared {
        prefix: prefix.clone(),
        pointer: pointer_path(prefix),
        reader,
        swaps_per_writer,
        control,
        retries: AtomicU64::new(0),
        torn_reads: AtomicU64::new(0),
        halted: Mutex::new(None),
        digest_etags,
    };
    let started = Instant::now();
    let tasks = writers
        .iter()
        .enumerate()
        .map(|(index, writer)| shared.write(index, &**writer));
    let all_acks: Vec<Acks> = futures::future::try_join_all(tasks).await?;
    let elapsed = started.elapsed();

    let (acknowledged, latencies): (Vec<Swap>, Vec<Duration>) =
        all_acks.into_iter().flatten().unzip();
    let pointer = &shared.pointer;
    let (chain, broken) = follow_chain(&*shared.reader, prefix, pointer, shared.digest_etags)
        .await
        .map_err(|message| PointerRaceError {
            writer: None,
            doing: format!("following the chain back from {pointer}"),
            message,
        })?;
    let in_chain: HashSet<&Path> = chain.iter().collect();
    let lost = acknowledged
        .iter()
        .filter(|swap| !in_chain.contains(&swap.metadata))
        .cloned()
        .collect();
    let mut replaced: HashMap<Option<&Path>, usize> = HashMap::new();
    for swap in &acknowledged {
        *replaced.entry(swap.replaced.as_ref()).or_default() += 1;
    }
    let mut double_references: Vec<Option<Path>> = replaced
        .into_iter()
        .filter(|(_, times)| *times > 1)
        .map(|(target, _)| target.cloned())
        .collect();
    double_references.sort();
    Ok(PointerReport {
        writers: count,
        swaps_per_writer,
        interrupted: shared.control.as_ref().is_some_and(|c| c.is_stopped()),
        chain,
        lost,
        double_references,
        broken: broken.or_else(|| shared.halted()),
        retries: shared.retries.load(Ordering::Relaxed),
        torn_reads: shared.torn_reads.load(Ordering::Relaxed),
        digest_etags: shared.digest_etags,
        latency: Percentiles::of(latencies),
        acknowledged,
        elapsed,
    })
}

/// A metadata file's bytes: `{"writer":3,"replaces":"table/metadata/1-4.json"}`.
fn metadata_body(writer: usize, replaces: Option<&Path>) -> Result<Bytes, String> {
    let metadata = Metadata {
        writer,
        replaces: replaces.map(Path::to_string),
    };
    serde_json::to_vec(&metadata)
        .map(Bytes::from)
        .map_err(|e| e.to_string())
}

/// What one read of the pointer found.
enum Read {
    /// No pointer yet.
    Absent,
    /// The pointer names this metadata file, at this ETag.
    Target(Path, String),
    /// A whole body naming no metadata file: a read caught in the middle of a write (a
    /// partial path), or a corrupt pointer.
    Torn(String),
    /// A body cut short of its length: a read caught in the middle of a write.
    Cut(String),
}

/// Reads the pointer once; `digest_etags`: its ETag must be its body's MD5 (else torn).
async fn read_pointer(
    store: &dyn ObjectStore,
    prefix: &Path,
    pointer: &Path,
    digest_etags: bool,
) -> Result<Read, String> {
    let got = match store.get(pointer).await {
        Ok(got) => got,
        Err(object_store::Error::NotFound { .. }) => return Ok(Read::Absent),
        Err(e) => return Err(e.to_string()),
    };
    let etag = got
        .meta
        .e_tag
        .clone()
        .ok_or("the store gave no ETag, so the pointer cannot be swapped on it")?;
    Ok(match got.bytes().await {
        Ok(body) if digest_etags && !is_md5_of(&etag, &body) => Read::Torn(format!(
            "its ETag {etag} is not its body's digest: a read caught between a write's \
             metadata and its bytes"
        )),
        Ok(body) => match parse_target(prefix, &body) {
            Ok(target) => Read::Target(target, etag),
            Err(e) => Read::Torn(e),
        },
        Err(e) => Read::Cut(format!("its body was cut short: {e}")),
    })
}

/// Whether `etag` is `body`'s MD5. On a store whose single PUTs are given their body's MD5
/// as ETag (S3 without KMS, SeaweedFS, s3rver; see [`etags_are_digests`]) a read whose ETag
/// is not is caught between two writes: s3rver (`lib/stores/filesystem.js`) keeps an
/// object's ETag in a metadata file apart from its bytes, and writes the metadata, and
/// answers the PUT, without waiting for the bytes to reach the file, so a GET just after
/// can pair the new ETag with the old bytes, whole. A swap made on that read names the old
/// target as its predecessor at the new ETag, and the store is right to let it through:
/// the read, not the swap, was wrong.
fn is_md5_of(etag: &str, body: &[u8]) -> bool {
    use md5::Digest;
    let digest = md5::Md5::digest(body);
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    etag.trim_start_matches("W/")
        .trim_matches('"')
        .eq_ignore_ascii_case(&hex)
}

/// Whether `store` gives a single PUT its body's MD5 as ETag, learnt from one put of a
/// probe object under `prefix`, removed again. Stores whose ETags are opaque, or not the
/// MD5 (S3 with SSE-KMS, directory buckets), answer `false`, and their reads are taken as
/// they come.
async fn etags_are_digests(store: &dyn ObjectStore, prefix: &Path) -> Result<bool, String> {
    const BODY: &[u8] = b"dynacommit pointer race: does this store's ETag name its bytes?";
    let probe = prefix.clone().join(".etag-probe");
    let put = store
        .put_opts(&probe, Bytes::from_static(BODY).into(), Default::default())
        .await
        .map_err(|e| format!("writing {probe}: {e}"))?;
    // The answer is in; a probe left behind harms nothing (no one lists the prefix).
    match store.delete(&probe).await {
        Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
        Err(e) => tracing::warn!(%probe, error = %e, "could not remove the ETag probe"),
    }
    Ok(put.e_tag.is_some_and(|etag| is_md5_of(&etag, BODY)))
}

/// A metadata path, as stored in the pointer or a metadata file's `replaces`: exactly
/// what [`metadata_path`] makes under `prefix`, so that no partial or interleaved write of
/// one is taken for a target.
fn parse_target(prefix: &Path, text: &[u8]) -> Result<Path, String> {
    let whole = || -> Option<Path> {
        let text = std::str::from_utf8(text).ok()?;
        let name = text.rsplit('/').next()?;
        let (writer, attempt) = name.strip_suffix(".json")?.split_once('-')?;
        let path = metadata_path(prefix, writer.parse().ok()?, attempt.parse().ok()?);
        (path.as_ref() == text).then_some(path)
    };
    whole().ok_or_else(|| {
        format!(
            "it does not name a metadata file: {:?}",
            String::from_utf8_lossy(text)
        )
    })
}

/// The pointer once every write has been answered: read again while torn, for up to
/// [`TORN_PATIENCE`], since a store that answers a PUT before its bytes are written
/// (s3rver) can still be writing the last swap's.
async fn read_settled_pointer(
    store: &dyn ObjectStore,
    prefix: &Path,
    pointer: &Path,
    digest_etags: bool,
) -> Result<Read, String> {
    let started = Instant::now();
    loop {
        match read_pointer(store, prefix, pointer, digest_etags).await? {
            Read::Torn(_) | Read::Cut(_) if started.elapsed() < TORN_PATIENCE => {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            read => return Ok(read),
        }
    }
}

/// Follows the chain from the pointer's target back through each metadata file's
/// `replaces`: the paths in order, and why it stopped short of the start if it did.
/// `Err` only if the store fails.
async fn follow_chain(
    store: &dyn ObjectStore,
    prefix: &Path,
    pointer: &Path,
    digest_etags: bool,
) -> Result<(Vec<Path>, Option<String>), String> {
    let mut next = match read_settled_pointer(store, prefix, pointer, digest_etags)
        .await
        .map_err(|e| format!("reading {pointer}: {e}"))?
    {
        Read::Absent => None,
        Read::Target(target, _) => Some(target),
        Read::Torn(e) | Read::Cut(e) => {
            return Ok((Vec::new(), Some(format!("{pointer} is unreadable: {e}"))));
        }
    };
    let mut chain = Vec::new();
    let mut seen = HashSet::new();
    while let Some(path) = next {
        if !seen.insert(path.clone()) {
            return Ok((chain, Some(format!("{path} comes twice: the chain loops"))));
        }
        let body = match store.get(&path).await {
            Ok(got) => got.bytes().await.map_err(|e| e.to_string())?,
            Err(object_store::Error::NotFound { .. }) => {
                return Ok((chain, Some(format!("{path} is named but missing"))));
            }
            Err(e) => return Err(format!("reading {path}: {e}")),
        };
        let replaces = serde_json::from_slice::<Metadata>(&body)
            .map_err(|e| e.to_string())
            .and_then(|m| {
                m.replaces
                    .map(|r| parse_target(prefix, r.as_bytes()))
                    .transpose()
            });
        chain.push(path.clone());
        match replaces {
            Ok(replaces) => next = replaces,
            Err(e) => return Ok((chain, Some(format!("{path} is unreadable: {e}")))),
        }
    }
    Ok((chain, None))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_etag_is_the_md5_of_its_body_in_any_of_its_forms() {
        // The digest computed here, not copied in: the test holds the comparison.
        use md5::Digest;
        let hex: String = md5::Md5::digest(b"pointer")
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        for etag in [
            hex.clone(),
            format!("\"{hex}\""),
            format!("W/\"{hex}\""),
            hex.to_uppercase(),
        ] {
            assert!(is_md5_of(&etag, b"pointer"), "{etag}");
        }
        assert!(!is_md5_of(&format!("\"{hex}\""), b"pointer2"));
        assert!(!is_md5_of("\"3\"", b"pointer"));
    }

    #[tokio::test]
    async fn stores_whose_etags_are_not_digests_are_told_apart() {
        let memory: Arc<dyn ObjectStore> = Arc::new(object_store::memory::InMemory::new());
        let prefix = Path::from("race");
        assert!(!etags_are_digests(&*memory, &prefix).await.unwrap());
        // The probe leaves nothing behind.
        assert!(
            futures::StreamExt::next(&mut memory.list(Some(&prefix)))
                .await
                .is_none()
        );
    }
}
