//! The one trait the lease protocol needs from storage.

use async_trait::async_trait;

use super::record::{Expect, LeaseRecord, PutOutcome};
use crate::dynamo::DynamoError;

/// Storage for lease records: a conditional write and a consistent read, nothing else
/// (inspection and repair tools use the concrete tables' own methods).
///
/// Implemented by [`DynamoLeaseTable`](super::DynamoLeaseTable) for production and
/// [`MemoryLeaseTable`](super::MemoryLeaseTable) for one process (the embedded default,
/// and deterministic simulation). An implementation must make `put` atomic with respect
/// to its condition: of any number of concurrent writes expecting the same state, at
/// most one applies.
#[async_trait]
pub trait LeaseTable: std::fmt::Debug + Send + Sync + 'static {
    /// Writes `record` (the whole item) if `expect` holds for the stored record at its
    /// (path, etag).
    async fn put(&self, record: &LeaseRecord, expect: &Expect) -> Result<PutOutcome, TableError>;

    /// The record at (path, etag), read consistently.
    async fn get(&self, path: &str, etag: &str) -> Result<Option<LeaseRecord>, TableError>;

    /// A short description for Display and logs (`dynamodb table leases`).
    fn describe(&self) -> String;

    /// The DynamoDB table's name, for a table that is one: [`LeaseManager::new`](super::LeaseManager::new)
    /// checks it against [`LeaseConfig::table`](super::LeaseConfig::table).
    fn dynamodb_table(&self) -> Option<&str> {
        None
    }
}

/// A lease table failed to answer.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TableError {
    /// DynamoDB failed.
    #[error(transparent)]
    Dynamo(#[from] DynamoError),
    /// A stored record is not a lease record (a missing or mistyped attribute).
    #[error(
        "lease record {path}#{etag} is malformed: {problem}; is another application using this table?"
    )]
    Malformed {
        /// The record's path.
        path: String,
        /// The record's etag.
        etag: String,
        /// What is wrong with it.
        problem: String,
    },
    /// A fault that a test or simulation injected (feature `harness`: only test tables
    /// raise it).
    #[cfg(feature = "harness")]
    #[error("injected fault: {message}")]
    Injected {
        /// What the fault simulates.
        message: String,
        /// Whether the write may have applied.
        ambiguous: bool,
    },
}

impl TableError {
    /// Whether a write that failed with this error may have been applied nonetheless.
    pub fn is_ambiguous(&self) -> bool {
        match self {
            Self::Dynamo(e) => e.is_ambiguous(),
            #[cfg(feature = "harness")]
            Self::Injected { ambiguous, .. } => *ambiguous,
            Self::Malformed { .. } => false,
        }
    }
}
