//! Where the leases and the objects live: flags, the environment, or the embedded default.

use std::sync::Arc;

use clap::Args;
use dynacommit::dynamo::DynamoClientBuilder;
use dynacommit::lease::{DynamoLeaseTable, LeaseConfig, LeaseTable, MemoryLeaseTable};
use object_store::aws::{AmazonS3Builder, AwsCredentialProvider};
use object_store::local::LocalFileSystem;
use object_store::memory::InMemory;
use object_store::prefix::PrefixStore;
use object_store::{ObjectStore, RetryConfig};

/// Flags shared by every command.
#[derive(Debug, Args)]
pub struct BackendArgs {
    /// The object store: s3://bucket[/prefix], file:///dir or memory://. Default: a fresh
    /// local directory.
    #[arg(long, global = true, env = "DYNACOMMIT_STORE")]
    pub store: Option<String>,
    /// Lease table in DynamoDB, as TABLE or TABLE:TIMEOUT_MS.
    #[arg(long, global = true, env = "DYNACOMMIT_LEASE_TABLE", default_value = dynacommit::lease::DEFAULT_TABLE)]
    pub table: String,
    /// DynamoDB endpoint (else AWS_ENDPOINT_URL_DYNAMODB, AWS_ENDPOINT_URL, or AWS's own).
    #[arg(long, global = true)]
    pub dynamodb_endpoint: Option<String>,
    /// Use the in-process lease table even where DynamoDB is configured.
    #[arg(long, global = true)]
    pub embedded: bool,
    /// How often waiting writers poll, in milliseconds (default 100; 5 on the embedded
    /// default, where a poll costs microseconds).
    #[arg(long, global = true)]
    pub poll_ms: Option<u64>,
}

/// The lease table and object store a command runs on.
pub struct Backends {
    pub table: Arc<dyn LeaseTable>,
    pub config: LeaseConfig,
    pub store: Arc<dyn ObjectStore>,
    /// A one-line description, printed before the work.
    pub description: String,
    /// A directory to remove when done.
    pub scratch: Option<std::path::PathBuf>,
}

