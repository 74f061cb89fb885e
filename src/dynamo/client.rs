//! The DynamoDB client: configuration, and one signed, retried JSON call.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use object_store::aws::AwsCredentialProvider;
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
/// Build one with [`DynamoClientBuilder`](crate::dynamo::DynamoClientBuilder):
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
/// let leases = dynacommit::lease::DynamoLeaseTable::new(client, "leases");
/// let report = leases.ensure_table().await?;
/// println!("{} is {}", report.table.name, report.table.status);
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
    /// Where requests go instead of HTTP, in the simulator.
    #[cfg(feature = "harness")]
    transport: Option<Arc<dyn super::transport::Transport>>,
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
    /// A client of the settings a [`DynamoClientBuilder`] checked.
    pub(super) fn from_settings(
        http: reqwest::Client,
        url: String,
        streams_url: String,
        region: String,
        credentials: AwsCredentialProvider,
        retry: RetryConfig,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                http,
                url,
                streams_url,
                region,
                credentials,
                retry,
                requests: std::sync::atomic::AtomicU64::new(0),
                #[cfg(feature = "harness")]
                transport: None,
            }),
        }
    }

    /// This client, answered by `transport` instead of HTTP (only while unshared: the
    /// builder's last step).
    #[cfg(feature = "harness")]
    pub(super) fn with_transport(
        mut self,
        transport: Arc<dyn super::transport::Transport>,
    ) -> Self {
        if let Some(inner) = Arc::get_mut(&mut self.inner) {
            inner.transport = Some(transport);
        }
        self
    }

    /// The URL requests go to.
    pub fn endpoint(&self) -> &str {
        &self.inner.url
    }

    /// The URL DynamoDB Streams requests go to. See
    /// [`DynamoClientBuilder::with_streams_endpoint`](crate::dynamo::DynamoClientBuilder::with_streams_endpoint) for how it is chosen.
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

    /// The pause before attempt `attempts + 1` of a request first sent at `started`, or
    /// `None` once the retry policy says stop; jittered by the transport in a simulation.
    pub(crate) fn next_delay(&self, attempts: u32, started: Instant) -> Option<Duration> {
        #[cfg(feature = "harness")]
        if let Some(transport) = &self.inner.transport {
            return self
                .inner
                .retry
                .next_delay_drawn(attempts, started, |cap| transport.draw(cap));
        }
        self.inner.retry.next_delay(attempts, started)
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
            let delay = self
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
        #[cfg(feature = "harness")]
        if let Some(transport) = &inner.transport {
            let no_answer = |why: String| DynamoError::Transport {
                operation: op,
                endpoint: url.to_owned(),
                source: why.into(),
            };
            let answer = tokio::time::timeout(timeout, transport.send(&target, body.clone()))
                .await
                .map_err(|_| no_answer(format!("timed out after {timeout:?}")))?;
            let (status, bytes) = answer.map_err(no_answer)?;
            return parse_response(op, url, status, &bytes);
        }
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
                    source: source.into(),
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

#[cfg(test)]
mod tests {
    use super::*;

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
