//! [`CommitStore`]: the wrapper, written once and mounted for each `object_store` version
//! (by `store/v014.rs` and `store/v013.rs`, which name the crate `os`). Its parts:
//!
//! - here: the type, its settings, and the `ObjectStore` implementation, which sends every
//!   unconditional call straight through;
//! - `conditional`: a conditional write (put, copy, rename) through the lease protocol, or
//!   natively where the store enforces the condition;
//! - `refused`: what a leased write does when the store refuses its condition header;
//! - `probe`: which conditions the inner store enforces;
//! - `held`: deletes and renames with paths held;
//! - `multipart`: a multipart upload completed with a condition;
//! - `outcome`: the errors a conditional write reports, and [`may_have_applied`];
//! - `from_url`: `from_url_opts`, object_store 0.12's `parse_url_opts` with the lease table.

mod conditional;
mod from_url;
mod held;
mod multipart;
mod outcome;
mod probe;
mod refused;

pub use outcome::may_have_applied;

use std::ops::Range;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::BoxStream;
use os::path::Path;
use os::{
    CopyMode, CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta,
    ObjectStore, PutMode, PutMultipartOptions, PutOptions, PutPayload, PutResult, RenameOptions,
    Result,
};

// The mounting version's crate and what differs between versions.
use super::{credentials, os, put_result};
use crate::lease::{CREATE_ETAG, LeaseManager};
use crate::store::conditions::Conditions;
use crate::store::headers::{Headers, Probed};

#[doc = concat!(" The name this wrapper gives in `", os_name!(), "::Error::Generic`.")]
const STORE: &str = "dynacommit";

/// Wraps any `ObjectStore` so that its conditional writes are safe even where the store
/// itself ignores conditions (s3rver, some MinIO and Ceph versions) or lacks them (S3's
/// copy-if-not-exists).
///
/// `put_opts` with [`PutMode::Create`] or [`PutMode::Update`], `copy_opts` with
/// [`CopyMode::Create`] and `rename_opts` with [`RenameTargetMode::Create`](os::RenameTargetMode::Create) take a lease on
/// (path, expected ETag) first, check the precondition, and then write to the inner
/// store, the condition carried unless the store refuses its header; every other call
/// goes straight through, untouched.
///
/// Safe only if every writer of a path makes its conditional writes through the same lease
/// table (this wrapper, or object_store 0.12's `DynamoCommit` on the same DynamoDB table),
/// and no one writes those paths unconditionally. See `docs/protocol.md`.
///
/// ```
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// use std::sync::Arc;
#[doc = concat!(" use ", at!(), "::CommitStore;")]
/// use dynacommit::lease::{LeaseConfig, LeaseManager, MemoryLeaseTable};
#[doc = concat!(" use ", os_name!(), "::memory::InMemory;")]
#[doc = concat!(" use ", os_name!(), "::{ObjectStore, PutMode, path::Path};")]
///
/// let leases = LeaseManager::new(Arc::new(MemoryLeaseTable::new()), LeaseConfig::default())?;
/// let store = CommitStore::new(Arc::new(InMemory::new()), leases);
/// let path = Path::from("_log/00000000000000000000.json");
/// store.put_opts(&path, "commit 0".into(), PutMode::Create.into()).await?;
/// let again = store.put_opts(&path, "rival".into(), PutMode::Create.into()).await;
#[doc = concat!(" assert!(matches!(again, Err(", os_name!(), "::Error::AlreadyExists { .. })));")]
/// # Ok(()) }
/// ```
///
/// The inner store's type is a parameter (by default any `ObjectStore` behind a
/// `dyn`): with a concrete one, the wrapper also offers what it offers beside the trait
/// (`MultipartStore`, `Signer`, `PaginatedListStore`), passed straight through.
pub struct CommitStore<T: ?Sized = dyn ObjectStore> {
    inner: Arc<T>,
    leases: LeaseManager,
    /// Put before every path in the lease table (empty: the path alone, as 0.12.5 does).
    lease_prefix: String,
    /// Leases, native conditions, or a probe's choice between them.
    conditions: Conditions,
    /// What the last probe found, and when (shared by clones of the store's handle).
    probed: Arc<Probed>,
    /// Which condition headers the store refuses, learnt from its answers and the probe.
    headers: Arc<Headers>,
    /// Where the probe writes: `.dynacommit-probe/` under this prefix.
    probe_under: Path,
    /// This store's scope in its lease manager's queues (see `run_conditional`): its
    /// tasks' writes to one path learn from each other's successes, not from those of
    /// another store sharing the manager, whose paths may name other objects.
    scope: u64,
    /// Whether every guarded write and delete of a path holds one lease on the path until
    /// none of its attempts can still land ([`Self::hold_paths`]).
    hold_paths: bool,
}

