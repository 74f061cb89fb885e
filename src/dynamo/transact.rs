//! TransactWriteItems: up to 100 writes and checks, all or nothing.

use serde::Serialize;

use super::attr::Item;
use super::client::{DynamoClient, Resend};
use super::error::DynamoError;
use super::item::{
    DeleteItem, ExpressionAttributes, OnConditionFailure, PutItem, UpdateItem,
    expression_placeholders,
};

/// DynamoDB's limit of items per transaction.
pub const TRANSACT_MAX: usize = 100;

/// A condition on an item that a transaction checks without writing it.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct ConditionCheck {
    /// The table.
    pub table_name: String,
    /// The item's full primary key.
    pub key: Item,
    /// The condition.
    pub condition_expression: String,
    /// Placeholders of the condition.
    #[serde(flatten)]
    pub expressions: ExpressionAttributes,
    /// What to return when the condition fails.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub return_values_on_condition_check_failure: Option<OnConditionFailure>,
}

impl ConditionCheck {
    /// Checks `condition` on the item at `key`.
    pub fn new(table: impl Into<String>, key: Item, condition: impl Into<String>) -> Self {
        Self {
            table_name: table.into(),
            key,
            condition_expression: condition.into(),
            expressions: ExpressionAttributes::default(),
            return_values_on_condition_check_failure: None,
        }
    }

    /// Asks for the item as it stood when the condition fails.
    pub fn return_old_item_on_condition_failure(mut self) -> Self {
        self.return_values_on_condition_check_failure = Some(OnConditionFailure::AllOld);
        self
    }
}

expression_placeholders!(ConditionCheck);

/// One item of a transaction. Its requests must not ask for `ReturnValues`.
#[derive(Debug, Clone, Serialize)]
pub enum TransactWriteItem {
    /// A put.
    Put(PutItem),
    /// An update.
    Update(UpdateItem),
    /// A delete.
    Delete(DeleteItem),
    /// A check only.
    ConditionCheck(ConditionCheck),
}

impl TransactWriteItem {
    /// The item's key (for a put, the whole item, its key among its attributes).
    pub(crate) fn key(&self) -> &Item {
        match self {
            Self::Put(p) => &p.item,
            Self::Update(u) => &u.key,
            Self::Delete(d) => &d.key,
            Self::ConditionCheck(c) => &c.key,
        }
    }

    /// Its condition, if it has one, and the placeholders of its expressions.
    pub(crate) fn condition_and_expressions(
        &mut self,
    ) -> (Option<&str>, &mut ExpressionAttributes) {
        match self {
            Self::Put(p) => (p.condition_expression.as_deref(), &mut p.expressions),
            Self::Update(u) => (u.condition_expression.as_deref(), &mut u.expressions),
            Self::Delete(d) => (d.condition_expression.as_deref(), &mut d.expressions),
            Self::ConditionCheck(c) => (Some(c.condition_expression.as_str()), &mut c.expressions),
        }
    }

    /// The placeholders of its expressions.
    pub(crate) fn expressions(&self) -> &ExpressionAttributes {
        match self {
            Self::Put(p) => &p.expressions,
            Self::Update(u) => &u.expressions,
            Self::Delete(d) => &d.expressions,
            Self::ConditionCheck(c) => &c.expressions,
        }
    }
}

#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct TransactWriteRequest<'a> {
    transact_items: &'a [TransactWriteItem],
    client_request_token: String,
}

#[derive(serde::Deserialize)]
struct Empty {}

impl DynamoClient {
    /// Applies all of `items` or none. A cancellation comes back as
    /// [`DynamoError::TransactionCanceled`] with one reason per item, so the item that
    /// failed is known. Each call carries a fresh idempotency token, so the client's own
    /// retries of a request whose answer was lost never apply it twice.
    #[cfg_attr(feature = "harness", visibility::make(pub))]
    pub(crate) async fn transact_write_items(
        &self,
        items: &[TransactWriteItem],
    ) -> Result<(), DynamoError> {
        self.transact(items, Resend::Always).await
    }

    /// [`transact_write_items`](Self::transact_write_items), sent once: any failure,
    /// throttling included, is returned at once. For a transaction whose conditions name
    /// the current time, which its caller builds afresh for the next attempt.
    #[cfg_attr(feature = "harness", visibility::make(pub))]
    pub(crate) async fn transact_write_items_once(
        &self,
        items: &[TransactWriteItem],
    ) -> Result<(), DynamoError> {
        self.transact(items, Resend::Never).await
    }

    async fn transact(
        &self,
        items: &[TransactWriteItem],
        resend: Resend,
    ) -> Result<(), DynamoError> {
        if items.is_empty() || items.len() > TRANSACT_MAX {
            return Err(DynamoError::InvalidRequest(format!(
                "a transaction takes 1 to {TRANSACT_MAX} items, not {}: split it",
                items.len()
            )));
        }
        if let Some(index) = items.iter().position(|item| match item {
            TransactWriteItem::Put(p) => p.return_values.is_some(),
            TransactWriteItem::Update(u) => u.return_values.is_some(),
            TransactWriteItem::Delete(d) => d.return_values.is_some(),
            TransactWriteItem::ConditionCheck(_) => false,
        }) {
            return Err(DynamoError::InvalidRequest(format!(
                "transaction item {index} asks for ReturnValues, which transactions do not support"
            )));
        }
        let request = TransactWriteRequest {
            transact_items: items,
            client_request_token: format!("{:032x}", rand::random::<u128>()),
        };
        let deadline = self.deadline("TransactWriteItems");
        let _: Empty = self
            .call_as("TransactWriteItems", &request, resend, &deadline)
            .await?;
        Ok(())
    }
}
