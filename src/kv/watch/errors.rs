//! Which answers of DynamoDB Streams a watch waits out, and which end it with
//! [`KvError::WatchLost`] rather than skip anything.

use crate::dynamo::DynamoError;
use crate::kv::KvError;

/// Whether the stream refused a read for load (throttling that outlasted the client's
/// retries): nothing was lost, and a later read may succeed.
pub(super) fn is_throttled(e: &DynamoError) -> bool {
    matches!(
        e.code(),
        Some(
            "LimitExceededException"
                | "ThrottlingException"
                | "ProvisionedThroughputExceededException"
                | "RequestLimitExceeded"
        )
    )
}

/// A checkpoint's shard that the stream no longer has (it drops a shard 24 hours after
/// the shard closed).
pub(super) fn gone(shard: &str) -> KvError {
    KvError::WatchLost {
        problem: format!(
            "the checkpoint's shard {shard} is no longer in the stream (DynamoDB drops a shard 24 hours after it closes): start a new watch and re-read"
        ),
    }
}

/// [`lost`], for a read of `shard`: a shard the stream does not have is gone.
pub(super) fn lost_shard(e: DynamoError, shard: &str) -> KvError {
    if e.code() == Some("ResourceNotFoundException") {
        gone(shard)
    } else {
        lost(e)
    }
}

pub(super) fn lost_iterator() -> KvError {
    KvError::WatchLost {
        problem: "the checkpoint's shard iterator is over 15 minutes old (no event came from that shard since): start a new watch and re-read".into(),
    }
}

/// A read of the stream that can no longer go on from where it was.
pub(super) fn lost(e: DynamoError) -> KvError {
    if e.is_expired_iterator() {
        lost_iterator()
    } else if e.is_trimmed() {
        KvError::WatchLost {
            problem: "the checkpoint points before the oldest record the stream keeps (24 hours): start a new watch and re-read".into(),
        }
    } else {
        e.into()
    }
}
