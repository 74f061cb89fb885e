//! A lease manager on DynamoDB in one call: from a client and settings, or from the
//! environment.

use super::{DynamoLeaseTable, LeaseManager};
use crate::dynamo::{DynamoClient, DynamoError};

/// Building a lease manager on DynamoDB from settings failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SetupError {
    /// A lease setting is unusable.
    #[error(transparent)]
    Config(#[from] crate::lease::ConfigError),
    /// The DynamoDB client could not be built (no region or endpoint, bad credentials
    /// settings).
    #[error(transparent)]
    Dynamo(#[from] DynamoError),
}

impl LeaseManager {
    /// Leases in the DynamoDB table that `config` names, reached through `client`: the table
    /// name is given once. The table must exist ([`DynamoLeaseTable::ensure_table`], or
    /// `dynacommit table create`).
    ///
    /// ```no_run
    /// # fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// use std::sync::Arc;
    /// use dynacommit::{CommitStore, dynamo::DynamoClientBuilder, lease::{LeaseConfig, LeaseManager}};
    /// use object_store::aws::AmazonS3Builder;
    ///
    /// let s3 = AmazonS3Builder::from_env().with_bucket_name("lake").build()?;
    /// let dynamo = DynamoClientBuilder::from_env().with_credential_provider(s3.credentials().clone()).build()?;
    /// let store = CommitStore::new(Arc::new(s3), LeaseManager::dynamodb(dynamo, LeaseConfig::new("lake_leases"))?);
    /// # let _ = store; Ok(()) }
    /// ```
    pub fn dynamodb(
        client: DynamoClient,
        config: crate::lease::LeaseConfig,
    ) -> Result<Self, crate::lease::ConfigError> {
        let table = DynamoLeaseTable::new(client, config.table.clone());
        Self::new(std::sync::Arc::new(table), config)
    }

    /// [`dynamodb`](Self::dynamodb) with everything from the environment: the client from
    /// [`DynamoClientBuilder::from_env`](crate::dynamo::DynamoClientBuilder::from_env), the
    /// settings from [`LeaseConfig::from_env`](crate::lease::LeaseConfig::from_env).
    pub fn from_env() -> Result<Self, SetupError> {
        let client = crate::dynamo::DynamoClientBuilder::from_env().build()?;
        Ok(Self::dynamodb(
            client,
            crate::lease::LeaseConfig::from_env()?,
        )?)
    }
}
