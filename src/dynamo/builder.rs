//! [`DynamoClientBuilder`]: a client's settings, from code or the environment, and where
//! its requests go (the endpoint resolution rules of the AWS SDKs).

use std::sync::Arc;

use object_store::StaticCredentialProvider;
use object_store::aws::{AwsCredential, AwsCredentialProvider};

use super::client::DynamoClient;
use super::error::DynamoError;
use super::retry::RetryConfig;

impl DynamoClient {
    /// A builder with nothing set; see [`DynamoClientBuilder::from_env`] for the usual start.
    pub fn builder() -> DynamoClientBuilder {
        DynamoClientBuilder::default()
    }
}

/// Configures a [`DynamoClient`].
///
/// The endpoint is the explicit setting, else `AWS_ENDPOINT_URL_DYNAMODB`, else
/// `AWS_ENDPOINT_URL`, else `https://dynamodb.{region}.amazonaws.com` (`.amazonaws.com.cn`
/// for the `cn-` regions). The DynamoDB Streams endpoint follows from it unless set (see
/// [`with_streams_endpoint`](Self::with_streams_endpoint)). The region is the
/// explicit setting, else `AWS_REGION`, else `AWS_DEFAULT_REGION`. Credentials are static,
/// from the environment, or any [`AwsCredentialProvider`], such as an `AmazonS3` store's
/// `credentials()`, so that one identity signs both the S3 and the DynamoDB requests.
/// The environment is read only by [`from_env`](Self::from_env).
#[derive(Default, Clone)]
pub struct DynamoClientBuilder {
    endpoint: Option<String>,
    streams_endpoint: Option<String>,
    region: Option<String>,
    credentials: Option<AwsCredentialProvider>,
    retry: RetryConfig,
    http: Option<reqwest::Client>,
    #[cfg(feature = "harness")]
    transport: Option<std::sync::Arc<dyn super::transport::Transport>>,
}

impl std::fmt::Debug for DynamoClientBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DynamoClientBuilder")
            .field("endpoint", &self.endpoint)
            .field("streams_endpoint", &self.streams_endpoint)
            .field("region", &self.region)
            .field(
                "credentials",
                &self.credentials.as_ref().map(|_| "<redacted>"),
            )
            .field("retry", &self.retry)
            .finish()
    }
}

impl DynamoClientBuilder {
    /// A builder filled from the environment variables named on [`DynamoClientBuilder`],
    /// `AWS_ENDPOINT_URL_DYNAMODB_STREAMS` (the AWS SDKs' name for the Streams endpoint) and
    /// `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`.
    pub fn from_env() -> Self {
        Self::from_lookup(|name| std::env::var(name).ok().filter(|v| !v.is_empty()))
    }

    /// Like [`from_env`](Self::from_env), reading variables through `lookup` (for tests
    /// and for callers that keep their configuration elsewhere).
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Self {
        let mut builder = Self {
            endpoint: lookup("AWS_ENDPOINT_URL_DYNAMODB").or_else(|| lookup("AWS_ENDPOINT_URL")),
            streams_endpoint: lookup("AWS_ENDPOINT_URL_DYNAMODB_STREAMS"),
            region: lookup("AWS_REGION").or_else(|| lookup("AWS_DEFAULT_REGION")),
            ..Self::default()
        };
        if let (Some(key), Some(secret)) =
            (lookup("AWS_ACCESS_KEY_ID"), lookup("AWS_SECRET_ACCESS_KEY"))
        {
            builder = builder.with_credentials(key, secret, lookup("AWS_SESSION_TOKEN"));
        }
        builder
    }

    /// The endpoint URL, such as `http://127.0.0.1:8000` for DynamoDB Local.
    pub fn with_endpoint(mut self, endpoint: impl Into<String>) -> Self {
        self.endpoint = Some(endpoint.into());
        self
    }

    /// The DynamoDB Streams endpoint URL, for the rare setup that serves Streams apart from
    /// a custom DynamoDB endpoint.
    ///
    /// Unset, it follows the DynamoDB endpoint: AWS's own host `dynamodb.{region}.{domain}`
    /// becomes `streams.dynamodb.{region}.{domain}` (AWS serves Streams there, signed for
    /// the same service name `dynamodb`), and any other endpoint is kept as it is, because
    /// DynamoDB Local and the other emulators serve both APIs on one port.
    pub fn with_streams_endpoint(mut self, endpoint: impl Into<String>) -> Self {
        self.streams_endpoint = Some(endpoint.into());
        self
    }

