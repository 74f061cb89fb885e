//! The DynamoDB client: configuration, and one signed, retried JSON call.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use object_store::StaticCredentialProvider;
use object_store::aws::{AwsCredential, AwsCredentialProvider};
use reqwest::header::{HeaderName, HeaderValue};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::time::Instant;
use tracing::Instrument;

use super::error::{DynamoError, is_read_operation};
use super::response::parse_response;
use super::retry::RetryConfig;
use super::signing::signed_headers;

/// A DynamoDB client speaking the JSON protocol directly: SigV4-signed POSTs, retried
/// within a [`RetryConfig`]. Cheap to clone; clones share one connection pool.
///
/// Build one with [`DynamoClientBuilder`]:
///
/// ```no_run
/// # async fn run() -> Result<(), dynacommit::dynamo::DynamoError> {
/// use dynacommit::dynamo::DynamoClient;
///
/// let client = DynamoClient::builder()
///     .with_endpoint("http://127.0.0.1:8000")
///     .with_region("us-east-1")
///     .with_credentials("local", "local", None)
///     .build()?;
/// let table = client.describe_table("leases").await?;
/// println!("{} is {}", table.name, table.status);
/// # Ok(()) }
/// ```
///
/// The same client reads DynamoDB Streams (for [`DynamoKv`](crate::kv::DynamoKv)'s
/// watches): those calls go to
/// [`streams_endpoint`](Self::streams_endpoint), signed with the same credentials and
/// retried and bounded the same way; every other call goes to [`endpoint`](Self::endpoint).
#[derive(Clone)]
pub struct DynamoClient {
    inner: Arc<Inner>,
}

struct Inner {
    http: reqwest::Client,
    /// The URL requests are POSTed to (the endpoint with path `/`).
    url: String,
    /// The URL DynamoDB Streams requests are POSTed to: on AWS another host than `url`.
    streams_url: String,
    region: String,
    credentials: AwsCredentialProvider,
    retry: RetryConfig,
    /// Requests sent by this client and its clones, retries included.
    requests: std::sync::atomic::AtomicU64,
}

impl std::fmt::Debug for DynamoClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DynamoClient")
            .field("endpoint", &self.inner.url)
            .field("streams_endpoint", &self.inner.streams_url)
            .field("region", &self.inner.region)
            .field("credentials", &"<redacted>")
            .field("retry", &self.inner.retry)
            .finish()
    }
}

/// The operations of the DynamoDB Streams API. Every other operation is DynamoDB's own.
const STREAMS_OPERATIONS: &[&str] = &[
    "ListStreams",
    "DescribeStream",
    "GetShardIterator",
    "GetRecords",
];

/// Which of the two JSON APIs an operation belongs to. They share the signing (service
/// name `dynamodb` for both) and this client's one send path, retries and deadlines; they
/// differ in the `X-Amz-Target` prefix and, on AWS, in the host.
///
/// The operation's name picks it, so that no call site can send an operation to the wrong
/// API: the two sets of names do not overlap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Api {
    /// DynamoDB itself: tables, items, queries, transactions.
    DynamoDb,
    /// DynamoDB Streams: reading a table's change log.
    Streams,
}

impl Api {
    /// The API operation `op` belongs to.
    pub(crate) fn of(op: &str) -> Self {
        if STREAMS_OPERATIONS.contains(&op) {
            Self::Streams
        } else {
            Self::DynamoDb
        }
    }

    /// The version prefix of the API's `X-Amz-Target` values.
    fn target_prefix(self) -> &'static str {
        match self {
            Self::DynamoDb => "DynamoDB_20120810.",
            Self::Streams => "DynamoDBStreams_20120810.",
        }
    }
}

impl Inner {
    /// Where requests of `api` are POSTed.
    fn url_for(&self, api: Api) -> &str {
        match api {
            Api::DynamoDb => &self.url,
            Api::Streams => &self.streams_url,
        }
    }
}

impl DynamoClient {
    /// A builder with nothing set; see [`DynamoClientBuilder::from_env`] for the usual start.
    pub fn builder() -> DynamoClientBuilder {
        DynamoClientBuilder::default()
    }

    /// The URL requests go to.
    pub fn endpoint(&self) -> &str {
        &self.inner.url
    }

    /// The URL DynamoDB Streams requests go to. See
    /// [`DynamoClientBuilder::with_streams_endpoint`] for how it is chosen.
    pub fn streams_endpoint(&self) -> &str {
        &self.inner.streams_url
    }

    /// The region requests are signed for.
    pub fn region(&self) -> &str {
        &self.inner.region
    }

    /// The retry policy in force.
    pub fn retry_config(&self) -> &RetryConfig {
        &self.inner.retry
    }

