//! Where the leases and the objects live: flags, the environment, or the embedded default.

use std::sync::Arc;

use clap::Args;
use dynacommit::dynamo::{DynamoClient, DynamoClientBuilder, DynamoError, EnsureReport};
use dynacommit::kv::DynamoKv;
use dynacommit::lease::{DynamoLeaseTable, LeaseConfig, LeaseTable, MemoryLeaseTable};
use object_store::aws::{AmazonS3Builder, AwsCredentialProvider};
use object_store::local::LocalFileSystem;
use object_store::memory::InMemory;
use object_store::prefix::PrefixStore;
use object_store::{ObjectStore, RetryConfig};

use crate::fail::Fail;

/// Flags shared by every command.
#[derive(Debug, Args)]
pub struct BackendArgs {
    /// The object store: s3://bucket[/prefix], file:///dir or memory://. Default: a fresh
    /// local directory.
    #[arg(
        long,
        global = true,
        help_heading = "Where leases and objects live",
        env = "DYNACOMMIT_STORE"
    )]
    pub store: Option<String>,
    /// Lease table in DynamoDB, as TABLE or TABLE:TIMEOUT_MS (else DYNACOMMIT_LEASE_TABLE,
    /// else dynacommit_leases). Naming a table asks for DynamoDB.
    #[arg(long, global = true, help_heading = "Where leases and objects live")]
    pub table: Option<String>,
    /// DynamoDB endpoint (else AWS_ENDPOINT_URL_DYNAMODB, AWS_ENDPOINT_URL, or AWS's own).
    #[arg(long, global = true, help_heading = "Where leases and objects live")]
    pub dynamodb_endpoint: Option<String>,
    /// Use DynamoDB (AWS's own, in AWS_REGION, unless an endpoint is set) for the leases
    /// (and for `kv`'s keys).
    #[arg(
        long,
        global = true,
        help_heading = "Where leases and objects live",
        conflicts_with = "embedded"
    )]
    pub dynamodb: bool,
    /// Use the in-process lease table (for `kv`, the local file) even where DynamoDB is
    /// configured.
    #[arg(long, global = true, help_heading = "Where leases and objects live")]
    pub embedded: bool,
    /// Create the lease (lock, key-value) table if it is missing, also outside loopback endpoints
    /// (dynacommit creates tables unasked only on 127.0.0.1 or localhost).
    #[arg(long, global = true, help_heading = "Where leases and objects live")]
    pub create_table: bool,
    /// How often waiting writers poll, in milliseconds (else DYNACOMMIT_POLL_INTERVAL_MS,
    /// else 100; 5 on the embedded default, where a poll costs microseconds).
    #[arg(long, global = true, help_heading = "Where leases and objects live")]
    pub poll_ms: Option<u64>,
}

/// The lease table a command runs on.
pub struct Leases {
    pub table: Arc<dyn LeaseTable>,
    pub config: LeaseConfig,
    /// A description of the table and its timing.
    pub text: String,
    /// Whether the table is the in-process one.
    pub embedded: bool,
}

