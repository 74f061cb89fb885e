//! A key-value store on DynamoDB: Vault's storage contract (get, put, delete, folder
//! listing, transactions) and Teleport's (create, update, compare-and-swap, revisions,
//! expiry, ordered ranges, watches), on the same client as the leases.
//!
//! Every stored value carries a [`Revision`] that changes on every write, so a reader can
//! make its next write conditional on nothing having changed since ([`KvStore::conditional_update`],
//! [`KvStore::conditional_delete`], [`TxnOp::if_revision`]).
//!
//! Two stores implement [`KvStore`]: [`DynamoKv`] for production, and [`MemoryKv`], an
//! in-process store with the same semantics, for single-process use and tests.
//!
//! ```
//! use bytes::Bytes;
//! use dynacommit::kv::{KvStore, MemoryKv, TxnOp};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), dynacommit::kv::KvError> {
//! let kv = MemoryKv::new();
//! let rev = kv.put(b"config/limits", Bytes::from("10"), None).await?;
//! kv.conditional_update(b"config/limits", &rev, Bytes::from("20"), None).await?;
//! kv.transaction(vec![
//!     TxnOp::put(b"config/owner", Bytes::from("ops")).if_absent(),
//!     TxnOp::delete(b"config/limits"),
//! ])
//! .await?;
//! assert_eq!(kv.list(b"config/").await?, vec![b"owner".to_vec()]);
//! # Ok(())
//! # }
//! ```
//!
//! Schema, costs and the consistency of each read: `docs/kv.md`.

mod dynamo;
mod error;
pub mod key;
mod layout;
mod memory;
mod txn;

pub use txn::{TRANSACTION_BYTES_MAX, transaction_items};
mod types;
mod watch;

use std::time::SystemTime;

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::BoxStream;

pub use dynamo::{DEFAULT_NAMESPACE, DEFAULT_TTL_GRACE, DynamoKv};
pub use error::KvError;
pub use layout::FOLDER_SHARDS;
pub use memory::MemoryKv;
pub use types::{Checkpoint, Condition, Entry, EventKind, Revision, TxnAction, TxnOp, WatchEvent};

/// The most operations one [`KvStore::transaction`] takes, and the most items it may make
/// with the folder counters it may change ([`transaction_items`]): DynamoDB's limit on a
/// transaction, kept by both stores alike.
pub const TRANSACTION_MAX: usize = 100;

/// The largest value [`DynamoKv`] stores: DynamoDB's 400 KB item limit, less room for
/// the key and the bookkeeping attributes ([`MemoryKv`] enforces the same, so code tried on
/// one works on the other).
pub const VALUE_MAX: usize = 400 * 1024 - key::PARTITION_KEY_MAX - key::SORT_KEY_MAX - 256;