    /// The region to sign for.
    pub fn with_region(mut self, region: impl Into<String>) -> Self {
        self.region = Some(region.into());
        self
    }

    /// Static credentials.
    pub fn with_credentials(
        mut self,
        key_id: impl Into<String>,
        secret_key: impl Into<String>,
        session_token: Option<String>,
    ) -> Self {
        let credential = AwsCredential {
            key_id: key_id.into(),
            secret_key: secret_key.into(),
            token: session_token,
        };
        self.credentials = Some(Arc::new(StaticCredentialProvider::new(credential)));
        self
    }

    /// Credentials from a provider, asked before every request (providers cache and
    /// refresh on their own). `AmazonS3::credentials()` gives the one an S3 store uses.
    pub fn with_credential_provider(mut self, provider: AwsCredentialProvider) -> Self {
        self.credentials = Some(provider);
        self
    }

    /// The retry policy and timeouts.
    pub fn with_retry(mut self, retry: RetryConfig) -> Self {
        self.retry = retry;
        self
    }

    /// A reqwest client to use instead of one built from the retry policy. Each request
    /// still carries [`RetryConfig::request_timeout`] (which also bounds connecting, for a
    /// client with no connect timeout of its own), and each call its deadline.
    pub fn with_http_client(mut self, client: reqwest::Client) -> Self {
        self.http = Some(client);
        self
    }

    /// Answers the client's requests in process instead of over HTTP: the simulator's
    /// table. The endpoint is still checked, and named in errors.
    #[cfg(feature = "harness")]
    #[doc(hidden)]
    pub fn with_transport(
        mut self,
        transport: std::sync::Arc<dyn super::transport::Transport>,
    ) -> Self {
        self.transport = Some(transport);
        self
    }

    /// Checks the configuration and builds the client.
    pub fn build(self) -> Result<DynamoClient, DynamoError> {
        self.retry.validate().map_err(DynamoError::Config)?;
        let region = self.region.ok_or_else(|| {
            DynamoError::Config(
                "no region: call with_region or set AWS_REGION (or AWS_DEFAULT_REGION)".into(),
            )
        })?;
        if region.is_empty()
            || !region
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-')
        {
            return Err(DynamoError::Config(format!(
                "region {region:?} is not a region name like us-east-1"
            )));
        }
        let endpoint = self.endpoint.unwrap_or_else(|| default_endpoint(&region));
        let url = normalise_endpoint(&endpoint)?;
        let streams_url = match self.streams_endpoint {
            Some(endpoint) => normalise_endpoint(&endpoint)?,
            None => streams_endpoint_for(&url),
        };
        let credentials = self.credentials.ok_or_else(|| {
            DynamoError::Config(
                "no credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, call \
                 with_credentials, or pass a provider (such as AmazonS3::credentials()) to \
                 with_credential_provider"
                    .into(),
            )
        })?;
        let http = match self.http {
            Some(http) => http,
            // The request timeout is set on each request (see send_once).
            None => reqwest::Client::builder()
                .connect_timeout(self.retry.connect_timeout)
                .build()
                .map_err(|e| DynamoError::Config(format!("cannot build the HTTP client: {e}")))?,
        };
        let client =
            DynamoClient::from_settings(http, url, streams_url, region, credentials, self.retry);
        #[cfg(feature = "harness")]
        let client = match self.transport {
            Some(transport) => client.with_transport(transport),
            None => client,
        };
        Ok(client)
    }
}

/// AWS's own DynamoDB endpoint for `region`: `amazonaws.com`, or `amazonaws.com.cn` for the
/// China regions (`cn-north-1`, `cn-northwest-1`).
fn default_endpoint(region: &str) -> String {
    let domain = if region.starts_with("cn-") {
        "amazonaws.com.cn"
    } else {
        "amazonaws.com"
    };
    format!("https://dynamodb.{region}.{domain}")
}

/// The DynamoDB Streams URL that goes with the DynamoDB URL `url` (normalised): AWS's own
/// `dynamodb.` hosts have a `streams.dynamodb.` twin; any other endpoint (DynamoDB Local,
/// an emulator, a proxy) is taken to serve both APIs.
fn streams_endpoint_for(url: &str) -> String {
    let Ok(mut parsed) = url::Url::parse(url) else {
        return url.to_owned();
    };
    let twin = parsed.host_str().and_then(|host| {
        let on_aws = host.ends_with(".amazonaws.com") || host.ends_with(".amazonaws.com.cn");
        (on_aws && host.starts_with("dynamodb.")).then(|| format!("streams.{host}"))
    });
    match twin {
        Some(host) if parsed.set_host(Some(&host)).is_ok() => parsed.to_string(),
        _ => url.to_owned(),
    }
}