/// The lease table and object store a command runs on.
pub struct Backends {
    pub table: Arc<dyn LeaseTable>,
    pub config: LeaseConfig,
    pub store: Arc<dyn ObjectStore>,
    /// A one-line description, printed before the work (not in JSON mode).
    pub description: String,
    /// Warnings, printed to stderr in every mode.
    pub warnings: Vec<String>,
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

/// The variable `name`, if set and not empty.
pub fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

/// Whether `endpoint` is on this machine (127.0.0.0/8, ::1 or localhost), where creating
/// a table costs nothing and touches no account.
pub fn is_loopback(endpoint: &str) -> bool {
    match url::Url::parse(endpoint)
        .ok()
        .and_then(|u| u.host().map(|h| h.to_owned()))
    {
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        Some(url::Host::Domain(name)) => name.eq_ignore_ascii_case("localhost"),
        None => false,
    }
}

impl BackendArgs {
    /// Why DynamoDB is to be used, if it is: an endpoint, `--dynamodb`, or the table
    /// named by `table_named` (a flag or variable the user set). AWS_REGION alone is not a
    /// request: it is set on many machines for other tools.
    fn dynamodb_reason(&self, table_named: Option<&'static str>) -> Option<&'static str> {
        if self.embedded {
            return None;
        }
        if self.dynamodb_endpoint.is_some() {
            return Some("--dynamodb-endpoint");
        }
        for name in ["AWS_ENDPOINT_URL_DYNAMODB", "AWS_ENDPOINT_URL"] {
            if env(name).is_some() {
                return Some(name);
            }
        }
        if self.dynamodb {
            return Some("--dynamodb");
        }
        table_named
    }

    /// The flag or variable that names the lease table, if one does.
    fn lease_table_named(&self) -> Option<&'static str> {
        if self.table.is_some() {
            Some("--table")
        } else if env("DYNACOMMIT_LEASE_TABLE").is_some() {
            Some("DYNACOMMIT_LEASE_TABLE")
        } else {
            None
        }
    }

    /// The lease settings: flags, then the environment (`LeaseConfig::from_env`'s
    /// variables), then the defaults. `embedded` picks the default poll interval.
    pub fn lease_config(&self, embedded: bool) -> Result<LeaseConfig, Fail> {
        self.lease_config_from(embedded, env).map_err(Fail::Usage)
    }

    fn lease_config_from(
        &self,
        embedded: bool,
        lookup: impl Fn(&str) -> Option<String>,
    ) -> Result<LeaseConfig, String> {
        let mut config = LeaseConfig::from_lookup(&lookup).map_err(|e| {
            format!("{e} (from the DYNACOMMIT_* variables: fix or unset the one named)")
        })?;
        if let Some(spec) = &self.table {
            let named: LeaseConfig = spec.parse().map_err(|e| format!("--table: {e}"))?;
            config.table = named.table;
            if spec.contains(':') {
                config.timeout = named.timeout;
            }
        }
        if let Some(ms) = self.poll_ms {
            config.poll_interval = std::time::Duration::from_millis(ms);
        } else if embedded && lookup("DYNACOMMIT_POLL_INTERVAL_MS").is_none() {
            config.poll_interval = std::time::Duration::from_millis(5);
        }
        if self.poll_ms == Some(0) {
            return Err("--poll-ms 0: the poll interval must be above zero".into());
        }
        config.validate().map_err(|e| {
            format!("{e} (check --table, --poll-ms and the DYNACOMMIT_* variables)")
        })?;
        Ok(config)
    }

    /// The lease table's name (flags, then DYNACOMMIT_LEASE_TABLE, then the default).
    pub fn lease_table_name(&self) -> Result<String, Fail> {
        Ok(self.lease_config(false)?.table)
    }

    /// The lock table `name` in DynamoDB if DynamoDB was asked for (`explicit`: the user
    /// named the table).
    pub fn lock_table(&self, name: &str, explicit: bool) -> Result<Option<DynamoLeaseTable>, Fail> {
        match self.dynamodb_reason(explicit.then_some("--lock-table")) {
            Some(_) => self.open_dynamo(name).map(Some),
            None => Ok(None),
        }
    }

    /// The DynamoDB client for the key-value table if DynamoDB was asked for (`table_named`:
    /// the flag or variable that named the table, if one did), with the reason; `None` for
    /// the embedded default.
    pub fn kv_client(
        &self,
        table_named: Option<&'static str>,
    ) -> Result<Option<(DynamoClient, &'static str)>, Fail> {
        match self.dynamodb_reason(table_named) {
            Some(reason) => Ok(Some((self.open_client()?, reason))),
            None => Ok(None),
        }
    }

    /// The AWS_REGION-like variable set while no DynamoDB was asked for, if any: worth a
    /// note, since the user may have expected DynamoDB.
    pub fn region_without_dynamodb(&self, table_named: Option<&'static str>) -> Option<&str> {
        if self.embedded || self.dynamodb_reason(table_named).is_some() {
            return None;
        }
        ["AWS_REGION", "AWS_DEFAULT_REGION"]
            .into_iter()
            .find(|name| env(name).is_some())
    }

