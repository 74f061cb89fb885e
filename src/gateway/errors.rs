//! object_store's errors as S3's: the codes and statuses AWS answers, so that a client's
//! own retry logic does the right thing. An outcome that may have applied is never
//! answered as a clean failure.

use object_store::Error as E;
use s3s::{S3Error, S3ErrorCode as Code};

use crate::lease::LeaseError;
use crate::may_have_applied;

/// What a `NotFound` means for the request it answers.
#[derive(Debug, Clone, Copy)]
pub(super) enum Missing {
    /// The object named (GetObject, HeadObject, a copy's source).
    Key,
    /// The multipart upload named.
    Upload,
}

/// The S3 error for `e`, which a request about `key` met.
pub(super) fn s3_error(e: E, key: &str, missing: Missing) -> S3Error {
    let message = |what: &str| format!("{key}: {what}");
    if may_have_applied(&e) {
        // A 5xx: clients retry it, and a retried conditional write meets its own first
        // attempt as a failed condition, or succeeds; never a clean 4xx.
        return S3Error::with_message(
            Code::InternalError,
            message(&format!(
                "the write may or may not have been applied ({e}); read the object to know"
            )),
        );
    }
    match e {
        E::NotFound { .. } => match missing {
            Missing::Key => {
                S3Error::with_message(Code::NoSuchKey, message("the specified key does not exist"))
            }
            Missing::Upload => S3Error::with_message(
                Code::NoSuchUpload,
                message("the specified multipart upload does not exist"),
            ),
        },
        E::AlreadyExists { .. } | E::Precondition { .. } => S3Error::with_message(
            Code::PreconditionFailed,
            message("at least one of the preconditions you specified did not hold"),
        ),
        E::NotModified { .. } => S3Error::new(Code::NotModified),
        E::NotSupported { source } => {
            S3Error::with_message(Code::NotImplemented, source.to_string())
        }
        E::NotImplemented { operation, .. } => S3Error::with_message(
            Code::NotImplemented,
            format!("the upstream store does not implement {operation}"),
        ),
        E::PermissionDenied { .. } | E::Unauthenticated { .. } => S3Error::with_message(
            Code::InternalError,
            message("the upstream store refused the gateway's own credentials"),
        ),
        E::Generic { source, .. } if lease_error(source.as_ref()) => S3Error::with_message(
            Code::ServiceUnavailable,
            message(&format!(
                "the lease table failed, nothing was written: {source}"
            )),
        ),
        other => S3Error::with_message(Code::InternalError, message(&other.to_string())),
    }
}

/// Whether `source` is the lease protocol's failure (the table unreachable or refusing).
fn lease_error(source: &(dyn std::error::Error + 'static)) -> bool {
    source.is::<LeaseError>()
}

/// `NotImplemented`, naming what the gateway does not do and why.
pub(super) fn not_implemented(what: impl std::fmt::Display) -> S3Error {
    S3Error::with_message(
        Code::NotImplemented,
        format!("this gateway does not support {what}"),
    )
}

/// `InvalidArgument`, naming what was wrong.
pub(super) fn invalid(what: impl std::fmt::Display) -> S3Error {
    S3Error::with_message(Code::InvalidArgument, what.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conditions_failing_are_412_and_missing_keys_404() {
        let exists = E::AlreadyExists {
            path: "k".into(),
            source: "x".into(),
        };
        assert_eq!(
            *s3_error(exists, "k", Missing::Key).code(),
            Code::PreconditionFailed
        );
        let missing = || E::NotFound {
            path: "k".into(),
            source: "x".into(),
        };
        assert_eq!(
            *s3_error(missing(), "k", Missing::Key).code(),
            Code::NoSuchKey
        );
        assert_eq!(
            *s3_error(missing(), "k", Missing::Upload).code(),
            Code::NoSuchUpload
        );
    }

    #[test]
    fn a_write_that_may_have_applied_is_never_a_clean_failure() {
        // A create whose PUT was sent and then failed, marked by the CommitStore: were it
        // answered 412, a client would take its own commit for a rival's.
        let marked = E::AlreadyExists {
            path: "k".into(),
            source: Box::new(crate::store::OutcomeUnknown {
                source: "timed out".into(),
            }),
        };
        assert!(may_have_applied(&marked));
        let e = s3_error(marked, "k", Missing::Key);
        assert_eq!(*e.code(), Code::InternalError);
        assert!(
            e.message()
                .unwrap()
                .contains("may or may not have been applied")
        );
    }

    #[test]
    fn an_upstream_failure_is_a_5xx() {
        let failed = E::Generic {
            store: "S3",
            source: "connection reset".into(),
        };
        let e = s3_error(failed, "k", Missing::Key);
        assert_eq!(*e.code(), Code::InternalError);
        assert_eq!(e.status_code().map(|s| s.as_u16()), Some(500));
    }
}
