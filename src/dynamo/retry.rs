//! Retry policy: capped exponential backoff with full jitter, bounded in attempts and time.

use std::time::Duration;

/// How the client retries throttling, 5xx answers and requests that got no answer.
///
/// The delay before retry `n` (from 1) is uniformly random in
/// `[0, min(max_backoff, initial_backoff * 2^(n-1))]` ("full jitter"), so a crowd of clients
/// throttled together spreads out instead of coming back in step. Retrying stops at
/// `max_attempts` attempts, or when the next delay would end past `max_elapsed` from the
/// first attempt, whichever comes first. A connection that could not be opened (refused,
/// no such host, a failed TLS handshake) sent nothing: it is retried too, but only up to
/// `max_connect_attempts` attempts, so that a wrong endpoint fails in moments.
///
/// # One deadline per call
///
/// Every public call of [`DynamoClient`](super::DynamoClient) has one overall deadline,
/// `call_deadline` from its start (for `ensure_table`
/// and `wait_until_active`, the table spec's or
/// the caller's own wait bound instead). It covers everything the call does: fetching
/// credentials, each request, retries and their backoff, every page of
/// `query_all` and
/// `scan_all`, every chunk and unprocessed-item retry of
/// `batch_write_item`. It is enforced hard: a
/// request still in flight when it passes is abandoned (for a write, that is ambiguous),
/// and the call fails with [`DynamoError::DeadlineExceeded`](super::DynamoError::DeadlineExceeded),
/// naming the call and how long it ran. Each request is also bounded by
/// `request_timeout`, set on the request itself, so that it holds for any HTTP client
/// given to [`with_http_client`](super::DynamoClientBuilder::with_http_client).
///
/// A 5xx or a lost answer leaves a write *ambiguous*: it may have been applied. Sending it
/// again is safe for reads, puts, deletes, updates that only set values, transactions
/// (their `ClientRequestToken` makes DynamoDB apply them once), and conditional writes
/// whose own effect falsifies their condition (the retry then fails that condition, and
/// the error says an earlier attempt may have applied: see
/// [`DynamoError::is_ambiguous`](super::DynamoError::is_ambiguous)). An unconditional
/// update that may count twice (`ADD`, `#n + :one`)
/// is not sent again after an ambiguous failure unless it asks to be
/// (`UpdateItem::resend_if_ambiguous`).
///
/// ```
/// use std::time::Duration;
/// use dynacommit::dynamo::RetryConfig;
///
/// let patient = RetryConfig {
///     max_attempts: 20,
///     max_elapsed: Duration::from_secs(60),
///     ..RetryConfig::default()
/// };
/// assert!(patient.validate().is_ok());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetryConfig {
    /// Attempts in all, the first included. At least 1.
    pub max_attempts: u32,
    /// The cap of the first delay.
    pub initial_backoff: Duration,
    /// The cap of any one delay.
    pub max_backoff: Duration,
    /// No retry starts later than this after the first attempt.
    pub max_elapsed: Duration,
    /// Bound on one request, from sending to the end of the body.
    pub request_timeout: Duration,
    /// Bound on opening a connection (on the HTTP client the builder makes; a client given
    /// to `with_http_client` keeps its own, and `request_timeout` bounds it anyway).
    pub connect_timeout: Duration,
    /// Attempts in all, the first included, while the connection cannot even be opened
    /// (nothing was sent, so it is never ambiguous). At least 1; `max_attempts` still
    /// applies.
    pub max_connect_attempts: u32,
    /// Bound on one public call as a whole: see "One deadline per call" above.
    pub call_deadline: Duration,
}

impl Default for RetryConfig {
    fn default() -> Self {
        Self {
            max_attempts: 10,
            initial_backoff: Duration::from_millis(25),
            max_backoff: Duration::from_secs(2),
            max_elapsed: Duration::from_secs(20),
            request_timeout: Duration::from_secs(10),
            connect_timeout: Duration::from_secs(3),
            max_connect_attempts: 3,
            call_deadline: Duration::from_secs(60),
        }
    }
}