/// A key-value store with revisions, expiry, folders, ranges, transactions and watches.
///
/// An entry whose expiry has passed is absent for every operation from that moment on,
/// whether or not it has been deleted yet. Keys are bytes; see [`key`] for the rules.
#[async_trait]
pub trait KvStore: std::fmt::Debug + Send + Sync + 'static {
    /// The entry at `key`, if there is a live one.
    async fn get(&self, key: &[u8]) -> Result<Option<Entry>, KvError>;

    /// Writes `value` at `key` if `condition` holds, and returns the new revision. A
    /// failed condition is the error [`Condition::failure`] names: [`KvError::AlreadyExists`],
    /// [`KvError::NotFound`], [`KvError::CompareFailed`] or [`KvError::RevisionMismatch`].
    async fn write(
        &self,
        key: &[u8],
        value: Bytes,
        expires: Option<SystemTime>,
        condition: Condition,
    ) -> Result<Revision, KvError>;

    /// Deletes `key` if `condition` holds. `Ok(true)` if a live entry was deleted,
    /// `Ok(false)` if there was none (only possible under [`Condition::Always`]).
    async fn remove(&self, key: &[u8], condition: Condition) -> Result<bool, KvError>;

    /// Sets a live entry's expiry (`None`: never) and gives it a new revision;
    /// [`KvError::NotFound`] if there is no live entry.
    async fn keep_alive(
        &self,
        key: &[u8],
        expires: Option<SystemTime>,
    ) -> Result<Revision, KvError>;

    /// The names directly under `prefix`, sorted: keys as the rest after `prefix`, and
    /// folders holding at least one live key with a trailing `/`. `list(b"")` lists the
    /// root; `list(b"a/")` lists folder `a/`.
    async fn list(&self, prefix: &[u8]) -> Result<Vec<Vec<u8>>, KvError>;

    /// The live entries with `start <= key < end`, in key order, at most `limit` (all if
    /// `None`). An empty `end` means no upper bound.
    async fn range(
        &self,
        start: &[u8],
        end: &[u8],
        limit: Option<usize>,
    ) -> Result<Vec<Entry>, KvError>;

    /// Deletes every entry with `start <= key < end` (expired ones too), and returns how
    /// many live ones it deleted. Not atomic as a whole: each batch is.
    async fn delete_range(&self, start: &[u8], end: &[u8]) -> Result<usize, KvError>;

    /// Applies all of `ops` or none, each only if its condition holds; one new revision
    /// per put, in order (`None` for deletes, checks, and puts that a later step of the
    /// same transaction overwrote or deleted: no read ever sees those). At most [`TRANSACTION_MAX`]
    /// operations, and at most that many items with folder counters ([`transaction_items`]);
    /// a key may appear more than once, each step seeing the ones before it
    /// (as in Vault's transactions). A failed condition is [`KvError::TransactionConflict`]
    /// naming the operation.
    async fn transaction(&self, ops: Vec<TxnOp>) -> Result<Vec<Option<Revision>>, KvError>;

    /// Deletes the entries with `start <= key < end` whose expiry has passed, as a delete
    /// of each (watchers see an [`EventKind::Expired`]); returns how many.
    async fn sweep_expired(&self, start: &[u8], end: &[u8]) -> Result<usize, KvError>;

    /// Every change to keys starting with `prefix` from now on (or after `from`), in
    /// order per key: first [`EventKind::Ready`], then puts, deletes and expiries. Each
    /// event carries the [`Checkpoint`] to resume after it.
    fn watch(
        &self,
        prefix: &[u8],
        from: Option<Checkpoint>,
    ) -> BoxStream<'static, Result<WatchEvent, KvError>>;

    /// A short description for logs (`dynamodb table kv`).
    fn describe(&self) -> String;

    /// Writes `value` at `key` whatever is there; returns the new revision.
    async fn put(
        &self,
        key: &[u8],
        value: Bytes,
        expires: Option<SystemTime>,
    ) -> Result<Revision, KvError> {
        self.write(key, value, expires, Condition::Always).await
    }

    /// Writes `value` at `key` only if there is no live entry there
    /// ([`KvError::AlreadyExists`] otherwise).
    async fn create(
        &self,
        key: &[u8],
        value: Bytes,
        expires: Option<SystemTime>,
    ) -> Result<Revision, KvError> {
        self.write(key, value, expires, Condition::Absent).await
    }

    /// Writes `value` at `key` only if there is a live entry there ([`KvError::NotFound`]
    /// otherwise).
    async fn update(
        &self,
        key: &[u8],
        value: Bytes,
        expires: Option<SystemTime>,
    ) -> Result<Revision, KvError> {
        self.write(key, value, expires, Condition::Exists).await
    }

    /// Writes `value` at `key` only if the live entry there holds `expected`
    /// ([`KvError::CompareFailed`] otherwise, also when there is none).
    async fn compare_and_swap(
        &self,
        key: &[u8],
        expected: &[u8],
        value: Bytes,
        expires: Option<SystemTime>,
    ) -> Result<Revision, KvError> {
        let condition = Condition::Value(Bytes::copy_from_slice(expected));
        self.write(key, value, expires, condition).await
    }

    /// Writes `value` at `key` only if the live entry there is at `revision`
    /// ([`KvError::RevisionMismatch`] otherwise).
    async fn conditional_update(
        &self,
        key: &[u8],
        revision: &Revision,
        value: Bytes,
        expires: Option<SystemTime>,
    ) -> Result<Revision, KvError> {
        let condition = Condition::Revision(revision.clone());
        self.write(key, value, expires, condition).await
    }

    /// Deletes `key`; deleting a missing key succeeds. `true` if a live entry was there.
    async fn delete(&self, key: &[u8]) -> Result<bool, KvError> {
        self.remove(key, Condition::Always).await
    }

    /// Deletes `key` only if the live entry there is at `revision`
    /// ([`KvError::RevisionMismatch`] otherwise).
    async fn conditional_delete(&self, key: &[u8], revision: &Revision) -> Result<(), KvError> {
        self.remove(key, Condition::Revision(revision.clone()))
            .await
            .map(|_| ())
    }
}

/// Unix time in milliseconds, as stored (0 before 1970).
pub(crate) fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// The time `ms` Unix milliseconds stand for.
pub(crate) fn from_unix_ms(ms: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + std::time::Duration::from_millis(ms)
}

/// Checks what every write checks before it is sent: the key and the value's size.
pub(crate) fn check_write(key: &[u8], value: &[u8], namespace_len: usize) -> Result<(), KvError> {
    key::validate(key, namespace_len)?;
    if value.len() > VALUE_MAX {
        return Err(KvError::ValueTooLarge {
            key: key::display(key),
            size: value.len(),
            max: VALUE_MAX,
        });
    }
    Ok(())
}
