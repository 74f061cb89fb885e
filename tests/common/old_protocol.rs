//! object_store 0.12.5's own DynamoCommit, as a writer in our races and benchmarks.
//!
//! 0.12.5 sends its DynamoDB requests to the S3 endpoint when one is set, so it is given
//! an HTTP connector of its own that routes requests carrying `X-Amz-Target: DynamoDB_*`
//! to DynamoDB Local and everything else to the S3 server.

use std::sync::Arc;

use async_trait::async_trait;
use object_store_012 as old;
use old::aws::{AmazonS3, AmazonS3Builder, DynamoCommit, S3ConditionalPut, S3CopyIfNotExists};
use old::client::{
    ClientOptions, HttpClient, HttpConnector, HttpError, HttpRequest, HttpResponse, HttpService,
    ReqwestConnector,
};

use super::s3::S3Server;

/// Sends DynamoDB requests to `dynamodb`, the rest where they were going.
#[derive(Debug)]
struct Router {
    inner: HttpClient,
    dynamodb: http::uri::Authority,
    counters: Arc<super::Counters>,
    slow_puts: Option<std::ops::Range<u64>>,
}

#[async_trait]
impl HttpService for Router {
    async fn call(&self, mut req: HttpRequest) -> Result<HttpResponse, HttpError> {
        let to_dynamodb = req
            .headers()
            .get("x-amz-target")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("DynamoDB_"));
        let counter = match req
            .headers()
            .get("x-amz-target")
            .and_then(|v| v.to_str().ok())
        {
            Some(t) if t.ends_with(".GetItem") || t.ends_with(".Query") => {
                &self.counters.dynamo_reads
            }
            Some(t) if t.starts_with("DynamoDB_") => &self.counters.dynamo_writes,
            _ => &self.counters.s3,
        };
        counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        if to_dynamodb {
            let uri = http::Uri::builder()
                .scheme("http")
                .authority(self.dynamodb.clone())
                .path_and_query("/")
                .build()
                .unwrap();
            *req.uri_mut() = uri;
            req.headers_mut().remove(http::header::HOST);
        }
        let is_write = std::ptr::eq(counter, &self.counters.dynamo_writes);
        let (method, uri) = (req.method().clone(), req.uri().path().to_owned());
        let started = std::time::Instant::now();
        let answer = match &self.slow_puts {
            Some(delays) if !to_dynamodb && req.method() == http::Method::PUT => {
                let inner = self.inner.clone();
                self.counters
                    .slowed(delays.clone(), async move { inner.execute(req).await })
                    .await
            }
            _ => self.inner.execute(req).await,
        };
        if std::env::var_os("DYNACOMMIT_BENCH_TRACE").is_some_and(|v| v != "0")
            && started.elapsed() >= std::time::Duration::from_millis(100)
        {
            eprintln!(
                "slow HTTP (0.12.5): {method} {uri}: {:.0} ms -> {:?}",
                started.elapsed().as_secs_f64() * 1e3,
                answer.as_ref().map(|r| r.status())
            );
        }
        if let Ok(response) = &answer {
            use std::sync::atomic::Ordering::SeqCst;
            // A DynamoDB write answered 400 is a failed condition (the only 400 these
            // well-formed requests meet).
            if is_write && response.status() == http::StatusCode::BAD_REQUEST {
                self.counters.dynamo_failed_writes.fetch_add(1, SeqCst);
            }
            if !to_dynamodb && response.status().is_server_error() {
                self.counters.s3_server_errors.fetch_add(1, SeqCst);
            }
        }
        answer
    }
}

#[derive(Debug)]
struct RouterConnector {
    dynamodb: http::uri::Authority,
    counters: Arc<super::Counters>,
    slow_puts: Option<std::ops::Range<u64>>,
}

impl HttpConnector for RouterConnector {
    fn connect(&self, options: &ClientOptions) -> old::Result<HttpClient> {
        Ok(HttpClient::new(Router {
            inner: ReqwestConnector::default().connect(options)?,
            dynamodb: self.dynamodb.clone(),
            counters: self.counters.clone(),
            slow_puts: self.slow_puts.clone(),
        }))
    }
}

/// An object_store 0.12.5 S3 store on `bucket` of `server`, its conditional puts and
/// copies going through DynamoCommit on `table` with a `timeout_ms` lease.
pub fn store(server: S3Server, bucket: &str, table: &str, timeout_ms: u64) -> AmazonS3 {
    store_via(
        server,
        bucket,
        table,
        timeout_ms,
        &super::dynamodb_url(),
        Arc::default(),
        None,
    )
}

/// Like [`store`], sending the DynamoDB requests to `dynamodb_url`, counting requests in
/// `counters`, and delaying each S3 PUT by a random time from `slow_puts` (ms), if given.
pub fn store_via(
    server: S3Server,
    bucket: &str,
    table: &str,
    timeout_ms: u64,
    dynamodb_url: &str,
    counters: Arc<super::Counters>,
    slow_puts: Option<std::ops::Range<u64>>,
) -> AmazonS3 {
    let dynamodb: http::Uri = dynamodb_url.parse().unwrap();
    let (key, secret) = server.keys();
    let commit = DynamoCommit::new(table.to_owned()).with_timeout(timeout_ms);
    #[allow(deprecated)]
    let builder = AmazonS3Builder::new()
        .with_endpoint(server.url())
        .with_allow_http(true)
        .with_region("us-east-1")
        .with_bucket_name(bucket)
        .with_access_key_id(key)
        .with_secret_access_key(secret)
        .with_conditional_put(S3ConditionalPut::Dynamo(commit.clone()))
        .with_copy_if_not_exists(S3CopyIfNotExists::Dynamo(commit))
        .with_http_connector(RouterConnector {
            dynamodb: dynamodb.authority().unwrap().clone(),
            counters,
            slow_puts,
        });
    let builder = match super::bounded_retries() {
        Some((max_retries, init_backoff, max_backoff)) => builder
            .with_retry(old::RetryConfig {
                max_retries,
                backoff: old::BackoffConfig {
                    init_backoff,
                    max_backoff,
                    base: 2.0,
                },
                ..Default::default()
            })
            .with_client_options(ClientOptions::new().with_allow_http(true).with_timeout(
                // As the other targets' (`super::s3`): on s3rver only.
                if matches!(server, S3Server::S3rver) {
                    super::BENCH_REQUEST_TIMEOUT
                } else {
                    std::time::Duration::from_secs(30)
                },
            )),
        None => builder,
    };
    builder.build().unwrap()
}

/// A race writer using object_store 0.12.5.
pub struct OldWriter(pub Arc<AmazonS3>);

/// `OldWriter` as a race's log writer (the races are the harness's).
#[cfg(feature = "harness")]
mod log_writer {
    use async_trait::async_trait;
    use bytes::Bytes;
    use dynacommit::race::LogWriter;
    use object_store::path::Path;

    use super::{OldWriter, old};
    use old::ObjectStore as _;

    #[async_trait]
    impl LogWriter for OldWriter {
        async fn create(&self, path: &Path, body: Bytes) -> Result<bool, String> {
            let path = old::path::Path::from(path.as_ref());
            match self
                .0
                .put_opts(&path, body.into(), old::PutMode::Create.into())
                .await
            {
                Ok(_) => Ok(true),
                Err(old::Error::AlreadyExists { .. }) => Ok(false),
                Err(e) => Err(e.to_string()),
            }
        }
    }
}
