//! Single-item operations: PutItem, GetItem, UpdateItem, DeleteItem.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use super::attr::Item;
use super::client::DynamoClient;
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
        }
    }
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
    pub async fn put_item(&self, request: &PutItem) -> Result<WriteOutput, DynamoError> {
        self.call("PutItem", request).await
    }

    /// GetItem: the item at a key, or `None`.
    pub async fn get_item(&self, request: &GetItem) -> Result<Option<Item>, DynamoError> {
        let output: GetItemOutput = self.call("GetItem", request).await?;
        Ok(output.item)
    }

    /// UpdateItem: changes some attributes of an item (creating it if absent), if its
    /// condition holds.
    pub async fn update_item(&self, request: &UpdateItem) -> Result<WriteOutput, DynamoError> {
        self.call("UpdateItem", request).await
    }

    /// DeleteItem: removes an item, if its condition holds.
    pub async fn delete_item(&self, request: &DeleteItem) -> Result<WriteOutput, DynamoError> {
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
    fn get_item_is_consistent_by_default() {
        let json = serde_json::to_value(GetItem::new("t", Item::new())).unwrap();
        assert_eq!(json["ConsistentRead"], true);
        assert!(json.get("ExpressionAttributeNames").is_none());
    }
}
