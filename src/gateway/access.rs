//! Who may call the gateway: clients sign with the gateway's own key pairs (SigV4, by
//! header or presigned URL; s3s checks the signatures), never with the upstream's.

use std::collections::HashMap;

use async_trait::async_trait;
use s3s::access::{S3Access, S3AccessContext};
use s3s::auth::{S3Auth, SecretKey};
use s3s::{S3Error, S3ErrorCode as Code, S3Result};

/// A key pair clients sign their requests with. Its secret never appears in Debug output.
///
/// ```
/// use dynacommit::gateway::KeyPair;
///
/// let key = KeyPair::new("deltalake-writer", "n0t-in-any-log");
/// assert!(!format!("{key:?}").contains("n0t-in-any-log"));
/// ```
#[derive(Clone)]
pub struct KeyPair {
    pub(super) access_key: String,
    pub(super) secret: String,
}

impl KeyPair {
    /// A key pair: the access key id clients name and the secret they sign with.
    pub fn new(access_key: impl Into<String>, secret: impl Into<String>) -> Self {
        Self {
            access_key: access_key.into(),
            secret: secret.into(),
        }
    }

    /// The access key id.
    pub fn access_key(&self) -> &str {
        &self.access_key
    }
}

impl std::fmt::Debug for KeyPair {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyPair")
            .field("access_key", &self.access_key)
            .field("secret", &"<redacted>")
            .finish()
    }
}

/// The secrets of the gateway's key pairs, by access key id.
pub(super) struct Keys(HashMap<String, SecretKey>);

impl Keys {
    pub(super) fn new(pairs: &[KeyPair]) -> Self {
        Self(
            pairs
                .iter()
                .map(|p| (p.access_key.clone(), SecretKey::from(p.secret.as_str())))
                .collect(),
        )
    }
}

#[async_trait]
impl S3Auth for Keys {
    async fn get_secret_key(&self, access_key: &str) -> S3Result<SecretKey> {
        match self.0.get(access_key) {
            Some(secret) => Ok(SecretKey::from(secret.expose())),
            None => Err(S3Error::with_message(
                Code::InvalidAccessKeyId,
                "the access key id is not one of this gateway's",
            )),
        }
    }
}

/// The longest life of a presigned URL, as S3 allows: seven days.
const MAX_PRESIGNED_SECS: u64 = 7 * 24 * 3600;

/// Whether the body is aws-chunked (a `STREAMING-*` payload, or the content encoding).
pub(super) fn is_chunked(headers: &http::HeaderMap) -> bool {
    let streaming = headers
        .get("x-amz-content-sha256")
        .is_some_and(|v| v.as_bytes().starts_with(b"STREAMING-"));
    let encoded = headers
        .get_all(http::header::CONTENT_ENCODING)
        .iter()
        .any(|v| {
            v.as_bytes()
                .to_ascii_lowercase()
                .windows(b"aws-chunked".len())
                .any(|w| w == b"aws-chunked")
        });
    streaming || encoded
}

/// Which requests reach the store once their signatures (if any) have been checked.
pub(super) struct Policy {
    pub(super) anonymous: bool,
}

#[async_trait]
impl S3Access for Policy {
    async fn check(&self, cx: &mut S3AccessContext<'_>) -> S3Result<()> {
        // s3s accepts AWS's old SigV2 too, whose header form has no expiry: refuse it. The
        // query's names are read decoded, as s3s reads them.
        let v2_header = cx
            .headers()
            .get(http::header::AUTHORIZATION)
            .is_some_and(|v| v.as_bytes().starts_with(b"AWS "));
        let query: Vec<(String, String)> = cx
            .uri()
            .query()
            .map(|q| {
                url::form_urlencoded::parse(q.as_bytes())
                    .into_owned()
                    .collect()
            })
            .unwrap_or_default();
        let named = |name: &str| query.iter().find(|(k, _)| k == name).map(|(_, v)| v);
        let v2_query = named("Signature").is_some() || named("AWSAccessKeyId").is_some();
        if v2_header || v2_query {
            return Err(S3Error::with_message(
                Code::AccessDenied,
                "signature version 2 is not accepted: sign with SigV4 (AWS4-HMAC-SHA256)",
            ));
        }
        // S3 caps a presigned URL's life at seven days; s3s takes any.
        if let Some(expires) = named("X-Amz-Expires")
            && expires
                .parse::<u64>()
                .map_or(true, |s| s > MAX_PRESIGNED_SECS)
        {
            return Err(S3Error::with_message(
                Code::AuthorizationQueryParametersError,
                format!("X-Amz-Expires must be a number of seconds up to {MAX_PRESIGNED_SECS}"),
            ));
        }
        if cx.credentials().is_none() && is_chunked(cx.headers()) {
            // s3s decodes aws-chunked framing only for signed requests: unsigned, the
            // framing would be stored as the object.
            return Err(S3Error::with_message(
                Code::NotImplemented,
                "this gateway does not take unsigned aws-chunked bodies: sign the request, or \
                 send the body plain",
            ));
        }
        if cx.credentials().is_none() && !self.anonymous {
            return Err(S3Error::with_message(
                Code::AccessDenied,
                "the request is not signed: sign it with one of the gateway's key pairs \
                 (the gateway allows anonymous requests only when started with --anonymous)",
            ));
        }
        Ok(())
    }
}
