//! The configuration object_store 0.12 users had: a URL and the option map they pass to
//! `parse_url_opts` / `AmazonS3Builder::with_config`, with
//! `conditional_put=dynamo:TABLE[:TIMEOUT_MS]` selecting the DynamoDB commit protocol.
//! This module reads what belongs to dynacommit and hands the rest to the S3 builder of
//! whichever object_store version is wrapped. Like `parse_url_opts`, it reads no
//! environment: what the caller passes is all there is.

use std::time::Duration;

use crate::dynamo::DynamoError;
use crate::lease::{ConfigError, LeaseConfig};

/// Option names (lowercase) that select the commit protocol, as object_store 0.12 spelled
/// them.
const CONDITIONAL_PUT: [&str; 2] = ["aws_conditional_put", "conditional_put"];
/// Option names of copy-if-not-exists, which dynacommit supplies itself.
const COPY_IF_NOT_EXISTS: [&str; 2] = ["aws_copy_if_not_exists", "copy_if_not_exists"];
/// Option names of the condition mode (dynacommit's own: `lease`, `native` or `auto`).
const CONDITIONS: [&str; 2] = ["aws_dynacommit_conditions", "dynacommit_conditions"];
/// Option names of holding paths (dynacommit's own: `true` or `false`).
const HOLD_PATHS: [&str; 2] = ["aws_dynacommit_hold_paths", "dynacommit_hold_paths"];
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
        "unknown option `{key}`: not an AmazonS3Builder option (see object_store's AmazonS3ConfigKey) nor one of dynacommit's (`conditional_put`, `aws_endpoint_url_dynamodb`, `dynacommit_conditions`, `dynacommit_hold_paths`)"
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
    /// How conditional writes are made (`dynacommit_conditions`; `lease` by default).
    pub conditions: crate::Conditions,
    /// Whether paths are held (`dynacommit_hold_paths`; `false` by default).
    pub hold_paths: bool,
    /// The options for the S3 builder, keys lowercased, in order.
    pub s3: Vec<(String, String)>,
    /// The HTTP settings among them that the DynamoDB client must share: a proxy, a CA,
    /// accepting invalid certificates.
    pub http: HttpOptions,
}

/// The S3 store's HTTP settings that DynamoDB requests must follow too, as object_store
/// 0.12's DynamoCommit sent its requests through the S3 client.
#[derive(Debug, Default)]
pub(crate) struct HttpOptions {
    pub proxy_url: Option<String>,
    pub proxy_ca_certificate: Option<String>,
    pub allow_invalid_certificates: bool,
}

impl HttpOptions {
    /// A reqwest client with these settings, or `None` if there are none.
    pub(crate) fn client(&self) -> Result<Option<reqwest::Client>, FromOptionsError> {
        if self.proxy_url.is_none() && !self.allow_invalid_certificates {
            return Ok(None);
        }
        let bad = |key: &str, value: &str, e: reqwest::Error| FromOptionsError::BadValue {
            key: key.to_owned(),
            value: value.to_owned(),
            problem: format!("unusable for the DynamoDB client: {e}"),
        };
        let mut builder = reqwest::Client::builder();
        if let Some(url) = &self.proxy_url {
            let proxy = reqwest::Proxy::all(url).map_err(|e| bad("proxy_url", url, e))?;
            builder = builder.proxy(proxy);
        }
        if let Some(pem) = &self.proxy_ca_certificate {
            let ca = reqwest::Certificate::from_pem(pem.as_bytes())
                .map_err(|e| bad("proxy_ca_certificate", "(PEM)", e))?;
            builder = builder.add_root_certificate(ca);
        }
        if self.allow_invalid_certificates {
            builder = builder.danger_accept_invalid_certs(true);
        }
        builder.build().map(Some).map_err(|e| {
            FromOptionsError::Store(format!("cannot build the DynamoDB HTTP client: {e}"))
        })
    }
}

