//! Fault injection for deterministic simulation: a lease table and an object store whose
//! misbehaviour a test scripts. Time is Tokio's, so under `start_paused` every delay is
//! exact and instant.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use dynacommit::lease::{
    Expect, LeaseRecord, LeaseTable, MemoryLeaseTable, PutOutcome, TableError,
};
use futures::stream::BoxStream;
use md5::Digest;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, GetResultPayload, ListResult, MultipartUpload, ObjectMeta,
    ObjectStore, PutMode, PutMultipartOptions, PutOptions, PutPayload, PutResult, RenameOptions,
    Result,
};
use tokio::time::Instant;

/// What the table does wrong.
#[derive(Debug, Default, Clone)]
pub struct TableFaults {
    /// Apply this many of the next puts, then answer with an ambiguous error.
    pub lose_answers: usize,
    /// Fail every renewal or release (a put expecting our own record) ambiguously.
    pub fail_owned_puts: bool,
    /// Fail this many of the next renewals ambiguously, without applying them.
    pub fail_next_owned_puts: usize,
}

/// A lease table (a fresh [`MemoryLeaseTable`], or a shared one) with scripted faults and
/// a log of every write applied through it.
#[derive(Debug)]
pub struct FaultyTable {
    inner: Arc<dyn LeaseTable>,
    faults: Mutex<TableFaults>,
    log: Mutex<Vec<(Instant, LeaseRecord)>>,
    /// Writes refused by their condition (each billed by DynamoDB all the same).
    refused: std::sync::atomic::AtomicUsize,
}

impl FaultyTable {
    pub fn new() -> Arc<Self> {
        Self::over(Arc::new(MemoryLeaseTable::new()))
    }

    /// Faults of its own in front of `inner`, which others may share.
    pub fn over(inner: Arc<dyn LeaseTable>) -> Arc<Self> {
        Arc::new(Self {
            inner,
            faults: Mutex::default(),
            log: Mutex::default(),
            refused: Default::default(),
        })
    }

    pub fn set_faults(&self, faults: TableFaults) {
        *self.faults.lock().unwrap() = faults;
    }

    /// Every write applied, with when.
    pub fn writes(&self) -> Vec<(Instant, LeaseRecord)> {
        self.log.lock().unwrap().clone()
    }

