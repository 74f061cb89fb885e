//! `CommitStore::from_url_opts`: an S3 store and its lease table from a URL and options,
//! as object_store 0.12's `parse_url_opts` built them for `DynamoCommit`.

use std::sync::Arc;

use super::{CommitStore, STORE};
use super::{credentials, os};
use os::path::Path;

use crate::lease::LeaseManager;

impl CommitStore {
    /// An S3 store on `url`, wrapped, and the path within it: object_store 0.12's
    /// `parse_url_opts` for stores that used its DynamoCommit. `options` are what
    /// `AmazonS3Builder::with_config` takes (keys in any case), and
    /// `conditional_put=dynamo:TABLE[:TIMEOUT_MS]` names the lease table, as it selected
    /// 0.12's DynamoCommit. Like `parse_url_opts`, it reads no environment.
    ///
    /// DynamoDB is reached with the S3 store's credentials, in its region (the URL's, if
    /// the URL names one), through its proxy and CA settings, at
    /// `aws_endpoint_url_dynamodb`, else at the S3 endpoint if one is set (as 0.12 did),
    /// else at AWS's. Unknown options and malformed values are errors naming the option.
    ///
    /// `dynacommit_conditions` = `lease` (the default), `native` or `auto` sets the
    /// [condition mode](CommitStore::with_conditions); in `native` and `auto` modes a
    /// `copy_if_not_exists` other than `dynamo:` goes to the S3 store, for it to enforce.
    ///
    /// `dynacommit_hold_paths` = `true` [holds paths](CommitStore::hold_paths) (not with
    /// `native`).
    ///
    /// The lease table is object_store 0.12's, keyed by the object path alone, so 0.12.5
    /// writers and these share it safely (except where paths are held). The store keeps its
    /// S3 type, so its multipart, signing and paginated listing are offered too.
    ///
    /// ```no_run
    /// # fn run() -> Result<(), Box<dyn std::error::Error>> {
    #[doc = concat!(" use ", at!(), "::CommitStore;")]
    ///
    /// let url = url::Url::parse("s3://lake/tables/events")?;
    /// let (store, path) = CommitStore::from_url_opts(
    ///     &url,
    ///     [("aws_region", "eu-west-1"), ("conditional_put", "dynamo:lake_leases:5000")],
    /// )?;
    /// # let _ = (store, path); Ok(()) }
    /// ```
    pub fn from_url_opts<I, K, V>(
        url: &url::Url,
        options: I,
    ) -> std::result::Result<(CommitStore<os::aws::AmazonS3>, Path), crate::store::FromOptionsError>
    where
        I: IntoIterator<Item = (K, V)>,
        K: AsRef<str>,
        V: Into<String>,
    {
        Self::from_url_opts_with(url, options, std::convert::identity)
    }

    /// [`Self::from_url_opts`], with `configure` applied to the S3 builder before the
    /// options (so that an option naming a setting `configure` also sets wins): for an
    /// integration that carries settings of its own (retries, client options).
    // Only the deltalake integration (object_store 0.13) calls it.
    #[allow(dead_code)]
    pub(crate) fn from_url_opts_with<I, K, V>(
        url: &url::Url,
        options: I,
        configure: impl FnOnce(os::aws::AmazonS3Builder) -> os::aws::AmazonS3Builder,
    ) -> std::result::Result<(CommitStore<os::aws::AmazonS3>, Path), crate::store::FromOptionsError>
    where
        I: IntoIterator<Item = (K, V)>,
        K: AsRef<str>,
        V: Into<String>,
    {
        use crate::store::FromOptionsError;
        use os::aws::{AmazonS3Builder, AmazonS3ConfigKey};
        let options = options
            .into_iter()
            .map(|(k, v)| (k.as_ref().to_owned(), v.into()));
        let parsed = crate::store::options::Options::parse(options, |key| {
            key.parse::<AmazonS3ConfigKey>().is_ok()
        })?;
        let mut builder = configure(AmazonS3Builder::new().with_url(url.as_str()));
        for (key, value) in parsed.s3 {
            let config_key = key
                .parse::<AmazonS3ConfigKey>()
                .map_err(|_| FromOptionsError::UnknownOption { key: key.clone() })?;
            builder = builder.with_config(config_key, value);
        }
        // The URL's region wins over the option for S3 (the builder parses the URL when it
        // builds): the leases go where the data goes.
        let region = crate::store::options::region_of_url(url)
            .or_else(|| builder.get_config_value(&AmazonS3ConfigKey::Region))
            .unwrap_or_else(|| "us-east-1".to_owned());
        let s3_endpoint = builder.get_config_value(&AmazonS3ConfigKey::Endpoint);
        let s3 = builder
            .build()
            .map_err(|e| FromOptionsError::Store(e.to_string()))?;
        let mut dynamo = crate::dynamo::DynamoClientBuilder::default()
            .with_region(region)
            .with_credential_provider(credentials(s3.credentials().clone()));
        if let Some(endpoint) = parsed.dynamodb_endpoint.or(s3_endpoint) {
            dynamo = dynamo.with_endpoint(endpoint);
        }
        if let Some(http) = parsed.http.client()? {
            dynamo = dynamo.with_http_client(http);
        }
        let leases = LeaseManager::dynamodb(dynamo.build()?, parsed.lease)?;
        let path = Path::from_url_path(url.path())
            .map_err(|e| FromOptionsError::Store(format!("the URL's path: {e}")))?;
        let mut store = CommitStore::new(Arc::new(s3), leases)
            .with_conditions(parsed.conditions)
            .with_probe_path(path.clone());
        store.hold_paths = parsed.hold_paths;
        Ok((store, path))
    }
}

impl From<crate::store::FromOptionsError> for os::Error {
    fn from(e: crate::store::FromOptionsError) -> Self {
        os::Error::Generic {
            store: STORE,
            source: Box::new(e),
        }
    }
}