impl Options {
    /// Sorts `options` (keys in any case, as object_store takes them). `is_s3_key` says
    /// whether the S3 builder knows a (lowercased) key. Unknown options are errors.
    pub(crate) fn parse(
        options: impl IntoIterator<Item = (String, String)>,
        is_s3_key: impl Fn(&str) -> bool,
    ) -> Result<Self, FromOptionsError> {
        let mut lease: Option<(String, String, LeaseConfig)> = None;
        let mut copy: Option<(String, String, LeaseConfig)> = None;
        let mut dynamodb_endpoint = None;
        let mut conditions = crate::Conditions::Lease;
        let mut hold_paths: Option<(String, String)> = None;
        // A copy-if-not-exists setting of the S3 store's own (not `dynamo:`): for the
        // `native` and `auto` modes, which let the store enforce copies itself.
        let mut store_copy: Option<(String, String, String)> = None;
        let mut http = HttpOptions::default();
        let mut s3 = Vec::new();
        for (key, value) in options {
            let name = key.to_ascii_lowercase();
            let short = name.strip_prefix("aws_").unwrap_or(&name);
            if CONDITIONAL_PUT.contains(&name.as_str()) {
                lease = Some((key.clone(), value.clone(), lease_config(&key, &value)?));
            } else if COPY_IF_NOT_EXISTS.contains(&name.as_str()) {
                if value.trim().starts_with("dynamo:") {
                    // 0.12 took `dynamo:TABLE` here too, for copy and rename leases.
                    copy = Some((key.clone(), value.clone(), lease_config(&key, &value)?));
                } else {
                    store_copy = Some((key, name, value));
                }
            } else if CONDITIONS.contains(&name.as_str()) {
                conditions = conditions_mode(&key, &value)?;
            } else if HOLD_PATHS.contains(&name.as_str()) {
                match value.trim().to_ascii_lowercase().as_str() {
                    "true" => hold_paths = Some((key, value)),
                    "false" => hold_paths = None,
                    _ => {
                        return Err(FromOptionsError::BadValue {
                            key,
                            value,
                            problem: "expected `true` (every write and delete of a path holds it until its attempts have landed: see CommitStore::hold_paths) or `false` (the default)".into(),
                        });
                    }
                }
            } else if DYNAMODB_ENDPOINT.contains(&name.as_str()) {
                if !value.trim().is_empty() {
                    dynamodb_endpoint = Some(value);
                }
            } else if is_s3_key(&name) {
                match short {
                    "proxy_url" => http.proxy_url = Some(value.clone()),
                    "proxy_ca_certificate" => http.proxy_ca_certificate = Some(value.clone()),
                    "allow_invalid_certificates" => {
                        http.allow_invalid_certificates = value.trim().eq_ignore_ascii_case("true")
                    }
                    "skip_signature" if value.trim().eq_ignore_ascii_case("true") => {
                        return Err(FromOptionsError::BadValue {
                            key,
                            value,
                            problem:
                                "DynamoDB takes only signed requests: the leases need credentials"
                                    .into(),
                        });
                    }
                    _ => {}
                }
                s3.push((name, value));
            } else {
                return Err(FromOptionsError::UnknownOption { key });
            }
        }
        let Some((_, _, lease)) = lease else {
            return Err(FromOptionsError::NoLeaseTable);
        };
        if let Some((key, name, value)) = store_copy {
            if copy.is_some() {
                return Err(FromOptionsError::BadValue {
                    key,
                    value,
                    problem: "a `dynamo:` copy_if_not_exists is given too: give one".into(),
                });
            }
            if conditions == crate::Conditions::Lease {
                return Err(FromOptionsError::BadValue {
                    key,
                    value,
                    problem: "in the default `lease` mode dynacommit makes copies itself, under a lease: drop this option, give `dynamo:TABLE` as for conditional_put, or let the store enforce copies with `dynacommit_conditions=native` (or `auto`)"
                        .into(),
                });
            }
            s3.push((name, value));
        }
        // Copies and renames lease in the same table, with the same timeout: 0.12.5 writers
        // configured with another copy table would never meet these.
        if let Some((key, value, copy)) = copy
            && (copy.table != lease.table || copy.timeout != lease.timeout)
        {
            return Err(FromOptionsError::BadValue {
                key,
                value,
                problem: format!(
                    "dynacommit leases copies in the conditional_put table ({}, {} ms): give the same `dynamo:` value, or drop this option",
                    lease.table,
                    lease.timeout.as_millis()
                ),
            });
        }
        if let Some((key, value)) = &hold_paths
            && conditions == crate::Conditions::Native
        {
            return Err(FromOptionsError::BadValue {
                key: key.clone(),
                value: value.clone(),
                problem: "held paths take a lease for every write, and `dynacommit_conditions=native` takes none: drop one of the two".into(),
            });
        }
        Ok(Self {
            lease,
            dynamodb_endpoint,
            conditions,
            hold_paths: hold_paths.is_some(),
            s3,
            http,
        })
    }
}

