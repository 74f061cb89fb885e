//! Everything that can go wrong talking to DynamoDB, as one typed enum.

use std::time::Duration;

use super::attr::Item;

/// An error from the DynamoDB client.
///
/// Server errors carry DynamoDB's own code and message. Use [`DynamoError::is_retryable`]
/// to tell passing faults from final ones; the client has already retried the former
/// (within its [`RetryConfig`](super::RetryConfig)) before handing one back.
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
    /// page from a proxy, a body that is not JSON, a JSON body missing a required field.
    #[error(
        "{operation}: unusable answer from {endpoint} (HTTP {status}): {problem}; body starts: {excerpt:?}"
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
        /// The underlying HTTP client error (its chain names the cause).
        #[source]
        source: reqwest::Error,
    },

    /// A retryable fault kept happening until the attempt or time bound ran out.
    #[error("{operation}: gave up after {attempts} attempts in {elapsed:?}; last error: {last}")]
    RetriesExhausted {
        /// The operation.
        operation: &'static str,
        /// How many attempts were made.
        attempts: u32,
        /// Time from the first attempt to giving up.
        elapsed: Duration,
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

/// Error codes that mean "slow down": retried with backoff.
const THROTTLING_CODES: &[&str] = &[
    "ProvisionedThroughputExceededException",
    "ThrottlingException",
    "RequestLimitExceeded",
    "LimitExceededException",
];

impl DynamoError {
    /// Whether the same request may succeed if sent again: throttling, a 5xx, no answer.
    pub fn is_retryable(&self) -> bool {
        match self {
            Self::Service { status, code, .. } => {
                *status >= 500 || THROTTLING_CODES.contains(&code.as_str())
            }
            Self::MalformedResponse { status, .. } => *status >= 500,
            Self::Transport { .. } => true,
            _ => false,
        }
    }

    /// Whether a write that ended with this error may nonetheless have been applied:
    /// the request left but no definite answer came back.
    pub fn is_ambiguous(&self) -> bool {
        match self {
            Self::Transport { .. } => true,
            Self::Service { status, .. } | Self::MalformedResponse { status, .. } => *status >= 500,
            Self::RetriesExhausted { last, .. } => last.is_ambiguous(),
            _ => false,
        }
    }

    /// Whether this is a failed condition (for a transaction: any item's condition).
    pub fn is_condition_failure(&self) -> bool {
        match self {
            Self::ConditionalCheckFailed { .. } => true,
            Self::TransactionCanceled { reasons, .. } => {
                reasons.iter().any(|r| r.code == "ConditionalCheckFailed")
            }
            _ => false,
        }
    }

    /// The DynamoDB error code, if the server sent one.
    pub fn code(&self) -> Option<&str> {
        match self {
            Self::Service { code, .. } => Some(code),
            Self::ConditionalCheckFailed { .. } => Some("ConditionalCheckFailedException"),
            Self::TransactionCanceled { .. } => Some("TransactionCanceledException"),
            Self::RetriesExhausted { last, .. } => last.code(),
            _ => None,
        }
    }
}
