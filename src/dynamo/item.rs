//! Single-item operations: PutItem, GetItem, UpdateItem, DeleteItem.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use super::attr::Item;
use super::client::{DynamoClient, Resend};
use super::error::DynamoError;

/// Placeholders shared by every expression of one request (`#name` and `:value`).
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct ExpressionAttributes {
    /// `#placeholder` to attribute name.
    #[serde(skip_serializing_if = "HashMap::is_empty")]
    pub expression_attribute_names: HashMap<String, String>,
    /// `:placeholder` to value.
    #[serde(skip_serializing_if = "HashMap::is_empty")]
    pub expression_attribute_values: Item,
}

/// Adds `name` and `value` builder methods to requests that carry expressions.
macro_rules! expression_placeholders {
    ($($request:ty),*) => {$(
        impl $request {
            /// Binds `#placeholder` to an attribute name in this request's expressions.
            pub fn name(mut self, placeholder: impl Into<String>, attribute: impl Into<String>) -> Self {
                self.expressions
                    .expression_attribute_names
                    .insert(placeholder.into(), attribute.into());
                self
            }

            /// Binds `:placeholder` to a value in this request's expressions.
            pub fn value(mut self, placeholder: impl Into<String>, value: impl Into<$crate::dynamo::AttributeValue>) -> Self {
                self.expressions
                    .expression_attribute_values
                    .insert(placeholder.into(), value.into());
                self
            }
        }
    )*};
}
pub(crate) use expression_placeholders;

/// Adds the builder methods of conditional writes.
macro_rules! conditional_write {
    ($($request:ty),*) => {$(
        impl $request {
            /// Applies the write only if `expression` holds for the item as it stands.
            pub fn condition(mut self, expression: impl Into<String>) -> Self {
                self.condition_expression = Some(expression.into());
                self
            }

            /// Asks for the item as it stood when the condition fails.
            pub fn return_old_item_on_condition_failure(mut self) -> Self {
                self.return_values_on_condition_check_failure = Some(OnConditionFailure::AllOld);
                self
            }

            /// What to return on success.
            pub fn return_values(mut self, values: ReturnValues) -> Self {
                self.return_values = Some(values);
                self
            }
        }
    )*};
}

/// What a write returns of the item as it stood (`ReturnValues`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ReturnValues {
    /// Nothing (the default).
    None,
    /// The whole item before the write.
    AllOld,
    /// The updated attributes before the write (UpdateItem only).
    UpdatedOld,
    /// The whole item after the write (UpdateItem only).
    AllNew,
    /// The updated attributes after the write (UpdateItem only).
    UpdatedNew,
}

/// Whether a failed condition sends the item back (`ReturnValuesOnConditionCheckFailure`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum OnConditionFailure {
    /// Send nothing back.
    None,
    /// Send the item as it stood: it lands in
    /// [`DynamoError::ConditionalCheckFailed::old_item`](DynamoError::ConditionalCheckFailed).
    AllOld,
}

/// A PutItem request.
///
/// ```
/// use dynacommit::dynamo::{Item, PutItem};
///
/// let item: Item = [("path".to_string(), "a/b".into()), ("etag".to_string(), "*".into())].into();
/// let put = PutItem::new("leases", item)
///     .condition("attribute_not_exists(#pk)")
///     .name("#pk", "path")
///     .return_old_item_on_condition_failure();
/// # let _ = put;
/// ```
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct PutItem {
    /// The table.
    pub table_name: String,
    /// The item to write (its key included).
    pub item: Item,
    /// The condition the existing item must meet.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub condition_expression: Option<String>,
    /// Placeholders of the condition.
    #[serde(flatten)]
    pub expressions: ExpressionAttributes,
    /// What to return on success.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub return_values: Option<ReturnValues>,
    /// What to return when the condition fails.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub return_values_on_condition_check_failure: Option<OnConditionFailure>,
}

impl PutItem {
    /// Writes `item` to `table` unconditionally.
    pub fn new(table: impl Into<String>, item: Item) -> Self {
        Self {
            table_name: table.into(),
            item,
            condition_expression: None,
            expressions: ExpressionAttributes::default(),
            return_values: None,
            return_values_on_condition_check_failure: None,
        }
    }
}

/// A GetItem request; strongly consistent unless told otherwise.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct GetItem {
    /// The table.
    pub table_name: String,
    /// The item's full primary key.
    pub key: Item,
    /// Whether the read reflects every write acknowledged before it (default `true`).
    pub consistent_read: bool,
    /// The attributes to return, if not all.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub projection_expression: Option<String>,
    /// Placeholders of the projection.
    #[serde(flatten)]
    pub expressions: ExpressionAttributes,
}

