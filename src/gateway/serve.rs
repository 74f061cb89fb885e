//! The HTTP side: connections, the bounds on what a request may send, `/health`, one
//! access-log line per request, and a shutdown that lets requests in flight finish.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use http::{Method, Request, Response, StatusCode};
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use s3s::service::S3Service;
use tokio::net::TcpListener;

use super::AccessRecord;

/// What the accept loop and each connection need.
pub(super) struct Server {
    pub(super) s3: S3Service,
    pub(super) log: Arc<dyn Fn(&AccessRecord) + Send + Sync>,
    pub(super) header_timeout: Duration,
    pub(super) grace: Duration,
    /// The largest object or part body taken (body.rs), which bounds aws-chunked ones.
    pub(super) max_body: u64,
}

/// Where an S3 operation leaves how long its guarded writes waited for their leases
/// (in the request's extensions, which s3s hands to the operation).
#[derive(Clone, Default)]
pub(super) struct LeaseWait(Arc<std::sync::Mutex<Option<Duration>>>);

impl LeaseWait {
    /// Runs `work`, noting the longest its guarded writes waited, if it made any.
    pub(super) async fn measure<T>(this: Option<&Self>, work: impl Future<Output = T>) -> T {
        let (out, waited) = crate::lease::waited::measured(work).await;
        if let Some(this) = this
            && let Ok(mut slot) = this.0.lock()
        {
            *slot = waited;
        }
        out
    }

    fn get(&self) -> Option<Duration> {
        self.0.lock().ok().and_then(|slot| *slot)
    }
}

/// How many bytes a request's head (its line and headers) may take.
const MAX_HEAD_BYTES: usize = 64 * 1024;

/// How many headers a request may carry (S3 requests carry a dozen or two).
const MAX_HEADERS: usize = 100;

