//! Turning an HTTP answer into a typed result or a typed error.

use serde::Deserialize;
use serde::de::DeserializeOwned;

use super::attr::Item;
use super::error::{CancellationReason, DynamoError};

/// How much of an unusable body an error quotes.
const EXCERPT_BYTES: usize = 200;

/// Decodes a 2xx body as `Resp`; anything else as DynamoDB's error shape.
pub(crate) fn parse_response<Resp: DeserializeOwned>(
    op: &'static str,
    endpoint: &str,
    status: u16,
    body: &[u8],
) -> Result<Resp, DynamoError> {
    let malformed = |problem: String| DynamoError::MalformedResponse {
        operation: op,
        endpoint: endpoint.to_owned(),
        status,
        problem,
        excerpt: excerpt(body),
    };
    if (200..300).contains(&status) {
        // Read into a value first, to see an error body under a 2xx status (from a proxy,
        // or a server that got it wrong) before an answer whose fields are all optional
        // takes it for a success.
        let value: serde_json::Value = serde_json::from_slice(body)
            .map_err(|e| malformed(format!("not a valid {op} answer ({e})")))?;
        if let Some(kind) = value.get("__type") {
            let kind = kind.as_str().unwrap_or("(not a string)");
            return Err(malformed(format!(
                "an error body ({}) under a success status",
                error_code(kind)
            )));
        }
        return serde_json::from_value(value)
            .map_err(|e| malformed(format!("not a valid {op} answer ({e})")));
    }
    let wire: WireError = serde_json::from_slice(body)
        .map_err(|e| malformed(format!("not a DynamoDB error body ({e})")))?;
    let Some(kind) = wire.kind else {
        return Err(malformed("error body without __type".into()));
    };
    let code = error_code(&kind).to_owned();
    let message = wire
        .message_upper
        .or(wire.message_lower)
        .unwrap_or_default();
    Err(match code.as_str() {
        "ConditionalCheckFailedException" => DynamoError::ConditionalCheckFailed {
            operation: op,
            message,
            old_item: wire.item.map(Box::new),
        },
        "TransactionCanceledException" => DynamoError::TransactionCanceled {
            message,
            reasons: wire
                .cancellation_reasons
                .unwrap_or_default()
                .into_iter()
                .enumerate()
                .map(|(index, r)| CancellationReason {
                    index,
                    code: r.code.unwrap_or_else(|| "None".into()),
                    message: r.message,
                    item: r.item,
                })
                .collect(),
        },
        _ => DynamoError::Service {
            operation: op,
            status,
            code,
            message,
        },
    })
}

