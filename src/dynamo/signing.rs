//! SigV4 signing of DynamoDB JSON requests, with aws-sigv4.

use std::time::SystemTime;

use aws_credential_types::Credentials;
use aws_sigv4::http_request::{SignableBody, SignableRequest, SigningSettings, sign};
use aws_sigv4::sign::v4;
use object_store::aws::AwsCredential;

use super::error::DynamoError;

/// The content type of every DynamoDB JSON request.
pub(crate) const CONTENT_TYPE: &str = "application/x-amz-json-1.0";

/// The headers that make up one signed DynamoDB request: the two the protocol needs
/// (`content-type`, `x-amz-target`) and those the signature adds (`x-amz-date`,
/// `authorization`, and `x-amz-security-token` with temporary credentials).
///
/// Pure: the same inputs always give the same headers, which is what lets signing be
/// tested against a pinned vector (DynamoDB Local accepts any signature).
pub(crate) fn signed_headers(
    credential: &AwsCredential,
    region: &str,
    url: &str,
    target: &str,
    body: &[u8],
    time: SystemTime,
) -> Result<Vec<(&'static str, String)>, DynamoError> {
    let identity = Credentials::new(
        credential.key_id.clone(),
        credential.secret_key.clone(),
        credential.token.clone(),
        None,
        "dynacommit",
    )
    .into();
    let params = v4::SigningParams::builder()
        .identity(&identity)
        .region(region)
        .name("dynamodb")
        .time(time)
        .settings(SigningSettings::default())
        .build()
        .map_err(|e| DynamoError::Signing(e.to_string()))?
        .into();
    let unsigned = [("content-type", CONTENT_TYPE), ("x-amz-target", target)];
    let signable = SignableRequest::new(
        "POST",
        url,
        unsigned.iter().copied(),
        SignableBody::Bytes(body),
    )
    .map_err(|e| DynamoError::Signing(e.to_string()))?;
    let (instructions, _signature) = sign(signable, &params)
        .map_err(|e| DynamoError::Signing(e.to_string()))?
        .into_parts();
    let (added, _query) = instructions.into_parts();
    let mut headers: Vec<(&'static str, String)> = unsigned
        .iter()
        .map(|(name, value)| (*name, (*value).to_owned()))
        .collect();
    headers.extend(added.into_iter().map(|h| (h.name(), h.value().to_owned())));
    Ok(headers)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    // The expected signatures below were computed independently by botocore's SigV4Auth
    // (the signer of the AWS CLI) for the same request, keys and time. DynamoDB Local
    // never checks signatures, so this pin is what proves ours are right.
    const BODY: &str = r#"{"TableName":"leases","Key":{"path":{"S":"a/b"},"etag":{"S":"*"}},"ConsistentRead":true}"#;
    const URL: &str = "https://dynamodb.eu-west-1.amazonaws.com/";
    const TARGET: &str = "DynamoDB_20120810.GetItem";

    fn pinned_time() -> SystemTime {
        // 2026-12-02T18:26:31Z
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_796_235_991)
    }

    fn credential(token: Option<&str>) -> AwsCredential {
        AwsCredential {
            key_id: "AKIDEXAMPLE".into(),
            secret_key: "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY".into(),
            token: token.map(str::to_owned),
        }
    }

    fn header<'a>(headers: &'a [(&'static str, String)], name: &str) -> Option<&'a str> {
        headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    #[test]
    fn matches_the_pinned_vector_with_long_term_keys() {
        let h = signed_headers(
            &credential(None),
            "eu-west-1",
            URL,
            TARGET,
            BODY.as_bytes(),
            pinned_time(),
        )
        .unwrap();
        assert_eq!(header(&h, "x-amz-date"), Some("20261202T182631Z"));
        assert_eq!(
            header(&h, "authorization"),
            Some(
                "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20261202/eu-west-1/dynamodb/aws4_request, \
                 SignedHeaders=content-type;host;x-amz-date;x-amz-target, \
                 Signature=5ec2211a0a92decc5645076ab84ef6c7fa455a1ae5e223f63ea844adadf3fa31"
            )
        );
        assert_eq!(header(&h, "x-amz-security-token"), None);
        assert_eq!(header(&h, "x-amz-target"), Some(TARGET));
        assert_eq!(header(&h, "content-type"), Some(CONTENT_TYPE));
    }

    #[test]
    fn matches_the_pinned_vector_with_a_session_token() {
        let token = "FQoGZXIvYXdzEXAMPLETOKEN";
        let h = signed_headers(
            &credential(Some(token)),
            "eu-west-1",
            URL,
            TARGET,
            BODY.as_bytes(),
            pinned_time(),
        )
        .unwrap();
        assert_eq!(header(&h, "x-amz-security-token"), Some(token));
        assert_eq!(
            header(&h, "authorization"),
            Some(
                "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20261202/eu-west-1/dynamodb/aws4_request, \
                 SignedHeaders=content-type;host;x-amz-date;x-amz-security-token;x-amz-target, \
                 Signature=d2a287584836dc977c7bb2c8e5c4cde556c1f68226dc41905750be311dd748ca"
            )
        );
    }

    #[test]
    fn a_changed_body_changes_the_signature() {
        let sign_body = |body: &str| {
            let h = signed_headers(
                &credential(None),
                "eu-west-1",
                URL,
                TARGET,
                body.as_bytes(),
                pinned_time(),
            )
            .unwrap();
            header(&h, "authorization").unwrap().to_owned()
        };
        assert_ne!(sign_body(BODY), sign_body(&BODY.replace("a/b", "a/c")));
    }
}