    /// How many writes the table refused by their condition.
    pub fn refused(&self) -> usize {
        self.refused.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Seeds a record directly.
    pub async fn seed(&self, record: LeaseRecord) {
        self.inner.put(&record, &Expect::Absent).await.unwrap();
    }
}

fn injected(message: &str) -> TableError {
    TableError::Injected {
        message: message.into(),
        ambiguous: true,
    }
}

#[async_trait]
impl LeaseTable for FaultyTable {
    async fn put(&self, record: &LeaseRecord, expect: &Expect) -> Result<PutOutcome, TableError> {
        let owned = matches!(expect, Expect::Owned { .. });
        {
            let mut faults = self.faults.lock().unwrap();
            if owned && faults.fail_owned_puts {
                return Err(injected("renewal blocked"));
            }
            if owned && faults.fail_next_owned_puts > 0 {
                faults.fail_next_owned_puts -= 1;
                return Err(injected("renewal answer lost (not applied)"));
            }
        }
        let outcome = self.inner.put(record, expect).await?;
        if outcome == PutOutcome::Written {
            self.log
                .lock()
                .unwrap()
                .push((Instant::now(), record.clone()));
        } else {
            self.refused
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
        let mut faults = self.faults.lock().unwrap();
        if faults.lose_answers > 0 {
            faults.lose_answers -= 1;
            return Err(injected("answer lost after the write applied"));
        }
        Ok(outcome)
    }

    async fn get(&self, path: &str, etag: &str) -> Result<Option<LeaseRecord>, TableError> {
        self.inner.get(path, etag).await
    }

    fn describe(&self) -> String {
        "faulty in-process table".into()
    }
}

/// An object store in front of another, changed as a test needs: puts and copies that take
/// `delay` to reach the inner store, and (for s3rver) reads that retry torn bodies.
#[derive(Debug)]
pub struct ScriptedStore {
    pub inner: Arc<dyn ObjectStore>,
    /// Added before every put and copy.
    pub delay: Duration,
    /// Read whole bodies, retrying a body cut short or not matching its ETag. s3rver
    /// overwrites objects in place, so a GET racing a PUT can return a torn body
    /// (`../shared/SERVICES.md`); this is the server's gap, not the wrapper's, and
    /// object_store's race helper reads while others write.
    pub retry_torn_reads: bool,
    /// Counts every request, if set.
    pub counters: Option<Arc<super::Counters>>,
    /// Puts go out after a random delay from this range (ms), in a task of their own
    /// (see [`super::Counters::slowed`]); needs `counters`.
    pub slow_puts: Option<std::ops::Range<u64>>,
    /// When armed, the next HEAD reads the object at once and holds its answer this long
    /// (a stalled read whose answer is stale when it arrives).
    pub stall_next_head: Arc<Mutex<Option<Duration>>>,
    /// When armed, the next put is preceded by this plain write of its path (a writer
    /// outside the protocol slipping in after the check, or an earlier attempt of the same
    /// write landing): the put then meets it.
    pub write_before_next_put: Arc<Mutex<Option<bytes::Bytes>>>,
    /// Puts and copies outside this prefix refused (as credentials allowed one prefix).
    pub writes_only_under: Option<Path>,
    /// Every `PutMode::Update` refused with `Precondition`, whatever its ETag (a store
    /// that answers every `If-Match` with 412).
    pub refuse_every_update: bool,
    /// When set, the next conditional create is refused with `AlreadyExists` and not
    /// applied (AWS's 409 for a create racing a delete of its key).
    pub refuse_next_create: Arc<std::sync::atomic::AtomicBool>,
    /// If set, every delete applies and is answered at once (a retry's answer), and
    /// lands again this much later (the client's first attempt, lingering).
    pub linger_deletes: Option<Duration>,
    /// The lingering attempts, for a test to wait until they have landed.
    pub lingering: Arc<Mutex<Vec<tokio::task::JoinHandle<()>>>>,
}

impl ScriptedStore {
    /// `inner` unchanged: the base the constructors below change one thing of.
    fn plain(inner: Arc<dyn ObjectStore>) -> Self {
        Self {
            inner,
            delay: Duration::ZERO,
            retry_torn_reads: false,
            counters: None,
            slow_puts: None,
            stall_next_head: Arc::default(),
            write_before_next_put: Arc::default(),
            writes_only_under: None,
            refuse_every_update: false,
            refuse_next_create: Arc::default(),
            linger_deletes: None,
            lingering: Arc::default(),
        }
    }

    /// Deletes whose first attempt lingers, landing `linger` after the answer.
    pub fn lingering_deletes(inner: Arc<dyn ObjectStore>, linger: Duration) -> Self {
        Self {
            linger_deletes: Some(linger),
            ..Self::plain(inner)
        }
    }

    /// Waits until every lingering delete attempt so far has landed.
    pub async fn lingering_landed(&self) {
        let pending: Vec<_> = std::mem::take(&mut *self.lingering.lock().unwrap());
        for attempt in pending {
            attempt.await.expect("a lingering delete panicked");
        }
    }

    /// `inner`, with the next conditional create refused once when `armed` is set.
    pub fn refusing_next_create(
        inner: Arc<dyn ObjectStore>,
        armed: Arc<std::sync::atomic::AtomicBool>,
    ) -> Self {
        Self {
            refuse_next_create: armed,
            ..Self::plain(inner)
        }
    }