impl RetryConfig {
    /// Checks the settings make sense, naming the first that does not.
    pub fn validate(&self) -> Result<(), String> {
        if self.max_attempts == 0 {
            return Err("retry max_attempts must be at least 1".into());
        }
        if self.initial_backoff.is_zero() {
            return Err("retry initial_backoff must be above zero".into());
        }
        if self.max_backoff < self.initial_backoff {
            return Err("retry max_backoff must not be below initial_backoff".into());
        }
        if self.request_timeout.is_zero() || self.connect_timeout.is_zero() {
            return Err("request and connect timeouts must be above zero".into());
        }
        if self.max_connect_attempts == 0 {
            return Err("retry max_connect_attempts must be at least 1".into());
        }
        if self.call_deadline.is_zero() {
            return Err("call_deadline must be above zero".into());
        }
        Ok(())
    }

    /// How long to wait before trying again after `attempts` attempts begun at `started`,
    /// or `None` once the attempt or time bound says to stop.
    pub fn next_delay(&self, attempts: u32, started: tokio::time::Instant) -> Option<Duration> {
        self.next_delay_drawn(attempts, started, random_below)
    }

    /// [`next_delay`](Self::next_delay), with the jitter drawn by `draw` (a duration up to
    /// the one it is given): a simulation draws it from its seed.
    pub(crate) fn next_delay_drawn(
        &self,
        attempts: u32,
        started: tokio::time::Instant,
        draw: impl FnOnce(Duration) -> Duration,
    ) -> Option<Duration> {
        let delay = draw(self.backoff_cap(attempts));
        let within_time = started.elapsed().saturating_add(delay) <= self.max_elapsed;
        (attempts < self.max_attempts && within_time).then_some(delay)
    }

    /// The delay before retry number `retry` (1 for the first retry), jittered.
    pub fn backoff(&self, retry: u32) -> Duration {
        random_below(self.backoff_cap(retry))
    }

    /// The upper bound of the delay before retry number `retry`.
    pub fn backoff_cap(&self, retry: u32) -> Duration {
        let doublings = retry.saturating_sub(1).min(30);
        self.initial_backoff
            .saturating_mul(1 << doublings)
            .min(self.max_backoff)
    }
}

/// A uniformly random duration from zero to `cap`, both included.
fn random_below(cap: Duration) -> Duration {
    let nanos = u64::try_from(cap.as_nanos()).unwrap_or(u64::MAX);
    Duration::from_nanos(rand::random_range(0..=nanos))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cap_doubles_then_stays_at_the_maximum() {
        let r = RetryConfig {
            initial_backoff: Duration::from_millis(10),
            max_backoff: Duration::from_millis(50),
            ..RetryConfig::default()
        };
        let caps: Vec<u128> = (1..=6).map(|n| r.backoff_cap(n).as_millis()).collect();
        assert_eq!(caps, [10, 20, 40, 50, 50, 50]);
        assert_eq!(r.backoff_cap(u32::MAX), Duration::from_millis(50));
    }

    #[test]
    fn jittered_delays_stay_under_the_cap_and_vary() {
        let r = RetryConfig::default();
        let delays: Vec<Duration> = (0..64).map(|_| r.backoff(4)).collect();
        assert!(delays.iter().all(|d| *d <= r.backoff_cap(4)));
        let first = delays[0];
        assert!(delays.iter().any(|d| *d != first), "no jitter: {delays:?}");
    }

    #[test]
    fn nonsense_settings_are_refused() {
        let zero = RetryConfig {
            max_attempts: 0,
            ..RetryConfig::default()
        };
        assert!(zero.validate().unwrap_err().contains("max_attempts"));
        let inverted = RetryConfig {
            max_backoff: Duration::from_millis(1),
            ..RetryConfig::default()
        };
        assert!(inverted.validate().unwrap_err().contains("max_backoff"));
        let no_time = RetryConfig {
            call_deadline: Duration::ZERO,
            ..RetryConfig::default()
        };
        assert!(no_time.validate().unwrap_err().contains("call_deadline"));
        let no_connect = RetryConfig {
            max_connect_attempts: 0,
            ..RetryConfig::default()
        };
        assert!(
            no_connect
                .validate()
                .unwrap_err()
                .contains("max_connect_attempts")
        );
    }
}