    /// The client's settings come from flags and the environment: its errors are usage.
    fn open_dynamo(&self, name: &str) -> Result<DynamoLeaseTable, Fail> {
        Ok(DynamoLeaseTable::new(self.open_client()?, name))
    }

    /// The DynamoDB client, from flags and the environment: its errors are usage.
    fn open_client(&self) -> Result<DynamoClient, Fail> {
        let mut builder = DynamoClientBuilder::from_env();
        // Explicit keys sign as before; otherwise AWS's standard credential chain.
        if (env("AWS_ACCESS_KEY_ID").is_none() || env("AWS_SECRET_ACCESS_KEY").is_none())
            && let Some(chain) = credential_chain(std::env::vars()).map_err(Fail::Usage)?
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
        let client = builder.build().map_err(|e| match e {
            // The library's words name its own methods; a CLI user sets variables.
            DynamoError::Config(m) if m.starts_with("no credentials") => Fail::Usage(
                "no AWS credentials for DynamoDB: set AWS_ACCESS_KEY_ID and \
                     AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN for temporary ones), or run \
                     where AWS's credential chain finds some (AWS_WEB_IDENTITY_TOKEN_FILE with \
                     AWS_ROLE_ARN, a container's credentials, instance metadata)"
                    .to_owned(),
            ),
            e => Fail::Usage(e.to_string()),
        })?;
        Ok(client)
    }

    /// The table `name` in DynamoDB, for commands that have nothing to do without one: the
    /// command itself asks for DynamoDB, so AWS_REGION is enough here.
    pub fn require_dynamo_table(&self, name: &str) -> Result<DynamoLeaseTable, Fail> {
        let region = env("AWS_REGION").or_else(|| env("AWS_DEFAULT_REGION"));
        if self.embedded
            || (self.dynamodb_reason(self.lease_table_named()).is_none() && region.is_none())
        {
            return Err(Fail::Usage(
                "no DynamoDB configured: set AWS_ENDPOINT_URL_DYNAMODB (or --dynamodb-endpoint) \
                 or AWS_REGION; the embedded default keeps no table beyond one process"
                    .to_owned(),
            ));
        }
        self.open_dynamo(name)
    }

    /// Makes sure `table` exists before leases go into it: creates it on a loopback
    /// endpoint or with --create-table; elsewhere (AWS) only checks, and says how to
    /// create it when it is missing.
    pub async fn prepare_table(&self, table: &DynamoLeaseTable) -> Result<(), Fail> {
        let name = table.table_name();
        let how =
            format!("run `dynacommit table create --table {name}` once, or pass --create-table");
        self.prepare(table.client(), name, table.ensure_table(), &how)
            .await
    }

    /// Makes sure the key-value table exists, as [`prepare_table`](Self::prepare_table)
    /// does for the lease table.
    pub async fn prepare_kv_table(&self, kv: &DynamoKv) -> Result<(), Fail> {
        let how = "pass --create-table once (any `dynacommit kv` command creates it then, \
                   with its TTL and stream)";
        self.prepare(kv.client(), kv.table_name(), kv.ensure_table(), how)
            .await
    }

    /// Creates the table `name` with `ensure` on a loopback endpoint or with
    /// --create-table; elsewhere only checks it exists, and says `how` to create it.
    async fn prepare(
        &self,
        client: &DynamoClient,
        name: &str,
        ensure: impl Future<Output = Result<EnsureReport, DynamoError>>,
        how: &str,
    ) -> Result<(), Fail> {
        let endpoint = client.endpoint().to_owned();
        if self.create_table || is_loopback(&endpoint) {
            ensure.await.map_err(|e| e.to_string())?;
            return Ok(());
        }
        match client.describe_table(name).await {
            Ok(_) => Ok(()),
            Err(e) if e.code() == Some("ResourceNotFoundException") => Err(Fail::Usage(format!(
                "the table {name} does not exist in DynamoDB at {endpoint}, and dynacommit \
                 creates tables outside loopback endpoints only when told to: {how}"
            ))),
            Err(e) => Err(Fail::Failure(format!("cannot check the table {name}: {e}"))),
        }
    }

