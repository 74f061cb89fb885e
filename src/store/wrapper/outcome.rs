//! What a failed conditional write reports: object_store's own error variants, marked
//! when the write may have applied ([`may_have_applied`] reads the mark).

use super::STORE;
use super::os;
use os::path::Path;

use crate::lease::{CREATE_ETAG, LeaseError};
use crate::store::OutcomeUnknown;

/// Whether a failed write of a [`CommitStore`](super::CommitStore) may nonetheless have been applied: `true`
/// when the write itself was sent and failed or was abandoned (a timeout, a 5xx, the lease
/// lost mid-write), so its outcome is unknown; `false` when it certainly was not applied
/// (the precondition failed — `AlreadyExists`, `Precondition` — or the lease could not be
/// taken, so nothing was sent). A write whose outcome is unknown keeps its lease until it
/// expires: no other writer can act on the object meanwhile, and a caller that retries a
/// create will meet `AlreadyExists` if the first attempt landed.
///
/// Errors keep object_store's variants (a `NotFound` stays a `NotFound`); the mark is in
#[doc = concat!(" their source. A lease failure is `", os_name!(), "::Error::Generic { store: \"dynacommit\" }`")]
/// whose source downcasts to [`LeaseError`].
///
/// ```
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// # use std::sync::Arc;
/// # use dynacommit::lease::{LeaseConfig, LeaseManager, MemoryLeaseTable};
#[doc = concat!(" use ", at!(), "::{CommitStore, may_have_applied};")]
#[doc = concat!(" use ", os_name!(), "::{ObjectStore, PutMode, memory::InMemory, path::Path};")]
///
/// # let leases = LeaseManager::new(Arc::new(MemoryLeaseTable::new()), LeaseConfig::default())?;
/// let store = CommitStore::new(Arc::new(InMemory::new()), leases);
/// let path = Path::from("log/0.json");
/// store.put_opts(&path, "a".into(), PutMode::Create.into()).await?;
/// let again = store.put_opts(&path, "b".into(), PutMode::Create.into()).await.unwrap_err();
/// assert!(!may_have_applied(&again)); // AlreadyExists: certainly not written
/// # Ok(()) }
/// ```
pub fn may_have_applied(error: &os::Error) -> bool {
    let mut source = std::error::Error::source(error);
    while let Some(e) = source {
        if e.is::<OutcomeUnknown>() {
            return true;
        }
        source = e.source();
    }
    false
}

/// The error of a conditional write that waited for the lease behind another write of
/// the same store, which succeeded: a create (etag `*`) finds the object there, an update
/// finds `etag` replaced by another. Nothing was sent.
pub(super) fn beaten_by_this_store(path: &Path, etag: &str) -> os::Error {
    let path = path.to_string();
    if etag == CREATE_ETAG {
        os::Error::AlreadyExists {
            path,
            source: "another write through this store created the object while this one \
                     waited for the lease"
                .into(),
        }
    } else {
        os::Error::Precondition {
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
pub(super) fn may_have_applied_too(e: os::Error) -> os::Error {
    use os::Error as E;
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

pub(super) fn lease_error(path: &Path, e: LeaseError) -> os::Error {
    tracing::warn!(%path, error = %e, "conditional write failed in the lease protocol");
    os::Error::Generic {
        store: STORE,
        source: Box::new(e),
    }
}
