//! Everything that can go wrong talking to DynamoDB, as one typed enum.

use std::time::Duration;

use super::attr::Item;
use super::stream_view::StreamViewType;

/// An error from the DynamoDB client.
///
/// Server errors carry DynamoDB's own code and message. Use [`DynamoError::is_retryable`]
/// to tell passing faults from final ones; the client has already retried the former
/// (within its [`RetryConfig`](super::RetryConfig)) before handing one back.
///
/// Use [`DynamoError::is_ambiguous`] to tell whether a write that failed may nonetheless
/// have been applied. That is judged over the whole call, not only its last attempt: when
/// an earlier attempt of a write got no definite answer (no answer, a 5xx, a transaction
/// still in progress) and a later attempt failed for another reason, the error comes back
/// as [`DynamoError::AfterAmbiguousAttempt`] wrapping the last attempt's error, or as
/// [`DynamoError::RetriesExhausted`] with `earlier_attempt_may_have_applied` set. The
/// typical case: a conditional PutItem applies, its answer is lost, and the retry fails its
/// own condition because of the first attempt's write. That is not a rival's doing.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DynamoError {
    /// A condition expression evaluated to false. `old_item` holds the item as it stood
    /// when `ReturnValuesOnConditionCheckFailure=ALL_OLD` was asked and the server sent it
    /// back; some emulators never do, so callers must cope with `None`.
    #[error("{operation}: the condition failed: {message}")]
    ConditionalCheckFailed {
        /// The operation that was refused.
        operation: &'static str,
        /// DynamoDB's message.
        message: String,
        /// The item as it was, if asked for and sent.
        old_item: Option<Box<Item>>,
    },

    /// A `TransactWriteItems` call was cancelled; `reasons` has one entry per item of the
    /// request, in order.
    #[error("TransactWriteItems: the transaction was cancelled ({}): {message}", describe_reasons(.reasons))]
    TransactionCanceled {
        /// DynamoDB's message.
        message: String,
        /// Why each item was (or was not) the cause.
        reasons: Vec<CancellationReason>,
    },

    /// DynamoDB answered with an error of its own (validation, missing table, access denied,
    /// throttling that outlasted the retries, ...).
    #[error("{operation}: DynamoDB answered HTTP {status} {code}: {message}")]
    Service {
        /// The operation that failed.
        operation: &'static str,
        /// The HTTP status.
        status: u16,
        /// The error code, without its namespace (`ResourceNotFoundException`).
        code: String,
        /// DynamoDB's message (sent as `Message` or `message`).
        message: String,
    },

    /// The server answered with something that is not a DynamoDB answer at all: an HTML
    /// page from a proxy, a body that is not JSON, a JSON body missing a required field,
    /// an error body under a 2xx status.
    ///
    /// A 2xx status means DynamoDB accepted the request: for a write, this error is
    /// [ambiguous](DynamoError::is_ambiguous) (the write may well have applied), and it is
    /// not retried.
    #[error(
        "{operation}: unusable answer from {endpoint} (HTTP {status}){}: {problem}; body starts: {excerpt:?}",
        accepted_note(.operation, *.status)
    )]
    MalformedResponse {
        /// The operation.
        operation: &'static str,
        /// Where it was sent.
        endpoint: String,
        /// The HTTP status.
        status: u16,
        /// What was wrong with it.
        problem: String,
        /// The first bytes of the body, lossily decoded.
        excerpt: String,
    },

    /// The request never got an answer: connection refused or reset, a timeout, a body cut
    /// short. The write may or may not have been applied.
    #[error("{operation}: no answer from {endpoint}: {source}")]
    Transport {
        /// The operation.
        operation: &'static str,
        /// Where it was sent.
        endpoint: String,
        /// Why no answer came (for HTTP, reqwest's error, whose chain names the cause).
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },

    /// The connection could not even be opened: refused, no such host, a failed TLS
    /// handshake, a connect timeout. The request was never sent, so this is not
    /// [ambiguous](DynamoError::is_ambiguous). Retried, but only up to
    /// [`RetryConfig::max_connect_attempts`](super::RetryConfig::max_connect_attempts).
    #[error("{operation}: could not connect to {endpoint} (nothing was sent): {source}")]
    Unreachable {
        /// The operation.
        operation: &'static str,
        /// Where it was to be sent.
        endpoint: String,
        /// The underlying HTTP client error (its chain names the cause).
        #[source]
        source: reqwest::Error,
    },

    /// A public call did not finish within its one overall deadline
    /// ([`RetryConfig::call_deadline`](super::RetryConfig::call_deadline), or the wait bound
    /// of `ensure_table` and
    /// `wait_until_active`): its requests, retries,
    /// pages, chunks and credential fetches together took too long.
    ///
    /// It is [ambiguous](DynamoError::is_ambiguous) when `may_have_applied` is set: a write
    /// was in flight when the deadline cut it, or an earlier attempt got no definite answer.
    #[error(
        "{operation}: did not finish within its deadline of {deadline:?} (ran {elapsed:?}){}{}",
        if *.may_have_applied { "; a write got no definite answer: it may have applied" } else { "" },
        .last.as_ref().map(|e| format!("; last error: {e}")).unwrap_or_default()
    )]
    DeadlineExceeded {
        /// The public call (`query_all`, `batch_write_item`, `ensure_table`, ...), or the
        /// DynamoDB operation of a single-request call (`PutItem`, ...).
        operation: &'static str,
        /// The deadline it had.
        deadline: Duration,
        /// How long it ran.
        elapsed: Duration,
        /// The last error before time ran out, if any (a request cut short, a credential
        /// provider that never answered, a retryable fault).
        last: Option<Box<DynamoError>>,
        /// Whether a write may have been applied without the call learning it. Never set
        /// for reads.
        may_have_applied: bool,
    },

    /// A retryable fault kept happening until the attempt or time bound ran out.
    ///
    /// It is [ambiguous](DynamoError::is_ambiguous) if its last attempt was, or if
    /// `earlier_attempt_may_have_applied` is set (say, a 500 and then throttling until the
    /// bound ran out).
    #[error(
        "{operation}: gave up after {attempts} attempts in {elapsed:?}{}; last error: {last}",
        if *.earlier_attempt_may_have_applied { " (an earlier attempt got no definite answer: the write may have applied)" } else { "" }
    )]
    RetriesExhausted {
        /// The operation.
        operation: &'static str,
        /// How many attempts were made.
        attempts: u32,
        /// Time from the first attempt to giving up.
        elapsed: Duration,
        /// The last attempt's error.
        last: Box<DynamoError>,
        /// Whether an attempt before the last got no definite answer (no answer, a 5xx, a
        /// transaction still in progress), so that the write may have been applied. Never
        /// set for reads.
        earlier_attempt_may_have_applied: bool,
    },

    /// A write call failed on its last attempt after an earlier attempt got no definite
    /// answer: whatever `last` says, the write may have been applied by that earlier
    /// attempt. Always [ambiguous](DynamoError::is_ambiguous).
    ///
    /// A `ConditionalCheckFailed` wrapped here most likely failed on the earlier attempt's
    /// own write: compare the old item ([`DynamoError::old_item`] looks through this
    /// wrapper) with what was written before concluding that a rival wrote it.
    /// [`code`](DynamoError::code), [`is_condition_failure`](DynamoError::is_condition_failure)
    /// and [`is_retryable`](DynamoError::is_retryable) answer for `last`;
    /// [`underlying`](DynamoError::underlying) gives it.
    #[error(
        "{last} (after attempt {first_ambiguous_attempt} of {attempts} got no definite answer: {earlier}; that earlier attempt may have applied the write)"
    )]
    AfterAmbiguousAttempt {
        /// The operation.
        operation: &'static str,
        /// How many attempts were made.
        attempts: u32,
        /// The first attempt (from 1) that got no definite answer.
        first_ambiguous_attempt: u32,
        /// That attempt's error.
        earlier: Box<DynamoError>,
        /// The last attempt's error.
        last: Box<DynamoError>,
    },

    /// Some writes of a `BatchWriteItem` were still unprocessed when the bound ran out.
    #[error(
        "BatchWriteItem: {unprocessed} of {total} writes still unprocessed after {attempts} attempts; retry them or raise the retry bound"
    )]
    BatchIncomplete {
        /// Writes not applied.
        unprocessed: usize,
        /// Writes asked for.
        total: usize,
        /// Attempts made for the last chunk.
        attempts: u32,
    },

    /// Credentials could not be obtained from the configured provider.
    #[error("could not get AWS credentials for DynamoDB: {0}")]
    Credentials(String),

    /// The request could not be signed.
    #[error("could not sign the DynamoDB request: {0}")]
    Signing(String),

    /// The client configuration is unusable.
    #[error("invalid DynamoDB configuration: {0}")]
    Config(String),

    /// A request the client refuses to send because DynamoDB would reject it.
    #[error("invalid DynamoDB request: {0}")]
    InvalidRequest(String),

    /// An existing table does not have the key schema asked for.
    #[error(
        "table {table} exists with key schema {found}, but {expected} is needed: use another table name, or delete and recreate it"
    )]
    TableSchemaMismatch {
        /// The table.
        table: String,
        /// The schema asked for.
        expected: String,
        /// The schema found.
        found: String,
    },

    /// A table did not become ACTIVE in time.
    #[error(
        "table {table} is still {status} after {waited:?}; try again later, or raise the wait bound"
    )]
    TableNotReady {
        /// The table.
        table: String,
        /// Its last status.
        status: String,
        /// How long we waited.
        waited: Duration,
    },

    /// The table has a stream enabled, but of another view type than the one asked for.
    /// DynamoDB cannot change a stream's view type in place, and
    /// `ensure_table` never replaces a stream that
    /// readers may depend on.
    #[error(
        "table {table} has a stream with view type {found}, but {expected} is needed; a stream's view type cannot be changed: disable the stream and enable it again with {expected} (readers then move to a new stream ARN), or use another table name"
    )]
    StreamViewTypeMismatch {
        /// The table.
        table: String,
        /// The view type asked for.
        expected: StreamViewType,
        /// The view type found.
        found: StreamViewType,
    },

    /// TTL is enabled on the table, but on another attribute than the one asked for.
    #[error(
        "table {table} has TTL on attribute {found:?}, but {expected:?} is needed; DynamoDB allows one TTL attribute per table"
    )]
    TtlMismatch {
        /// The table.
        table: String,
        /// The attribute asked for.
        expected: String,
        /// The attribute found.
        found: String,
    },
}