impl<T: ObjectStore + ?Sized> CommitStore<T> {
    /// Wraps `inner`, coordinating its conditional writes through `leases`.
    pub fn new(inner: Arc<T>, leases: LeaseManager) -> Self {
        Self {
            inner,
            leases,
            lease_prefix: String::new(),
            conditions: Conditions::default(),
            probed: Arc::default(),
            headers: Arc::default(),
            probe_under: Path::default(),
            scope: crate::lease::new_scope(),
            hold_paths: false,
        }
    }

    /// Probes (see [`Self::enforced`]) under `prefix` instead of the store's root: for
    /// credentials allowed only a prefix of the bucket (an IAM policy for one table).
    /// [`Self::from_url_opts`] probes under the URL's path.
    ///
    /// ```
    /// # use std::sync::Arc;
    #[doc = concat!(" # use ", at!(), "::CommitStore; use dynacommit::lease::{LeaseConfig, LeaseManager, MemoryLeaseTable};")]
    #[doc = concat!(" # use ", os_name!(), "::path::Path;")]
    /// # let leases = LeaseManager::new(Arc::new(MemoryLeaseTable::new()), LeaseConfig::default()).unwrap();
    #[doc = concat!(" let store = CommitStore::new(Arc::new(", os_name!(), "::memory::InMemory::new()), leases)")]
    ///     .with_probe_path(Path::from("tables/events"));
    /// # let _ = store;
    /// ```
    pub fn with_probe_path(mut self, prefix: Path) -> Self {
        self.probe_under = prefix;
        self
    }

    /// Makes conditional writes as `conditions` says: through leases (the default), straight
    /// through the inner store, or as a one-time probe of the inner store finds best. See
    /// [`Conditions`] for when each is safe.
    ///
    /// ```
    /// # use std::sync::Arc;
    #[doc = concat!(" # use ", at!(), "::CommitStore; use dynacommit::lease::{LeaseConfig, LeaseManager, MemoryLeaseTable};")]
    /// use dynacommit::Conditions;
    /// # let leases = LeaseManager::new(Arc::new(MemoryLeaseTable::new()), LeaseConfig::default()).unwrap();
    #[doc = concat!(" let store = CommitStore::new(Arc::new(", os_name!(), "::memory::InMemory::new()), leases)")]
    ///     .with_conditions(Conditions::Auto);
    /// # let _ = store;
    /// ```
    pub fn with_conditions(mut self, conditions: Conditions) -> Self {
        self.conditions = conditions;
        self
    }

    /// How conditional writes are made.
    pub fn conditions(&self) -> Conditions {
        self.conditions
    }