impl Drop for Backends {
    fn drop(&mut self) {
        if let Some(dir) = &self.scratch {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

impl BackendArgs {
    /// Whether DynamoDB is configured at all.
    fn dynamodb_configured(&self) -> bool {
        !self.embedded
            && (self.dynamodb_endpoint.is_some()
                || [
                    "AWS_ENDPOINT_URL_DYNAMODB",
                    "AWS_ENDPOINT_URL",
                    "AWS_REGION",
                    "AWS_DEFAULT_REGION",
                ]
                .iter()
                .any(|v| env(v).is_some()))
    }

    /// The lease settings `--table` names.
    pub fn lease_config(&self) -> Result<LeaseConfig, String> {
        self.table.parse().map_err(|e| format!("--table: {e}"))
    }

    /// The lease (or lock) table `name` in DynamoDB, when DynamoDB is configured.
    pub fn dynamo_table(&self, name: &str) -> Result<Option<DynamoLeaseTable>, String> {
        if !self.dynamodb_configured() {
            return Ok(None);
        }
        let mut builder = DynamoClientBuilder::from_env();
        // Explicit keys sign as before; otherwise AWS's standard credential chain.
        if (env("AWS_ACCESS_KEY_ID").is_none() || env("AWS_SECRET_ACCESS_KEY").is_none())
            && let Some(chain) = credential_chain(std::env::vars())?
        {
            builder = builder.with_credential_provider(chain);
        }
        if let Some(endpoint) = &self.dynamodb_endpoint {
            builder = builder.with_endpoint(endpoint);
        }
        if env("AWS_REGION").is_none() && env("AWS_DEFAULT_REGION").is_none() {
            // A local endpoint needs some region to sign for; AWS itself needs the real one.
            builder = builder.with_region("us-east-1");
        }
        let client = builder.build().map_err(|e| e.to_string())?;
        Ok(Some(DynamoLeaseTable::new(client, name)))
    }

    /// The table `name` in DynamoDB, for commands that have nothing to do without one.
    pub fn require_dynamo_table(&self, name: &str) -> Result<DynamoLeaseTable, String> {
        self.dynamo_table(name)?.ok_or_else(|| {
            "no DynamoDB configured: set AWS_ENDPOINT_URL_DYNAMODB (or --dynamodb-endpoint) or \
             AWS_REGION; the embedded default keeps no table beyond one process"
                .to_owned()
        })
    }

    /// Resolves everything a command needs.
    pub async fn resolve(&self) -> Result<Backends, String> {
        let mut config = self.lease_config()?;
        let (table, table_text, embedded_table): (Arc<dyn LeaseTable>, String, bool) =
            match self.dynamo_table(&config.table)? {
                Some(dynamo) => {
                    let text = format!(
                        "DynamoDB table {} at {}",
                        dynamo.table_name(),
                        dynamo.client().endpoint()
                    );
                    dynamo.ensure_table().await.map_err(|e| e.to_string())?;
                    (Arc::new(dynamo), text, false)
                }
                None => (
                    Arc::new(MemoryLeaseTable::new()),
                    "the in-process lease table".into(),
                    true,
                ),
            };
        let (store, store_text, scratch) = open_store(self.store.as_deref())?;
        config.poll_interval =
            std::time::Duration::from_millis(self.poll_ms.unwrap_or(if embedded_table {
                5
            } else {
                100
            }));
        config.validate().map_err(|e| e.to_string())?;
        let description = if embedded_table && self.store.is_none() {
            format!(
                "embedded default: {table_text} and {store_text} (configure --store and DynamoDB to use real services)"
            )
        } else {
            format!("leases in {table_text}; objects in {store_text}")
        };
        Ok(Backends {
            table,
            config,
            store,
            description,
            scratch,
        })
    }
}

/// AWS's standard credential chain, as object_store's `AmazonS3Builder` runs it from the
/// `AWS_*` variables in `vars`: static keys, else a web identity token
/// (`AWS_WEB_IDENTITY_TOKEN_FILE` and `AWS_ROLE_ARN`, exchanged at STS), else ECS task
/// credentials (`AWS_CONTAINER_CREDENTIALS_RELATIVE_URI`), else container credentials
/// (`AWS_CONTAINER_CREDENTIALS_FULL_URI` with `AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE`),
/// else the instance metadata service, unless `AWS_EC2_METADATA_DISABLED=true`: then there
/// is no chain (`None`), and the client builder says how to give credentials.
///
/// The provider fetches lazily, at the first request, and its own retries are kept short;
/// the DynamoDB client bounds each fetch by its call's deadline anyway. Errors never
/// carry the values of the variables.
fn credential_chain(
    vars: impl IntoIterator<Item = (String, String)>,
) -> Result<Option<AwsCredentialProvider>, String> {
    let vars: Vec<(String, String)> = vars
        .into_iter()
        .filter(|(k, v)| k.starts_with("AWS_") && !v.is_empty())
        .collect();
    let set = |name: &str| vars.iter().any(|(k, _)| k == name);
    let chain_configured = set("AWS_ACCESS_KEY_ID")
        || (set("AWS_WEB_IDENTITY_TOKEN_FILE") && set("AWS_ROLE_ARN"))
        || set("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI")
        || (set("AWS_CONTAINER_CREDENTIALS_FULL_URI")
            && set("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE"));
    let metadata_disabled = vars
        .iter()
        .any(|(k, v)| k == "AWS_EC2_METADATA_DISABLED" && v.eq_ignore_ascii_case("true"));
    if !chain_configured && metadata_disabled {
        return Ok(None);
    }
    // What AmazonS3Builder::from_env does, from `vars`; the bucket is never contacted.
    let mut builder = AmazonS3Builder::new();
    for (key, value) in &vars {
        if let Ok(config) = key.to_ascii_lowercase().parse() {
            builder = builder.with_config(config, value);
        }
    }
    let s3 = builder
        .with_bucket_name("dynacommit-credentials")
        .with_retry(RetryConfig {
            max_retries: 2,
            retry_timeout: std::time::Duration::from_secs(10),
            ..RetryConfig::default()
        })
        .build()
        .map_err(|e| format!("cannot set up the AWS credential chain: {e}"))?;
    Ok(Some(s3.credentials().clone()))
}

type OpenedStore = (Arc<dyn ObjectStore>, String, Option<std::path::PathBuf>);

/// Opens the store a URL names, or a fresh local directory.
fn open_store(url: Option<&str>) -> Result<OpenedStore, String> {
    let Some(url) = url else {
        let dir = std::env::temp_dir().join(format!("dynacommit-{:016x}", rand::random::<u64>()));
        std::fs::create_dir_all(&dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        let store = LocalFileSystem::new_with_prefix(&dir).map_err(|e| e.to_string())?;
        let text = format!("a local store in {}", dir.display());
        return Ok((Arc::new(store), text, Some(dir)));
    };
    let bad = |why: &str| {
        format!("--store {url:?}: {why}; use s3://bucket[/prefix], file:///dir or memory://")
    };
    let (scheme, rest) = url.split_once("://").ok_or_else(|| bad("no scheme"))?;
    match scheme {
        "memory" => Ok((Arc::new(InMemory::new()), "an in-memory store".into(), None)),
        "file" => {
            std::fs::create_dir_all(rest)
                .map_err(|e| bad(&format!("cannot create the directory ({e})")))?;
            let store = LocalFileSystem::new_with_prefix(rest).map_err(|e| bad(&e.to_string()))?;
            Ok((Arc::new(store), format!("a local store in {rest}"), None))
        }
        "s3" => {
            let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
            if bucket.is_empty() {
                return Err(bad("no bucket"));
            }
            let mut builder = AmazonS3Builder::from_env().with_bucket_name(bucket);
            let endpoint = env("AWS_ENDPOINT_URL_S3").or_else(|| env("AWS_ENDPOINT_URL"));
            if let Some(endpoint) = &endpoint {
                builder = builder
                    .with_endpoint(endpoint)
                    .with_allow_http(endpoint.starts_with("http://"));
            }
            let s3 = builder.build().map_err(|e| bad(&e.to_string()))?;
            let text = format!(
                "s3://{bucket}/{prefix}{}",
                endpoint.map(|e| format!(" at {e}")).unwrap_or_default()
            );
            let store: Arc<dyn ObjectStore> = if prefix.is_empty() {
                Arc::new(s3)
            } else {
                Arc::new(PrefixStore::new(s3, prefix))
            };
            Ok((store, text, None))
        }
        other => Err(bad(&format!("unknown scheme {other:?}"))),
    }
}