/// Why one item of a cancelled transaction was cancelled.
#[derive(Debug, Clone, PartialEq)]
pub struct CancellationReason {
    /// The item's position in the request, from 0.
    pub index: usize,
    /// DynamoDB's code: `None` for items that were fine, `ConditionalCheckFailed`, ...
    pub code: String,
    /// DynamoDB's message, if any.
    pub message: Option<String>,
    /// The item as it was, when `ReturnValuesOnConditionCheckFailure=ALL_OLD` was asked.
    pub item: Option<Item>,
}

impl CancellationReason {
    /// Whether this item caused the cancellation (its code is anything but `None`).
    pub fn is_cause(&self) -> bool {
        self.code != "None"
    }

    /// Whether this item's write was throttled (`ThrottlingError` for on-demand tables,
    /// `ProvisionedThroughputExceeded` for provisioned ones): the transaction did not
    /// apply, and the same one may apply once sent again.
    pub(crate) fn is_throttling(&self) -> bool {
        matches!(
            self.code.as_str(),
            "ThrottlingError" | "ProvisionedThroughputExceeded"
        )
    }

    /// Whether another transaction (or a single write) in flight on this item cancelled
    /// the transaction: contention, never answered by DynamoDB Local.
    pub(crate) fn is_conflict(&self) -> bool {
        self.code == "TransactionConflict"
    }
}