    /// Every conditional update refused, the one naming the object's own ETag too.
    pub fn refusing_every_update(inner: Arc<dyn ObjectStore>) -> Self {
        Self {
            refuse_every_update: true,
            ..Self::plain(inner)
        }
    }

    /// Puts and copies anywhere but under `prefix` refused with `PermissionDenied`, as by
    /// an IAM policy that grants one prefix of the bucket.
    pub fn writing_only_under(inner: Arc<dyn ObjectStore>, prefix: Path) -> Self {
        Self {
            writes_only_under: Some(prefix),
            ..Self::plain(inner)
        }
    }

    fn may_write(&self, location: &Path) -> Result<()> {
        match &self.writes_only_under {
            Some(prefix) if !location.prefix_matches(prefix) => {
                Err(object_store::Error::PermissionDenied {
                    path: location.to_string(),
                    source: format!("403: these credentials may write under {prefix}/ only").into(),
                })
            }
            _ => Ok(()),
        }
    }

    /// `inner`, with the next put preceded by a plain write of `armed`'s body when armed.
    pub fn writing_before_next_put(
        inner: Arc<dyn ObjectStore>,
        armed: Arc<Mutex<Option<bytes::Bytes>>>,
    ) -> Self {
        Self {
            write_before_next_put: armed,
            ..Self::plain(inner)
        }
    }

    /// HEADs whose answers are held when `stall` is armed.
    pub fn stalling_heads(
        inner: Arc<dyn ObjectStore>,
        stall: Arc<Mutex<Option<Duration>>>,
    ) -> Self {
        Self {
            stall_next_head: stall,
            ..Self::plain(inner)
        }
    }

    /// Puts and copies delayed by `delay`.
    pub fn slow(inner: Arc<dyn ObjectStore>, delay: Duration) -> Self {
        Self {
            delay,
            ..Self::plain(inner)
        }
    }

    /// Puts delayed by a random time from `delays` (ms) on their way to `inner`, going on
    /// even when their caller stops waiting; counted in `counters`.
    pub fn slow_in_flight(
        inner: Arc<dyn ObjectStore>,
        delays: std::ops::Range<u64>,
        counters: Arc<super::Counters>,
    ) -> Self {
        Self {
            counters: Some(counters),
            slow_puts: Some(delays),
            ..Self::plain(inner)
        }
    }

    /// Reads retried when s3rver tears them.
    pub fn retrying_torn_reads(inner: Arc<dyn ObjectStore>) -> Self {
        Self {
            retry_torn_reads: true,
            ..Self::plain(inner)
        }
    }

    /// Every request counted in `counters.s3`.
    pub fn counting(inner: Arc<dyn ObjectStore>, counters: Arc<super::Counters>) -> Self {
        Self {
            counters: Some(counters),
            ..Self::plain(inner)
        }
    }

    /// The scripted delay. A zero delay must not touch the timer: Tokio's timer wheel
    /// would still make it wait up to a millisecond.
    async fn pause(&self) {
        if !self.delay.is_zero() {
            tokio::time::sleep(self.delay).await;
        }
    }

