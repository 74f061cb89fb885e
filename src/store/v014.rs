//! The wrapper for object_store 0.14, the default: [`CommitStore`] mounted on that crate,
//! and what its inner store offers beside `ObjectStore`, passed through.

use async_trait::async_trait;
use object_store as os;
use os::path::Path;
use os::{ObjectStore, PutMultipartOptions, PutPayload, PutResult, Result};

/// The path at which the wrapper's doc examples find `CommitStore`.
macro_rules! at {
    () => {
        "dynacommit"
    };
}

/// The name of the `object_store` crate in the wrapper's doc examples.
macro_rules! os_name {
    () => {
        "object_store"
    };
}

// The one wrapper, mounted on each version's crate: loaded twice on purpose.
#[allow(clippy::duplicate_mod)]
#[path = "wrapper/mod.rs"]
mod wrapper;

pub use wrapper::{CommitStore, may_have_applied};

/// object_store 0.14's AWS credentials, as the DynamoDB client takes them: they are
/// already of its type.
fn credentials(provider: os::aws::AwsCredentialProvider) -> os::aws::AwsCredentialProvider {
    provider
}

/// A `PutResult` (0.14's has extensions, 0.13's none).
fn put_result(e_tag: Option<String>, version: Option<String>) -> PutResult {
    PutResult {
        e_tag,
        version,
        extensions: Default::default(),
    }
}

// What the inner store offers beside `ObjectStore`, passed through unchanged: none of
// it is conditional. (0.13's traits lack the `_opts` methods: see `v013.rs`.)

use object_store::MultipartId;
use object_store::list::{PaginatedListOptions, PaginatedListResult, PaginatedListStore};
use object_store::multipart::{MultipartStore, PartId};
use object_store::signer::{Method, SignedUrlOptions, Signer, Url};

#[async_trait]
#[deny(clippy::missing_trait_methods)]
impl<T: ObjectStore + MultipartStore + ?Sized> MultipartStore for CommitStore<T> {
    async fn create_multipart(&self, path: &Path) -> Result<MultipartId> {
        self.inner().create_multipart(path).await
    }

    async fn create_multipart_opts(
        &self,
        path: &Path,
        opts: PutMultipartOptions,
    ) -> Result<MultipartId> {
        self.inner().create_multipart_opts(path, opts).await
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
        method: Method,
        path: &Path,
        expires_in: std::time::Duration,
    ) -> Result<Url> {
        self.inner().signed_url(method, path, expires_in).await
    }

    async fn signed_url_opts(
        &self,
        method: Method,
        path: &Path,
        expires_in: std::time::Duration,
        options: &SignedUrlOptions,
    ) -> Result<Url> {
        self.inner()
            .signed_url_opts(method, path, expires_in, options)
            .await
    }

    async fn signed_urls(
        &self,
        method: Method,
        paths: &[Path],
        expires_in: std::time::Duration,
    ) -> Result<Vec<Url>> {
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