fn describe_reasons(reasons: &[CancellationReason]) -> String {
    let causes: Vec<String> = reasons
        .iter()
        .filter(|r| r.is_cause())
        .map(|r| format!("item {}: {}", r.index, r.code))
        .collect();
    if causes.is_empty() {
        "no reason given".to_owned()
    } else {
        causes.join(", ")
    }
}

/// The answer to GetRecords with a shard iterator older than 15 minutes.
const EXPIRED_ITERATOR: &str = "ExpiredIteratorException";

/// The answer to a read of stream records older than the stream keeps (24 hours).
const TRIMMED_DATA_ACCESS: &str = "TrimmedDataAccessException";

/// Error codes that mean "slow down": retried with backoff.
const THROTTLING_CODES: &[&str] = &[
    "ProvisionedThroughputExceededException",
    "ThrottlingException",
    "RequestLimitExceeded",
    "LimitExceededException",
];

/// The answer to a single-item write on an item that a `TransactWriteItems` in flight is
/// changing (AWS answers it; DynamoDB Local never does): refused, nothing applied, so
/// retried with backoff like throttling, and never ambiguous.
const TRANSACTION_CONFLICT: &str = "TransactionConflictException";

/// The answer to a retry of a `TransactWriteItems` whose earlier attempt, with the same
/// `ClientRequestToken`, is still being applied: retried with backoff, and ambiguous.
pub(crate) const TRANSACTION_IN_PROGRESS: &str = "TransactionInProgressException";

/// Operations that change nothing: their failures are never ambiguous for lack of an
/// effect. Every other operation is taken as a write.
const READ_OPERATIONS: &[&str] = &[
    "GetItem",
    "BatchGetItem",
    "TransactGetItems",
    "Query",
    "Scan",
    "DescribeTable",
    "DescribeTimeToLive",
    "ListTables",
    // DynamoDB Streams: reading a shard moves no server-side cursor (the iterator is the
    // cursor, and the caller holds it), so these change nothing either.
    "ListStreams",
    "DescribeStream",
    "GetShardIterator",
    "GetRecords",
];

