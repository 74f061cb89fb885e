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
        let method = request.method().clone();
        // The path only: a presigned URL's query carries its signature.
        let path = request.uri().path().to_owned();
        let condition = condition_of(request.headers());
        let response = if method == Method::GET && path == "/health" {
            plain(StatusCode::OK, "ok\n")
        } else if let Some(refusal) = refused_before_s3s(&request) {
            refusal
        } else {
            match self.s3.call(request.map(s3s::Body::from)).await {
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
        };
        let record = AccessRecord {
            peer,
            method: method.to_string(),
            path,
            condition,
            status: response.status().as_u16(),
            duration: started.elapsed(),
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
    let headers = request.headers();
    // A POST without a query is a browser form upload (POST Object), which s3s reads
    // whole before any signature check; every POST S3 routes otherwise has a query
    // (?delete, ?uploads, ?uploadId=). The content type is compared as bytes: any form
    // type at all is refused, whatever its parameters hold.
    let form = headers
        .get(http::header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().to_ascii_lowercase().starts_with(b"multipart/"));
    if request.method() == Method::POST && (request.uri().query().is_none() || form) {
        return Some(s3_error_response(
            StatusCode::NOT_IMPLEMENTED,
            "NotImplemented",
            "this gateway does not support browser form uploads (POST Object)",
        ));
    }
    chunked_beyond_bounds(headers)
}

/// How many bytes of aws-chunked framing a body may carry per chunk (the size in hex, a
/// chunk signature, line ends), and in all beside (the final chunk, trailers).
const FRAMING_PER_CHUNK: u64 = 128;
const FRAMING_FIXED: u64 = 32 * 1024;
/// The smallest chunk S3 allows but the last: 8 KiB.
const MIN_CHUNK: u64 = 8 * 1024;

/// An aws-chunked body (`STREAMING-*` payload, or `Content-Encoding: aws-chunked`) whose
/// length on the wire is not bounded by its decoded length. s3s buffers each chunk whole,
/// at the size the chunk declares, before checking its signature: the body budget, which
/// counts the decoded length, bounds that only if the wire length is bounded too.
fn chunked_beyond_bounds(headers: &http::HeaderMap) -> Option<Response<s3s::Body>> {
    if !super::access::is_chunked(headers) {
        return None;
    }
    let number =
        |name: &str| -> Option<u64> { headers.get(name)?.to_str().ok()?.trim().parse().ok() };
    let (Some(wire), Some(decoded)) = (
        number(http::header::CONTENT_LENGTH.as_str()),
        number("x-amz-decoded-content-length"),
    ) else {
        return Some(s3_error_response(
            StatusCode::LENGTH_REQUIRED,
            "MissingContentLength",
            "an aws-chunked body needs both Content-Length and x-amz-decoded-content-length",
        ));
    };
    let allowed = decoded
        .saturating_add(FRAMING_FIXED)
        .saturating_add((decoded / MIN_CHUNK + 1).saturating_mul(FRAMING_PER_CHUNK));
    (wire > allowed).then(|| {
        s3_error_response(
            StatusCode::BAD_REQUEST,
            "IncompleteBody",
            "the aws-chunked body is longer on the wire than its decoded length allows",
        )
    })
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
