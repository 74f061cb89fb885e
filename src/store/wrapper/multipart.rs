//! The completion of a multipart upload with a condition: the S3 request
//! `CompleteMultipartUpload` carrying `If-None-Match: *` or `If-Match`, guarded by the
//! lease protocol as a put with the same mode is.

use super::os;
use super::{CommitStore, etag_of, no_etag_to_update};
use os::multipart::{MultipartStore, PartId};
use os::path::Path;
use os::{MultipartId, ObjectStore, PutMode, PutResult, Result};

use crate::lease::CREATE_ETAG;

impl<T: ObjectStore + MultipartStore + ?Sized> CommitStore<T> {
    /// Completes the multipart upload `id` of `location` from `parts` if `mode` holds: the
    /// object is absent ([`PutMode::Create`]) or has the ETag read
    /// ([`PutMode::Update`]); [`PutMode::Overwrite`] completes it plainly. A conditional
    /// completion takes the lease a put with the same condition takes, so that uploads
    /// and puts to one path exclude each other, and fails as such a put fails
    /// (`AlreadyExists`, `Precondition`; [`may_have_applied`](super::may_have_applied)
    /// tells whether a failed one may have landed).
    ///
    /// `MultipartStore` carries no condition to the store, so this needs leases: a store in
    /// [`Conditions::Native`](crate::Conditions::Native) mode (or `Auto`, having found the
    /// store enforcing) answers `NotSupported` for a conditional completion, and completes
    /// nothing.
    ///
    /// ```
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// use std::sync::Arc;
    #[doc = concat!(" use ", at!(), "::CommitStore;")]
    /// use dynacommit::lease::{LeaseConfig, LeaseManager, MemoryLeaseTable};
    #[doc = concat!(" use ", os_name!(), "::{PutMode, PutPayload, memory::InMemory, path::Path};")]
    #[doc = concat!(" use ", os_name!(), "::multipart::MultipartStore;")]
    ///
    /// let leases = LeaseManager::new(Arc::new(MemoryLeaseTable::new()), LeaseConfig::default())?;
    /// let store = CommitStore::new(Arc::new(InMemory::new()), leases);
    /// let path = Path::from("data/part-0.parquet");
    /// let id = store.create_multipart(&path).await?;
    /// let part = store.put_part(&path, &id, 0, PutPayload::from("rows")).await?;
    /// store.complete_multipart_opts(&path, &id, vec![part], PutMode::Create).await?;
    /// # Ok(()) }
    /// ```
    pub async fn complete_multipart_opts(
        &self,
        location: &Path,
        id: &MultipartId,
        parts: Vec<PartId>,
        mode: PutMode,
    ) -> Result<PutResult> {
        let complete = || self.inner.complete_multipart(location, id, parts);
        match mode {
            PutMode::Overwrite => complete().await,
            _ if self.native().await? => Err(os::Error::NotSupported {
                source: format!(
                    "{location}: a conditional completion of a multipart upload needs leases \
                     (the store is used in native mode, and object_store sends no condition \
                     with CompleteMultipartUpload)"
                )
                .into(),
            }),
            PutMode::Create => {
                let check = || self.check_absent(location);
                self.guarded(location, CREATE_ETAG, check, Some(etag_of), complete)
                    .await
            }
            PutMode::Update(version) => {
                let Some(etag) = version.e_tag else {
                    return Err(no_etag_to_update());
                };
                let check = || self.check_etag(location, &etag);
                self.guarded(location, &etag, check, Some(etag_of), complete)
                    .await
            }
        }
    }
}
