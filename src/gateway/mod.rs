//! An S3 endpoint whose conditional writes go through [`CommitStore`](crate::CommitStore):
//! put-if-absent, compare-and-swap on an ETag and copy-if-not-exists for every S3 client
//! in every language (Python deltalake, polars, boto3, DuckDB, Spark), with one changed
//! endpoint URL. Feature `gateway`; `dynacommit gateway` runs it.
//!
//! The gateway serves one bucket, addressed by path (`/BUCKET/KEY`) or, given a domain,
//! by virtual host (`BUCKET.DOMAIN/KEY`). S3's wire protocol (routing, XML, SigV4 by header or
//! presigned URL, aws-chunked bodies) is the [`s3s`] crate's; every request goes to the
//! upstream store through one `CommitStore`, so a conditional request takes the same
//! lease a library writer takes, and nothing in a gateway's memory is needed for safety:
//! several gateways may front one store and one lease table. What it answers, refuses
//! and guarantees is in `docs/gateway.md`.
//!
//! ```no_run
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! use std::sync::Arc;
//! use dynacommit::CommitStore;
//! use dynacommit::gateway::{Gateway, KeyPair, Upstream};
//! use dynacommit::lease::{LeaseConfig, LeaseManager, MemoryLeaseTable};
//!
//! let leases = LeaseManager::new(Arc::new(MemoryLeaseTable::new()), LeaseConfig::default())?;
//! let store = CommitStore::new(Arc::new(object_store::memory::InMemory::new()), leases);
//! let gateway = Gateway::builder("lake", Upstream::in_memory(store))
//!     .with_key(KeyPair::new("writer", "a long random secret"))
//!     .build()?;
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:9000").await?;
//! gateway.serve(listener, std::future::pending()).await?;
//! # Ok(()) }
//! ```

mod access;
mod body;
mod errors;
mod hosts;
mod keys;
mod listing;
mod multipart;
mod objects;
mod serve;
mod service;
mod upstream;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

pub use access::KeyPair;
pub use upstream::Upstream;

/// A gateway's settings, before it serves.
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// use dynacommit::CommitStore;
/// use dynacommit::gateway::{Gateway, KeyPair, Upstream};
/// use dynacommit::lease::{LeaseConfig, LeaseManager, MemoryLeaseTable};
///
/// let leases = LeaseManager::new(Arc::new(MemoryLeaseTable::new()), LeaseConfig::default())?;
/// let store = CommitStore::new(Arc::new(object_store::memory::InMemory::new()), leases);
/// let gateway = Gateway::builder("lake", Upstream::in_memory(store))
///     .with_key(KeyPair::new("writer", "a long random secret"))
///     .with_max_body_memory(256 << 20)
///     .with_shutdown_grace(Duration::from_secs(10))
///     .build()?;
/// # let _ = gateway; Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct GatewayBuilder {
    bucket: String,
    upstream: Upstream,
    keys: Vec<KeyPair>,
    anonymous: bool,
    region: Option<String>,
    virtual_host_domain: Option<String>,
    max_body_memory: u64,
    body_idle: Duration,
    header_timeout: Duration,
    grace: Duration,
    log: Arc<dyn Fn(&AccessRecord) + Send + Sync>,
}

/// The smallest body budget: a quarter of it (8 MiB) takes boto3's and the AWS CLI's parts.
const MIN_BODY_MEMORY: u64 = 32 << 20;

/// A gateway ready to serve ([`Gateway::serve`]).
pub struct Gateway {
    server: serve::Server,
}

/// Why a gateway cannot be built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GatewayError {
    /// No key pair was given, and anonymous requests were not allowed: no request could
    /// be answered.
    #[error(
        "the gateway has no key pair for clients to sign with: give one (--credentials-file, \
         or DYNACOMMIT_GATEWAY_ACCESS_KEY_ID and DYNACOMMIT_GATEWAY_SECRET_ACCESS_KEY), or \
         allow anonymous requests (--anonymous)"
    )]
    NoKeys,
    /// The bucket's name is not one S3 clients can address.
    #[error("bucket name {name:?}: {why}")]
    BadBucket {
        /// The name given.
        name: String,
        /// What is wrong with it.
        why: &'static str,
    },
    /// The body budget is too small for clients' parts.
    #[error(
        "the body budget is {bytes} bytes: give at least 32 MiB (a quarter of it is the \
         largest part taken, and clients send parts of 8 MiB)"
    )]
    SmallBudget {
        /// The budget given.
        bytes: u64,
    },
    /// The virtual-host domain is not a DNS name.
    #[error(
        "virtual-host domain {domain:?}: give a DNS name without a port or scheme, such as \
         s3.lake.internal"
    )]
    BadDomain {
        /// The domain given.
        domain: String,
    },
    /// A key pair is unusable.
    #[error("key pair {access_key:?}: {why}")]
    BadKey {
        /// The access key id.
        access_key: String,
        /// What is wrong with it.
        why: &'static str,
    },
}

