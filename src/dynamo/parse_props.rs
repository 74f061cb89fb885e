//! Property tests of what the client reads from the wire: the answer parser
//! ([`parse_response`]) and [`AttributeValue`] decoding. Whatever the bytes (random,
//! JSON-like, valid answers cut short, attribute-shaped values of the wrong types, nesting
//! past any sane depth), the outcome is a value or an error: never a panic, never a stack
//! overflow.

use bytes::Bytes;
use proptest::collection::{hash_map, vec};
use proptest::prelude::*;
use serde::Deserialize;
use serde_json::{Value, json};

use super::attr::{AttributeValue, Item};
use super::error::DynamoError;
use super::item::WriteOutput;
use super::query::Page;
use super::response::parse_response;

/// GetItem's answer, as the client reads it.
#[derive(Debug, PartialEq, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct GetItemAnswer {
    item: Option<Item>,
}

const ENDPOINT: &str = "http://127.0.0.1:8000/";

/// Statuses worth trying: successes, client errors, server errors, a redirect.
fn status() -> impl Strategy<Value = u16> {
    prop_oneof![
        Just(200u16),
        Just(204),
        Just(302),
        Just(400),
        Just(413),
        Just(500),
        Just(503),
    ]
}

/// Checks one outcome: a success only under a 2xx, and an error that can be shown and
/// asked about without panicking.
fn check<T>(status: u16, outcome: Result<T, DynamoError>) -> Result<(), TestCaseError> {
    match outcome {
        Ok(_) => prop_assert!((200..300).contains(&status), "success under {}", status),
        Err(e) => {
            prop_assert!(!e.to_string().is_empty());
            let shown = format!("{e:?}");
            prop_assert!(!shown.is_empty());
            let _ = (e.is_retryable(), e.is_ambiguous(), e.code(), e.old_item());
            if (200..300).contains(&status) {
                prop_assert!(
                    matches!(e, DynamoError::MalformedResponse { .. }),
                    "a 2xx fails only as malformed: {:?}",
                    e
                );
            }
        }
    }
    Ok(())
}

/// Parses `body` as every kind of answer the client reads.
fn parse_as_everything(status: u16, body: &[u8]) -> Result<(), TestCaseError> {
    check(
        status,
        parse_response::<WriteOutput>("PutItem", ENDPOINT, status, body),
    )?;
    check(
        status,
        parse_response::<GetItemAnswer>("GetItem", ENDPOINT, status, body),
    )?;
    check(
        status,
        parse_response::<Page>("Query", ENDPOINT, status, body),
    )?;
    check(
        status,
        parse_response::<Value>("DescribeTable", ENDPOINT, status, body),
    )?;
    let _ = serde_json::from_slice::<AttributeValue>(body);
    let _ = serde_json::from_slice::<Item>(body);
    Ok(())
}

/// Any valid attribute value, nested a few levels.
fn attribute_value() -> impl Strategy<Value = AttributeValue> {
    let leaf = prop_oneof![
        any::<String>().prop_map(AttributeValue::S),
        "-?[0-9]{1,38}(\\.[0-9]{1,10})?(E-?[0-9]{1,3})?".prop_map(AttributeValue::N),
        vec(any::<u8>(), 0..24).prop_map(|b| AttributeValue::B(Bytes::from(b))),
        any::<bool>().prop_map(AttributeValue::Bool),
        any::<bool>().prop_map(AttributeValue::Null),
        vec(any::<String>(), 0..3).prop_map(AttributeValue::SS),
        vec("-?[0-9]{1,6}", 0..3).prop_map(AttributeValue::NS),
        vec(vec(any::<u8>(), 0..8).prop_map(Bytes::from), 0..3).prop_map(AttributeValue::BS),
    ];
    leaf.prop_recursive(4, 24, 4, |inner| {
        prop_oneof![
            vec(inner.clone(), 0..4).prop_map(AttributeValue::L),
            hash_map("[a-z#:_]{0,5}", inner, 0..4).prop_map(AttributeValue::M),
        ]
    })
}

fn item() -> impl Strategy<Value = Item> {
    hash_map("[a-zA-Z0-9_]{1,6}", attribute_value(), 0..4)
}