    fn count(&self) {
        if let Some(c) = &self.counters {
            c.s3.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    }

    /// Reads `location` until its body is whole (s3rver overwrites in place, so a read
    /// racing a write can get part of one), at most [`TORN_READ_ATTEMPTS`] times.
    async fn whole_read(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            let result = self.inner.get_opts(location, options.clone()).await?;
            let (meta, range, attributes, extensions) = (
                result.meta.clone(),
                result.range.clone(),
                result.attributes.clone(),
                result.extensions.clone(),
            );
            let body = result.bytes().await;
            let torn = match &body {
                Ok(body) => !is_whole(body, meta.e_tag.as_deref().unwrap_or_default()),
                Err(_) => true,
            };
            match body {
                Ok(body) if !torn => {
                    let payload = futures::stream::once(async move { Ok(body) });
                    return Ok(GetResult {
                        payload: GetResultPayload::Stream(Box::pin(payload)),
                        meta,
                        range,
                        attributes,
                        extensions,
                    });
                }
                _ if pause_after_torn_read(attempt).await => {
                    eprintln!("retrying a torn read of {location}");
                }
                Ok(_) => {
                    return Err(object_store::Error::Generic {
                        store: "ScriptedStore",
                        source: format!(
                            "{location}: body torn {TORN_READ_ATTEMPTS} times in a row"
                        )
                        .into(),
                    });
                }
                Err(e) => return Err(e),
            }
        }
    }
}

/// Reads of one object [`ScriptedStore::whole_read`] tries before giving up.
pub const TORN_READ_ATTEMPTS: u32 = 40;

/// After torn (or failed) read number `attempt` of one object on s3rver: whether to read
/// again, after a pause that grows with the attempts (back to back, a loaded machine can
/// meet the same overwrite in progress again and again).
pub async fn pause_after_torn_read(attempt: u32) -> bool {
    if attempt >= TORN_READ_ATTEMPTS {
        return false;
    }
    tokio::time::sleep(std::time::Duration::from_millis(2 * u64::from(attempt))).await;
    true
}

impl std::fmt::Display for ScriptedStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ScriptedStore({})", self.inner)
    }
}

#[async_trait]
impl ObjectStore for ScriptedStore {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> Result<PutResult> {
        self.count();
        self.may_write(location)?;
        if matches!(opts.mode, PutMode::Create)
            && self
                .refuse_next_create
                .swap(false, std::sync::atomic::Ordering::SeqCst)
        {
            return Err(object_store::Error::AlreadyExists {
                path: location.to_string(),
                source: "409 ConditionalRequestConflict: a conflicting operation is in progress"
                    .into(),
            });
        }
        if self.refuse_every_update && matches!(opts.mode, PutMode::Update(_)) {
            return Err(object_store::Error::Precondition {
                path: location.to_string(),
                source: "412: this store refuses every If-Match".into(),
            });
        }
        self.pause().await;
        let before = self.write_before_next_put.lock().unwrap().take();
        if let Some(body) = before {
            object_store::ObjectStoreExt::put(&*self.inner, location, body.into()).await?;
        }
        match (&self.slow_puts, &self.counters) {
            (Some(delays), Some(counters)) => {
                let (inner, location) = (self.inner.clone(), location.clone());
                let put = async move { inner.put_opts(&location, payload, opts).await };
                counters.slowed(delays.clone(), put).await
            }
            _ => self.inner.put_opts(location, payload, opts).await,
        }
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> Result<Box<dyn MultipartUpload>> {
        self.count();
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        self.count();
        let stall = options
            .head
            .then(|| self.stall_next_head.lock().unwrap().take())
            .flatten();
        if let Some(stall) = stall {
            let answer = self.inner.get_opts(location, options).await;
            tokio::time::sleep(stall).await;
            return answer;
        }
        if self.retry_torn_reads && !options.head {
            self.whole_read(location, options).await
        } else {
            self.inner.get_opts(location, options).await
        }
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, Result<Path>>,
    ) -> BoxStream<'static, Result<Path>> {
        self.count();
        let Some(linger) = self.linger_deletes else {
            return self.inner.delete_stream(locations);
        };
        let (inner, lingering) = (self.inner.clone(), self.lingering.clone());
        Box::pin(futures::StreamExt::then(locations, move |location| {
            let (inner, lingering) = (inner.clone(), lingering.clone());
            async move {
                let location = location?;
                object_store::ObjectStoreExt::delete(&*inner, &location).await?;
                let (late, path) = (inner.clone(), location.clone());
                lingering.lock().unwrap().push(tokio::spawn(async move {
                    tokio::time::sleep(linger).await;
                    let _ = object_store::ObjectStoreExt::delete(&*late, &path).await;
                }));
                Ok(location)
            }
        }))
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        self.count();
        self.inner.list(prefix)
    }

