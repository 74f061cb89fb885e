//! The lease protocol's errors: [`LeaseError`], and the errors of an acquisition and of a
//! guarded operation, which add the caller's own.

use crate::lease::table::TableError;

/// The lease protocol failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LeaseError {
    /// The lease table failed.
    #[error("lease table: {0}")]
    Table(#[from] TableError),
    /// The generation counter of a lease reached its maximum.
    #[error(
        "lease {path}#{etag} is at generation u64::MAX and cannot be taken again; delete the record (dynacommit lease break) once no writer uses it"
    )]
    GenerationExhausted {
        /// The path.
        path: String,
        /// The etag.
        etag: String,
    },
    /// The lease was lost while held: the guarded operation was abandoned.
    #[error(
        "lost the lease on {path}#{etag} at generation {generation}: {reason}; the operation was abandoned and may or may not have been applied"
    )]
    Lost {
        /// The path.
        path: String,
        /// The etag.
        etag: String,
        /// The generation we held.
        generation: u64,
        /// Why.
        reason: String,
    },
}

/// Acquisition failed: the caller's check refused, or the protocol failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AcquireError<E> {
    /// The precondition check failed (the object changed, or could not be read).
    #[error(transparent)]
    Check(E),
    /// The lease protocol failed.
    #[error(transparent)]
    Lease(#[from] LeaseError),
}

/// [`LeaseManager::run_guarded`](crate::lease::LeaseManager::run_guarded) failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GuardError<E> {
    /// The precondition failed, before or under the lease: nothing was sent.
    #[error(transparent)]
    Check(E),
    /// The operation failed. It may still land (an earlier attempt of a retried request),
    /// so its lease was kept until it expires.
    #[error(transparent)]
    Operation(E),
    /// The lease protocol failed before the operation was called: nothing was sent.
    #[error(transparent)]
    Lease(#[from] LeaseError),
    /// The lease was lost while the operation ran: the operation was dropped, and what it
    /// had sent may or may not have been applied.
    #[error(transparent)]
    Abandoned(LeaseError),
}