/// Checks an endpoint is an http(s) URL with a host and nothing after it, and returns it
/// with the path `/` that requests are POSTed to.
fn normalise_endpoint(endpoint: &str) -> Result<String, DynamoError> {
    // Never echo user info: an endpoint with `user:password@` in it is a secret.
    let shown = match url::Url::parse(endpoint) {
        Ok(mut url) if !url.username().is_empty() || url.password().is_some() => {
            let _ = url.set_username("");
            let _ = url.set_password(None);
            url.to_string()
        }
        Err(_) if endpoint.contains('@') => "(not shown: it contains '@')".to_owned(),
        _ => endpoint.to_owned(),
    };
    let bad = |why: &str| {
        DynamoError::Config(format!(
            "endpoint {shown:?} {why}: give a URL like http://127.0.0.1:8000 or https://dynamodb.us-east-1.amazonaws.com"
        ))
    };
    let url = url::Url::parse(endpoint).map_err(|e| bad(&format!("is not a URL ({e})")))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(bad("must start with http:// or https://"));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(bad("has no host"));
    }
    if url.path() != "/" || url.query().is_some() || url.fragment().is_some() {
        return Err(bad("must not have a path, query or fragment"));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(bad("must not carry credentials"));
    }
    Ok(url.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        move |name| map.get(name).cloned()
    }

    #[test]
    fn endpoint_prefers_the_dynamodb_variable_then_the_generic_one_then_the_region() {
        let both = DynamoClientBuilder::from_lookup(env(&[
            ("AWS_ENDPOINT_URL_DYNAMODB", "http://127.0.0.1:8000"),
            ("AWS_ENDPOINT_URL", "http://127.0.0.1:9999"),
            ("AWS_REGION", "eu-west-1"),
            ("AWS_ACCESS_KEY_ID", "k"),
            ("AWS_SECRET_ACCESS_KEY", "s"),
        ]))
        .build()
        .unwrap();
        assert_eq!(both.endpoint(), "http://127.0.0.1:8000/");

        let generic = DynamoClientBuilder::from_lookup(env(&[
            ("AWS_ENDPOINT_URL", "http://127.0.0.1:9999"),
            ("AWS_DEFAULT_REGION", "eu-west-1"),
            ("AWS_ACCESS_KEY_ID", "k"),
            ("AWS_SECRET_ACCESS_KEY", "s"),
        ]))
        .build()
        .unwrap();
        assert_eq!(generic.endpoint(), "http://127.0.0.1:9999/");

        let aws = DynamoClientBuilder::from_lookup(env(&[
            ("AWS_REGION", "ap-south-1"),
            ("AWS_DEFAULT_REGION", "eu-west-1"),
            ("AWS_ACCESS_KEY_ID", "k"),
            ("AWS_SECRET_ACCESS_KEY", "s"),
        ]))
        .build()
        .unwrap();
        assert_eq!(aws.endpoint(), "https://dynamodb.ap-south-1.amazonaws.com/");
        assert_eq!(aws.region(), "ap-south-1");
    }

    #[test]
    fn china_regions_use_the_china_domain() {
        let endpoint = |region: &str| {
            DynamoClient::builder()
                .with_region(region)
                .with_credentials("k", "s", None)
                .build()
                .unwrap()
                .endpoint()
                .to_owned()
        };
        assert_eq!(
            endpoint("cn-north-1"),
            "https://dynamodb.cn-north-1.amazonaws.com.cn/"
        );
        assert_eq!(
            endpoint("cn-northwest-1"),
            "https://dynamodb.cn-northwest-1.amazonaws.com.cn/"
        );
        assert_eq!(
            endpoint("eu-central-1"),
            "https://dynamodb.eu-central-1.amazonaws.com/"
        );
    }

    #[test]
    fn streams_go_to_aws_streams_hosts_and_stay_on_custom_endpoints() {
        let streams = |pairs: &[(&str, &str)]| {
            let mut pairs = pairs.to_vec();
            pairs.extend([("AWS_ACCESS_KEY_ID", "k"), ("AWS_SECRET_ACCESS_KEY", "s")]);
            let client = DynamoClientBuilder::from_lookup(env(&pairs))
                .build()
                .unwrap();
            client.streams_endpoint().to_owned()
        };
        assert_eq!(
            streams(&[("AWS_REGION", "eu-west-1")]),
            "https://streams.dynamodb.eu-west-1.amazonaws.com/"
        );
        assert_eq!(
            streams(&[("AWS_REGION", "cn-north-1")]),
            "https://streams.dynamodb.cn-north-1.amazonaws.com.cn/"
        );
        // AWS's own host given explicitly still has its Streams twin.
        assert_eq!(
            streams(&[
                ("AWS_REGION", "us-east-1"),
                (
                    "AWS_ENDPOINT_URL_DYNAMODB",
                    "https://dynamodb.us-east-1.amazonaws.com"
                ),
            ]),
            "https://streams.dynamodb.us-east-1.amazonaws.com/"
        );
        // DynamoDB Local and other emulators serve both APIs on one port.
        for local in ["http://127.0.0.1:8000", "http://localhost:4566"] {
            assert_eq!(
                streams(&[("AWS_REGION", "us-east-1"), ("AWS_ENDPOINT_URL", local)]),
                format!("{local}/")
            );
        }
        // The Streams variable wins over everything.
        assert_eq!(
            streams(&[
                ("AWS_REGION", "us-east-1"),
                ("AWS_ENDPOINT_URL_DYNAMODB", "http://127.0.0.1:8000"),
                ("AWS_ENDPOINT_URL_DYNAMODB_STREAMS", "http://127.0.0.1:8001"),
            ]),
            "http://127.0.0.1:8001/"
        );
        let explicit = DynamoClient::builder()
            .with_region("us-east-1")
            .with_credentials("k", "s", None)
            .with_streams_endpoint("http://streams.example:9000")
            .build()
            .unwrap();
        assert_eq!(
            explicit.endpoint(),
            "https://dynamodb.us-east-1.amazonaws.com/"
        );
        assert_eq!(explicit.streams_endpoint(), "http://streams.example:9000/");
        let bad = DynamoClient::builder()
            .with_region("us-east-1")
            .with_credentials("k", "s", None)
            .with_streams_endpoint("streams.example")
            .build()
            .unwrap_err();
        assert!(bad.to_string().contains("http"), "{bad}");
    }

    #[test]
    fn explicit_settings_override_the_environment() {
        let client = DynamoClientBuilder::from_lookup(env(&[
            ("AWS_ENDPOINT_URL_DYNAMODB", "http://127.0.0.1:8000"),
            ("AWS_REGION", "eu-west-1"),
        ]))
        .with_endpoint("http://localhost:8001")
        .with_region("us-west-2")
        .with_credentials("k", "s", None)
        .build()
        .unwrap();
        assert_eq!(client.endpoint(), "http://localhost:8001/");
        assert_eq!(client.region(), "us-west-2");
    }

    #[test]
    fn missing_or_bad_settings_name_what_to_do() {
        let no_region = DynamoClient::builder()
            .with_credentials("k", "s", None)
            .build()
            .unwrap_err()
            .to_string();
        assert!(no_region.contains("AWS_REGION"), "{no_region}");

        let no_creds = DynamoClient::builder()
            .with_region("us-east-1")
            .build()
            .unwrap_err()
            .to_string();
        assert!(no_creds.contains("AWS_ACCESS_KEY_ID"), "{no_creds}");

        for (endpoint, why) in [
            ("127.0.0.1:8000", "http"),
            ("ftp://h", "http"),
            ("http://h/path", "path"),
            ("not a url", "not a URL"),
            ("http://user:pw@h", "credentials"),
        ] {
            let e = DynamoClient::builder()
                .with_region("us-east-1")
                .with_credentials("k", "s", None)
                .with_endpoint(endpoint)
                .build()
                .unwrap_err()
                .to_string();
            assert!(e.contains(why), "{endpoint}: {e}");
            assert!(!e.contains("pw@"), "{e}");
        }
    }

    #[test]
    fn debug_output_never_shows_secrets() {
        let builder = DynamoClient::builder()
            .with_region("us-east-1")
            .with_credentials(
                "AKIDSECRETKEYID",
                "TOPSECRETVALUE",
                Some("TOKENVALUE".into()),
            );
        let client = builder.clone().build().unwrap();
        for text in [format!("{builder:?}"), format!("{client:?}")] {
            for secret in ["TOPSECRETVALUE", "TOKENVALUE", "AKIDSECRETKEYID"] {
                assert!(!text.contains(secret), "{secret} leaked in {text}");
            }
            assert!(text.contains("redacted"), "{text}");
        }
    }
}