/// JSON shaped like attribute values, mostly wrong: type tags over values of any type,
/// numbers as numbers or as strings that are not numbers, base64 garbage, extra keys.
fn attribute_like_json() -> impl Strategy<Value = Value> {
    let scalar = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
        any::<String>().prop_map(Value::String),
        "[A-Za-z0-9+/=_-]{0,12}".prop_map(Value::String),
        "-?[0-9]{0,40}(\\.[0-9]{0,4})?(e-?[0-9]{0,3})?".prop_map(Value::String),
    ];
    let tag = prop_oneof![
        Just("S"),
        Just("N"),
        Just("B"),
        Just("BOOL"),
        Just("NULL"),
        Just("M"),
        Just("L"),
        Just("SS"),
        Just("NS"),
        Just("BS"),
        Just("X"),
    ];
    scalar.prop_recursive(6, 64, 4, move |inner| {
        prop_oneof![
            4 => (tag.clone(), inner.clone()).prop_map(|(tag, v)| json!({ tag: v })),
            2 => vec(inner.clone(), 0..4).prop_map(Value::Array),
            1 => hash_map("[A-Za-z]{1,4}", inner, 0..3)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn random_bytes_are_a_value_or_an_error(
        status in status(),
        body in vec(any::<u8>(), 0..512),
    ) {
        parse_as_everything(status, &body)?;
    }

    #[test]
    fn json_like_text_is_a_value_or_an_error(
        status in status(),
        body in "[{}\\[\\]\":,0-9A-Za-z_#. \\\\-]{0,256}",
    ) {
        parse_as_everything(status, body.as_bytes())?;
    }

    #[test]
    fn attribute_shaped_json_decodes_the_same_from_text_and_round_trips(
        value in attribute_like_json(),
    ) {
        let text = serde_json::to_vec(&value).unwrap();
        let from_text = serde_json::from_slice::<AttributeValue>(&text);
        let from_value = serde_json::from_value::<AttributeValue>(value.clone());
        prop_assert_eq!(from_text.is_ok(), from_value.is_ok(), "{}", value);
        if let Ok(decoded) = from_text {
            let again = serde_json::to_vec(&decoded).unwrap();
            prop_assert_eq!(serde_json::from_slice::<AttributeValue>(&again).unwrap(), decoded);
        }
        // The same value as an item's attribute, in a success and in a condition failure.
        for (status, body) in [
            (200, json!({ "Item": { "a": value } })),
            (400, json!({
                "__type": "x#ConditionalCheckFailedException",
                "message": "failed",
                "Item": { "a": value },
            })),
        ] {
            let body = serde_json::to_vec(&body).unwrap();
            parse_as_everything(status, &body)?;
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn a_valid_answer_cut_anywhere_is_malformed_and_whole_is_itself(item in item()) {
        let body = serde_json::to_vec(&json!({ "Item": item })).unwrap();
        for cut in 0..body.len() {
            let e = parse_response::<GetItemAnswer>("GetItem", ENDPOINT, 200, &body[..cut])
                .unwrap_err();
            prop_assert!(matches!(e, DynamoError::MalformedResponse { .. }), "{:?}", e);
        }
        let whole = parse_response::<GetItemAnswer>("GetItem", ENDPOINT, 200, &body).unwrap();
        prop_assert_eq!(whole.item.as_ref(), Some(&item));
    }

    #[test]
    fn a_condition_failure_cut_anywhere_is_malformed_and_whole_keeps_the_item(
        item in item(),
    ) {
        let body = serde_json::to_vec(&json!({
            "__type": "com.amazonaws.dynamodb.v20120810#ConditionalCheckFailedException",
            "message": "The conditional request failed",
            "Item": item,
        }))
        .unwrap();
        for cut in 0..body.len() {
            let e = parse_response::<WriteOutput>("PutItem", ENDPOINT, 400, &body[..cut])
                .unwrap_err();
            prop_assert!(matches!(e, DynamoError::MalformedResponse { .. }), "{:?}", e);
        }
        let e = parse_response::<WriteOutput>("PutItem", ENDPOINT, 400, &body).unwrap_err();
        prop_assert!(e.is_condition_failure());
        prop_assert_eq!(e.old_item(), Some(&item));
    }

    #[test]
    fn a_query_page_cut_anywhere_is_malformed(
        items in vec(item(), 0..4),
        last in proptest::option::of(item()),
    ) {
        let body = serde_json::to_vec(&json!({
            "Items": items,
            "Count": items.len(),
            "ScannedCount": items.len(),
            "LastEvaluatedKey": last,
        }))
        .unwrap();
        for cut in 0..body.len() {
            prop_assert!(parse_response::<Page>("Query", ENDPOINT, 200, &body[..cut]).is_err());
        }
        let page = parse_response::<Page>("Query", ENDPOINT, 200, &body).unwrap();
        prop_assert_eq!(page.items, items);
        prop_assert_eq!(page.last_evaluated_key, last);
    }
}

/// `depth` attribute values nested in one another with `open` and `close`.
fn nested(depth: usize, open: &str, close: &str) -> String {
    let mut text = open.repeat(depth);
    text.push_str(r#"{"NULL":true}"#);
    text.push_str(&close.repeat(depth));
    text
}

#[test]
fn deep_nesting_is_refused_not_a_stack_overflow() {
    // serde_json stops at 128 levels of arrays and objects; an attribute value takes two
    // per level of L or M, so about 60 levels decode and no more.
    for (open, close) in [(r#"{"L":["#, "]}"), (r#"{"M":{"k":"#, "}}")] {
        for depth in [0, 1, 10, 60] {
            let text = nested(depth, open, close);
            assert!(
                serde_json::from_str::<AttributeValue>(&text).is_ok(),
                "depth {depth}"
            );
            let body = format!(r#"{{"Item":{{"a":{text}}}}}"#);
            let answer: GetItemAnswer =
                parse_response("GetItem", ENDPOINT, 200, body.as_bytes()).unwrap();
            assert!(answer.item.is_some());
        }
        for depth in [64, 100, 1_000, 100_000] {
            let text = nested(depth, open, close);
            let e = serde_json::from_str::<AttributeValue>(&text).unwrap_err();
            assert!(
                e.to_string().contains("recursion limit"),
                "depth {depth}: {e}"
            );
            for (status, body) in [
                (200, format!(r#"{{"Item":{{"a":{text}}}}}"#)),
                (
                    400,
                    format!(
                        r#"{{"__type":"x#ConditionalCheckFailedException","Item":{{"a":{text}}}}}"#
                    ),
                ),
            ] {
                let e =
                    parse_response::<GetItemAnswer>("GetItem", ENDPOINT, status, body.as_bytes())
                        .unwrap_err();
                assert!(
                    matches!(e, DynamoError::MalformedResponse { .. }),
                    "depth {depth}: {e:?}"
                );
                assert!(
                    e.to_string().contains("recursion limit"),
                    "depth {depth}: {e}"
                );
            }
        }
    }
    // Plain arrays, far past the limit.
    let body = format!("{}{}", "[".repeat(1_000_000), "]".repeat(1_000_000));
    let e = parse_response::<Value>("Query", ENDPOINT, 200, body.as_bytes()).unwrap_err();
    assert!(e.to_string().contains("recursion limit"), "{e}");
}
