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

crate::store::commit_store!(object_store_013, "dynacommit::v013", credentials_013);

/// object_store 0.13's AWS credentials, as the DynamoDB client (on 0.14's types) takes
/// them: the same provider, asked afresh for every request.
fn credentials_013(
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
