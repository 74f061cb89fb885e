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
                () = &mut shutdown => break,
            };
            let server = server.clone();
            let service = hyper::service::service_fn(move |request| {
                let server = server.clone();
                async move { Ok::<_, Infallible>(server.answer(request, peer).await) }
            });
            let connection = http.serve_connection(TokioIo::new(socket), service);
            let connection = graceful.watch(connection);
            tokio::spawn(async move {
                if let Err(e) = connection.await {
                    tracing::debug!(%peer, error = %e, "gateway: connection ended with an error");
                }
            });
        }
        drop(listener);
        tokio::select! {
            () = graceful.shutdown() => Ok(()),
            () = tokio::time::sleep(server.grace) => {
                tracing::warn!(
                    grace_s = server.grace.as_secs(),
                    "gateway: requests still in flight after the shutdown grace period were cut off"
                );
                Ok(())
            }
        }
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
        } else if method == Method::POST && is_form(&request) {
            // s3s reads a browser form upload whole, before any signature check.
            s3_error_response(
                StatusCode::NOT_IMPLEMENTED,
                "NotImplemented",
                "this gateway does not support browser form uploads (POST Object)",
            )
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

fn is_form(request: &Request<Incoming>) -> bool {
    request
        .headers()
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.to_ascii_lowercase().starts_with("multipart/form-data"))
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