impl GetItem {
    /// A consistent read of `key` in `table`.
    pub fn new(table: impl Into<String>, key: Item) -> Self {
        Self {
            table_name: table.into(),
            key,
            consistent_read: true,
            projection_expression: None,
            expressions: ExpressionAttributes::default(),
        }
    }

    /// An eventually consistent read instead (half the cost, may be stale).
    pub fn eventually_consistent(mut self) -> Self {
        self.consistent_read = false;
        self
    }

    /// Only these attributes.
    pub fn projection(mut self, expression: impl Into<String>) -> Self {
        self.projection_expression = Some(expression.into());
        self
    }
}

/// An UpdateItem request.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct UpdateItem {
    /// The table.
    pub table_name: String,
    /// The item's full primary key.
    pub key: Item,
    /// What to change (`SET #g = #g + :one`).
    pub update_expression: String,
    /// The condition the existing item must meet.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub condition_expression: Option<String>,
    /// Placeholders of both expressions.
    #[serde(flatten)]
    pub expressions: ExpressionAttributes,
    /// What to return on success.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub return_values: Option<ReturnValues>,
    /// What to return when the condition fails.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub return_values_on_condition_check_failure: Option<OnConditionFailure>,
    /// Whether the client may send this request again after an attempt that got no
    /// definite answer, even though it [counts twice](Self::may_count_twice) if applied
    /// twice. Not sent to DynamoDB. Default `false`.
    #[serde(skip)]
    pub resend_if_ambiguous: bool,
}

impl UpdateItem {
    /// Applies `update_expression` to the item at `key`.
    pub fn new(table: impl Into<String>, key: Item, update_expression: impl Into<String>) -> Self {
        Self {
            table_name: table.into(),
            key,
            update_expression: update_expression.into(),
            condition_expression: None,
            expressions: ExpressionAttributes::default(),
            return_values: None,
            return_values_on_condition_check_failure: None,
            resend_if_ambiguous: false,
        }
    }

    /// Lets the client's retries send this request again after an attempt that got no
    /// answer or a 5xx, although [it may count twice](Self::may_count_twice): for callers
    /// whose condition refuses a second application, or who accept one.
    pub fn resend_if_ambiguous(mut self) -> Self {
        self.resend_if_ambiguous = true;
        self
    }

    /// Whether applying this update twice may differ from applying it once: it has no
    /// condition, and its expression builds on the values it finds (arithmetic `+` or `-`,
    /// an `ADD` clause, `list_append`). Such an update is not sent again after an attempt
    /// that may have applied, unless [`resend_if_ambiguous`](Self::resend_if_ambiguous)
    /// was asked; its ambiguous error is returned instead.
    pub fn may_count_twice(&self) -> bool {
        self.condition_expression.is_none() && builds_on_found_values(&self.update_expression)
    }
}

/// Whether an update expression reads the values it changes. Placeholders (`#add`,
/// `:plus`) and attribute names only hold letters, digits and `_`, so any `+` or `-` is
/// arithmetic; `ADD` is a reserved word, so as a whole word it is the clause.
fn builds_on_found_values(expression: &str) -> bool {
    expression.contains(['+', '-'])
        || expression
            .split(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '#' | ':')))
            .any(|word| {
                word.eq_ignore_ascii_case("ADD") || word.eq_ignore_ascii_case("list_append")
            })
}

/// A DeleteItem request.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct DeleteItem {
    /// The table.
    pub table_name: String,
    /// The item's full primary key.
    pub key: Item,
    /// The condition the existing item must meet.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub condition_expression: Option<String>,
    /// Placeholders of the condition.
    #[serde(flatten)]
    pub expressions: ExpressionAttributes,
    /// What to return on success.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub return_values: Option<ReturnValues>,
    /// What to return when the condition fails.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub return_values_on_condition_check_failure: Option<OnConditionFailure>,
}

impl DeleteItem {
    /// Deletes the item at `key` (a no-op if there is none).
    pub fn new(table: impl Into<String>, key: Item) -> Self {
        Self {
            table_name: table.into(),
            key,
            condition_expression: None,
            expressions: ExpressionAttributes::default(),
            return_values: None,
            return_values_on_condition_check_failure: None,
        }
    }
}

expression_placeholders!(PutItem, GetItem, UpdateItem, DeleteItem);
conditional_write!(PutItem, UpdateItem, DeleteItem);

/// The answer to a write: the attributes asked for with `ReturnValues`, if any.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct WriteOutput {
    /// The attributes asked for.
    pub attributes: Option<Item>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct GetItemOutput {
    item: Option<Item>,
}