    /// Keys this store's leases by `prefix` followed by the object path, so that stores of
    /// different buckets can share one table without contending on equal paths (by default
    /// the key is the path alone, as in object_store 0.12.5). Every writer of a bucket must
    /// use the same prefix, and a fleet that includes 0.12.5 writers must use none.
    ///
    /// ```
    /// # use std::sync::Arc;
    #[doc = concat!(" # use ", at!(), "::CommitStore; use dynacommit::lease::{LeaseConfig, LeaseManager, MemoryLeaseTable};")]
    /// # let leases = LeaseManager::new(Arc::new(MemoryLeaseTable::new()), LeaseConfig::default()).unwrap();
    #[doc = concat!(" let store = CommitStore::new(Arc::new(", os_name!(), "::memory::InMemory::new()), leases)")]
    ///     .with_lease_prefix("s3://lake/");
    /// # let _ = store;
    /// ```
    pub fn with_lease_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.lease_prefix = prefix.into();
        self
    }

    /// Holds each path, not only each version of it, while a write or a delete of it may
    /// still land: every guarded write of a path (create, update, copy or rename to it)
    /// and every delete through this store takes one lease on the path, and releases it
    /// only once `timeout x skew` has passed since its last write (in the background), when
    /// every request sent under it has landed. An object store client retries a write or a
    /// delete whose answer did not come, and an earlier attempt can still land after the call
    /// returned: by default a delete lingering so can remove a path created again
    /// meanwhile (two holders of a lock object), and a write applied twice can land on
    /// an update made in between (on a store that ignores conditions). Held, nobody
    /// writes the path until every attempt has landed.
    ///
    /// The price: the next write or delete of a path, by anyone, waits until then, up to
    /// `timeout x skew` after the last (60 s by default: choose a short lease timeout for
    /// such paths, above the store's longest request); if the holder's process ends first,
    /// until the record expires. Every writer of the paths must hold them (one lease per
    /// path, where the others key by version), no object_store 0.12.5 writer may share
    /// them, and nothing goes native. A rename holds both its paths.
    ///
    /// ```
    /// # use std::sync::Arc;
    #[doc = concat!(" # use ", at!(), "::CommitStore; use dynacommit::lease::{LeaseConfig, LeaseManager, MemoryLeaseTable};")]
    /// # let leases = LeaseManager::new(Arc::new(MemoryLeaseTable::new()), LeaseConfig::default()).unwrap();
    #[doc = concat!(" let store = CommitStore::new(Arc::new(", os_name!(), "::memory::InMemory::new()), leases)")]
    ///     .hold_paths();
    /// # let _ = store;
    /// ```
    pub fn hold_paths(mut self) -> Self {
        self.hold_paths = true;
        self
    }

    /// The wrapped store.
    pub fn inner(&self) -> &Arc<T> {
        &self.inner
    }

    /// The lease manager.
    pub fn leases(&self) -> &LeaseManager {
        &self.leases
    }

    /// The same store over `dyn ObjectStore`, for code that names the plain
    /// [`CommitStore`] type.
    pub fn into_dyn(self) -> CommitStore
    where
        T: Sized,
    {
        CommitStore {
            inner: self.inner,
            leases: self.leases,
            lease_prefix: self.lease_prefix,
            conditions: self.conditions,
            probed: self.probed,
            headers: self.headers,
            probe_under: self.probe_under,
            scope: self.scope,
            hold_paths: self.hold_paths,
        }
    }
}

/// How many deletes of a held store's `delete_stream` go at once.
const HELD_DELETES_AT_ONCE: usize = 10;

/// The lease table's key for `path`: the store's prefix, then the path.
fn lease_key(prefix: &str, path: &Path) -> String {
    format!("{prefix}{path}")
}

/// The error of an update that names no ETag to expect.
fn no_etag_to_update() -> os::Error {
    os::Error::Generic {
        store: STORE,
        source: "PutMode::Update needs an e_tag: pass the UpdateVersion from the PutResult or \
                 ObjectMeta of the version you read"
            .into(),
    }
}

/// The ETag a put left.
fn etag_of(put: &os::PutResult) -> Option<String> {
    put.e_tag.clone()
}

impl<T: ObjectStore + ?Sized> std::fmt::Display for CommitStore<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "CommitStore({}, {})",
            self.inner,
            self.leases.table().describe()
        )
    }
}