/// `lease`, `native` or `auto` (any case).
fn conditions_mode(key: &str, value: &str) -> Result<crate::Conditions, FromOptionsError> {
    match value.trim().to_ascii_lowercase().as_str() {
        "lease" => Ok(crate::Conditions::Lease),
        "native" => Ok(crate::Conditions::Native),
        "auto" => Ok(crate::Conditions::Auto),
        _ => Err(FromOptionsError::BadValue {
            key: key.to_owned(),
            value: value.to_owned(),
            problem: "expected `lease` (the default: every conditional write under a DynamoDB lease), `native` (the store enforces them) or `auto` (probe the store once); see docs/protocol.md, \"Condition modes\""
                .into(),
        }),
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
    let mut config = LeaseConfig::new(table);
    if let Some(timeout) = timeout {
        config = config.with_timeout(timeout);
        // Records must outlive any reclaim of them, however long the lease: 0.12 took
        // any timeout.
        let needed = timeout * 2 * config.max_clock_skew_rate;
        config.ttl = config.ttl.max(needed);
    }
    config
        .validate()
        .map_err(|e| bad(&format!("not a usable lease: {e}")))?;
    Ok(config)
}

/// The region an AWS S3 URL names in its host (`https://b.s3.eu-west-1.amazonaws.com`,
/// `https://s3.eu-west-1.amazonaws.com/b`, dualstack too), which object_store's builder
/// takes over the region option for S3: the leases must use the same.
pub(crate) fn region_of_url(url: &url::Url) -> Option<String> {
    let host = url.host_str()?;
    let labels: Vec<&str> = host.strip_suffix(".amazonaws.com")?.split('.').collect();
    let s3 = labels.iter().position(|l| *l == "s3")?;
    let next = labels.get(s3 + 1)?;
    let region = if *next == "dualstack" {
        labels.get(s3 + 2)?
    } else {
        next
    };
    Some((*region).to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(options: &[(&str, &str)]) -> Result<Options, FromOptionsError> {
        let owned = options.iter().map(|(k, v)| (k.to_string(), v.to_string()));
        Options::parse(owned, |k| k.starts_with("aws_") || k == "region")
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
        let o = parse(&[("AWS_CONDITIONAL_PUT", "dynamo:t"), ("AWS_REGION", "y")]).unwrap();
        assert_eq!(o.lease.table, "t");
        assert_eq!(
            o.s3,
            vec![("aws_region".to_owned(), "y".to_owned())],
            "any case"
        );
        let long = parse(&[("conditional_put", "dynamo:t:900000")]).unwrap();
        assert!(
            long.lease.ttl >= Duration::from_secs(2 * 900 * 3),
            "0.12 took long leases"
        );
    }

    #[test]
    fn bad_options_are_named() {
        let err = |options| parse(options).unwrap_err().to_string();
        assert!(err(&[("conditional_put", "etag")]).contains("`conditional_put` = `etag`"));
        assert!(err(&[("conditional_put", "dynamo:t:soon")]).contains("whole milliseconds"));
        assert!(err(&[("conditional_put", "dynamo:")]).contains("empty"));
        assert!(err(&[("conditional_put", "dynamo:t:0")]).contains("`conditional_put`"));
        assert!(
            err(&[("conditional_put", "dynamo:t"), ("bucket_nam", "b")]).contains("`bucket_nam`")
        );
        assert!(err(&[("region", "x")]).contains("conditional_put=dynamo"));
        assert!(
            err(&[
                ("conditional_put", "dynamo:t"),
                ("copy_if_not_exists", "header:a:b")
            ])
            .contains("`copy_if_not_exists`")
        );
        assert!(
            err(&[
                ("conditional_put", "dynamo:t"),
                ("dynacommit_conditions", "sometimes")
            ])
            .contains("`dynacommit_conditions` = `sometimes`: expected `lease`")
        );
        assert!(
            err(&[
                ("conditional_put", "dynamo:t"),
                ("copy_if_not_exists", "dynamo:other")
            ])
            .contains("same `dynamo:` value")
        );
        parse(&[
            ("conditional_put", "dynamo:t:900"),
            ("copy_if_not_exists", "dynamo: t:900"),
        ])
        .unwrap();
        assert!(
            err(&[
                ("conditional_put", "dynamo:t"),
                ("aws_skip_signature", "true")
            ])
            .contains("signed")
        );
    }

    #[test]
    fn holding_paths_is_an_option_refused_beside_native() {
        let o = parse(&[("conditional_put", "dynamo:t")]).unwrap();
        assert!(!o.hold_paths, "the default");
        let o = parse(&[
            ("conditional_put", "dynamo:t"),
            ("AWS_DYNACOMMIT_HOLD_PATHS", " True "),
            ("dynacommit_conditions", "auto"),
        ])
        .unwrap();
        assert!(o.hold_paths);
        let err = |options| parse(options).unwrap_err().to_string();
        assert!(
            err(&[
                ("conditional_put", "dynamo:t"),
                ("dynacommit_hold_paths", "yes")
            ])
            .contains("`dynacommit_hold_paths` = `yes`: expected `true`")
        );
        assert!(
            err(&[
                ("conditional_put", "dynamo:t"),
                ("dynacommit_hold_paths", "true"),
                ("dynacommit_conditions", "native")
            ])
            .contains("drop one of the two")
        );
    }

    #[test]
    fn the_condition_mode_is_an_option_and_lets_the_store_copy_itself() {
        use crate::Conditions;
        let o = parse(&[("conditional_put", "dynamo:t")]).unwrap();
        assert_eq!(o.conditions, Conditions::Lease, "the default");
        for (value, mode) in [
            ("lease", Conditions::Lease),
            ("Native", Conditions::Native),
            (" AUTO ", Conditions::Auto),
        ] {
            let o = parse(&[
                ("conditional_put", "dynamo:t"),
                ("AWS_DYNACOMMIT_CONDITIONS", value),
            ])
            .unwrap();
            assert_eq!(o.conditions, mode, "{value}");
        }
        // The store's own copy-if-not-exists goes to the S3 builder in native or auto
        // mode, whichever order the options come in.
        let o = parse(&[
            ("copy_if_not_exists", "header:If-None-Match:*"),
            ("conditional_put", "dynamo:t"),
            ("dynacommit_conditions", "auto"),
        ])
        .unwrap();
        assert_eq!(
            o.s3,
            vec![(
                "copy_if_not_exists".to_owned(),
                "header:If-None-Match:*".to_owned()
            )]
        );
    }

    #[test]
    fn an_s3_url_names_its_region() {
        let region = |u: &str| region_of_url(&url::Url::parse(u).unwrap());
        assert_eq!(
            region("https://b.s3.eu-west-1.amazonaws.com/x").as_deref(),
            Some("eu-west-1")
        );
        assert_eq!(
            region("https://s3.us-west-2.amazonaws.com/b").as_deref(),
            Some("us-west-2")
        );
        assert_eq!(
            region("https://b.s3.dualstack.ap-south-1.amazonaws.com").as_deref(),
            Some("ap-south-1")
        );
        assert_eq!(region("s3://bucket/path"), None);
        assert_eq!(region("http://127.0.0.1:4568/b"), None);
    }
}