impl DynamoClient {
    /// PutItem: writes a whole item, if its condition holds.
    #[cfg_attr(feature = "harness", visibility::make(pub))]
    pub(crate) async fn put_item(&self, request: &PutItem) -> Result<WriteOutput, DynamoError> {
        self.call("PutItem", request).await
    }

    /// GetItem: the item at a key, or `None`.
    #[cfg_attr(feature = "harness", visibility::make(pub))]
    pub(crate) async fn get_item(&self, request: &GetItem) -> Result<Option<Item>, DynamoError> {
        let output: GetItemOutput = self.call("GetItem", request).await?;
        Ok(output.item)
    }

    /// UpdateItem: changes some attributes of an item (creating it if absent), if its
    /// condition holds. One that [may count twice](UpdateItem::may_count_twice) is not
    /// sent again after an attempt that got no definite answer: that ambiguous error is
    /// returned instead.
    #[cfg_attr(feature = "harness", visibility::make(pub))]
    pub(crate) async fn update_item(
        &self,
        request: &UpdateItem,
    ) -> Result<WriteOutput, DynamoError> {
        let resend = if request.may_count_twice() && !request.resend_if_ambiguous {
            Resend::IfDefinite
        } else {
            Resend::Always
        };
        self.call_as("UpdateItem", request, resend, &self.deadline("UpdateItem"))
            .await
    }

    /// PutItem, sent once: any failure, throttling included, is returned at once (its
    /// [`is_ambiguous`](DynamoError::is_ambiguous) says whether it may have applied). For a
    /// caller whose condition a second application would not refuse, or that names the
    /// current time, and that builds the request afresh for its next attempt.
    #[cfg_attr(feature = "harness", visibility::make(pub))]
    pub(crate) async fn put_item_once(
        &self,
        request: &PutItem,
    ) -> Result<WriteOutput, DynamoError> {
        self.call_as("PutItem", request, Resend::Never, &self.deadline("PutItem"))
            .await
    }

    /// UpdateItem, sent once: see [`put_item_once`](Self::put_item_once).
    #[cfg_attr(feature = "harness", visibility::make(pub))]
    pub(crate) async fn update_item_once(
        &self,
        request: &UpdateItem,
    ) -> Result<WriteOutput, DynamoError> {
        self.call_as(
            "UpdateItem",
            request,
            Resend::Never,
            &self.deadline("UpdateItem"),
        )
        .await
    }

    /// DeleteItem: removes an item, if its condition holds.
    #[cfg_attr(feature = "harness", visibility::make(pub))]
    pub(crate) async fn delete_item(
        &self,
        request: &DeleteItem,
    ) -> Result<WriteOutput, DynamoError> {
        self.call("DeleteItem", request).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dynamo::AttributeValue;

    #[test]
    fn put_item_serialises_to_the_wire_shape() {
        let item: Item = [("path".to_owned(), AttributeValue::from("a"))].into();
        let put = PutItem::new("t", item)
            .condition("attribute_not_exists(#pk)")
            .name("#pk", "path")
            .return_old_item_on_condition_failure();
        let json = serde_json::to_value(&put).unwrap();
        assert_eq!(
            json,
            serde_json::json!({
                "TableName": "t",
                "Item": {"path": {"S": "a"}},
                "ConditionExpression": "attribute_not_exists(#pk)",
                "ExpressionAttributeNames": {"#pk": "path"},
                "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
            })
        );
    }

    #[test]
    fn updates_that_build_on_found_values_may_count_twice_unless_conditional() {
        let update = |expression: &str| UpdateItem::new("t", Item::new(), expression);
        for counting in [
            "SET #n = #n + :one",
            "SET n = n-:one",
            "ADD #n :one",
            "SET #v = :v add #n :one",
            "SET #l = list_append(#l, :more)",
        ] {
            assert!(update(counting).may_count_twice(), "{counting}");
            assert!(
                !update(counting).condition("#g = :g").may_count_twice(),
                "{counting}"
            );
        }
        for fixed in [
            "SET #add = :address, #plus = :v",
            "SET address = :add REMOVE #x",
            "SET #n = if_not_exists(#n, :zero)",
            "DELETE #s :members",
        ] {
            assert!(!update(fixed).may_count_twice(), "{fixed}");
        }
        let json = serde_json::to_value(update("ADD #n :one").resend_if_ambiguous()).unwrap();
        assert!(json.get("ResendIfAmbiguous").is_none(), "{json}");
    }

    #[test]
    fn get_item_is_consistent_by_default() {
        let json = serde_json::to_value(GetItem::new("t", Item::new())).unwrap();
        assert_eq!(json["ConsistentRead"], true);
        assert!(json.get("ExpressionAttributeNames").is_none());
    }
}
