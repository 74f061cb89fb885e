//! A conditional write (a put, a copy, a rename to an absent target): through the lease
//! protocol ([`LeaseManager::run_conditional`](crate::lease::LeaseManager), which orders
//! its steps), or straight to a store found to enforce the condition itself.

use super::os;
use super::outcome::{beaten_by_this_store, lease_error, may_have_applied_too};
use super::refused::Refused;
use super::{CommitStore, STORE, lease_key};
use os::path::Path;
use os::{
    CopyMode, CopyOptions, ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload, PutResult,
    RenameOptions, RenameTargetMode, Result,
};
use tracing::Instrument;

use crate::lease::{Beaten, CREATE_ETAG, Ending, GuardError, LeaseEnd};
use crate::store::conditions::{Conditions, Enforced};
use crate::store::headers::Header;

impl<T: ObjectStore + ?Sized> CommitStore<T> {
    /// Whether conditional writes go to the inner store with their conditions, without a
    /// lease. All or none: were creates native and copies leased (S3 enforces
    /// `If-None-Match` but has no copy-if-not-exists), a native create and a leased copy
    /// to one path would not exclude each other, and the copy could land on the create.
    pub(super) async fn native(&self) -> Result<bool> {
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
    pub(super) fn carries(&self, header: Header) -> bool {
        self.leases.safeguards().condition_under_lease() && self.headers.carries(header)
    }

    /// `mode` as the store takes it: `If-Match` names the ETag unquoted where the store
    /// honours only that form.
    pub(super) fn in_store_form(&self, mode: PutMode) -> PutMode {
        match mode {
            PutMode::Update(version) if self.headers.unquoted() => {
                PutMode::Update(os::UpdateVersion {
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
    pub(super) async fn native_put(
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

    /// A put under a lease, carrying `mode` (the condition the lease guards) unless the
    /// store refuses its header. A refusal of the header (nothing written) is remembered
    /// and the write sent plain, as object_store 0.12.5's always is.
    pub(super) async fn put_under_lease(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
        mode: PutMode,
    ) -> Result<PutResult> {
        use os::Error as E;
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
        match self
            .inner
            .put_opts(location, payload.clone(), conditional)
            .await
        {
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

    /// A copy (or, given `rename`'s options, a rename) under a lease, carrying
    /// copy-if-not-exists unless the store refuses it. A refusal whose target holds the
    /// source's version (same ETag and size) is an earlier attempt of ours; another is a
    /// writer without a lease, and an error that is not `AlreadyExists`.
    pub(super) async fn copy_under_lease(
        &self,
        from: &Path,
        to: &Path,
        copy: CopyOptions,
        rename: Option<RenameOptions>,
    ) -> Result<()> {
        use os::Error as E;
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
                self.plain_after_refused_header(
                    e,
                    Header::CopyIfAbsent,
                    sent_at,
                    holds,
                    send(false),
                )
                .await
            }
            other => other,
        }
    }

    /// One conditional write through the lease protocol
    /// ([`LeaseManager::run_conditional`], which owns every step's order); `write` is only
    /// called once the lease is held, and never polled past its usable time. A write that
    /// waited behind another of this store's on the same lease, which succeeded, may have
    /// lost to it: given `etag_after` (which reads the ETag a write's output says it left),
    /// it fails without a request where that is settled; otherwise `check` tells (a copy's
    /// check reports a missing source first, as stores do).
    pub(super) async fn guarded<R, C, CF, W, WF>(
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
    pub(super) async fn guarded_with<R, C, CF, W, WF>(
        &self,
        path: &Path,
        etag: &str,
        check: C,
        etag_after: Option<fn(&R) -> Option<String>>,
        write: W,
        sent_nothing: fn(&os::Error) -> bool,
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
            (
                crate::lease::lease_etag(etag),
                etag_after,
                LeaseEnd::Release,
            )
        };
        let beaten = etag_after.map(|etag_after| Beaten {
            scope: self.scope,
            error: || beaten_by_this_store(path, etag),
            etag_after,
        });
        self.leases
            .run_conditional(
                &key,
                &lease_etag,
                check,
                beaten,
                write,
                Ending { end, sent_nothing },
            )
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
    pub(super) async fn check_absent(&self, path: &Path) -> Result<()> {
        match self.inner.head(path).await {
            Ok(_) => Err(os::Error::AlreadyExists {
                path: path.to_string(),
                source: "the object already exists".into(),
            }),
            Err(os::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Succeeds if the copy or rename target `to` is absent; if it is present, reports a
    /// missing source first, as stores do natively.
    pub(super) async fn check_copy_target(&self, from: &Path, to: &Path) -> Result<()> {
        match self.check_absent(to).await {
            Err(exists @ os::Error::AlreadyExists { .. }) => {
                self.inner.head(from).await?;
                Err(exists)
            }
            other => other,
        }
    }

    /// Succeeds if the object at `path` has ETag `expected`.
    pub(super) async fn check_etag(&self, path: &Path, expected: &str) -> Result<()> {
        let precondition = |why: String| os::Error::Precondition {
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
            Err(os::Error::NotFound { .. }) => {
                Err(precondition("the object does not exist".into()))
            }
            Err(e) => Err(e),
        }
    }

    /// The rename itself, through the lease if the target must be absent.
    pub(super) async fn rename_guarded(
        &self,
        from: &Path,
        to: &Path,
        options: RenameOptions,
    ) -> Result<()> {
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