    /// The lease table (DynamoDB if asked for, created on loopback; else in-process),
    /// its settings, and a description of both.
    pub async fn leases(&self) -> Result<Leases, Fail> {
        let reason = self.dynamodb_reason(self.lease_table_named());
        let config = self.lease_config(reason.is_none())?;
        let timing = format!(
            "lease timeout {} ms, skew x{}, poll {} ms",
            config.timeout.as_millis(),
            config.max_clock_skew_rate,
            config.poll_interval.as_millis()
        );
        let (table, table_text): (Arc<dyn LeaseTable>, String) = match reason {
            Some(reason) => {
                let dynamo = self.open_dynamo(&config.table)?;
                let text = format!(
                    "DynamoDB table {} at {} (because of {reason}; {timing})",
                    dynamo.table_name(),
                    dynamo.client().endpoint()
                );
                self.prepare_table(&dynamo).await?;
                (Arc::new(dynamo), text)
            }
            None => (
                Arc::new(MemoryLeaseTable::new()),
                format!("the in-process lease table ({timing})"),
            ),
        };
        Ok(Leases {
            table,
            config,
            text: table_text,
            embedded: reason.is_none(),
        })
    }

    /// Resolves everything a command needs.
    pub async fn resolve(&self) -> Result<Backends, Fail> {
        let Leases {
            table,
            config,
            text: table_text,
            embedded,
        } = self.leases().await?;
        let mut warnings = Vec::new();
        let (store, store_text, scratch) =
            open_store(self.store.as_deref()).map_err(Fail::Usage)?;
        let mut description = if embedded && self.store.is_none() {
            format!(
                "embedded default: {table_text} and {store_text} (configure --store and DynamoDB to use real services)"
            )
        } else {
            format!("leases in {table_text}; objects in {store_text}")
        };
        if embedded
            && !self.embedded
            && let Some(name) = ["AWS_REGION", "AWS_DEFAULT_REGION"]
                .into_iter()
                .find(|name| env(name).is_some())
        {
            description.push_str(&format!(
                "\nnote: {name} is set, but no DynamoDB was asked for, so the leases stay \
                 in this process; for DynamoDB pass --dynamodb (AWS's, in that region), \
                 --table, or set AWS_ENDPOINT_URL_DYNAMODB"
            ));
        }
        if embedded
            && self
                .store
                .as_deref()
                .is_some_and(|s| s.starts_with("s3://"))
        {
            warnings.push(private_leases_warning(&format!(
                "--store {}",
                self.store.as_deref().unwrap_or_default()
            )));
        }
        Ok(Backends {
            table,
            config,
            store,
            description,
            warnings,
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

/// A store in the directory `dir` (a file:// URL's rest), created if missing, and the
/// directory it resolved to: file://relative/dir is not a URL a browser would take, but
/// its meaning is plain, so it is resolved against the working directory.
pub fn local_store(dir: &str) -> Result<(LocalFileSystem, std::path::PathBuf), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create the directory ({e})"))?;
    let dir =
        std::fs::canonicalize(dir).map_err(|e| format!("cannot resolve the directory ({e})"))?;
    let store = LocalFileSystem::new_with_prefix(&dir).map_err(|e| e.to_string())?;
    Ok((store, dir))
}

/// The warning for a shared store (`flag` names it, as `--store s3://lake`) whose leases
/// are kept in this process only.
pub fn private_leases_warning(flag: &str) -> String {
    format!(
        "WARNING: {flag} is shared, but the leases are in this process only: other \
         processes writing it are NOT coordinated with this one and can overwrite its \
         commits. Put the leases in DynamoDB: set AWS_ENDPOINT_URL_DYNAMODB, or pass \
         --dynamodb or --table."
    )
}

/// An S3 store of `bucket` as the environment configures it (AWS_* variables), at
/// AWS_ENDPOINT_URL_S3 or AWS_ENDPOINT_URL if set (returned, for descriptions).
pub fn s3_builder(bucket: &str) -> (AmazonS3Builder, Option<String>) {
    let mut builder = AmazonS3Builder::from_env().with_bucket_name(bucket);
    let endpoint = env("AWS_ENDPOINT_URL_S3").or_else(|| env("AWS_ENDPOINT_URL"));
    if let Some(endpoint) = &endpoint {
        builder = builder
            .with_endpoint(endpoint)
            .with_allow_http(endpoint.starts_with("http://"));
    }
    (builder, endpoint)
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
            let (store, dir) = local_store(rest).map_err(|e| bad(&e))?;
            let text = if std::path::Path::new(rest).is_absolute() {
                format!("a local store in {}", dir.display())
            } else {
                format!(
                    "a local store in {} (--store {url} resolved)",
                    dir.display()
                )
            };
            Ok((Arc::new(store), text, None))
        }
        "s3" => {
            let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
            if bucket.is_empty() {
                return Err(bad("no bucket"));
            }
            let (builder, endpoint) = s3_builder(bucket);
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

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use std::time::Duration;

    #[derive(Parser)]
    struct Flags {
        #[command(flatten)]
        backends: BackendArgs,
    }

    fn flags(args: &[&str]) -> BackendArgs {
        Flags::parse_from(std::iter::once("dynacommit").chain(args.iter().copied())).backends
    }

    fn vars(pairs: &'static [(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        move |name| {
            pairs
                .iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| (*v).to_owned())
        }
    }

    #[test]
    fn flags_then_environment_then_defaults() {
        let env = vars(&[
            ("DYNACOMMIT_LEASE_TABLE", "from_env:5000"),
            ("DYNACOMMIT_LEASE_TIMEOUT_MS", "7000"),
            ("DYNACOMMIT_POLL_INTERVAL_MS", "40"),
        ]);
        let config = flags(&[]).lease_config_from(true, &env).unwrap();
        assert_eq!(config.table, "from_env");
        assert_eq!(config.timeout, Duration::from_millis(7000));
        assert_eq!(config.poll_interval, Duration::from_millis(40));

        let config = flags(&["--table", "flagged"])
            .lease_config_from(false, &env)
            .unwrap();
        assert_eq!(config.table, "flagged");
        assert_eq!(
            config.timeout,
            Duration::from_millis(7000),
            "no timeout in the flag"
        );

        let config = flags(&["--table", "flagged:9000", "--poll-ms", "3"])
            .lease_config_from(false, &env)
            .unwrap();
        assert_eq!(config.timeout, Duration::from_millis(9000));
        assert_eq!(config.poll_interval, Duration::from_millis(3));

        let config = flags(&[]).lease_config_from(true, vars(&[])).unwrap();
        assert_eq!(config.table, dynacommit::lease::DEFAULT_TABLE);
        assert_eq!(config.timeout, Duration::from_secs(20));
        assert_eq!(config.poll_interval, Duration::from_millis(5), "embedded");
        let config = flags(&[]).lease_config_from(false, vars(&[])).unwrap();
        assert_eq!(config.poll_interval, Duration::from_millis(100));

        let bad = flags(&[])
            .lease_config_from(false, vars(&[("DYNACOMMIT_MAX_CLOCK_SKEW_RATE", "x")]))
            .unwrap_err();
        assert!(bad.contains("DYNACOMMIT_MAX_CLOCK_SKEW_RATE"), "{bad}");
    }

    #[test]
    fn only_this_machine_is_loopback() {
        for local in [
            "http://127.0.0.1:8000",
            "http://localhost:8000",
            "http://[::1]:8000/",
        ] {
            assert!(is_loopback(local), "{local}");
        }
        for remote in [
            "https://dynamodb.eu-west-1.amazonaws.com",
            "http://10.0.0.7:8000",
            "http://localhost.example.com",
            "not a url",
        ] {
            assert!(!is_loopback(remote), "{remote}");
        }
    }
}
