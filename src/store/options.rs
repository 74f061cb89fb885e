//! The configuration object_store 0.12 users had: a URL and the option map they pass to
//! `AmazonS3Builder` (and deltalake's `storage_options`), with
//! `conditional_put=dynamo:TABLE[:TIMEOUT_MS]` selecting the DynamoDB commit protocol.
//! This module reads what belongs to dynacommit and hands the rest to the S3 builder of
//! whichever object_store version is wrapped.

use std::time::Duration;

use crate::dynamo::DynamoError;
use crate::lease::{ConfigError, LeaseConfig};

/// Option names (lowercase) that select the commit protocol, as object_store 0.12 spelled
/// them.
const CONDITIONAL_PUT: [&str; 2] = ["aws_conditional_put", "conditional_put"];
/// Option names of copy-if-not-exists, which dynacommit supplies itself.
const COPY_IF_NOT_EXISTS: [&str; 2] = ["aws_copy_if_not_exists", "copy_if_not_exists"];
/// Option names of the DynamoDB endpoint (dynacommit's own; 0.12 used the S3 endpoint).
const DYNAMODB_ENDPOINT: [&str; 3] = [
    "aws_endpoint_url_dynamodb",
    "endpoint_url_dynamodb",
    "dynamodb_endpoint",
];