    /// How many HTTP requests this client (and every clone of it) has sent, retries
    /// included: for counting the round trips an operation costs.
    pub fn requests_sent(&self) -> u64 {
        self.inner
            .requests
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// A deadline for public call `call`, starting now, of the retry policy's
    /// [`call_deadline`](RetryConfig::call_deadline).
    pub(crate) fn deadline(&self, call: &'static str) -> Deadline {
        Deadline::new(call, self.inner.retry.call_deadline)
    }

    /// Sends operation `op` with body `request`, retrying retryable failures, and decodes
    /// the answer, all within a deadline of its own. Every single-request operation of this
    /// client goes through here (or through [`call_as`](Self::call_as)): reads are retried
    /// freely, writes are taken as safe to send again (see [`Resend`]).
    pub(crate) async fn call<Req, Resp>(
        &self,
        op: &'static str,
        request: &Req,
    ) -> Result<Resp, DynamoError>
    where
        Req: Serialize + ?Sized,
        Resp: DeserializeOwned,
    {
        self.call_by(op, request, &self.deadline(op)).await
    }

    /// Like [`call`](Self::call), as one step of a public call that ends by `deadline`.
    pub(crate) async fn call_by<Req, Resp>(
        &self,
        op: &'static str,
        request: &Req,
        deadline: &Deadline,
    ) -> Result<Resp, DynamoError>
    where
        Req: Serialize + ?Sized,
        Resp: DeserializeOwned,
    {
        let resend = if is_read_operation(op) {
            Resend::Read
        } else {
            Resend::Always
        };
        self.call_as(op, request, resend, deadline).await
    }

    /// Like [`call_by`](Self::call_by), for a request whose [`Resend`] policy the caller
    /// knows.
    pub(crate) async fn call_as<Req, Resp>(
        &self,
        op: &'static str,
        request: &Req,
        resend: Resend,
        deadline: &Deadline,
    ) -> Result<Resp, DynamoError>
    where
        Req: Serialize + ?Sized,
        Resp: DeserializeOwned,
    {
        let body = serde_json::to_vec(request)
            .map(Bytes::from)
            .map_err(|e| DynamoError::InvalidRequest(format!("{op}: cannot encode: {e}")))?;
        let endpoint = self.inner.url_for(Api::of(op));
        let span =
            tracing::debug_span!("dynamodb", op, %endpoint, attempts = tracing::field::Empty);
        self.call_with_retries(op, body, resend, deadline)
            .instrument(span)
            .await
    }

    /// Sends `body` until it gets a definite answer, a final error, or the retry bound.
    ///
    /// # What is retried, and why that is safe
    ///
    /// A failure is retried when [`DynamoError::is_retryable`] says so: throttling (the
    /// request was refused, nothing applied), `TransactionInProgressException` (an earlier
    /// attempt of the same transaction is being applied), a 5xx, or no answer at all. The
    /// last two are *ambiguous*: the request may have been applied before the answer was
    /// lost, and the retry sends it again. That is safe when applying it twice is the same
    /// as applying it once, or when the second application cannot happen:
    ///
    /// - reads change nothing;
    /// - PutItem and DeleteItem set the item to a fixed state (a second application writes
    ///   the same item, or deletes an item already gone), as does an UpdateItem that only
    ///   `SET`s attributes to values or `REMOVE`s them; so do BatchWriteItem's puts and
    ///   deletes;
    /// - TransactWriteItems carries a `ClientRequestToken`, with which DynamoDB applies a
    ///   transaction at most once (within ten minutes) and answers a retry of one still
    ///   running with `TransactionInProgressException`;
    /// - a conditional write whose own effect falsifies its condition (`attribute_not_exists`
    ///   on a put, `generation = :g` on a write that raises the generation) can only fail
    ///   its condition when sent again. That failure is not a rival's doing: it comes back
    ///   wrapped in [`DynamoError::AfterAmbiguousAttempt`], which is ambiguous.
    ///
    /// What is not safe is an UpdateItem whose expression builds on the value it finds
    /// (`SET #n = #n + :one`, `ADD`, `list_append`) with no condition to stop a second
    /// application: sent again, it counts twice. Such a request ([`Resend::IfDefinite`])
    /// is only retried after definite failures (throttling); after an ambiguous one, that
    /// error is returned at once, unless the caller opted in with
    /// [`UpdateItem::resend_if_ambiguous`](super::UpdateItem::resend_if_ambiguous). A
    /// condition that the write does not falsify (`attribute_exists(#pk)` on a counter)
    /// does not protect it either: the client cannot tell, so such a caller must not
    /// opt in.
    ///
    /// Ambiguity is tracked over the whole call: once an attempt of a write was ambiguous,
    /// any error the call ends with is ambiguous too (see [`DynamoError::is_ambiguous`]).
    ///
    /// # What is not retried much
    ///
    /// A connection that could not be opened ([`DynamoError::Unreachable`]) sent nothing:
    /// it is not ambiguous, and it is retried only up to
    /// [`RetryConfig::max_connect_attempts`], so that a wrong endpoint fails in moments.
    ///
    /// # Time
    ///
    /// Everything here ends by `deadline`: the credential fetch is bounded by the time left,
    /// each request by the lesser of [`RetryConfig::request_timeout`] and the time left, and
    /// no retry starts that could not begin before it. Running out gives
    /// [`DynamoError::DeadlineExceeded`].
    async fn call_with_retries<Resp: DeserializeOwned>(
        &self,
        op: &'static str,
        body: Bytes,
        resend: Resend,
        deadline: &Deadline,
    ) -> Result<Resp, DynamoError> {
        let retry = &self.inner.retry;
        let started = Instant::now();
        let mut attempts = 0;
        let mut connect_failures = 0;
        // The first attempt of a write that got no definite answer, and its error.
        let mut earlier_ambiguous: Option<(u32, DynamoError)> = None;
        loop {
            if deadline.is_past() {
                return Err(deadline.exceeded(None, earlier_ambiguous.is_some()));
            }
            attempts += 1;
            tracing::Span::current().record("attempts", attempts);
            let error = match self.send_once(op, &body, deadline).await {
                Ok(resp) => return Ok(resp),
                Err(e) => e,
            };
            let ambiguous = resend != Resend::Read && error.is_ambiguous();
            // Out of time while waiting for credentials or an answer, or after a fault
            // that would otherwise be retried: the deadline is the reason to stop.
            if deadline.is_past()
                && (error.is_retryable() || matches!(error, DynamoError::Credentials(_)))
            {
                tracing::warn!(%error, attempts, "out of time");
                let may_have_applied = ambiguous || earlier_ambiguous.is_some();
                return Err(deadline.exceeded(Some(error), may_have_applied));
            }
            if resend == Resend::Never {
                return Err(error);
            }
            let may_count_twice = ambiguous && resend == Resend::IfDefinite;
            if may_count_twice && error.is_retryable() {
                tracing::warn!(%error, attempts, "not sending again a write that may count twice");
            }
            if may_count_twice || !error.is_retryable() {
                return Err(match earlier_ambiguous {
                    Some((first_ambiguous_attempt, earlier)) => {
                        DynamoError::AfterAmbiguousAttempt {
                            operation: op,
                            attempts,
                            first_ambiguous_attempt,
                            earlier: Box::new(earlier),
                            last: Box::new(error),
                        }
                    }
                    None => error,
                });
            }
            if matches!(error, DynamoError::Unreachable { .. }) {
                connect_failures += 1;
            }
            let delay = retry
                .next_delay(attempts, started)
                .filter(|_| connect_failures < retry.max_connect_attempts);
            let Some(delay) = delay else {
                tracing::warn!(%error, attempts, "giving up");
                return Err(DynamoError::RetriesExhausted {
                    operation: op,
                    attempts,
                    elapsed: started.elapsed(),
                    last: Box::new(error),
                    earlier_attempt_may_have_applied: earlier_ambiguous.is_some(),
                });
            };
            if delay >= deadline.remaining() {
                // The retry could not even start in time.
                tracing::warn!(%error, attempts, "out of time");
                let may_have_applied = ambiguous || earlier_ambiguous.is_some();
                return Err(deadline.exceeded(Some(error), may_have_applied));
            }
            tracing::debug!(%error, ?delay, "retrying");
            if ambiguous && earlier_ambiguous.is_none() {
                earlier_ambiguous = Some((attempts, error));
            }
            tokio::time::sleep(delay).await;
        }
    }

    /// One attempt: credentials, signing, the request and its answer, within the time
    /// `deadline` leaves.
    async fn send_once<Resp: DeserializeOwned>(
        &self,
        op: &'static str,
        body: &Bytes,
        deadline: &Deadline,
    ) -> Result<Resp, DynamoError> {
        let inner = &*self.inner;
        // A provider may retry on its own for minutes (object_store's does): bound it.
        let left = deadline.remaining();
        let credential = tokio::time::timeout(left, inner.credentials.get_credential())
            .await
            .map_err(|_| {
                DynamoError::Credentials(format!(
                    "the credential provider gave none in the {left:?} left of the call's deadline"
                ))
            })?
            .map_err(|e| DynamoError::Credentials(e.to_string()))?;
        // The per-request timeout holds for any HTTP client, and covers connecting too.
        let timeout = inner.retry.request_timeout.min(deadline.remaining());
        if timeout.is_zero() {
            return Err(DynamoError::Credentials(
                "the credential provider used up the call's deadline".into(),
            ));
        }
        let api = Api::of(op);
        let url = inner.url_for(api);
        let target = format!("{}{op}", api.target_prefix());
        let headers = signed_headers(
            &credential,
            &inner.region,
            url,
            &target,
            body,
            SystemTime::now(),
        )?;
        inner
            .requests
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut request = inner.http.post(url).timeout(timeout).body(body.clone());
        for (name, value) in headers {
            request = request.header(HeaderName::from_static(name), header_value(name, value)?);
        }
        // A connection never opened sent nothing: not ambiguous (and retried little).
        let transport = |source: reqwest::Error| {
            let endpoint = url.to_owned();
            if source.is_connect() {
                DynamoError::Unreachable {
                    operation: op,
                    endpoint,
                    source,
                }
            } else {
                DynamoError::Transport {
                    operation: op,
                    endpoint,
                    source,
                }
            }
        };
        let response = request.send().await.map_err(transport)?;
        let status = response.status().as_u16();
        let bytes = response.bytes().await.map_err(transport)?;
        parse_response(op, url, status, &bytes)
    }
}

/// The one time bound of a public call: every request, retry, backoff, page, chunk and
/// credential fetch it makes ends by `limit` after it started.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Deadline {
    /// The public call, named in [`DynamoError::DeadlineExceeded`].
    call: &'static str,
    started: Instant,
    limit: Duration,
}

