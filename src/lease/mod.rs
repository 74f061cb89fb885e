//! Generation-based leases: the commit protocol's core.
//!
//! A writer about to change an object first takes the lease on (path, expected ETag) in a
//! [`LeaseTable`]: a conditional write that at most one writer can win. The others wait,
//! polling the object (to fail fast once the winner's write shows) and the lease record,
//! and take the lease over only when it is released or has stood unchanged for
//! `timeout x max_clock_skew_rate` on their own monotonic clock. See `docs/protocol.md`
//! for the argument and its assumptions.

mod clock;
mod config;
mod dynamo;
mod manager;
mod memory;
mod pressure;
mod queue;
mod record;
mod setup;
mod table;
pub(crate) mod waited;

#[cfg(feature = "planted-bugs")]
pub use crate::safeguards::PlantedBug;
pub use clock::{Clock, SystemClock};
pub use config::{ConfigError, DEFAULT_TABLE, LeaseConfig, MAX_TIMEOUT, MAX_TTL};
pub use dynamo::{BROKEN_BY_OPERATOR, DynamoLeaseTable, LEASE_NAMESPACE};
pub use manager::{AcquireError, GuardError, Lease, LeaseError, LeaseManager, Waiting};
pub(crate) use manager::{Beaten, Ending, LeaseEnd, bare_etag, lease_etag, same_etag};
pub use memory::MemoryLeaseTable;
pub(crate) use queue::new_scope;
pub use record::{CREATE_ETAG, Expect, Holder, LeaseRecord, PutOutcome};
pub use setup::SetupError;
pub use table::{LeaseTable, TableError};

/// `mutex`'s value, whatever a panicking holder left. Every lock of the lease module
/// guards a value each critical section leaves whole (a single store, insert or removal),
/// so a poisoned one is still sound.
fn lock<T>(mutex: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}
