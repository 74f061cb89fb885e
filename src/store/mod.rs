//! [`CommitStore`]: an `ObjectStore` whose conditional writes are made safe by leases.
//!
//! The wrapper exists once in source (`wrapper/`) and is mounted for each `object_store`
//! version dynacommit supports: 0.14 by `v014.rs` ([`CommitStore`]), 0.13 by `v013.rs`
//! (`dynacommit::v013`, feature `object-store-013`). The two traits have the same shape;
//! only the crate their types come from differs, so each mount names its crate `os` and
//! the one body serves both. The lease protocol itself lives in
//! [`LeaseManager::run_guarded`](crate::lease::LeaseManager::run_guarded).

pub(crate) mod conditions;
pub(crate) mod headers;
pub(crate) mod options;

pub use conditions::{Conditions, Enforced};
pub use options::FromOptionsError;
pub use v014::{CommitStore, may_have_applied};

#[cfg(feature = "object-store-013")]
pub mod v013;
mod v014;

/// The mark [`may_have_applied`] looks for: a write that was sent and whose outcome is
/// unknown.
#[derive(Debug, thiserror::Error)]
#[error("{source} (the write may or may not have been applied)")]
pub(crate) struct OutcomeUnknown {
    pub(crate) source: Box<dyn std::error::Error + Send + Sync + 'static>,
}
