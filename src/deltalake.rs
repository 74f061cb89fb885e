//! deltalake's `s3://` and `s3a://` tables, committed through dynacommit's leases.
//! Enabled by the `deltalake` feature (deltalake-core 1.1, on object_store 0.13).
//!
//! [`register`] puts two factories into deltalake-core's process-wide registries for the
//! `s3` and `s3a` schemes, in place of deltalake-aws's (register one or the other, not
//! both):
//!
//! - [`S3CommitStoreFactory`] builds each table's store with
//!   [`CommitStore::from_url_opts`](crate::v013::CommitStore::from_url_opts) from the
//!   table URL and the table's `storage_options`: the options object_store's
//!   `AmazonS3Builder` takes, and `conditional_put=dynamo:TABLE[:TIMEOUT_MS]` naming the
//!   lease table, as object_store 0.12's DynamoCommit took them.
//! - [`S3LogStoreFactory`] gives those tables deltalake's default log store, which commits
//!   version `N` by writing `_delta_log/N.json` with `PutMode::Create` (deltalake-core
//!   1.1.3 sends the commit's bytes that way for its `DefaultLogStore`; only other log
//!   stores stage a temporary file and `rename_if_not_exists` it). On the wrapper that
//!   create takes a lease first, so of two writers of one version exactly one wins and the
//!   other gets `AlreadyExists`, which deltalake's commit loop turns into a conflict check
//!   and a retry at the next version, on any S3 store, including those that ignore
//!   `If-None-Match`.
//!
//! deltalake's own settings in `storage_options` are taken from it before the options
//! reach the S3 builder: its retry settings (`max_retries`, `retry_timeout`,
//! `backoff_config.*`) and root certificate (`certificate_path`) configure the S3 client
//! (the DynamoDB client keeps its own retries and the system's roots); an IO runtime
//! (deltalake's `IORuntime`, or its runtime options) runs every call of the store, leases
//! included, as deltalake does for its built-in stores; `max_concurrency` bounds the
//! store's concurrent calls. Any other option the S3 builder and dynacommit do not know is
//! an error naming it, and so are deltalake-aws's locking options
//! (`AWS_S3_LOCKING_PROVIDER`, `DELTA_DYNAMO_TABLE_NAME`): that is another protocol, on
//! another DynamoDB table, that must never be mixed with this one on a Delta table.
//!
//! ```no_run
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! use std::collections::HashMap;
//! use deltalake_core::DeltaTableBuilder;
//!
//! dynacommit::deltalake::register();
//! let options = HashMap::from([
//!     ("aws_region".to_owned(), "eu-west-1".to_owned()),
//!     ("conditional_put".to_owned(), "dynamo:lake_leases:5000".to_owned()),
//! ]);
//! let table = DeltaTableBuilder::from_url(url::Url::parse("s3://lake/tables/events")?)?
//!     .with_storage_options(options)
//!     .load()
//!     .await?;
//! println!("version {:?}", table.version());
//! # Ok(()) }
//! ```

use std::sync::Arc;

use deltalake_core::logstore::{
    DeltaIOStorageBackend, LogStore, LogStoreFactory, ObjectStoreFactory, ObjectStoreRef,
    StorageConfig, client_options_from_certificate, default_logstore, logstore_factories,
    object_store_factories,
};
use deltalake_core::{DeltaResult, DeltaTableError};
use object_store_013::ObjectStoreScheme;
use object_store_013::path::Path;
use url::Url;

use crate::v013::CommitStore;

/// The URL schemes [`register`] serves, as deltalake-aws does.
pub const SCHEMES: [&str; 2] = ["s3", "s3a"];

/// deltalake-aws's options selecting its own DynamoDB locking (S3DynamoDbLogStore), as
/// lowercase names: refused, never silently ignored.
const DELTALAKE_AWS_LOCKING: [&str; 2] = ["aws_s3_locking_provider", "delta_dynamo_table_name"];

/// Registers [`S3CommitStoreFactory`] and [`S3LogStoreFactory`] with deltalake-core for
/// the [`SCHEMES`], replacing whatever was registered for them (deltalake-aws's
/// `register_handlers`, for one). Tables opened afterwards on those schemes commit through
/// leases; call it once at start-up, before opening any.
pub fn register() {
    let stores = Arc::new(S3CommitStoreFactory);
    let logs = Arc::new(S3LogStoreFactory);
    for scheme in SCHEMES {
        // "s3://" and "s3a://" always parse.
        if let Ok(url) = Url::parse(&format!("{scheme}://")) {
            object_store_factories().insert(url.clone(), stores.clone());
            logstore_factories().insert(url, logs.clone());
        }
    }
}

/// deltalake's [`ObjectStoreFactory`] for S3 URLs: a [`CommitStore`] built by
/// [`CommitStore::from_url_opts`] from the table URL and its storage options, at the
/// bucket's root, and the table's path in the bucket (as deltalake-aws's factory returns
/// them).
#[derive(Debug, Clone, Copy, Default)]
pub struct S3CommitStoreFactory;

