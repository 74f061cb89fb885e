//! Generation-based leases: the commit protocol's core.
//!
//! A writer about to change an object first takes the lease on (path, expected ETag) in a
//! [`LeaseTable`]: a conditional write that at most one writer can win. The others wait,
//! polling the object (to fail fast once the winner's write shows) and the lease record,
//! and take the lease over only when it is released or has stood unchanged for
//! `timeout x max_clock_skew_rate` on their own monotonic clock. See `docs/protocol.md`
//! for the argument and its assumptions.

mod config;
mod dynamo;
mod manager;
mod memory;
mod record;
mod table;

pub use config::{ConfigError, DEFAULT_TABLE, LeaseConfig, MAX_TIMEOUT, MAX_TTL};
pub use dynamo::DynamoLeaseTable;
pub use manager::{AcquireError, Lease, LeaseError, LeaseManager};
pub use memory::MemoryLeaseTable;
pub use record::{CREATE_ETAG, Expect, LeaseRecord, PutOutcome};
pub use table::{LeaseTable, TableError};
