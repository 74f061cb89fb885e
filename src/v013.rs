//! The wrapper for object_store 0.13, where deltalake 1.1 and datafusion 55 are: the same
//! lease protocol as [`crate::CommitStore`] (written once, in `src/store/`), implementing
//! 0.13's `ObjectStore`. Enabled by the `object-store-013` feature.
//!
//! ```
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! use std::sync::Arc;
//! use dynacommit::lease::{LeaseConfig, LeaseManager, MemoryLeaseTable};
//! use dynacommit::v013::CommitStore;
//! use object_store_013::{ObjectStore, PutMode, memory::InMemory, path::Path};
//!
//! let leases = LeaseManager::new(Arc::new(MemoryLeaseTable::new()), LeaseConfig::default())?;
//! let store = CommitStore::new(Arc::new(InMemory::new()), leases);
//! store.put_opts(&Path::from("_delta_log/0.json"), "commit".into(), PutMode::Create.into()).await?;
//! # Ok(()) }
//! ```

crate::store::commit_store!(object_store_013, "dynacommit::v013");
