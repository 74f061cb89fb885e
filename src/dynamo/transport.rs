//! Requests answered in process instead of over HTTP (feature `harness`): the seam where
//! the simulator puts a table that answers as AWS does, under Tokio's paused clock, where a
//! socket would let the clock jump past every timeout.

use std::time::Duration;

use bytes::Bytes;
use futures::future::BoxFuture;

/// Answers a [`DynamoClient`](super::DynamoClient)'s requests in place of the HTTP server
/// at its endpoint. Everything above the wire stays the same: the body is the JSON the
/// client would POST, the answer is parsed as an HTTP answer would be, and the client's
/// retries, request timeout and deadlines apply.
pub trait Transport: Send + Sync + 'static {
    /// Answers one request: `target` is its `X-Amz-Target` (`DynamoDB_20120810.PutItem`),
    /// `body` its JSON. `Ok((status, body))` is an HTTP answer; `Err` is a request that
    /// left and got no answer (it may have applied), described by the string.
    fn send(&self, target: &str, body: Bytes) -> BoxFuture<'static, Result<(u16, Bytes), String>>;

    /// A pause from zero to `cap`, both included: the jitter of the client's retries,
    /// drawn where the simulation's seed can replay it.
    fn draw(&self, cap: Duration) -> Duration;
}