impl ObjectStoreFactory for S3CommitStoreFactory {
    fn parse_url_opts(
        &self,
        url: &Url,
        config: &StorageConfig,
    ) -> DeltaResult<(ObjectStoreRef, Path)> {
        refuse_deltalake_aws_locking(config)?;
        let (_, path) = ObjectStoreScheme::parse(url).map_err(|e| generic(Box::new(e)))?;
        let prefix = Path::parse(path)?;

        let retry = config.retry.clone();
        let client = match config
            .certificate
            .as_ref()
            .and_then(|c| c.certificate_path.as_deref())
        {
            Some(path) => Some(client_options_from_certificate(path)?),
            None => None,
        };
        // Only the options deltalake did not take for itself (runtime, limit, retry,
        // certificate) are the S3 builder's or dynacommit's.
        let (store, _) = CommitStore::from_url_opts_with(
            url,
            config
                .unknown_properties
                .iter()
                .map(|(k, v)| (k, v.clone())),
            |builder| {
                let builder = builder.with_retry(retry);
                match client {
                    Some(client) => builder.with_client_options(client),
                    None => builder,
                }
            },
        )
        .map_err(|e| generic(Box::new(e)))?;
        tracing::debug!(%url, %prefix, %store, "deltalake store through dynacommit");

        let mut store: ObjectStoreRef = Arc::new(store);
        if let Some(max) = config.limit.as_ref().and_then(|l| l.max_concurrency) {
            store = Arc::new(object_store_013::limit::LimitStore::new(store, max));
        }
        if let Some(runtime) = &config.runtime {
            store = Arc::new(DeltaIOStorageBackend::new(store, runtime.clone()));
        }
        Ok((store, prefix))
    }
}

/// deltalake's [`LogStoreFactory`] for S3 URLs: its default log store, which commits with
/// `PutMode::Create` (guarded by the leases on a [`CommitStore`]).
#[derive(Debug, Clone, Copy, Default)]
pub struct S3LogStoreFactory;

impl LogStoreFactory for S3LogStoreFactory {
    fn with_options(
        &self,
        prefixed_store: ObjectStoreRef,
        root_store: ObjectStoreRef,
        location: &Url,
        options: &StorageConfig,
    ) -> DeltaResult<Arc<dyn LogStore>> {
        Ok(default_logstore(
            prefixed_store,
            root_store,
            location,
            options,
        ))
    }
}

/// An error for deltalake, keeping its source.
fn generic(source: Box<dyn std::error::Error + Send + Sync>) -> DeltaTableError {
    DeltaTableError::GenericError { source }
}

/// Refuses deltalake-aws's locking options, in the storage options or the environment.
fn refuse_deltalake_aws_locking(config: &StorageConfig) -> DeltaResult<()> {
    let from_options = config
        .raw
        .keys()
        .find(|k| DELTALAKE_AWS_LOCKING.contains(&k.to_ascii_lowercase().as_str()))
        .cloned();
    let from_env = || {
        DELTALAKE_AWS_LOCKING
            .iter()
            .map(|k| k.to_ascii_uppercase())
            .find(|k| std::env::var_os(k).is_some())
            .map(|k| format!("{k} (environment variable)"))
    };
    match from_options.or_else(from_env) {
        None => Ok(()),
        Some(key) => Err(DeltaTableError::Generic(format!(
            "`{key}` configures deltalake-aws's S3DynamoDbLogStore, another commit protocol on \
             another DynamoDB table; dynacommit's factories take `conditional_put=dynamo:TABLE` \
             instead. Never let the two protocols write one Delta table: drop the option, or \
             do not register dynacommit for this process"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use deltalake_core::logstore::IORuntime;

    #[test]
    fn register_serves_s3_and_s3a() {
        register();
        for scheme in SCHEMES {
            let url = Url::parse(&format!("{scheme}://")).unwrap();
            assert!(object_store_factories().contains_key(&url), "{scheme}");
            assert!(logstore_factories().contains_key(&url), "{scheme}");
        }
    }

    fn config(options: &[(&str, &str)]) -> StorageConfig {
        StorageConfig::parse_options(options.iter().copied()).unwrap()
    }

    #[test]
    fn the_store_is_at_the_bucket_root_and_the_prefix_is_the_table_path() {
        let url = Url::parse("s3a://lake/tables/events").unwrap();
        let options = config(&[
            ("aws_region", "eu-west-1"),
            ("conditional_put", "dynamo:leases:5000"),
            ("aws_endpoint_url_dynamodb", "http://127.0.0.1:1"),
            // deltalake's own: taken by StorageConfig, never seen by the S3 builder.
            ("max_retries", "3"),
            ("max_concurrency", "4"),
        ]);
        let (store, prefix) = S3CommitStoreFactory.parse_url_opts(&url, &options).unwrap();
        assert_eq!(prefix.as_ref(), "tables/events");
        let shown = store.to_string();
        assert!(
            shown.starts_with("LimitStore(4, CommitStore(AmazonS3(lake), "),
            "{shown}"
        );
        assert!(shown.contains("dynamodb table leases"), "{shown}");

        // An IO runtime runs every call of the store, leases included.
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let options = options.with_io_runtime(IORuntime::RT(runtime.handle().clone()));
        let (store, _) = S3CommitStoreFactory.parse_url_opts(&url, &options).unwrap();
        let shown = store.to_string();
        assert!(
            shown.starts_with("DeltaIOStorageBackend(LimitStore(4, CommitStore("),
            "{shown}"
        );
    }

    #[test]
    fn unknown_and_deltalake_aws_options_are_refused_by_name() {
        let url = Url::parse("s3://lake/t").unwrap();
        let err = |options: &[(&str, &str)]| {
            S3CommitStoreFactory
                .parse_url_opts(&url, &config(options))
                .map(|_| ())
                .unwrap_err()
                .to_string()
        };
        let e = err(&[("conditional_put", "dynamo:t"), ("aws_bucket_nam", "x")]);
        assert!(e.contains("`aws_bucket_nam`"), "{e}");
        let e = err(&[("aws_region", "x")]);
        assert!(e.contains("conditional_put=dynamo"), "{e}");
        let e = err(&[
            ("conditional_put", "dynamo:t"),
            ("AWS_S3_LOCKING_PROVIDER", "dynamodb"),
        ]);
        assert!(e.contains("`AWS_S3_LOCKING_PROVIDER`"), "{e}");
        assert!(e.contains("S3DynamoDbLogStore"), "{e}");
    }
}