impl Deadline {
    /// A deadline `limit` from now for `call`.
    pub(crate) fn new(call: &'static str, limit: Duration) -> Self {
        Self {
            call,
            started: Instant::now(),
            limit,
        }
    }

    /// Time left, zero once past.
    pub(crate) fn remaining(&self) -> Duration {
        self.limit.saturating_sub(self.started.elapsed())
    }

    /// Time since the call started.
    pub(crate) fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    /// Whether no time is left.
    pub(crate) fn is_past(&self) -> bool {
        self.remaining().is_zero()
    }

    /// The error of a call that ran out of time, after `last` if any.
    pub(crate) fn exceeded(
        &self,
        last: Option<DynamoError>,
        may_have_applied: bool,
    ) -> DynamoError {
        DynamoError::DeadlineExceeded {
            operation: self.call,
            deadline: self.limit,
            elapsed: self.elapsed(),
            last: last.map(Box::new),
            may_have_applied,
        }
    }
}

/// Whether a request may be sent again after an attempt that got no definite answer.
/// See [`DynamoClient::call_with_retries`] for why each case is safe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Resend {
    /// It only reads: retried freely, and its failures carry no "may have applied".
    Read,
    /// A write that applying twice does no harm, or whose second application its own
    /// condition refuses: retried after any retryable failure.
    Always,
    /// A write that may count twice: retried only after failures that say it was not
    /// applied (throttling); an ambiguous failure is returned at once.
    IfDefinite,
    /// Sent once: every failure is returned at once, for a caller that builds the request
    /// afresh for its next attempt (a condition on the current time must not be sent
    /// again with an old time).
    Never,
}