/// Building a `CommitStore` from a URL and options failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FromOptionsError {
    /// An option no S3 store or dynacommit knows.
    #[error(
        "unknown option `{key}`: not an AmazonS3Builder option (see object_store's AmazonS3ConfigKey) nor one of dynacommit's (`conditional_put`, `aws_endpoint_url_dynamodb`)"
    )]
    UnknownOption {
        /// The option as given.
        key: String,
    },
    /// An option whose value cannot be used.
    #[error("option `{key}` = `{value}`: {problem}")]
    BadValue {
        /// The option as given.
        key: String,
        /// Its value.
        value: String,
        /// Why, and what is expected.
        problem: String,
    },
    /// No option or variable selects the DynamoDB protocol.
    #[error(
        "no `conditional_put=dynamo:TABLE[:TIMEOUT_MS]` in the options nor AWS_CONDITIONAL_PUT in the environment: name the DynamoDB table that coordinates this store's writers"
    )]
    NoLeaseTable,
    /// The S3 store could not be built.
    #[error("cannot build the S3 store: {0}")]
    Store(String),
    /// The DynamoDB client could not be built.
    #[error(transparent)]
    Dynamo(#[from] DynamoError),
    /// The lease settings are unusable.
    #[error(transparent)]
    Lease(#[from] ConfigError),
}

/// The options sorted out: dynacommit's, and the S3 builder's.
#[derive(Debug)]
pub(crate) struct Options {
    /// The lease table and timeout.
    pub lease: LeaseConfig,
    /// Where DynamoDB is, if named.
    pub dynamodb_endpoint: Option<String>,
    /// The options for the S3 builder, in order (the environment's first).
    pub s3: Vec<(String, String)>,
}

impl Options {
    /// Sorts `env` (the process's `AWS_*` variables, read as `AmazonS3Builder::from_env`
    /// does) and `options` (which win). `is_s3_key` says whether the S3 builder knows a
    /// key. Unknown options are errors; unknown variables are ignored, as object_store does.
    pub(crate) fn parse(
        env: impl IntoIterator<Item = (String, String)>,
        options: impl IntoIterator<Item = (String, String)>,
        is_s3_key: impl Fn(&str) -> bool,
    ) -> Result<Self, FromOptionsError> {
        let mut lease: Option<LeaseConfig> = None;
        let mut dynamodb_endpoint = None;
        let mut s3 = Vec::new();
        let given = env
            .into_iter()
            .map(|kv| (kv, true))
            .chain(options.into_iter().map(|kv| (kv, false)));
        for ((key, value), from_env) in given {
            let name = key.to_ascii_lowercase();
            if CONDITIONAL_PUT.contains(&name.as_str()) {
                lease = Some(lease_config(&key, &value)?);
            } else if COPY_IF_NOT_EXISTS.contains(&name.as_str()) {
                // 0.12 also took `dynamo:` here; copies go through the leases anyway.
                if !value.trim().starts_with("dynamo") {
                    return Err(FromOptionsError::BadValue {
                        key,
                        value,
                        problem: "dynacommit supplies copy-if-not-exists through its leases: drop this option, or give `dynamo:TABLE` as object_store 0.12 took".into(),
                    });
                }
            } else if DYNAMODB_ENDPOINT.contains(&name.as_str()) {
                dynamodb_endpoint = Some(value);
            } else if is_s3_key(&key) {
                s3.push((key, value));
            } else if !from_env {
                return Err(FromOptionsError::UnknownOption { key });
            }
        }
        Ok(Self {
            lease: lease.ok_or(FromOptionsError::NoLeaseTable)?,
            dynamodb_endpoint,
            s3,
        })
    }

    /// The process's `AWS_*` variables, lowercased as object_store reads them.
    pub(crate) fn environment() -> Vec<(String, String)> {
        std::env::vars()
            .filter(|(k, _)| k.starts_with("AWS_"))
            .map(|(k, v)| (k.to_ascii_lowercase(), v))
            .collect()
    }
}

/// `dynamo:TABLE` or `dynamo:TABLE:TIMEOUT_MS`, as object_store 0.12 wrote it.
fn lease_config(key: &str, value: &str) -> Result<LeaseConfig, FromOptionsError> {
    let bad = |problem: &str| FromOptionsError::BadValue {
        key: key.to_owned(),
        value: value.to_owned(),
        problem: problem.to_owned(),
    };
    let Some(rest) = value.trim().strip_prefix("dynamo:") else {
        return Err(bad(
            "dynacommit needs `dynamo:TABLE` or `dynamo:TABLE:TIMEOUT_MS` (for a store that enforces conditions itself, use object_store without dynacommit)",
        ));
    };
    let (table, timeout) = match rest.split_once(':') {
        Some((table, ms)) => {
            let ms: u64 = ms
                .trim()
                .parse()
                .map_err(|_| bad("the timeout after the table name must be whole milliseconds"))?;
            (table.trim(), Some(Duration::from_millis(ms)))
        }
        None => (rest.trim(), None),
    };
    if table.is_empty() {
        return Err(bad("the table name is empty"));
    }
    let config = LeaseConfig::new(table);
    Ok(match timeout {
        Some(timeout) => config.with_timeout(timeout),
        None => config,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(options: &[(&str, &str)]) -> Result<Options, FromOptionsError> {
        let owned = options.iter().map(|(k, v)| (k.to_string(), v.to_string()));
        Options::parse(Vec::new(), owned, |k| {
            k.starts_with("aws_") || k == "region"
        })
    }

    #[test]
    fn the_table_and_timeout_come_from_conditional_put_as_in_0_12() {
        let o = parse(&[
            ("conditional_put", "dynamo: lake_leases:2500"),
            ("region", "x"),
        ])
        .unwrap();
        assert_eq!(o.lease.table, "lake_leases");
        assert_eq!(o.lease.timeout, Duration::from_millis(2500));
        assert_eq!(o.s3, vec![("region".to_owned(), "x".to_owned())]);
        let o = parse(&[("AWS_CONDITIONAL_PUT", "dynamo:t")]).unwrap();
        assert_eq!(o.lease.table, "t");
    }

    #[test]
    fn bad_options_are_named() {
        let err = |options| parse(options).unwrap_err().to_string();
        assert!(err(&[("conditional_put", "etag")]).contains("`conditional_put` = `etag`"));
        assert!(err(&[("conditional_put", "dynamo:t:soon")]).contains("whole milliseconds"));
        assert!(err(&[("conditional_put", "dynamo:")]).contains("empty"));
        assert!(
            err(&[("conditional_put", "dynamo:t"), ("bucket_nam", "b")]).contains("`bucket_nam`")
        );
        assert!(err(&[("region", "x")]).contains("conditional_put=dynamo"));
        assert!(
            err(&[
                ("conditional_put", "dynamo:t"),
                ("copy_if_not_exists", "header:a:b")
            ])
            .contains("copy-if-not-exists")
        );
    }

    #[test]
    fn options_win_over_the_environment_and_unknown_variables_are_ignored() {
        let env = vec![
            (
                "aws_conditional_put".to_owned(),
                "dynamo:from_env".to_owned(),
            ),
            ("aws_no_such_thing".to_owned(), "x".to_owned()),
        ];
        let options = vec![(
            "conditional_put".to_owned(),
            "dynamo:from_options".to_owned(),
        )];
        let o = Options::parse(env, options, |k| k == "region").unwrap();
        assert_eq!(o.lease.table, "from_options");
    }
}
