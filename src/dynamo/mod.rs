//! A small DynamoDB client of our own: SigV4-signed JSON over reqwest, no AWS SDK.
//!
//! It covers what dynacommit needs and nothing more: the item operations with
//! conditions, Query with paging, BatchWriteItem and TransactWriteItems, table
//! provisioning, and reading a table's DynamoDB Stream. Every call is retried on throttling, 5xx and lost connections within a
//! [`RetryConfig`], and every failure is a [`DynamoError`] carrying DynamoDB's own words.

mod attr;
mod batch;
mod client;
mod error;
mod item;
#[cfg(test)]
mod parse_props;
mod query;
mod response;
mod retry;
mod signing;
mod streams;
mod table;
mod transact;

pub use attr::{AttributeValue, Item};
pub use batch::{BATCH_GET_MAX, BATCH_WRITE_MAX, WriteRequest};
pub use client::{DynamoClient, DynamoClientBuilder};
pub use error::{CancellationReason, DynamoError};
pub use item::{
    DeleteItem, ExpressionAttributes, GetItem, OnConditionFailure, PutItem, ReturnValues,
    UpdateItem, WriteOutput,
};
pub use query::{Page, Query, Scan};
pub use retry::RetryConfig;
pub use streams::{
    EventName, RecordsPage, Shard, ShardPosition, StreamDescription, StreamRecord, StreamSummary,
    StreamViewType, compare_sequence_numbers,
};
pub use table::{
    EnsureReport, KeyAttribute, KeySchema, KeyType, TableDescription, TableSpec, TimeToLive,
};
pub use transact::{ConditionCheck, TRANSACT_MAX, TransactWriteItem};
