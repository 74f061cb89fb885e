//! The S3 servers the scripts start: s3rver (ignores conditional headers) and SeaweedFS
//! (honours them). Each test gets buckets of its own, so tests that list or delete a
//! whole bucket never see each other.

use bytes::Bytes;
use object_store::aws::{
    AmazonS3, AmazonS3Builder, AwsAuthorizer, AwsCredential, S3ConditionalPut, S3CopyIfNotExists,
};
use object_store::client::HttpRequestBody;

/// One of the two S3 servers.
#[derive(Debug, Clone, Copy)]
pub enum S3Server {
    /// s3rver 3.7.1.
    S3rver,
    /// SeaweedFS 4.48.
    SeaweedFs,
}

impl S3Server {
    /// Its URL, from the variables `scripts/services.sh env` prints.
    pub fn url(self) -> String {
        let (var, default) = match self {
            Self::S3rver => ("DYNACOMMIT_TEST_S3RVER", "http://127.0.0.1:4568"),
            Self::SeaweedFs => ("DYNACOMMIT_TEST_SEAWEEDFS", "http://127.0.0.1:8333"),
        };
        std::env::var(var).unwrap_or_else(|_| default.into())
    }

    /// Its access key and secret.
    pub fn keys(self) -> (String, String) {
        match self {
            Self::S3rver => ("S3RVER".into(), "S3RVER".into()),
            Self::SeaweedFs => (
                std::env::var("DYNACOMMIT_TEST_SEAWEEDFS_KEY")
                    .unwrap_or_else(|_| "dynacommit".into()),
                std::env::var("DYNACOMMIT_TEST_SEAWEEDFS_SECRET")
                    .unwrap_or_else(|_| "dynacommit-secret".into()),
            ),
        }
    }

    fn name(self) -> &'static str {
        match self {
            Self::S3rver => "s3rver",
            Self::SeaweedFs => "seaweedfs",
        }
    }

    /// Creates a fresh bucket (failing loudly, with the way to start the server, if the
    /// server is not there) and returns a store on it.
    pub async fn fresh_store(self, conditional_put: S3ConditionalPut) -> AmazonS3 {
        let bucket = self.fresh_bucket().await;
        self.store(&bucket, conditional_put)
    }

    /// Creates a fresh bucket and returns its name.
    pub async fn fresh_bucket(self) -> String {
        let bucket = format!("dc-{:012x}", rand::random::<u64>() >> 16);
        self.create_bucket(&bucket).await;
        bucket
    }

    /// A store on an existing bucket.
    pub fn store(self, bucket: &str, conditional_put: S3ConditionalPut) -> AmazonS3 {
        self.store_with(bucket, conditional_put, None)
    }

    /// A store on an existing bucket, with a copy-if-not-exists mode.
    pub fn store_with(
        self,
        bucket: &str,
        conditional_put: S3ConditionalPut,
        copy_if_not_exists: Option<S3CopyIfNotExists>,
    ) -> AmazonS3 {
        let (key, secret) = self.keys();
        let mut builder = AmazonS3Builder::new()
            .with_endpoint(self.url())
            .with_allow_http(true)
            .with_region("us-east-1")
            .with_bucket_name(bucket)
            .with_access_key_id(key)
            .with_secret_access_key(secret)
            .with_conditional_put(conditional_put);
        if let Some(copy) = copy_if_not_exists {
            builder = builder.with_copy_if_not_exists(copy);
        }
        if let Some((max_retries, init_backoff, max_backoff)) = super::bounded_retries() {
            builder = builder.with_retry(object_store::RetryConfig {
                max_retries,
                backoff: object_store::BackoffConfig {
                    init_backoff,
                    max_backoff,
                    base: 2.0,
                },
                ..Default::default()
            });
        }
        if super::bounded_retries().is_some() && matches!(self, Self::S3rver) {
            // A read s3rver tears can stall until its 5 s keep-alive timeout closes the
            // socket: give up on any request after a second and retry, alike for all.
            // (Not on SeaweedFS, which holds a losing conditional PUT a second or more
            // before refusing it, and a conditional PUT is not retried.)
            builder = builder.with_client_options(
                object_store::ClientOptions::new()
                    .with_allow_http(true)
                    .with_timeout(super::BENCH_REQUEST_TIMEOUT),
            );
        }
        builder.build().unwrap()
    }

    async fn create_bucket(self, bucket: &str) {
        let (key, secret) = self.keys();
        let credential = AwsCredential {
            key_id: key,
            secret_key: secret,
            token: None,
        };
        let url = format!("{}/{bucket}", self.url());
        let mut request = http::Request::builder()
            .method("PUT")
            .uri(&url)
            .body(HttpRequestBody::from(Bytes::new()))
            .unwrap();
        AwsAuthorizer::new(&credential, "s3", "us-east-1")
            .try_authorize(&mut request, None)
            .unwrap();
        let mut send = reqwest::Client::new().put(&url);
        for (name, value) in request.headers() {
            send = send.header(name, value);
        }
        match send.send().await {
            Ok(r) if r.status().is_success() => {}
            Ok(r) => panic!(
                "{} refused to create bucket {bucket}: HTTP {} {}",
                self.name(),
                r.status(),
                r.text().await.unwrap_or_default()
            ),
            Err(e) => panic!(
                "{} is not answering at {} ({e}). Start it with `scripts/services.sh start {}`, \
                 or run the whole suite with `scripts/test.sh`.",
                self.name(),
                self.url(),
                self.name()
            ),
        }
    }
}
