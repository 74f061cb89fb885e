//! What the gateway writes to: a [`CommitStore`], and what its inner store offers beside
//! `ObjectStore` (multipart uploads that span requests, S3's own paginated listing).

use std::sync::Arc;

use async_trait::async_trait;
use object_store::aws::AmazonS3;
use object_store::list::PaginatedListStore;
use object_store::multipart::{MultipartStore, PartId};
use object_store::path::Path;
use object_store::{MultipartId, ObjectStore, PutMode, PutResult, Result};

use crate::CommitStore;

/// The store a gateway fronts: a [`CommitStore`], through which every conditional
/// request goes, so that the gateway, the library and the command line share one protocol.
///
/// Made from an S3 store ([`Upstream::s3`]: everything), an in-memory one
/// ([`Upstream::in_memory`]: no S3 listing pages) or any other ([`Upstream::store`]: no
/// multipart uploads, which then answer `NotImplemented`).
///
/// ```
/// use std::sync::Arc;
/// use dynacommit::CommitStore;
/// use dynacommit::gateway::Upstream;
/// use dynacommit::lease::{LeaseConfig, LeaseManager, MemoryLeaseTable};
///
/// let leases = LeaseManager::new(Arc::new(MemoryLeaseTable::new()), LeaseConfig::default())?;
/// let store = CommitStore::new(Arc::new(object_store::memory::InMemory::new()), leases);
/// let upstream = Upstream::in_memory(store);
/// # let _ = upstream; Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct Upstream {
    pub(super) store: Arc<dyn ObjectStore>,
    pub(super) multipart: Option<Arc<dyn GuardedMultipart>>,
    pub(super) pages: Option<Arc<dyn PaginatedListStore>>,
}

impl std::fmt::Debug for Upstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The store's Display, never its Debug (which is not ours to trust with secrets).
        f.debug_struct("Upstream")
            .field("store", &format_args!("{}", self.store))
            .field("multipart", &self.multipart.is_some())
            .field("pages", &self.pages.is_some())
            .finish()
    }
}

impl Upstream {
    /// An S3 bucket (or a store that speaks S3), with multipart uploads and S3's listing
    /// pages passed through.
    pub fn s3(store: CommitStore<AmazonS3>) -> Self {
        let store = Arc::new(store);
        Self {
            store: store.clone(),
            multipart: Some(store.clone()),
            pages: Some(store),
        }
    }

    /// An in-process store: for tests, and the embedded default.
    pub fn in_memory(store: CommitStore<object_store::memory::InMemory>) -> Self {
        let store = Arc::new(store);
        Self {
            store: store.clone(),
            multipart: Some(store),
            pages: None,
        }
    }

    /// Any other store (a local directory, say): no multipart uploads.
    pub fn store(store: CommitStore) -> Self {
        Self {
            store: Arc::new(store),
            multipart: None,
            pages: None,
        }
    }
}

/// Multipart uploads across requests, completed with a condition through the lease
/// protocol ([`CommitStore::complete_multipart_opts`]).
#[async_trait]
pub(super) trait GuardedMultipart: MultipartStore {
    /// [`CommitStore::complete_multipart_opts`].
    async fn complete(
        &self,
        path: &Path,
        id: &MultipartId,
        parts: Vec<PartId>,
        mode: PutMode,
    ) -> Result<PutResult>;
}

#[async_trait]
impl<T: ObjectStore + MultipartStore> GuardedMultipart for CommitStore<T> {
    async fn complete(
        &self,
        path: &Path,
        id: &MultipartId,
        parts: Vec<PartId>,
        mode: PutMode,
    ) -> Result<PutResult> {
        self.complete_multipart_opts(path, id, parts, mode).await
    }
}