    fn list_with_offset(
        &self,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> BoxStream<'static, Result<ObjectMeta>> {
        self.count();
        self.inner.list_with_offset(prefix, offset)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        self.count();
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> Result<()> {
        self.count();
        self.may_write(to)?;
        self.pause().await;
        self.inner.copy_opts(from, to, options).await
    }

    async fn rename_opts(&self, from: &Path, to: &Path, options: RenameOptions) -> Result<()> {
        self.count();
        self.inner.rename_opts(from, to, options).await
    }
}

/// Whether `body` is whole by s3rver's ETag, which is the MD5 of the content.
pub fn is_whole(body: &[u8], etag: &str) -> bool {
    let md5: String = md5::Md5::digest(body)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    etag.trim_matches('"') == md5
}

/// An object store in front of another whose puts and gets each wait a random few
/// milliseconds first, so that concurrent callers of a store that answers at once (such
/// as `InMemory`) really interleave. It notes how far they did: the most requests in
/// flight at once, and how many reads started while a put was in flight.
#[derive(Debug)]
pub struct LatentStore {
    pub inner: Arc<dyn ObjectStore>,
    /// The wait before each put and get, in ms.
    pub delays: std::ops::Range<u64>,
    in_flight: std::sync::atomic::AtomicUsize,
    puts_in_flight: std::sync::atomic::AtomicUsize,
    /// The most puts and gets in flight at once.
    pub max_in_flight: std::sync::atomic::AtomicUsize,
    /// Reads (not HEADs) that started while a put was in flight.
    pub reads_during_puts: std::sync::atomic::AtomicUsize,
}

/// Counts one request in flight for as long as it lives.
struct InFlight<'a>(&'a std::sync::atomic::AtomicUsize);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

impl LatentStore {
    pub fn new(inner: Arc<dyn ObjectStore>, delays: std::ops::Range<u64>) -> Self {
        Self {
            inner,
            delays,
            in_flight: Default::default(),
            puts_in_flight: Default::default(),
            max_in_flight: Default::default(),
            reads_during_puts: Default::default(),
        }
    }

    /// Waits the random delay, counted in flight (the returned guard keeps it counted).
    async fn enter(&self) -> InFlight<'_> {
        use std::sync::atomic::Ordering::SeqCst;
        let now = self.in_flight.fetch_add(1, SeqCst) + 1;
        self.max_in_flight.fetch_max(now, SeqCst);
        let guard = InFlight(&self.in_flight);
        tokio::time::sleep(Duration::from_millis(rand::random_range(
            self.delays.clone(),
        )))
        .await;
        guard
    }
}

impl std::fmt::Display for LatentStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "LatentStore({})", self.inner)
    }
}

#[async_trait]
impl ObjectStore for LatentStore {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> Result<PutResult> {
        self.puts_in_flight
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let _put = InFlight(&self.puts_in_flight);
        let _guard = self.enter().await;
        self.inner.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> Result<Box<dyn MultipartUpload>> {
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        use std::sync::atomic::Ordering::SeqCst;
        if !options.head && self.puts_in_flight.load(SeqCst) > 0 {
            self.reads_during_puts.fetch_add(1, SeqCst);
        }
        let _guard = self.enter().await;
        self.inner.get_opts(location, options).await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, Result<Path>>,
    ) -> BoxStream<'static, Result<Path>> {
        self.inner.delete_stream(locations)
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        self.inner.list(prefix)
    }

    fn list_with_offset(
        &self,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> BoxStream<'static, Result<ObjectMeta>> {
        self.inner.list_with_offset(prefix, offset)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> Result<()> {
        self.inner.copy_opts(from, to, options).await
    }

    async fn rename_opts(&self, from: &Path, to: &Path, options: RenameOptions) -> Result<()> {
        self.inner.rename_opts(from, to, options).await
    }
}