/// One request, as the access log records it: never its query (a presigned URL's
/// signature) nor any header value.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct AccessRecord {
    /// The client's address.
    pub peer: SocketAddr,
    /// The HTTP method.
    pub method: String,
    /// The request's path (`/bucket/key`), without its query.
    pub path: String,
    /// The condition the request carried: `if-none-match`, `if-match` or
    /// `copy-if-absent`.
    pub condition: Option<&'static str>,
    /// The answer's status.
    pub status: u16,
    /// From the request's head to the answer's (a download's body streams after).
    pub duration: Duration,
    /// How long a conditional write waited before it could send (the queue behind other
    /// writes of the path, back-off, the lease's acquisition, the precondition check and
    /// any re-check under the lease), also when it then failed its condition; the longest
    /// of a DeleteObjects' held deletes; `None` for a request that took no lease.
    pub lease_wait: Option<Duration>,
}

impl std::fmt::Display for AccessRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {} {} {} {} {:.1}ms",
            self.peer,
            self.method,
            self.path,
            self.condition.unwrap_or("-"),
            self.status,
            self.duration.as_secs_f64() * 1000.0
        )?;
        match self.lease_wait {
            Some(wait) => write!(f, " lease {:.1}ms", wait.as_secs_f64() * 1000.0),
            None => write!(f, " lease -"),
        }
    }
}

impl Gateway {
    /// A gateway serving `bucket` from `upstream`. It takes no request until given a key
    /// pair ([`GatewayBuilder::with_key`]) or told to allow anonymous ones.
    pub fn builder(bucket: impl Into<String>, upstream: Upstream) -> GatewayBuilder {
        GatewayBuilder {
            bucket: bucket.into(),
            upstream,
            keys: Vec::new(),
            anonymous: false,
            region: None,
            virtual_host_domain: None,
            max_body_memory: 1 << 30,
            body_idle: Duration::from_secs(60),
            header_timeout: Duration::from_secs(30),
            grace: Duration::from_secs(30),
            log: Arc::new(|record: &AccessRecord| {
                tracing::info!(target: "dynacommit::gateway::access", "{record}");
            }),
        }
    }

    /// Serves on `listener` until `shutdown` completes, then stops taking connections
    /// and lets requests in flight finish (a commit under way completes), for up to the
    /// shutdown grace period.
    pub async fn serve(
        self,
        listener: tokio::net::TcpListener,
        shutdown: impl Future<Output = ()>,
    ) -> std::io::Result<()> {
        self.server.run(listener, shutdown).await
    }
}

impl GatewayBuilder {
    /// Adds a key pair clients may sign with (any number).
    pub fn with_key(mut self, key: KeyPair) -> Self {
        self.keys.push(key);
        self
    }

    /// Lets unsigned requests in (they may read and write anything in the bucket).
    pub fn allow_anonymous(mut self) -> Self {
        self.anonymous = true;
        self
    }

    /// The region GetBucketLocation and HeadBucket name (by default us-east-1).
    pub fn with_region(mut self, region: impl Into<String>) -> Self {
        let region = region.into();
        self.region = (region != "us-east-1").then_some(region);
        self
    }

    /// Takes virtual-host requests too: `BUCKET.DOMAIN` in the Host header names the
    /// bucket (the DNS name must resolve to the gateway). Path-style requests keep working.
    pub fn with_virtual_host_domain(mut self, domain: impl Into<String>) -> Self {
        self.virtual_host_domain = Some(domain.into());
        self
    }

