//! # dynacommit
//!
//! Safe conditional writes (put-if-absent, compare-and-swap on an ETag,
//! copy-if-not-exists) on object stores that do not enforce them, coordinated through
//! leases in DynamoDB: the commit protocol `object_store` shipped as `DynamoCommit` up to
//! 0.12.5, rebuilt as a standalone crate on `object_store` 0.14.
//!
//! This release holds the foundation: [`dynamo`], a DynamoDB client of our own (signed
//! JSON requests, retries, typed errors, table provisioning).
#![deny(missing_docs)]
#![deny(clippy::unwrap_used, clippy::expect_used)]
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

pub mod dynamo;
pub mod lease;
pub mod race;
mod store;

pub use store::CommitStore;
