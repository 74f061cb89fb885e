//! BatchWriteItem, chunked and retried until every write is applied or the bound is hit.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use super::attr::Item;
use super::client::DynamoClient;
use super::error::DynamoError;

/// DynamoDB's limit of writes per BatchWriteItem call.
pub const BATCH_WRITE_MAX: usize = 25;

/// One write of a batch: a whole-item put or a delete by key. Batches take no conditions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum WriteRequest {
    /// Writes an item.
    #[serde(rename = "PutRequest")]
    Put {
        /// The item, key included.
        #[serde(rename = "Item")]
        item: Item,
    },
    /// Deletes the item at a key.
    #[serde(rename = "DeleteRequest")]
    Delete {
        /// The full primary key.
        #[serde(rename = "Key")]
        key: Item,
    },
}

#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct BatchWriteRequest<'a> {
    request_items: HashMap<&'a str, &'a [WriteRequest]>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct BatchWriteOutput {
    #[serde(default)]
    unprocessed_items: HashMap<String, Vec<WriteRequest>>,
}

impl DynamoClient {
    /// Applies `writes` to `table` in calls of [`BATCH_WRITE_MAX`], sending back what
    /// DynamoDB leaves unprocessed (it does so under load) with the client's backoff until
    /// all are applied, or failing with [`DynamoError::BatchIncomplete`] past the retry
    /// bound. Writes are not atomic: on error, some may have been applied.
    ///
    /// The whole call, every chunk and every retry of unprocessed writes, ends within one
    /// [`call_deadline`](super::RetryConfig::call_deadline); past it, the error is
    /// [`DynamoError::DeadlineExceeded`] naming `batch_write_item` (with the
    /// [`DynamoError::BatchIncomplete`] count as its last error when that is what was left).
    #[cfg_attr(feature = "harness", visibility::make(pub))]
    pub(crate) async fn batch_write_item(
        &self,
        table: &str,
        writes: &[WriteRequest],
    ) -> Result<(), DynamoError> {
        let deadline = self.deadline("batch_write_item");
        let mut done = 0;
        for chunk in writes.chunks(BATCH_WRITE_MAX) {
            let started = Instant::now();
            let mut pending = chunk.to_vec();
            let mut attempts = 0;
            loop {
                attempts += 1;
                let request = BatchWriteRequest {
                    request_items: [(table, pending.as_slice())].into(),
                };
                let output: BatchWriteOutput =
                    self.call_by("BatchWriteItem", &request, &deadline).await?;
                pending = output.unprocessed_items.into_values().flatten().collect();
                if pending.is_empty() {
                    break;
                }
                // This chunk's leftovers and every chunk not yet sent.
                let incomplete = DynamoError::BatchIncomplete {
                    unprocessed: pending.len() + (writes.len() - done - chunk.len()),
                    total: writes.len(),
                    attempts,
                };
                let Some(delay) = self.next_delay(attempts, started) else {
                    return Err(incomplete);
                };
                if delay >= deadline.remaining() {
                    return Err(deadline.exceeded(Some(incomplete), false));
                }
                tracing::debug!(
                    unprocessed = pending.len(),
                    ?delay,
                    "BatchWriteItem: retrying unprocessed writes"
                );
                tokio::time::sleep(delay).await;
            }
            done += chunk.len();
        }
        Ok(())
    }
}

/// DynamoDB's limit of keys per BatchGetItem call.
pub const BATCH_GET_MAX: usize = 100;

#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct BatchGetRequest<'a> {
    request_items: HashMap<&'a str, KeysAndAttributes>,
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct KeysAndAttributes {
    keys: Vec<Item>,
    #[serde(default)]
    consistent_read: bool,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct BatchGetOutput {
    #[serde(default)]
    responses: HashMap<String, Vec<Item>>,
    #[serde(default)]
    unprocessed_keys: HashMap<String, KeysAndAttributes>,
}

impl DynamoClient {
    /// The items at `keys` of `table`, read consistently, in calls of [`BATCH_GET_MAX`],
    /// asking again for what DynamoDB leaves unprocessed, with the client's backoff and
    /// within one [`call_deadline`](super::RetryConfig::call_deadline). The answer is in no
    /// particular order, and holds no entry for a key without an item: match items to
    /// keys by their key attributes.
    #[cfg_attr(feature = "harness", visibility::make(pub))]
    pub(crate) async fn batch_get_item(
        &self,
        table: &str,
        keys: &[Item],
    ) -> Result<Vec<Item>, DynamoError> {
        let deadline = self.deadline("batch_get_item");
        let mut items = Vec::with_capacity(keys.len());
        for chunk in keys.chunks(BATCH_GET_MAX) {
            let started = Instant::now();
            let mut pending = chunk.to_vec();
            let mut attempts = 0;
            while !pending.is_empty() {
                attempts += 1;
                let request = BatchGetRequest {
                    request_items: [(
                        table,
                        KeysAndAttributes {
                            keys: std::mem::take(&mut pending),
                            consistent_read: true,
                        },
                    )]
                    .into(),
                };
                let output: BatchGetOutput =
                    self.call_by("BatchGetItem", &request, &deadline).await?;
                items.extend(output.responses.into_values().flatten());
                pending = output
                    .unprocessed_keys
                    .into_values()
                    .flat_map(|k| k.keys)
                    .collect();
                if pending.is_empty() {
                    break;
                }
                let incomplete = DynamoError::BatchIncomplete {
                    unprocessed: pending.len(),
                    total: keys.len(),
                    attempts,
                };
                let Some(delay) = self.next_delay(attempts, started) else {
                    return Err(incomplete);
                };
                if delay >= deadline.remaining() {
                    return Err(deadline.exceeded(Some(incomplete), false));
                }
                tokio::time::sleep(delay).await;
            }
        }
        Ok(items)
    }
}