    /// The memory all request bodies in flight may hold together (by default 1 GiB; at
    /// least 32 MiB). A quarter of it is the largest single PutObject or UploadPart taken.
    pub fn with_max_body_memory(mut self, bytes: u64) -> Self {
        self.max_body_memory = bytes;
        self
    }

    /// How long a request's body may send nothing before the request fails (by default
    /// 60 s), and how long a request's head may take (by default 30 s).
    pub fn with_timeouts(mut self, body_idle: Duration, head: Duration) -> Self {
        self.body_idle = body_idle;
        self.header_timeout = head;
        self
    }

    /// How long a shutdown waits for requests in flight (by default 30 s).
    pub fn with_shutdown_grace(mut self, grace: Duration) -> Self {
        self.grace = grace;
        self
    }

    /// Where the access log goes (by default, a `tracing` event per request at INFO,
    /// target `dynacommit::gateway::access`).
    pub fn with_access_log(mut self, log: impl Fn(&AccessRecord) + Send + Sync + 'static) -> Self {
        self.log = Arc::new(log);
        self
    }

    /// Checks the settings.
    pub fn build(self) -> Result<Gateway, GatewayError> {
        if self.keys.is_empty() && !self.anonymous {
            return Err(GatewayError::NoKeys);
        }
        check_bucket(&self.bucket)?;
        let hosts = match self.virtual_host_domain {
            Some(domain) => Some(check_domain(domain)?),
            None => None,
        };
        for key in &self.keys {
            if key.access_key.is_empty() || key.secret.len() < 8 {
                return Err(GatewayError::BadKey {
                    access_key: key.access_key.clone(),
                    why: "the access key id must not be empty, and the secret must have at least 8 characters",
                });
            }
        }
        if self.max_body_memory < MIN_BODY_MEMORY {
            return Err(GatewayError::SmallBudget {
                bytes: self.max_body_memory,
            });
        }
        let bodies = body::BodyBudget::new(self.max_body_memory, self.body_idle);
        let max_body = bodies.max_bytes();
        let service = service::Service {
            name: self.bucket,
            upstream: self.upstream,
            bodies,
            region: self.region,
            started: SystemTime::now(),
        };
        let mut s3 = s3s::service::S3ServiceBuilder::new(service);
        // Browser form uploads are refused before s3s sees them (serve.rs); should one
        // get through, s3s may hold none of its file.
        let mut config = s3s::config::S3Config::default();
        config.post_object_max_file_size = 0;
        config.form_max_field_size = 1024;
        config.form_max_fields_size = 16 * 1024;
        config.form_max_parts = 16;
        config.xml_max_body_size = serve::MAX_XML_BODY as usize;
        s3.set_config(Arc::new(s3s::config::StaticConfigProvider::new(Arc::new(
            config,
        ))));
        if let Some(hosts) = hosts {
            s3.set_host(hosts);
        }
        // Signatures are always checked; the policy decides about unsigned requests.
        s3.set_auth(access::Keys::new(&self.keys));
        s3.set_access(access::Policy {
            anonymous: self.anonymous,
        });
        Ok(Gateway {
            server: serve::Server {
                s3: s3.build(),
                log: self.log,
                header_timeout: self.header_timeout,
                grace: self.grace,
                max_body,
            },
        })
    }
}

/// The virtual-host domain, checked: a DNS name without a port.
fn check_domain(domain: String) -> Result<hosts::Hosts, GatewayError> {
    let valid = !domain.is_empty()
        && domain.split('.').all(|label| {
            !label.is_empty()
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-')
        });
    if !valid {
        return Err(GatewayError::BadDomain { domain });
    }
    Ok(hosts::Hosts {
        domain: domain.to_ascii_lowercase(),
    })
}

/// Refuses a bucket name clients cannot address by path, or that `/health` would shadow.
fn check_bucket(name: &str) -> Result<(), GatewayError> {
    let bad = |why| GatewayError::BadBucket {
        name: name.to_owned(),
        why,
    };
    if name == "health" {
        return Err(bad(
            "GET /health is the gateway's health check: choose another name",
        ));
    }
    if !s3s::path::check_bucket_name(name) {
        return Err(bad(
            "not a valid S3 bucket name (3-63 lowercase letters, digits, '.' and '-')",
        ));
    }
    Ok(())
}
