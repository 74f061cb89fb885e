//! What can go wrong in the key-value store.

use crate::dynamo::DynamoError;

use super::Revision;

/// A key-value operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KvError {
    /// The key cannot be stored.
    #[error("key `{key}` cannot be stored: {problem}")]
    InvalidKey {
        /// The key, escaped.
        key: String,
        /// Why, and what to do.
        problem: String,
    },
    /// The value is over the store's limit.
    #[error(
        "the value for `{key}` is {size} bytes, over the {max} a DynamoDB item holds: store it in an object store and keep its path here"
    )]
    ValueTooLarge {
        /// The key, escaped.
        key: String,
        /// The value's size.
        size: usize,
        /// The limit.
        max: usize,
    },
    /// `create` found a live entry.
    #[error("key `{key}` already exists")]
    AlreadyExists {
        /// The key, escaped.
        key: String,
    },
    /// The operation needed a live entry and there is none.
    #[error("key `{key}` not found")]
    NotFound {
        /// The key, escaped.
        key: String,
    },
    /// `compare_and_swap` found another value (or none).
    #[error("key `{key}` does not hold the expected value")]
    CompareFailed {
        /// The key, escaped.
        key: String,
    },
    /// The live entry is not at the expected revision (or there is none).
    #[error("key `{key}` is not at revision {expected}: it changed or was deleted since")]
    RevisionMismatch {
        /// The key, escaped.
        key: String,
        /// The revision the caller expected.
        expected: Revision,
    },
    /// A transaction step's condition did not hold; nothing was applied.
    #[error(
        "transaction operation {index} (key `{key}`) failed its condition ({condition}); nothing was applied"
    )]
    TransactionConflict {
        /// The step's position, from 0.
        index: usize,
        /// Its key, escaped.
        key: String,
        /// The condition that did not hold.
        condition: String,
    },
    /// A transaction is malformed: too many operations, a key twice, none at all.
    #[error("transaction refused: {problem}")]
    InvalidTransaction {
        /// What is wrong, and what to do.
        problem: String,
    },
    /// Other writers kept changing what an operation needed to read first.
    #[error(
        "key `{key}` changed under {attempts} attempts in a row: too much contention; try again later"
    )]
    Contention {
        /// The key, escaped.
        key: String,
        /// How many attempts were made.
        attempts: u32,
    },
    /// A stored item is not a key-value entry.
    #[error(
        "item at `{key}` is not a key-value entry ({problem}): is another application using this table?"
    )]
    Malformed {
        /// The key, escaped.
        key: String,
        /// What is wrong with it.
        problem: String,
    },
    /// A watch cannot resume from its checkpoint.
    #[error("the watch cannot resume: {problem}")]
    WatchLost {
        /// Why, and what to do.
        problem: String,
    },
    /// A write to one key was sent and no definite answer came back: it may have
    /// applied, and a request DynamoDB received may still apply after this error. Read the
    /// key: at `revision`, this write applied (a compare-and-swap by value cannot tell its
    /// own write from a rival's equal value, and may land over newer state: prefer
    /// [`conditional_update`](super::KvStore::conditional_update), by revision).
    #[error(
        "the write to `{key}` may have applied (no definite answer came back){}: {source}",
        revision_note(.key, .revision.as_ref())
    )]
    WriteMayHaveApplied {
        /// The key, escaped.
        key: String,
        /// The revision the write would leave (`None` for a delete).
        revision: Option<Revision>,
        /// The failure.
        source: Box<DynamoError>,
    },
    /// A transaction was sent and no definite answer came back: it may have applied as a
    /// whole (never in part), and may still apply after this error. Read a key it puts: at
    /// its revision in `revisions`, the transaction applied.
    #[error(
        "the transaction may have applied as a whole (no definite answer came back); read a key it puts and compare its revision: {source}"
    )]
    TransactionMayHaveApplied {
        /// One per operation, as [`transaction`](super::KvStore::transaction) would have
        /// returned them.
        revisions: Vec<Option<Revision>>,
        /// The failure.
        source: Box<DynamoError>,
    },
    /// DynamoDB failed.
    #[error(transparent)]
    Dynamo(#[from] DynamoError),
}

/// How to tell whether a write to `key` that would have left `revision` applied.
fn revision_note(key: &str, revision: Option<&Revision>) -> String {
    match revision {
        Some(r) => format!("; if `{key}` is at revision {r}, it did"),
        None => String::new(),
    }
}

impl KvError {
    /// Whether a write that failed with this error may have been applied nonetheless (the
    /// request left and no definite answer came back): read before trying again.
    pub fn may_have_applied(&self) -> bool {
        match self {
            Self::Dynamo(e) => e.is_ambiguous(),
            Self::WriteMayHaveApplied { .. } | Self::TransactionMayHaveApplied { .. } => true,
            _ => false,
        }
    }

    /// This error of a write to `key` that would have left `revision`: one that may have
    /// applied says so, with the revision to look for.
    pub(crate) fn attempted(self, key: &[u8], revision: Option<&Revision>) -> Self {
        match self {
            Self::Dynamo(source) if source.is_ambiguous() => Self::WriteMayHaveApplied {
                key: super::key::display(key),
                revision: revision.cloned(),
                source: Box::new(source),
            },
            other => other,
        }
    }

    /// This error of a transaction that would have returned `revisions`.
    pub(crate) fn attempted_transaction(self, revisions: &[Option<Revision>]) -> Self {
        match self {
            Self::Dynamo(source) if source.is_ambiguous() => Self::TransactionMayHaveApplied {
                revisions: revisions.to_vec(),
                source: Box::new(source),
            },
            other => other,
        }
    }
}
