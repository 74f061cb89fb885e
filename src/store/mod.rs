//! [`CommitStore`]: an `ObjectStore` whose conditional writes are made safe by leases.
//!
//! The wrapper exists once in source and is compiled for each `object_store` version
//! dynacommit supports: 0.14 here ([`CommitStore`]), 0.13 in [`v013`](crate::v013) with
//! the `object-store-013` feature. The two traits have the same shape; only the crate
//! their types come from differs, so one macro body serves both, and the lease protocol
//! itself lives in [`LeaseManager::run_guarded`](crate::lease::LeaseManager::run_guarded).

pub(crate) mod conditions;
pub(crate) mod headers;
pub(crate) mod options;

pub use conditions::{Conditions, Enforced};
pub use options::FromOptionsError;

/// The mark [`may_have_applied`] looks for: a write that was sent and whose outcome is
/// unknown.
#[derive(Debug, thiserror::Error)]
#[error("{source} (the write may or may not have been applied)")]
pub(crate) struct OutcomeUnknown {
    pub(crate) source: Box<dyn std::error::Error + Send + Sync + 'static>,
}

/// The `CommitStore` type, its `ObjectStore` implementation and `may_have_applied`, for
/// the `object_store` crate named `$os`, at the path `$at` in docs.
macro_rules! commit_store {
    ($os:ident, $at:literal, $credentials:path) => {
use std::ops::Range;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::BoxStream;
use $os::path::Path;
use $os::{
    CopyMode, CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta,
    ObjectStore, ObjectStoreExt, PutMode, PutMultipartOptions, PutOptions, PutPayload, PutResult,
    RenameOptions, RenameTargetMode, Result,
};
use tracing::Instrument;

use crate::lease::{
    Beaten, CREATE_ETAG, Ending, GuardError, LeaseEnd, LeaseError, LeaseManager, PlantedBug,
};
use crate::store::OutcomeUnknown;
use crate::store::conditions::{Conditions, Enforced};
use crate::store::headers::{Header, Headers, Probe, Probed};

#[doc = concat!(" The name this wrapper gives in `", stringify!($os), "::Error::Generic`.")]
const STORE: &str = "dynacommit";

/// Wraps any `ObjectStore` so that its conditional writes are safe even where the store
/// itself ignores conditions (s3rver, some MinIO and Ceph versions) or lacks them (S3's
/// copy-if-not-exists).
///
/// `put_opts` with [`PutMode::Create`] or [`PutMode::Update`], `copy_opts` with
/// [`CopyMode::Create`] and `rename_opts` with [`RenameTargetMode::Create`] take a lease on
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
#[doc = concat!(" use ", $at, "::CommitStore;")]
/// use dynacommit::lease::{LeaseConfig, LeaseManager, MemoryLeaseTable};
#[doc = concat!(" use ", stringify!($os), "::memory::InMemory;")]
#[doc = concat!(" use ", stringify!($os), "::{ObjectStore, PutMode, path::Path};")]
///
/// let leases = LeaseManager::new(Arc::new(MemoryLeaseTable::new()), LeaseConfig::default())?;
/// let store = CommitStore::new(Arc::new(InMemory::new()), leases);
/// let path = Path::from("_log/00000000000000000000.json");
/// store.put_opts(&path, "commit 0".into(), PutMode::Create.into()).await?;
/// let again = store.put_opts(&path, "rival".into(), PutMode::Create.into()).await;
#[doc = concat!(" assert!(matches!(again, Err(", stringify!($os), "::Error::AlreadyExists { .. })));")]
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
    #[doc = concat!(" # use ", $at, "::CommitStore; use dynacommit::lease::{LeaseConfig, LeaseManager, MemoryLeaseTable};")]
    #[doc = concat!(" # use ", stringify!($os), "::path::Path;")]
    /// # let leases = LeaseManager::new(Arc::new(MemoryLeaseTable::new()), LeaseConfig::default()).unwrap();
    #[doc = concat!(" let store = CommitStore::new(Arc::new(", stringify!($os), "::memory::InMemory::new()), leases)")]
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
    #[doc = concat!(" # use ", $at, "::CommitStore; use dynacommit::lease::{LeaseConfig, LeaseManager, MemoryLeaseTable};")]
    /// use dynacommit::Conditions;
    /// # let leases = LeaseManager::new(Arc::new(MemoryLeaseTable::new()), LeaseConfig::default()).unwrap();
    #[doc = concat!(" let store = CommitStore::new(Arc::new(", stringify!($os), "::memory::InMemory::new()), leases)")]
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

    /// Which conditions the inner store enforces, probed (under `.dynacommit-probe/` at
    /// the root or [the probe path](Self::with_probe_path), removed afterwards) and
    /// remembered for ten minutes, then probed again (a store upgraded or reconfigured
    /// under a running process is noticed; so is an answer that contradicts the last
    /// probe, which forgets it): what [`Conditions::Auto`] decides by, and worth logging at
    /// start-up. A failed first probe is an error and is tried again next time (a failed
    /// re-probe leaves the last findings standing); a store that refuses a header
    /// (answers it with 400, 403, 405, 412 or 501 where the plain write succeeds) does
    /// not enforce it.
    ///
    /// ```
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// # use std::sync::Arc;
    #[doc = concat!(" # use ", $at, "::CommitStore; use dynacommit::lease::{LeaseConfig, LeaseManager, MemoryLeaseTable};")]
    /// # let leases = LeaseManager::new(Arc::new(MemoryLeaseTable::new()), LeaseConfig::default())?;
    #[doc = concat!(" let store = CommitStore::new(Arc::new(", stringify!($os), "::memory::InMemory::new()), leases);")]
    /// let enforced = store.enforced().await?;
    /// assert!(enforced.create && enforced.update); // InMemory enforces both
    /// # Ok(()) }
    /// ```
    pub async fn enforced(&self) -> Result<Enforced> {
        self.probed_now().await.map(|probe| probe.enforced)
    }

    /// The probe's findings, probing again if they are older than ten minutes or were
    /// forgotten. A re-probe that fails after ten minutes leaves the last findings in
    /// force (with a warning); a failed first probe, or one after a contradiction, is an
    /// error.
    async fn probed_now(&self) -> Result<Probe> {
        if let Some(probe) = self.probed.fresh() {
            return Ok(probe);
        }
        self.probe_in_turn(None).await
    }

    /// Findings of a probe that started at `since` or later (another task's will do), for
    /// a write whose header was refused at `since`: a failure is an error, never older
    /// findings.
    async fn probed_after(&self, since: tokio::time::Instant) -> Result<Probe> {
        self.probe_in_turn(Some(since)).await
    }

    /// Probes in this store's turn, unless fresh findings (made since `since`, if given)
    /// came meanwhile.
    async fn probe_in_turn(&self, since: Option<tokio::time::Instant>) -> Result<Probe> {
        let _turn = self.probed.turn().await;
        let usable = match since {
            None => self.probed.fresh(),
            Some(since) => self.probed.fresh_since(since),
        };
        if let Some(probe) = usable {
            return Ok(probe);
        }
        let (started, epoch) = (tokio::time::Instant::now(), self.probed.epoch());
        match self.probe().await {
            Ok(probe) => {
                self.headers.learn(&probe);
                self.probed.keep(probe, started, epoch);
                Ok(probe)
            }
            Err(e) => match since.is_none().then(|| self.probed.retry_later(epoch)).flatten() {
                Some(last) => {
                    tracing::warn!(store = %self.inner, error = %e, "probing the store again failed: its last findings stand");
                    Ok(last)
                }
                None => Err(e),
            },
        }
    }

    /// Whether conditional writes go to the inner store with their conditions, without a
    /// lease. All or none: were creates native and copies leased (S3 enforces
    /// `If-None-Match` but has no copy-if-not-exists), a native create and a leased copy
    /// to one path would not exclude each other, and the copy could land on the create.
    async fn native(&self) -> Result<bool> {
        if self.hold_paths {
            // A native write holds nothing: a delete of ours still landing could remove it.
            return Ok(false);
        }
        match self.conditions {
            Conditions::Lease => Ok(false),
            Conditions::Native => Ok(true),
            Conditions::Auto => Ok(self.enforced().await? == Enforced::ALL),
        }
    }

    /// Whether a write under a lease carries `header`: in every mode, unless the store
    /// was lately found to refuse it (`headers.rs`). On a store that enforces it, a
    /// leased write then cannot land on a commit made without a lease (a native writer's,
    /// a plain client's); on one that ignores it, it costs nothing.
    fn carries(&self, header: Header) -> bool {
        !self.leases.planted(PlantedBug::PlainWriteUnderLease) && self.headers.carries(header)
    }

    /// `mode` as the store takes it: `If-Match` names the ETag unquoted where the store
    /// honours only that form.
    fn in_store_form(&self, mode: PutMode) -> PutMode {
        match mode {
            PutMode::Update(version) if self.headers.unquoted() => {
                PutMode::Update($os::UpdateVersion {
                    e_tag: version
                        .e_tag
                        .map(|e| crate::lease::bare_etag(&e).to_owned()),
                    version: version.version,
                })
            }
            other => other,
        }
    }

    /// A put whose condition the store enforces itself, without a lease. An answer
    /// refusing the header contradicts the probe: it is forgotten, so the next write
    /// probes again (and leases, if the store no longer enforces).
    async fn native_put(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> Result<PutResult> {
        let put = self.inner.put_opts(location, payload, opts).await;
        if let Err(e) = &put
            && Self::refuses_header(e)
        {
            self.probed.forget();
        }
        put
    }

    /// The probe behind [`Self::enforced`].
    async fn probe(&self) -> Result<Probe> {
        use $os::Error as E;
        let dir = self
            .probe_under
            .clone()
            .join(".dynacommit-probe")
            .join(format!("{:016x}", rand::random::<u64>()));
        let (object, copy) = (dir.clone().join("object"), dir.join("copy"));
        let body = || PutPayload::from_static(b"dynacommit probe");
        // An answer refusing the header, not the write: on the probe's fresh key a failed
        // condition is no answer either (a store answering `If-None-Match` on an absent
        // object with 412 does not enforce it). The store is then known to take plain
        // writes before the condition counts as refused.
        let refusal = |e: &E| {
            matches!(
                e,
                E::NotImplemented { .. }
                    | E::NotSupported { .. }
                    | E::AlreadyExists { .. }
                    | E::Precondition { .. }
                    | E::PermissionDenied { .. }
            ) || crate::store::headers::status_in(e)
                .is_some_and(|s| matches!(s, 400 | 403 | 405 | 412 | 501))
        };
        let update_to = |e_tag: String, version: Option<String>| {
            PutMode::Update($os::UpdateVersion {
                e_tag: Some(e_tag),
                version,
            })
        };
        let found = async {
            // Create: on a fresh key the first must be applied, the second refused.
            let (create_accepted, create) =
                match self.inner.put_opts(&object, body(), PutMode::Create.into()).await {
                    Ok(_) => (
                        true,
                        matches!(
                            self.inner.put_opts(&object, body(), PutMode::Create.into()).await,
                            Err(E::AlreadyExists { .. })
                        ),
                    ),
                    // Refused on a fresh key, unless the object is there after all: a first
                    // attempt that landed and was answered 5xx, then refused on the
                    // client's retry, or a 409 answering a race.
                    Err(e) if refusal(&e) => match self.inner.head(&object).await {
                        Ok(_) => (
                            true,
                            matches!(
                                self.inner.put_opts(&object, body(), PutMode::Create.into()).await,
                                Err(E::AlreadyExists { .. })
                            ),
                        ),
                        Err(E::NotFound { .. }) => {
                            self.inner.put(&object, body()).await?;
                            (false, false)
                        }
                        Err(e) => return Err(e),
                    },
                    Err(e) => return Err(e),
                };
            // Update: one naming the object's own version must be applied (a store
            // refusing every `If-Match` would otherwise read as enforcing, and `auto`
            // would fail every update), in the ETag's form as given or else unquoted
            // (DigitalOcean Spaces honours only that), and one naming another ETag, in
            // the same form, refused. Without an ETag an update cannot name a version.
            let meta = self.inner.head(&object).await?;
            let mut unquoted = false;
            let mut update_accepted = false;
            let update = match meta.e_tag.clone() {
                None => false,
                Some(etag) => {
                    let bare = crate::lease::bare_etag(&etag).to_owned();
                    let mut applied = false;
                    for (form, bare_form) in [(etag.clone(), false), (bare.clone(), true)] {
                        if bare_form && bare == etag {
                            break;
                        }
                        let own = update_to(form, meta.version.clone());
                        match self.inner.put_opts(&object, body(), own.into()).await {
                            Ok(_) => {
                                applied = true;
                                update_accepted = true;
                                unquoted = bare_form;
                                break;
                            }
                            Err(e) if refusal(&e) => {}
                            Err(e) => return Err(e),
                        }
                    }
                    let mismatch = if unquoted {
                        "dynacommit-probe-mismatch"
                    } else {
                        "\"dynacommit-probe-mismatch\""
                    };
                    let elsewhere = update_to(mismatch.into(), None);
                    applied
                        && match self.inner.put_opts(&object, body(), elsewhere.into()).await {
                            Err(E::Precondition { .. }) => true,
                            Ok(_) => false,
                            Err(e) if refusal(&e) => false,
                            Err(e) => return Err(e),
                        }
                }
            };
            let if_absent = || CopyOptions::new().with_mode(CopyMode::Create);
            let (copy_accepted, copied) =
                match self.inner.copy_opts(&object, &copy, if_absent()).await {
                    Ok(()) => (
                        true,
                        matches!(
                            self.inner.copy_opts(&object, &copy, if_absent()).await,
                            Err(E::AlreadyExists { .. })
                        ),
                    ),
                    Err(e) if refusal(&e) => (false, false),
                    Err(e) => return Err(e),
                };
            Ok(Probe {
                enforced: Enforced {
                    create,
                    update,
                    copy: copied,
                },
                accepted: Enforced {
                    create: create_accepted,
                    update: update_accepted,
                    copy: copy_accepted,
                },
                unquoted,
            })
        }
        .await;
        for path in [&object, &copy] {
            match self.inner.delete(path).await {
                Ok(()) | Err(E::NotFound { .. }) => {}
                Err(e) => tracing::warn!(%path, error = %e, "could not remove a probe object"),
            }
        }
        let probe = found?;
        tracing::info!(
            store = %self.inner,
            enforced = %probe.enforced,
            if_match_unquoted = probe.unquoted,
            "probed the inner store's conditional writes"
        );
        Ok(probe)
    }

    /// Whether `e` refuses a condition header (nothing written), not the write.
    fn refuses_header(e: &$os::Error) -> bool {
        use $os::Error as E;
        matches!(e, E::NotImplemented { .. } | E::NotSupported { .. })
            || crate::store::headers::refuses_a_header(e)
    }

    /// A put under a lease, carrying `mode` (the condition the lease guards) unless the
    /// store refuses its header. A refusal of the header (nothing written) is remembered
    /// and the write sent plain, as object_store 0.12.5's always is.
    async fn put_under_lease(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
        mode: PutMode,
    ) -> Result<PutResult> {
        use $os::Error as E;
        let header = match &mode {
            PutMode::Create => Header::IfNoneMatch,
            PutMode::Update(_) => Header::IfMatch,
            PutMode::Overwrite => return self.inner.put_opts(location, payload, opts).await,
        };
        if !self.carries(header) {
            return self.inner.put_opts(location, payload, opts).await;
        }
        let conditional = PutOptions {
            mode: self.in_store_form(mode.clone()),
            ..opts.clone()
        };
        let sent_at = tokio::time::Instant::now();
        match self.inner.put_opts(location, payload.clone(), conditional).await {
            Err(E::AlreadyExists { .. } | E::Precondition { .. }) => {
                self.after_refusal(location, payload, opts, mode, header, sent_at)
                    .await
            }
            Err(e) if Self::refuses_header(&e) => {
                let holds = async {
                    matches!(
                        self.refused_over(location, &payload, &mode).await,
                        Refused::ConditionHolds
                    )
                };
                // Nothing is sent unless it is polled, whatever the inner store's `put_opts`
                // does when called.
                let plain = async { self.inner.put_opts(location, payload.clone(), opts).await };
                self.plain_after_refused_header(e, header, sent_at, holds, plain)
                    .await
            }
            other => other,
        }
    }

    /// A leased put carrying `mode` was refused. Under our lease no protocol writer
    /// touches the path, so the refusal is an earlier attempt of this very write (the
    /// client retried after an answer was lost), a writer without a lease (a native one,
    /// a plain client), a race the store answers so (AWS answers a create racing a delete
    /// of the key with 409), or a store that answers the header wrongly (for an update,
    /// one that honours `If-Match` only with the ETag unquoted): the object tells which.
    ///
    /// - Our bytes: our success.
    /// - The condition still holding (a create's object absent, an update's at the ETag
    ///   named): the write goes once more, still conditional (an update sent quoted goes
    ///   unquoted, for DigitalOcean Spaces), which is always safe. Refused again with the
    ///   condition still holding, a probe on a fresh key settles whether the store
    ///   refuses the header (403 or 412 to every conditional write); if it does, and the
    ///   condition still holds, this one write goes plain. Only this one: the next carry
    ///   the header again, so a probe misled by a fault costs at most one plain write.
    /// - Anything else: an error marked as possibly applied, not `AlreadyExists`: a caller
    ///   must not read it as a version taken by a rival in the protocol and commit the same
    ///   change again elsewhere (an earlier attempt of ours may have landed and been
    ///   replaced).
    async fn after_refusal(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
        mode: PutMode,
        header: Header,
        sent_at: tokio::time::Instant,
    ) -> Result<PutResult> {
        use $os::Error as E;
        let refused = || E::Generic {
            store: STORE,
            source: format!(
                "{location}: the store refused the write made under the lease (a writer \
                 without a lease, such as one in native mode or a plain client, changed the \
                 object, or an earlier attempt of this write landed and was since replaced)"
            )
            .into(),
        };
        let mut sent = self.in_store_form(mode.clone());
        for resent in [false, true] {
            match self.refused_over(location, &payload, &mode).await {
                Refused::Ours(result) => return Ok(result),
                Refused::Elsewhere => return Err(refused()),
                Refused::ConditionHolds if resent => break,
                Refused::ConditionHolds => {}
            }
            let again = match &sent {
                PutMode::Update(version) => PutMode::Update($os::UpdateVersion {
                    e_tag: version
                        .e_tag
                        .as_deref()
                        .map(|e| crate::lease::bare_etag(e).to_owned()),
                    version: version.version.clone(),
                }),
                other => other.clone(),
            };
            let conditional = PutOptions {
                mode: again.clone(),
                ..opts.clone()
            };
            match self.inner.put_opts(location, payload.clone(), conditional).await {
                Err(E::AlreadyExists { .. } | E::Precondition { .. }) => sent = again,
                // A success, or a failure that may have applied: the caller marks it.
                other => return other,
            }
        }
        if let Ok(probe) = self.probed_after(sent_at).await
            && !probe.accepts(header)
            && matches!(
                self.refused_over(location, &payload, &mode).await,
                Refused::ConditionHolds
            )
        {
            tracing::warn!(
                store = %self.inner,
                %location,
                ?header,
                "the store refuses the condition header though its condition holds: this \
                 write goes plain under the lease"
            );
            return self.inner.put_opts(location, payload, opts).await;
        }
        Err(refused())
    }

    /// What a refused leased put `mode` of `payload` at `location` finds there now.
    async fn refused_over(&self, location: &Path, payload: &PutPayload, mode: &PutMode) -> Refused {
        match self.inner.get(location).await {
            Ok(found) => {
                let now = found.meta.e_tag.clone();
                if let Some(result) = Self::holds(found, payload).await {
                    return Refused::Ours(result);
                }
                match (mode, &now) {
                    (PutMode::Update(version), Some(now))
                        if version
                            .e_tag
                            .as_deref()
                            .is_some_and(|expected| crate::lease::same_etag(expected, now)) =>
                    {
                        Refused::ConditionHolds
                    }
                    _ => Refused::Elsewhere,
                }
            }
            Err($os::Error::NotFound { .. }) if matches!(mode, PutMode::Create) => {
                Refused::ConditionHolds
            }
            Err(_) => Refused::Elsewhere,
        }
    }

    /// A leased write sent at `sent_at` carrying `header`, refused with `e` (nothing
    /// written), goes `plain` if the refusal is the header's: at once where the client
    /// itself refused it; after a store's 501 only once a probe started since finds the
    /// store refusing the header (a 501 may answer another option of the write) and the
    /// condition, read again after the probe, `holds`. Otherwise `e` stands. The refusal
    /// is remembered only once the plain write went through: a client's refusal of another
    /// option (attributes on a local directory) refuses that too.
    async fn plain_after_refused_header<R>(
        &self,
        e: $os::Error,
        header: Header,
        sent_at: tokio::time::Instant,
        holds: impl std::future::Future<Output = bool>,
        plain: impl std::future::Future<Output = Result<R>>,
    ) -> Result<R> {
        if !Self::refused_by_client(&e)
            && !(self
                .probed_after(sent_at)
                .await
                .is_ok_and(|probe| !probe.accepts(header))
                && holds.await)
        {
            return Err(e);
        }
        let plain = plain.await;
        if plain.is_ok() {
            self.headers.refused(header);
        }
        plain
    }

    /// Whether the client itself refused the header (it cannot send it: object_store's
    /// `S3ConditionalPut::Disabled`, an `AmazonS3` without `copy_if_not_exists`, a local
    /// directory's updates): nothing was sent.
    fn refused_by_client(e: &$os::Error) -> bool {
        matches!(
            e,
            $os::Error::NotImplemented { .. } | $os::Error::NotSupported { .. }
        )
    }

    /// `found` as a `PutResult`, if it holds exactly `payload`.
    async fn holds(found: GetResult, payload: &PutPayload) -> Option<PutResult> {
        if found.meta.size != payload.content_length() as u64 {
            return None;
        }
        let (e_tag, version) = (found.meta.e_tag.clone(), found.meta.version.clone());
        let stored = found.bytes().await.ok()?;
        let ours: Vec<u8> = payload.iter().flat_map(|chunk| chunk.iter().copied()).collect();
        (stored.as_ref() == ours.as_slice()).then(|| put_result(e_tag, version))
    }

    /// A copy (or, given `rename`'s options, a rename) under a lease, carrying
    /// copy-if-not-exists unless the store refuses it. A refusal whose target holds the
    /// source's version (same ETag and size) is an earlier attempt of ours; another is a
    /// writer without a lease, and an error that is not `AlreadyExists`.
    async fn copy_under_lease(
        &self,
        from: &Path,
        to: &Path,
        copy: CopyOptions,
        rename: Option<RenameOptions>,
    ) -> Result<()> {
        use $os::Error as E;
        // The caller's options, with only the target mode changed.
        let send = |if_absent: bool| {
            let (copy, rename) = (copy.clone(), rename.clone());
            async move {
                match rename {
                    Some(options) => {
                        let target_mode = if if_absent {
                            RenameTargetMode::Create
                        } else {
                            RenameTargetMode::Overwrite
                        };
                        let options = RenameOptions {
                            target_mode,
                            ..options
                        };
                        self.inner.rename_opts(from, to, options).await
                    }
                    None => {
                        let mode = if if_absent {
                            CopyMode::Create
                        } else {
                            CopyMode::Overwrite
                        };
                        self.inner
                            .copy_opts(from, to, CopyOptions { mode, ..copy })
                            .await
                    }
                }
            }
        };
        if !self.carries(Header::CopyIfAbsent) {
            return send(false).await;
        }
        let sent_at = tokio::time::Instant::now();
        match send(true).await {
            Err(E::AlreadyExists { .. }) => {
                if let (Ok(source), Ok(target)) =
                    (self.inner.head(from).await, self.inner.head(to).await)
                    && source.size == target.size
                    && source
                        .e_tag
                        .as_deref()
                        .zip(target.e_tag.as_deref())
                        .is_some_and(|(a, b)| crate::lease::same_etag(a, b))
                {
                    if rename.is_some() {
                        self.inner.delete(from).await?;
                    }
                    return Ok(());
                }
                Err(E::Generic {
                    store: STORE,
                    source: format!(
                        "{to}: the store refused the copy made under the lease (a writer \
                         without a lease, such as one in native mode or a plain client, \
                         created the target)"
                    )
                    .into(),
                })
            }
            Err(e) if Self::refuses_header(&e) => {
                let holds = async { self.check_copy_target(from, to).await.is_ok() };
                self.plain_after_refused_header(e, Header::CopyIfAbsent, sent_at, holds, send(false))
                    .await
            }
            other => other,
        }
    }

    /// Keys this store's leases by `prefix` followed by the object path, so that stores of
    /// different buckets can share one table without contending on equal paths (by default
    /// the key is the path alone, as in object_store 0.12.5). Every writer of a bucket must
    /// use the same prefix, and a fleet that includes 0.12.5 writers must use none.
    ///
    /// ```
    /// # use std::sync::Arc;
    #[doc = concat!(" # use ", $at, "::CommitStore; use dynacommit::lease::{LeaseConfig, LeaseManager, MemoryLeaseTable};")]
    /// # let leases = LeaseManager::new(Arc::new(MemoryLeaseTable::new()), LeaseConfig::default()).unwrap();
    #[doc = concat!(" let store = CommitStore::new(Arc::new(", stringify!($os), "::memory::InMemory::new()), leases)")]
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
    #[doc = concat!(" # use ", $at, "::CommitStore; use dynacommit::lease::{LeaseConfig, LeaseManager, MemoryLeaseTable};")]
    /// # let leases = LeaseManager::new(Arc::new(MemoryLeaseTable::new()), LeaseConfig::default()).unwrap();
    #[doc = concat!(" let store = CommitStore::new(Arc::new(", stringify!($os), "::memory::InMemory::new()), leases)")]
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

    /// One conditional write through the lease protocol
    /// ([`LeaseManager::run_conditional`], which owns every step's order); `write` is only
    /// called once the lease is held, and never polled past its usable time. A write that
    /// waited behind another of this store's on the same lease, which succeeded, may have
    /// lost to it: given `etag_after` (which reads the ETag a write's output says it left),
    /// it fails without a request where that is settled; otherwise `check` tells (a copy's
    /// check reports a missing source first, as stores do).
    async fn guarded<R, C, CF, W, WF>(
        &self,
        path: &Path,
        etag: &str,
        check: C,
        etag_after: Option<fn(&R) -> Option<String>>,
        write: W,
    ) -> Result<R>
    where
        C: FnMut() -> CF,
        CF: Future<Output = Result<()>>,
        W: FnOnce() -> WF,
        WF: Future<Output = Result<R>>,
    {
        self.guarded_with(path, etag, check, etag_after, write, |_| false)
            .await
    }

    /// [`Self::guarded`], where a `write` error for which `sent_nothing` holds is a clean
    /// failure (the write was itself a guarded call that failed before sending: a held
    /// rename's second lease).
    async fn guarded_with<R, C, CF, W, WF>(
        &self,
        path: &Path,
        etag: &str,
        check: C,
        etag_after: Option<fn(&R) -> Option<String>>,
        write: W,
        sent_nothing: fn(&$os::Error) -> bool,
    ) -> Result<R>
    where
        C: FnMut() -> CF,
        CF: Future<Output = Result<()>>,
        W: FnOnce() -> WF,
        WF: Future<Output = Result<R>>,
    {
        let span = tracing::debug_span!("conditional_write", %path, etag);
        let key = lease_key(&self.lease_prefix, path);
        let (lease_etag, etag_after, end) = if self.hold_paths {
            // One lease for every write of the path, whatever it expects (a version read
            // by another writer meanwhile is no other lease), released once quiet; the
            // queue's settling, which reads a success ahead by what this write expects of
            // the same lease, is left out too (the check decides).
            (CREATE_ETAG.to_owned(), None, LeaseEnd::ReleaseOnceQuiet)
        } else if etag == CREATE_ETAG {
            (etag.to_owned(), etag_after, LeaseEnd::KeepCreate)
        } else {
            // One version, one lease, whichever form of its ETag the caller read (a PUT's
            // answer and a HEAD's need not write it alike).
            (crate::lease::lease_etag(etag), etag_after, LeaseEnd::Release)
        };
        let beaten = etag_after.map(|etag_after| Beaten {
            scope: self.scope,
            error: || beaten_by_this_store(path, etag),
            etag_after,
        });
        self.leases
            .run_conditional(&key, &lease_etag, check, beaten, write, Ending { end, sent_nothing })
            .instrument(span)
            .await
            .map_err(|e| match e {
                GuardError::Check(e) => e,
                GuardError::Operation(e) => may_have_applied_too(e),
                GuardError::Lease(e) => lease_error(path, e),
                GuardError::Abandoned(e) => may_have_applied_too(lease_error(path, e)),
            })
    }

    /// Succeeds if nothing is at `path`.
    async fn check_absent(&self, path: &Path) -> Result<()> {
        match self.inner.head(path).await {
            Ok(_) => Err($os::Error::AlreadyExists {
                path: path.to_string(),
                source: "the object already exists".into(),
            }),
            Err($os::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Succeeds if the copy or rename target `to` is absent; if it is present, reports a
    /// missing source first, as stores do natively.
    async fn check_copy_target(&self, from: &Path, to: &Path) -> Result<()> {
        match self.check_absent(to).await {
            Err(exists @ $os::Error::AlreadyExists { .. }) => {
                self.inner.head(from).await?;
                Err(exists)
            }
            other => other,
        }
    }

    /// Succeeds if the object at `path` has ETag `expected`.
    async fn check_etag(&self, path: &Path, expected: &str) -> Result<()> {
        let precondition = |why: String| $os::Error::Precondition {
            path: path.to_string(),
            source: why.into(),
        };
        match self.inner.head(path).await {
            Ok(meta)
                if meta
                    .e_tag
                    .as_deref()
                    .is_some_and(|etag| crate::lease::same_etag(etag, expected)) =>
            {
                Ok(())
            }
            Ok(meta) => Err(precondition(format!(
                "ETag is {}, expected {expected}",
                meta.e_tag.as_deref().unwrap_or("(none)")
            ))),
            Err($os::Error::NotFound { .. }) => {
                Err(precondition("the object does not exist".into()))
            }
            Err(e) => Err(e),
        }
    }
}

impl CommitStore {
    /// An S3 store on `url`, wrapped, and the path within it: object_store 0.12's
    /// `parse_url_opts` for stores that used its DynamoCommit. `options` are what
    /// `AmazonS3Builder::with_config` takes (keys in any case), and
    /// `conditional_put=dynamo:TABLE[:TIMEOUT_MS]` names the lease table, as it selected
    /// 0.12's DynamoCommit. Like `parse_url_opts`, it reads no environment.
    ///
    /// DynamoDB is reached with the S3 store's credentials, in its region (the URL's, if
    /// the URL names one), through its proxy and CA settings, at
    /// `aws_endpoint_url_dynamodb`, else at the S3 endpoint if one is set (as 0.12 did),
    /// else at AWS's. Unknown options and malformed values are errors naming the option.
    ///
    /// `dynacommit_conditions` = `lease` (the default), `native` or `auto` sets the
    /// [condition mode](CommitStore::with_conditions); in `native` and `auto` modes a
    /// `copy_if_not_exists` other than `dynamo:` goes to the S3 store, for it to enforce.
    ///
    /// `dynacommit_hold_paths` = `true` [holds paths](CommitStore::hold_paths) (not with
    /// `native`).
    ///
    /// The lease table is object_store 0.12's, keyed by the object path alone, so 0.12.5
    /// writers and these share it safely (except where paths are held). The store keeps its
    /// S3 type, so its multipart, signing and paginated listing are offered too.
    ///
    /// ```no_run
    /// # fn run() -> Result<(), Box<dyn std::error::Error>> {
    #[doc = concat!(" use ", $at, "::CommitStore;")]
    ///
    /// let url = url::Url::parse("s3://lake/tables/events")?;
    /// let (store, path) = CommitStore::from_url_opts(
    ///     &url,
    ///     [("aws_region", "eu-west-1"), ("conditional_put", "dynamo:lake_leases:5000")],
    /// )?;
    /// # let _ = (store, path); Ok(()) }
    /// ```
    pub fn from_url_opts<I, K, V>(
        url: &url::Url,
        options: I,
    ) -> std::result::Result<(CommitStore<$os::aws::AmazonS3>, Path), crate::store::FromOptionsError>
    where
        I: IntoIterator<Item = (K, V)>,
        K: AsRef<str>,
        V: Into<String>,
    {
        Self::from_url_opts_with(url, options, std::convert::identity)
    }

    /// [`Self::from_url_opts`], with `configure` applied to the S3 builder before the
    /// options (so that an option naming a setting `configure` also sets wins): for an
    /// integration that carries settings of its own (retries, client options).
    // Only the deltalake integration (object_store 0.13) calls it.
    #[allow(dead_code)]
    pub(crate) fn from_url_opts_with<I, K, V>(
        url: &url::Url,
        options: I,
        configure: impl FnOnce($os::aws::AmazonS3Builder) -> $os::aws::AmazonS3Builder,
    ) -> std::result::Result<(CommitStore<$os::aws::AmazonS3>, Path), crate::store::FromOptionsError>
    where
        I: IntoIterator<Item = (K, V)>,
        K: AsRef<str>,
        V: Into<String>,
    {
        use crate::store::FromOptionsError;
        use $os::aws::{AmazonS3Builder, AmazonS3ConfigKey};
        let options = options
            .into_iter()
            .map(|(k, v)| (k.as_ref().to_owned(), v.into()));
        let parsed = crate::store::options::Options::parse(options, |key| {
            key.parse::<AmazonS3ConfigKey>().is_ok()
        })?;
        let mut builder = configure(AmazonS3Builder::new().with_url(url.as_str()));
        for (key, value) in parsed.s3 {
            let config_key = key
                .parse::<AmazonS3ConfigKey>()
                .map_err(|_| FromOptionsError::UnknownOption { key: key.clone() })?;
            builder = builder.with_config(config_key, value);
        }
        // The URL's region wins over the option for S3 (the builder parses the URL when it
        // builds): the leases go where the data goes.
        let region = crate::store::options::region_of_url(url)
            .or_else(|| builder.get_config_value(&AmazonS3ConfigKey::Region))
            .unwrap_or_else(|| "us-east-1".to_owned());
        let s3_endpoint = builder.get_config_value(&AmazonS3ConfigKey::Endpoint);
        let s3 = builder
            .build()
            .map_err(|e| FromOptionsError::Store(e.to_string()))?;
        let mut dynamo = crate::dynamo::DynamoClientBuilder::default()
            .with_region(region)
            .with_credential_provider($credentials(s3.credentials().clone()));
        if let Some(endpoint) = parsed.dynamodb_endpoint.or(s3_endpoint) {
            dynamo = dynamo.with_endpoint(endpoint);
        }
        if let Some(http) = parsed.http.client()? {
            dynamo = dynamo.with_http_client(http);
        }
        let leases = LeaseManager::dynamodb(dynamo.build()?, parsed.lease)?;
        let path = Path::from_url_path(url.path())
            .map_err(|e| FromOptionsError::Store(format!("the URL's path: {e}")))?;
        let mut store = CommitStore::new(Arc::new(s3), leases)
            .with_conditions(parsed.conditions)
            .with_probe_path(path.clone());
        store.hold_paths = parsed.hold_paths;
        Ok((store, path))
    }
}

impl From<crate::store::FromOptionsError> for $os::Error {
    fn from(e: crate::store::FromOptionsError) -> Self {
        $os::Error::Generic {
            store: STORE,
            source: Box::new(e),
        }
    }
}

/// How many deletes of a held store's `delete_stream` go at once.
const HELD_DELETES_AT_ONCE: usize = 10;

/// The lease table's key for `path`: the store's prefix, then the path.
fn lease_key(prefix: &str, path: &Path) -> String {
    format!("{prefix}{path}")
}

/// Whether a failed write of a [`CommitStore`] may nonetheless have been applied: `true`
/// when the write itself was sent and failed or was abandoned (a timeout, a 5xx, the lease
/// lost mid-write), so its outcome is unknown; `false` when it certainly was not applied
/// (the precondition failed — `AlreadyExists`, `Precondition` — or the lease could not be
/// taken, so nothing was sent). A write whose outcome is unknown keeps its lease until it
/// expires: no other writer can act on the object meanwhile, and a caller that retries a
/// create will meet `AlreadyExists` if the first attempt landed.
///
/// Errors keep object_store's variants (a `NotFound` stays a `NotFound`); the mark is in
#[doc = concat!(" their source. A lease failure is `", stringify!($os), "::Error::Generic { store: \"dynacommit\" }`")]
/// whose source downcasts to [`LeaseError`].
///
/// ```
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// # use std::sync::Arc;
/// # use dynacommit::lease::{LeaseConfig, LeaseManager, MemoryLeaseTable};
#[doc = concat!(" use ", $at, "::{CommitStore, may_have_applied};")]
#[doc = concat!(" use ", stringify!($os), "::{ObjectStore, PutMode, memory::InMemory, path::Path};")]
///
/// # let leases = LeaseManager::new(Arc::new(MemoryLeaseTable::new()), LeaseConfig::default())?;
/// let store = CommitStore::new(Arc::new(InMemory::new()), leases);
/// let path = Path::from("log/0.json");
/// store.put_opts(&path, "a".into(), PutMode::Create.into()).await?;
/// let again = store.put_opts(&path, "b".into(), PutMode::Create.into()).await.unwrap_err();
/// assert!(!may_have_applied(&again)); // AlreadyExists: certainly not written
/// # Ok(()) }
/// ```
pub fn may_have_applied(error: &$os::Error) -> bool {
    let mut source = std::error::Error::source(error);
    while let Some(e) = source {
        if e.is::<OutcomeUnknown>() {
            return true;
        }
        source = e.source();
    }
    false
}

/// The ETag a put left.
fn etag_of(put: &$os::PutResult) -> Option<String> {
    put.e_tag.clone()
}

/// What a refused leased put finds at its path.
enum Refused {
    /// Our bytes: an earlier attempt of ours landed.
    Ours(PutResult),
    /// The object as the write's condition needs it (absent for a create, at the ETag
    /// named for an update).
    ConditionHolds,
    /// Anything else: another writer's object.
    Elsewhere,
}

/// The error of a conditional write that waited for the lease behind another write of
/// the same store, which succeeded: a create (etag `*`) finds the object there, an update
/// finds `etag` replaced by another. Nothing was sent.
fn beaten_by_this_store(path: &Path, etag: &str) -> $os::Error {
    let path = path.to_string();
    if etag == CREATE_ETAG {
        $os::Error::AlreadyExists {
            path,
            source: "another write through this store created the object while this one \
                     waited for the lease"
                .into(),
        }
    } else {
        $os::Error::Precondition {
            path,
            source: format!(
                "another write through this store replaced ETag {etag} while this one \
                 waited for the lease"
            )
            .into(),
        }
    }
}

/// `e`, marked as the failure of a write that may have been applied, its variant kept.
fn may_have_applied_too(e: $os::Error) -> $os::Error {
    use $os::Error as E;
    if may_have_applied(&e) {
        // Marked already (a held rename's inner lease): once is enough.
        return e;
    }
    let mark = |source| -> Box<dyn std::error::Error + Send + Sync + 'static> {
        Box::new(OutcomeUnknown { source })
    };
    match e {
        E::Generic { store, source } => E::Generic {
            store,
            source: mark(source),
        },
        E::NotFound { path, source } => E::NotFound {
            path,
            source: mark(source),
        },
        E::AlreadyExists { path, source } => E::AlreadyExists {
            path,
            source: mark(source),
        },
        E::Precondition { path, source } => E::Precondition {
            path,
            source: mark(source),
        },
        E::NotModified { path, source } => E::NotModified {
            path,
            source: mark(source),
        },
        E::PermissionDenied { path, source } => E::PermissionDenied {
            path,
            source: mark(source),
        },
        E::Unauthenticated { path, source } => E::Unauthenticated {
            path,
            source: mark(source),
        },
        E::NotSupported { source } => E::NotSupported {
            source: mark(source),
        },
        // Variants whose source cannot carry the mark.
        other => E::Generic {
            store: STORE,
            source: mark(Box::new(other)),
        },
    }
}

fn lease_error(path: &Path, e: LeaseError) -> $os::Error {
    tracing::warn!(%path, error = %e, "conditional write failed in the lease protocol");
    $os::Error::Generic {
        store: STORE,
        source: Box::new(e),
    }
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
                    return Err($os::Error::Generic {
                        store: STORE,
                        source: "PutMode::Update needs an e_tag: pass the UpdateVersion from the \
                                 PutResult or ObjectMeta of the version you read"
                            .into(),
                    });
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

impl<T: ObjectStore + ?Sized> CommitStore<T> {
    /// A delete with paths held: under the path's lease, released only once quiet, so
    /// that no writer of the path goes ahead while an earlier attempt of the delete (its
    /// client retried) may still land.
    async fn held_delete(&self, path: Path) -> Result<Path> {
        let check = || async { Ok(()) };
        let delete = || async { self.inner.delete(&path).await };
        self.guarded(&path, CREATE_ETAG, check, None, delete).await?;
        Ok(path)
    }

    /// Another handle on this store, sharing its lease manager and findings.
    fn shared(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            leases: self.leases.clone(),
            lease_prefix: self.lease_prefix.clone(),
            conditions: self.conditions,
            probed: self.probed.clone(),
            headers: self.headers.clone(),
            probe_under: self.probe_under.clone(),
            scope: self.scope,
            hold_paths: self.hold_paths,
        }
    }

    /// A rename with paths held: the inner rename (a copy to `to`, a delete of `from`)
    /// under both paths' leases, taken in the order of their keys, so that two renames
    /// crossing take them alike and neither waits on the other's first. Both are checked
    /// under each lease: the source is there, and the target absent where it must be.
    async fn held_rename(&self, from: &Path, to: &Path, options: RenameOptions) -> Result<()> {
        let must_be_absent = matches!(options.target_mode, RenameTargetMode::Create);
        let check = || async move {
            self.inner.head(from).await?;
            if must_be_absent {
                self.check_absent(to).await?;
            }
            Ok(())
        };
        let rename = || async move {
            if must_be_absent {
                self.copy_under_lease(from, to, CopyOptions::new(), Some(options))
                    .await
            } else {
                self.inner.rename_opts(from, to, options).await
            }
        };
        let (first, second) = if lease_key(&self.lease_prefix, from) <= lease_key(&self.lease_prefix, to)
        {
            (from, to)
        } else {
            (to, from)
        };
        if first == second {
            return self.guarded(first, CREATE_ETAG, check, None, rename).await;
        }
        // The second lease's clean failures (its check, its acquisition) are the rename's:
        // nothing was sent under the first either.
        let inner = || self.guarded(second, CREATE_ETAG, check, None, rename);
        let clean = |e: &$os::Error| !may_have_applied(e);
        self.guarded_with(first, CREATE_ETAG, check, None, inner, clean)
            .await
    }

    /// The rename itself, through the lease if the target must be absent.
    async fn rename_guarded(&self, from: &Path, to: &Path, options: RenameOptions) -> Result<()> {
        match options.target_mode {
            RenameTargetMode::Overwrite => self.inner.rename_opts(from, to, options).await,
            RenameTargetMode::Create => {
                if self.native().await? {
                    return self.inner.rename_opts(from, to, options).await;
                }
                let write = || self.copy_under_lease(from, to, CopyOptions::new(), Some(options));
                let check = || self.check_copy_target(from, to);
                self.guarded(to, CREATE_ETAG, check, None, write).await
            }
        }
    }
}

    };
}

#[cfg(feature = "object-store-013")]
pub(crate) use commit_store;

/// The wrapper for object_store 0.14, the default.
mod v014 {
    commit_store!(object_store, "dynacommit", std::convert::identity);

    /// A `PutResult` (0.14's has extensions, 0.13's none).
    fn put_result(e_tag: Option<String>, version: Option<String>) -> PutResult {
        PutResult {
            e_tag,
            version,
            extensions: Default::default(),
        }
    }

    // What the inner store offers beside `ObjectStore`, passed through unchanged: none of
    // it is conditional. (0.13's traits lack the `_opts` methods: see `crate::v013`.)

    use object_store::MultipartId;
    use object_store::list::{PaginatedListOptions, PaginatedListResult, PaginatedListStore};
    use object_store::multipart::{MultipartStore, PartId};
    use object_store::signer::{Method, SignedUrlOptions, Signer, Url};

    #[async_trait]
    #[deny(clippy::missing_trait_methods)]
    impl<T: ObjectStore + MultipartStore + ?Sized> MultipartStore for CommitStore<T> {
        async fn create_multipart(&self, path: &Path) -> Result<MultipartId> {
            self.inner.create_multipart(path).await
        }

        async fn create_multipart_opts(
            &self,
            path: &Path,
            opts: PutMultipartOptions,
        ) -> Result<MultipartId> {
            self.inner.create_multipart_opts(path, opts).await
        }

        async fn put_part(
            &self,
            path: &Path,
            id: &MultipartId,
            part_idx: usize,
            data: PutPayload,
        ) -> Result<PartId> {
            self.inner.put_part(path, id, part_idx, data).await
        }

        async fn complete_multipart(
            &self,
            path: &Path,
            id: &MultipartId,
            parts: Vec<PartId>,
        ) -> Result<PutResult> {
            self.inner.complete_multipart(path, id, parts).await
        }

        async fn abort_multipart(&self, path: &Path, id: &MultipartId) -> Result<()> {
            self.inner.abort_multipart(path, id).await
        }
    }

    #[async_trait]
    #[deny(clippy::missing_trait_methods)]
    impl<T: ObjectStore + Signer + ?Sized> Signer for CommitStore<T> {
        async fn signed_url(
            &self,
            method: Method,
            path: &Path,
            expires_in: std::time::Duration,
        ) -> Result<Url> {
            self.inner.signed_url(method, path, expires_in).await
        }

        async fn signed_url_opts(
            &self,
            method: Method,
            path: &Path,
            expires_in: std::time::Duration,
            options: &SignedUrlOptions,
        ) -> Result<Url> {
            self.inner
                .signed_url_opts(method, path, expires_in, options)
                .await
        }

        async fn signed_urls(
            &self,
            method: Method,
            paths: &[Path],
            expires_in: std::time::Duration,
        ) -> Result<Vec<Url>> {
            self.inner.signed_urls(method, paths, expires_in).await
        }
    }

    #[async_trait]
    #[deny(clippy::missing_trait_methods)]
    impl<T: ObjectStore + PaginatedListStore + ?Sized> PaginatedListStore for CommitStore<T> {
        async fn list_paginated(
            &self,
            prefix: Option<&str>,
            opts: PaginatedListOptions,
        ) -> Result<PaginatedListResult> {
            self.inner.list_paginated(prefix, opts).await
        }
    }
}

pub use v014::{CommitStore, may_have_applied};