// The inner store's Debug output is not ours to trust with secrets: show its Display.
impl<T: ObjectStore + ?Sized> std::fmt::Debug for CommitStore<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CommitStore")
            .field("inner", &format_args!("{}", self.inner))
            .field("leases", &self.leases)
            .field("lease_prefix", &self.lease_prefix)
            .field("conditions", &self.conditions)
            .field("hold_paths", &self.hold_paths)
            .field("enforced", &self.probed.last())
            .finish()
    }
}

#[async_trait]
#[deny(clippy::missing_trait_methods)]
impl<T: ObjectStore + ?Sized> ObjectStore for CommitStore<T> {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        mut opts: PutOptions,
    ) -> Result<PutResult> {
        // The inner write is a plain one (the default mode, Overwrite) with every other
        // option kept; the mode decides what guards it.
        let mode = std::mem::take(&mut opts.mode);
        match mode {
            PutMode::Overwrite => self.inner.put_opts(location, payload, opts).await,
            PutMode::Create => {
                if self.native().await? {
                    opts.mode = PutMode::Create;
                    return self.native_put(location, payload, opts).await;
                }
                let write = || self.put_under_lease(location, payload, opts, PutMode::Create);
                let check = || self.check_absent(location);
                self.guarded(location, CREATE_ETAG, check, Some(etag_of), write)
                    .await
            }
            PutMode::Update(version) => {
                if self.native().await? {
                    opts.mode = self.in_store_form(PutMode::Update(version));
                    return self.native_put(location, payload, opts).await;
                }
                let Some(etag) = version.e_tag.clone() else {
                    return Err(no_etag_to_update());
                };
                let mode = PutMode::Update(version);
                let write = || self.put_under_lease(location, payload, opts, mode);
                let check = || self.check_etag(location, &etag);
                self.guarded(location, &etag, check, Some(etag_of), write)
                    .await
            }
        }
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> Result<Box<dyn MultipartUpload>> {
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        self.inner.get_opts(location, options).await
    }

    async fn get_ranges(&self, location: &Path, ranges: &[Range<u64>]) -> Result<Vec<Bytes>> {
        self.inner.get_ranges(location, ranges).await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, Result<Path>>,
    ) -> BoxStream<'static, Result<Path>> {
        use futures::StreamExt;
        if self.hold_paths {
            // Each path under its own lease, several at a time (each may wait out the last
            // write's lease), answered in the order asked; renewed only while the stream
            // is polled, as any guarded call only while it is awaited: read it to its
            // end, as `try_collect` does.
            let store = Arc::new(self.shared());
            return locations
                .map(move |location| {
                    let store = store.clone();
                    async move { store.held_delete(location?).await }
                })
                .buffered(HELD_DELETES_AT_ONCE)
                .boxed();
        }
        // A deleted object's create lease, kept unreleased since the create, goes now (in
        // the background), so that the path can be created again at once.
        let (leases, prefix) = (self.leases.clone(), self.lease_prefix.clone());
        self.inner
            .delete_stream(locations)
            .inspect(move |deleted| {
                if let Ok(path) = deleted {
                    leases.release_deferred(&lease_key(&prefix, path));
                }
            })
            .boxed()
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
        match options.mode {
            CopyMode::Overwrite => self.inner.copy_opts(from, to, options).await,
            CopyMode::Create => {
                if self.native().await? {
                    return self.inner.copy_opts(from, to, options).await;
                }
                let write = || self.copy_under_lease(from, to, options, None);
                let check = || self.check_copy_target(from, to);
                self.guarded(to, CREATE_ETAG, check, None, write).await
            }
        }
    }

    async fn rename_opts(&self, from: &Path, to: &Path, options: RenameOptions) -> Result<()> {
        if self.hold_paths {
            return self.held_rename(from, to, options).await;
        }
        self.rename_guarded(from, to, options).await?;
        // The source is gone: its create lease, if kept, goes too.
        self.leases
            .release_deferred(&lease_key(&self.lease_prefix, from));
        Ok(())
    }
}
