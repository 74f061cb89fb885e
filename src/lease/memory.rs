//! An in-process lease table with DynamoDB's conditional semantics.

use std::collections::BTreeMap;
use std::sync::Mutex;

use async_trait::async_trait;

use super::record::{Expect, LeaseRecord, PutOutcome};
use super::table::{LeaseTable, TableError};

/// Lease records in this process's memory: the embedded default (every writer in one
/// process) and the table of deterministic simulation tests. Its conditional writes are
/// atomic under one mutex, held only for the comparison and the write.
///
/// It coordinates writers of one process only: writers in other processes must share a
/// [`DynamoLeaseTable`](super::DynamoLeaseTable).
///
/// ```
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// use std::sync::Arc;
/// use dynacommit::lease::{LeaseConfig, LeaseManager, MemoryLeaseTable};
///
/// let table = Arc::new(MemoryLeaseTable::new());
/// let leases = LeaseManager::new(table.clone(), LeaseConfig::default())?;
/// let lease = leases.try_acquire("a/path", "*", None).await?.expect("nobody holds it");
/// assert_eq!(table.records()[0].generation, lease.generation());
/// # Ok(()) }
/// ```
#[derive(Debug, Default)]
pub struct MemoryLeaseTable {
    records: Mutex<BTreeMap<(String, String), LeaseRecord>>,
}

impl MemoryLeaseTable {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// Every record, in (path, etag) order: for tests and inspection.
    pub fn records(&self) -> Vec<LeaseRecord> {
        self.lock().values().cloned().collect()
    }

    /// Removes the record at (path, etag) and returns it, as DynamoDB's TTL or an
    /// operator deleting an item would: for tests and simulation.
    pub fn remove(&self, path: &str, etag: &str) -> Option<LeaseRecord> {
        self.lock().remove(&(path.to_owned(), etag.to_owned()))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<(String, String), LeaseRecord>> {
        // A panic while holding the guard cannot leave a record half-written (every
        // critical section is one insert or remove), so a poisoned map is still sound.
        super::lock(&self.records)
    }
}

/// Whether `expect` holds for `stored`: the same rules as the DynamoDB condition
/// expressions of [`DynamoLeaseTable`](super::DynamoLeaseTable).
pub(crate) fn expectation_holds(expect: &Expect, stored: Option<&LeaseRecord>) -> bool {
    match (expect, stored) {
        (Expect::Absent, None) => true,
        (Expect::Generation(g), Some(r)) => r.generation == *g,
        (
            Expect::Unchanged {
                generation,
                owner,
                ttl,
            },
            Some(r),
        ) => r.generation == *generation && r.owner == *owner && r.ttl == *ttl,
        (Expect::Owned { generation, owner }, Some(r)) => r.is_written_by(owner, *generation),
        _ => false,
    }
}

#[async_trait]
impl LeaseTable for MemoryLeaseTable {
    async fn put(&self, record: &LeaseRecord, expect: &Expect) -> Result<PutOutcome, TableError> {
        let key = (record.path.clone(), record.etag.clone());
        let mut records = self.lock();
        let stored = records.get(&key);
        if !expectation_holds(expect, stored) {
            return Ok(PutOutcome::Conflict(stored.cloned()));
        }
        records.insert(key, record.clone());
        Ok(PutOutcome::Written)
    }

    async fn get(&self, path: &str, etag: &str) -> Result<Option<LeaseRecord>, TableError> {
        Ok(self
            .lock()
            .get(&(path.to_owned(), etag.to_owned()))
            .cloned())
    }

    fn describe(&self) -> String {
        "in-process lease table".to_owned()
    }
}
