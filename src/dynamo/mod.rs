//! A small DynamoDB client of our own: SigV4-signed JSON over reqwest, no AWS SDK.
//!
//! It covers what dynacommit needs and nothing more: the item operations with
//! conditions, Query with paging, BatchWriteItem and TransactWriteItems, table
//! provisioning, and reading a table's DynamoDB Stream. Every call is retried on
//! throttling, 5xx, lost connections and writes refused for another's transaction in
//! flight, within a [`RetryConfig`], and every failure is a [`DynamoError`] carrying
//! DynamoDB's own words.

// Without the harness the crate calls only part of the operation set it has; the rest is
// there for the harness, whose wire tests hold all of it against DynamoDB Local.
#![cfg_attr(not(feature = "harness"), allow(dead_code))]

mod attr;
mod batch;
mod builder;
mod client;
mod ensure;
mod error;
mod item;
#[cfg(test)]
mod parse_props;
mod query;
mod response;
mod retry;
mod signing;
mod stream_view;
mod streams;
mod table;
mod transact;
#[cfg(feature = "harness")]
mod transport;

// What a user of the library meets: the client, its builder and retry settings, its
// error and what the error carries, and what table set-up reports.
pub use attr::{AttributeValue, Item};
pub use builder::DynamoClientBuilder;
pub use client::DynamoClient;
pub use error::{CancellationReason, DynamoError};
pub use retry::RetryConfig;
pub use stream_view::StreamViewType;
pub use table::{EnsureReport, KeyAttribute, KeySchema, KeyType, TableDescription};
#[cfg(feature = "harness")]
pub use transport::Transport;

// The wire operations: the crate's own, public only to the harness (the tests of the
// wire client), so that they are not a surface every change must keep stable.
#[cfg(feature = "harness")]
pub use wire::*;
#[cfg(not(feature = "harness"))]
pub(crate) use wire::*;

/// The wire operations' types, gathered for the one re-export above (without the harness,
/// the crate uses only some of them).
#[cfg_attr(not(feature = "harness"), allow(unused_imports))]
mod wire {
    pub use super::batch::{BATCH_GET_MAX, BATCH_WRITE_MAX, WriteRequest};
    pub use super::item::{
        DeleteItem, ExpressionAttributes, GetItem, OnConditionFailure, PutItem, ReturnValues,
        UpdateItem, WriteOutput,
    };
    pub use super::query::{Page, Query, Scan};
    pub use super::streams::{
        EventName, RecordsPage, Shard, ShardPosition, StreamDescription, StreamRecord,
        StreamSummary, compare_sequence_numbers,
    };
    pub use super::table::{TableSpec, TimeToLive};
    pub use super::transact::{ConditionCheck, TRANSACT_MAX, TransactWriteItem};
}