/// DynamoDB's error body. Servers differ on the case of `message`, so both are read.
#[derive(Deserialize)]
struct WireError {
    #[serde(rename = "__type")]
    kind: Option<String>,
    #[serde(rename = "Message")]
    message_upper: Option<String>,
    #[serde(rename = "message")]
    message_lower: Option<String>,
    #[serde(rename = "Item")]
    item: Option<Item>,
    #[serde(rename = "CancellationReasons")]
    cancellation_reasons: Option<Vec<WireReason>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct WireReason {
    code: Option<String>,
    message: Option<String>,
    item: Option<Item>,
}

/// `com.amazonaws.dynamodb.v20120810#ResourceNotFoundException` -> the part after '#'.
fn error_code(kind: &str) -> &str {
    kind.rsplit('#').next().unwrap_or(kind)
}

fn excerpt(body: &[u8]) -> String {
    let cut = &body[..body.len().min(EXCERPT_BYTES)];
    String::from_utf8_lossy(cut).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dynamo::AttributeValue;

    #[derive(Debug, Deserialize)]
    #[serde(rename_all = "PascalCase")]
    struct Answer {
        #[allow(dead_code)]
        table: String,
    }

    fn parse(status: u16, body: &str) -> Result<Answer, DynamoError> {
        parse_response("DescribeTable", "http://h/", status, body.as_bytes())
    }

    #[test]
    fn service_errors_keep_the_code_and_message_in_either_spelling() {
        for body in [
            r#"{"__type":"com.amazonaws.dynamodb.v20120810#ResourceNotFoundException","Message":"no such table"}"#,
            r#"{"__type":"com.amazonaws.dynamodb.v20120810#ResourceNotFoundException","message":"no such table"}"#,
        ] {
            let e = parse(400, body).unwrap_err();
            assert_eq!(e.code(), Some("ResourceNotFoundException"));
            assert!(e.to_string().contains("no such table"), "{e}");
            assert!(!e.is_retryable());
        }
    }

    #[test]
    fn throttling_and_5xx_are_retryable() {
        let throttled = parse(
            400,
            r#"{"__type":"x#ThrottlingException","message":"slow"}"#,
        );
        assert!(throttled.unwrap_err().is_retryable());
        let internal = parse(
            500,
            r#"{"__type":"x#InternalServerError","message":"oops"}"#,
        );
        let internal = internal.unwrap_err();
        assert!(internal.is_retryable() && internal.is_ambiguous());
    }

    #[test]
    fn condition_failures_carry_the_old_item_when_sent() {
        let with = parse(
            400,
            r#"{"__type":"x#ConditionalCheckFailedException","message":"failed","Item":{"generation":{"N":"7"}}}"#,
        )
        .unwrap_err();
        match with {
            DynamoError::ConditionalCheckFailed {
                old_item: Some(item),
                ..
            } => assert_eq!(item["generation"], AttributeValue::N("7".into())),
            other => panic!("unexpected {other:?}"),
        }
        let without = parse(400, r#"{"__type":"x#ConditionalCheckFailedException"}"#).unwrap_err();
        assert!(matches!(
            without,
            DynamoError::ConditionalCheckFailed { old_item: None, .. }
        ));
    }

    #[test]
    fn unusable_bodies_are_clear_errors() {
        let cases = [
            (
                502,
                "<html><body>Bad Gateway</body></html>",
                "not a DynamoDB error body",
            ),
            (200, r#"{"Table": {"#, "not a valid DescribeTable answer"),
            (200, r#"{"Other":1}"#, "missing field `Table`"),
            (200, "", "not a valid DescribeTable answer"),
            (400, r#"{"message":"no type"}"#, "without __type"),
            (200, "\u{0}\u{1}binary", "not a valid"),
        ];
        for (status, body, expected) in cases {
            let e = parse(status, body).unwrap_err();
            let text = e.to_string();
            assert!(
                matches!(e, DynamoError::MalformedResponse { .. }),
                "{body}: {e:?}"
            );
            assert!(text.contains(expected), "{body}: {text}");
            assert!(text.contains(&format!("HTTP {status}")), "{text}");
        }
    }

    #[test]
    fn an_error_body_under_a_success_status_is_not_a_success() {
        #[derive(Debug, Deserialize)]
        struct AllOptional {
            #[allow(dead_code)]
            #[serde(rename = "Attributes")]
            attributes: Option<Item>,
        }
        let body = br#"{"__type":"x#ConditionalCheckFailedException","message":"failed"}"#;
        for (op, ambiguous) in [("PutItem", true), ("GetItem", false)] {
            let e = parse_response::<AllOptional>(op, "http://h/", 200, body).unwrap_err();
            assert!(
                matches!(e, DynamoError::MalformedResponse { status: 200, .. }),
                "{e:?}"
            );
            assert_eq!(e.is_ambiguous(), ambiguous, "{op}: {e:?}");
            assert!(!e.is_retryable(), "{e:?}");
            let text = e.to_string();
            assert!(text.contains("ConditionalCheckFailedException"), "{text}");
            assert_eq!(text.contains("may have applied"), ambiguous, "{text}");
        }
        // Without `__type` the same shape is an answer.
        assert!(parse_response::<AllOptional>("PutItem", "http://h/", 200, b"{}").is_ok());
    }

    #[test]
    fn long_bodies_are_cut_in_errors() {
        let body = "x".repeat(10_000);
        let text = parse(503, &body).unwrap_err().to_string();
        assert!(text.len() < 1_000, "{} bytes", text.len());
    }
}