/// Whether `operation` only reads.
pub(crate) fn is_read_operation(operation: &str) -> bool {
    READ_OPERATIONS.contains(&operation)
}

/// What a malformed answer's Display adds when its status says a write was accepted.
fn accepted_note(operation: &str, status: u16) -> &'static str {
    if (200..300).contains(&status) && !is_read_operation(operation) {
        ", which says the write was accepted: it may have applied"
    } else {
        ""
    }
}

impl DynamoError {
    /// Whether the same request may succeed if sent again: throttling, a 5xx, no answer,
    /// a transaction still in progress, an item inside another's transaction.
    pub fn is_retryable(&self) -> bool {
        match self {
            Self::Service { status, code, .. } => {
                *status >= 500
                    || THROTTLING_CODES.contains(&code.as_str())
                    || code == TRANSACTION_IN_PROGRESS
                    || code == TRANSACTION_CONFLICT
            }
            Self::MalformedResponse { status, .. } => *status >= 500,
            Self::Transport { .. } | Self::Unreachable { .. } => true,
            Self::AfterAmbiguousAttempt { last, .. } => last.is_retryable(),
            _ => false,
        }
    }

    /// Whether a write that ended with this error may nonetheless have been applied, by
    /// its last attempt or by any earlier one: the request left but no definite answer came
    /// back (no answer, a 5xx, a 2xx that could not be read, a transaction still in
    /// progress), or a later attempt's error followed such an attempt.
    pub fn is_ambiguous(&self) -> bool {
        match self {
            Self::Transport { .. } | Self::AfterAmbiguousAttempt { .. } => true,
            Self::Service { status, code, .. } => *status >= 500 || code == TRANSACTION_IN_PROGRESS,
            Self::MalformedResponse {
                status, operation, ..
            } => *status >= 500 || !accepted_note(operation, *status).is_empty(),
            Self::RetriesExhausted {
                last,
                earlier_attempt_may_have_applied,
                ..
            } => *earlier_attempt_may_have_applied || last.is_ambiguous(),
            Self::DeadlineExceeded {
                may_have_applied, ..
            } => *may_have_applied,
            _ => false,
        }
    }

    /// Whether this is a failed condition (for a transaction: any item's condition). Also
    /// true of one that followed an ambiguous attempt: check
    /// [`is_ambiguous`](Self::is_ambiguous) before blaming a rival.
    pub fn is_condition_failure(&self) -> bool {
        match self {
            Self::ConditionalCheckFailed { .. } => true,
            Self::TransactionCanceled { reasons, .. } => {
                reasons.iter().any(|r| r.code == "ConditionalCheckFailed")
            }
            Self::AfterAmbiguousAttempt { last, .. } => last.is_condition_failure(),
            _ => false,
        }
    }

    /// The DynamoDB error code, if the server sent one.
    pub fn code(&self) -> Option<&str> {
        match self {
            Self::Service { code, .. } => Some(code),
            Self::ConditionalCheckFailed { .. } => Some("ConditionalCheckFailedException"),
            Self::TransactionCanceled { .. } => Some("TransactionCanceledException"),
            Self::RetriesExhausted { last, .. } | Self::AfterAmbiguousAttempt { last, .. } => {
                last.code()
            }
            Self::DeadlineExceeded { last, .. } => last.as_deref().and_then(Self::code),
            _ => None,
        }
    }

    /// The item as it stood when a condition failed, if the server sent it back: from a
    /// `ConditionalCheckFailed`, wrapped in `AfterAmbiguousAttempt` or not.
    pub fn old_item(&self) -> Option<&Item> {
        match self.underlying() {
            Self::ConditionalCheckFailed { old_item, .. } => old_item.as_deref(),
            _ => None,
        }
    }

    /// Whether GetRecords was given a shard iterator that has expired (they last 15
    /// minutes): get a fresh one with
    /// `get_shard_iterator`, after the last
    /// sequence number read.
    pub fn is_expired_iterator(&self) -> bool {
        self.code() == Some(EXPIRED_ITERATOR)
    }

    /// Whether a stream read asked for records the stream no longer keeps (it trims them
    /// after 24 hours), or a position before the first record of a shard: those records
    /// are gone; start again from
    /// `ShardPosition::TrimHorizon`.
    pub fn is_trimmed(&self) -> bool {
        self.code() == Some(TRIMMED_DATA_ACCESS)
    }

    /// This error without its `AfterAmbiguousAttempt` wrapper: the last attempt's error.
    /// Any other error is itself.
    pub fn underlying(&self) -> &DynamoError {
        match self {
            Self::AfterAmbiguousAttempt { last, .. } => last,
            other => other,
        }
    }
}