/// A header value, marked sensitive where it carries a secret so that reqwest's and
/// http's Debug output redact it.
fn header_value(name: &str, value: String) -> Result<HeaderValue, DynamoError> {
    let mut value = HeaderValue::try_from(value)
        .map_err(|_| DynamoError::Signing(format!("header {name} is not a valid header value")))?;
    if matches!(name, "authorization" | "x-amz-security-token") {
        value.set_sensitive(true);
    }
    Ok(value)
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
        Ok(DynamoClient {
            inner: Arc::new(Inner {
                http,
                url,
                streams_url,
                region,
                credentials,
                retry: self.retry,
                requests: std::sync::atomic::AtomicU64::new(0),
            }),
        })
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
    fn operations_pick_their_api_by_name() {
        for op in [
            "ListStreams",
            "DescribeStream",
            "GetShardIterator",
            "GetRecords",
        ] {
            assert_eq!(Api::of(op), Api::Streams, "{op}");
        }
        for op in [
            "GetItem",
            "DescribeTable",
            "UpdateTable",
            "Query",
            "ListTables",
        ] {
            assert_eq!(Api::of(op), Api::DynamoDb, "{op}");
        }
        assert_eq!(Api::Streams.target_prefix(), "DynamoDBStreams_20120810.");
        assert_eq!(Api::DynamoDb.target_prefix(), "DynamoDB_20120810.");
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

    #[test]
    fn secret_headers_are_marked_sensitive() {
        assert!(
            header_value("authorization", "x".into())
                .unwrap()
                .is_sensitive()
        );
        assert!(
            header_value("x-amz-security-token", "x".into())
                .unwrap()
                .is_sensitive()
        );
        assert!(
            !header_value("x-amz-target", "x".into())
                .unwrap()
                .is_sensitive()
        );
    }
}
