//! The wrapper for object_store 0.13, where deltalake 1.1 and datafusion 55 are: the same
//! lease protocol as [`crate::CommitStore`] (written once, in `src/store/wrapper/`), implementing
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

use std::sync::Arc;

use async_trait::async_trait;
use object_store_013 as os;
use os::path::Path;
use os::{ObjectStore, PutPayload, PutResult, Result};

/// The path at which the wrapper's doc examples find `CommitStore`.
macro_rules! at {
    () => {
        "dynacommit::v013"
    };
}

/// The name of the `object_store` crate in the wrapper's doc examples.
macro_rules! os_name {
    () => {
        "object_store_013"
    };
}

// The one wrapper, mounted on each version's crate: loaded twice on purpose.
#[allow(clippy::duplicate_mod)]
#[path = "wrapper/mod.rs"]
mod wrapper;

pub use wrapper::{CommitStore, may_have_applied};

/// A `PutResult` (0.14's has extensions, 0.13's none).
fn put_result(e_tag: Option<String>, version: Option<String>) -> PutResult {
    PutResult { e_tag, version }
}

// What the inner store offers beside `ObjectStore`, passed through unchanged: none of it
// is conditional.

use object_store_013::MultipartId;
use object_store_013::list::{PaginatedListOptions, PaginatedListResult, PaginatedListStore};
use object_store_013::multipart::{MultipartStore, PartId};
use object_store_013::signer::Signer;

#[async_trait]
#[deny(clippy::missing_trait_methods)]
impl<T: ObjectStore + MultipartStore + ?Sized> MultipartStore for CommitStore<T> {
    async fn create_multipart(&self, path: &Path) -> Result<MultipartId> {
        self.inner().create_multipart(path).await
    }

    async fn put_part(
        &self,
        path: &Path,
        id: &MultipartId,
        part_idx: usize,
        data: PutPayload,
    ) -> Result<PartId> {
        self.inner().put_part(path, id, part_idx, data).await
    }

    async fn complete_multipart(
        &self,
        path: &Path,
        id: &MultipartId,
        parts: Vec<PartId>,
    ) -> Result<PutResult> {
        self.inner().complete_multipart(path, id, parts).await
    }

    async fn abort_multipart(&self, path: &Path, id: &MultipartId) -> Result<()> {
        self.inner().abort_multipart(path, id).await
    }
}

#[async_trait]
#[deny(clippy::missing_trait_methods)]
impl<T: ObjectStore + Signer + ?Sized> Signer for CommitStore<T> {
    async fn signed_url(
        &self,
        method: http::Method,
        path: &Path,
        expires_in: std::time::Duration,
    ) -> Result<url::Url> {
        self.inner().signed_url(method, path, expires_in).await
    }

    async fn signed_urls(
        &self,
        method: http::Method,
        paths: &[Path],
        expires_in: std::time::Duration,
    ) -> Result<Vec<url::Url>> {
        self.inner().signed_urls(method, paths, expires_in).await
    }
}

#[async_trait]
#[deny(clippy::missing_trait_methods)]
impl<T: ObjectStore + PaginatedListStore + ?Sized> PaginatedListStore for CommitStore<T> {
    async fn list_paginated(
        &self,
        prefix: Option<&str>,
        opts: PaginatedListOptions,
    ) -> Result<PaginatedListResult> {
        self.inner().list_paginated(prefix, opts).await
    }
}

/// object_store 0.13's AWS credentials, as the DynamoDB client (on 0.14's types) takes
/// them: the same provider, asked afresh for every request.
fn credentials(
    provider: object_store_013::aws::AwsCredentialProvider,
) -> object_store::aws::AwsCredentialProvider {
    Arc::new(Credentials013(provider))
}

#[derive(Debug)]
struct Credentials013(object_store_013::aws::AwsCredentialProvider);

#[async_trait]
impl object_store::CredentialProvider for Credentials013 {
    type Credential = object_store::aws::AwsCredential;

    async fn get_credential(&self) -> object_store::Result<Arc<Self::Credential>> {
        let c = self
            .0
            .get_credential()
            .await
            .map_err(|e| object_store::Error::Generic {
                store: "dynacommit",
                source: Box::new(e),
            })?;
        Ok(Arc::new(object_store::aws::AwsCredential {
            key_id: c.key_id.clone(),
            secret_key: c.secret_key.clone(),
            token: c.token.clone(),
        }))
    }
}