impl Server {
    pub(super) async fn run(
        self,
        listener: TcpListener,
        shutdown: impl Future<Output = ()>,
    ) -> std::io::Result<()> {
        let graceful = GracefulShutdown::new();
        let mut connections = tokio::task::JoinSet::new();
        let server = Arc::new(self);
        let mut http = hyper::server::conn::http1::Builder::new();
        http.timer(TokioTimer::new())
            .header_read_timeout(server.header_timeout)
            .max_header_size(MAX_HEAD_BYTES)
            .max_headers(MAX_HEADERS);
        tokio::pin!(shutdown);
        loop {
            let (socket, peer) = tokio::select! {
                accepted = listener.accept() => match accepted {
                    Ok(accepted) => accepted,
                    Err(e) => {
                        // Out of file descriptors, or a connection reset before it was
                        // taken: the listener itself is fine. Wait a moment before the
                        // next accept, so a lasting cause does not spin the loop.
                        tracing::warn!(error = %e, "gateway: accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                },
                // Finished connections' tasks are reaped as they end.
                Some(_) = connections.join_next(), if !connections.is_empty() => continue,
                () = &mut shutdown => break,
            };
            let server = server.clone();
            let service = hyper::service::service_fn(move |request| {
                let server = server.clone();
                async move { Ok::<_, Infallible>(server.answer(request, peer).await) }
            });
            let connection = http.serve_connection(TokioIo::new(socket), service);
            let connection = graceful.watch(connection);
            connections.spawn(async move {
                if let Err(e) = connection.await {
                    tracing::debug!(%peer, error = %e, "gateway: connection ended with an error");
                }
            });
        }
        drop(listener);
        tokio::select! {
            () = graceful.shutdown() => {}
            () = tokio::time::sleep(server.grace) => {
                tracing::warn!(
                    grace_s = server.grace.as_secs(),
                    "gateway: requests still in flight after the shutdown grace period were cut off"
                );
            }
        }
        // What is still running is cut off now, not left running behind a returned serve.
        connections.shutdown().await;
        Ok(())
    }

    /// One request: `/health`, a refusal, or S3's answer; logged.
    async fn answer(&self, request: Request<Incoming>, peer: SocketAddr) -> Response<s3s::Body> {
        let started = Instant::now();
        let record = AccessRecord {
            peer,
            method: request.method().to_string(),
            // The path only: a presigned URL's query carries its signature.
            path: request.uri().path().to_owned(),
            condition: condition_of(request.headers()),
            status: 0,
            duration: Duration::ZERO,
            lease_wait: None,
        };
        // Where the S3 operation leaves how long it waited for a lease, if it took one.
        let wait = LeaseWait::default();
        let response = self.respond(request, &wait).await;
        self.logged(
            response,
            AccessRecord {
                lease_wait: wait.get(),
                duration: started.elapsed(),
                ..record
            },
        )
    }

    /// `/health`, a refusal, or S3's answer.
    async fn respond(&self, request: Request<Incoming>, wait: &LeaseWait) -> Response<s3s::Body> {
        if request.method() == Method::GET && request.uri().path() == "/health" {
            return plain(StatusCode::OK, "ok\n");
        }
        if let Some(refusal) = refused_before_s3s(&request) {
            return refusal;
        }
        let bound = match chunked_bound(&request, self.max_body) {
            Ok(bound) => bound,
            Err(refusal) => return *refusal,
        };
        let mut request = request.map(|body| match bound {
            // Past the bound the body fails, and the request with it: nothing is written
            // before a body is read whole (body.rs).
            Some(bound) => s3s::Body::http_body(http_body_util::Limited::new(
                body,
                usize::try_from(bound).unwrap_or(usize::MAX),
            )),
            None => s3s::Body::from(body),
        });
        request.extensions_mut().insert(wait.clone());
        match self.s3.call(request).await {
            Ok(response) => response,
            Err(e) => {
                tracing::error!(error = ?e, "gateway: s3s failed to answer");
                s3_error_response(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "InternalError",
                    "the gateway could not answer the request",
                )
            }
        }
    }

    /// `response`, its access-log line written.
    fn logged(&self, response: Response<s3s::Body>, record: AccessRecord) -> Response<s3s::Body> {
        let record = AccessRecord {
            status: response.status().as_u16(),
            ..record
        };
        (self.log)(&record);
        response
    }
}

/// The condition a request carries, as the access log names it.
fn condition_of(headers: &http::HeaderMap) -> Option<&'static str> {
    let copy = headers.contains_key("x-amz-copy-source");
    if headers.contains_key(http::header::IF_NONE_MATCH) {
        Some(if copy {
            "copy-if-absent"
        } else {
            "if-none-match"
        })
    } else if headers.contains_key(http::header::IF_MATCH) {
        Some("if-match")
    } else {
        None
    }
}

/// What must be refused before s3s sees the request, because s3s would read its body
/// into memory first.
fn refused_before_s3s(request: &Request<Incoming>) -> Option<Response<s3s::Body>> {
    // A POST without a query is a browser form upload (POST Object), which s3s reads
    // whole before any signature check; every POST S3 routes otherwise has a query
    // (?delete, ?uploads, ?uploadId=). With a query, a form content type (compared as
    // bytes, whatever its parameters hold) is refused too: s3s would read it as a form.
    // (CreateMultipartUpload's other multipart/* types name the object's type.)
    let form = request
        .headers()
        .get(http::header::CONTENT_TYPE)
        .is_some_and(|v| {
            v.as_bytes()
                .to_ascii_lowercase()
                .starts_with(b"multipart/form-data")
        });
    (request.method() == Method::POST && (request.uri().query().is_none() || form)).then(|| {
        s3_error_response(
            StatusCode::NOT_IMPLEMENTED,
            "NotImplemented",
            "this gateway does not support browser form uploads (POST Object)",
        )
    })
}

/// How many bytes of aws-chunked framing a body may carry per chunk (the size in hex, a
/// chunk signature, line ends), and in all beside (the final chunk, trailers).
const FRAMING_PER_CHUNK: u64 = 128;
const FRAMING_FIXED: u64 = 32 * 1024;
/// The smallest chunk S3 allows but the last: 8 KiB.
const MIN_CHUNK: u64 = 8 * 1024;
/// The largest XML body s3s reads (S3Config::xml_max_body_size, set in mod.rs).
pub(super) const MAX_XML_BODY: u64 = 4 << 20;

/// How many bytes an aws-chunked body (a `STREAMING-*` payload, or `Content-Encoding:
/// aws-chunked`) may carry on the wire, or the refusal of one that declares too much.
/// s3s buffers each chunk whole, at the size the chunk declares, before checking its
/// signature: only a bound on the wire bytes bounds that, whether the body comes with a
/// Content-Length or in HTTP chunks (as SDKs send trailer checksums over TLS). The
/// decoded length is bounded by what the request may carry: an object's or a part's
/// body up to `max_body`, an XML body up to what s3s reads.
fn chunked_bound(
    request: &Request<Incoming>,
    max_body: u64,
) -> Result<Option<u64>, Box<Response<s3s::Body>>> {
    let headers = request.headers();
    if !super::access::is_chunked(headers) {
        return Ok(None);
    }
    let Some(decoded) = headers
        .get("x-amz-decoded-content-length")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
    else {
        return Err(Box::new(s3_error_response(
            StatusCode::LENGTH_REQUIRED,
            "MissingContentLength",
            "an aws-chunked body needs x-amz-decoded-content-length",
        )));
    };
    let query = request.uri().query().unwrap_or_default();
    let data = request.method() == Method::PUT
        && (query.is_empty() || (query.contains("partNumber=") && query.contains("uploadId=")));
    let most = if data { max_body } else { MAX_XML_BODY };
    if decoded > most {
        return Err(Box::new(s3_error_response(
            StatusCode::BAD_REQUEST,
            "EntityTooLarge",
            "the aws-chunked body declares more than this request may carry",
        )));
    }
    Ok(Some(decoded.saturating_add(FRAMING_FIXED).saturating_add(
        (decoded / MIN_CHUNK + 1).saturating_mul(FRAMING_PER_CHUNK),
    )))
}

fn plain(status: StatusCode, text: &'static str) -> Response<s3s::Body> {
    let mut response = Response::new(s3s::Body::from(text.to_owned()));
    *response.status_mut() = status;
    response
}

/// An S3 error answered without s3s.
fn s3_error_response(status: StatusCode, code: &str, message: &str) -> Response<s3s::Body> {
    let xml = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>{code}</Code><Message>{message}</Message></Error>"
    );
    let mut response = Response::new(s3s::Body::from(xml));
    *response.status_mut() = status;
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/xml"),
    );
    response
}
