//! # dynacommit
//!
//! Safe conditional writes (put-if-absent, compare-and-swap on an ETag,
//! copy-if-not-exists) on object stores that do not enforce them, coordinated through
//! leases in DynamoDB: the commit protocol `object_store` shipped as `DynamoCommit` up to
//! 0.12.5, rebuilt as a standalone crate on `object_store` 0.14.
//!
//! - [`CommitStore`] wraps any `ObjectStore`: its conditional puts, copies and renames
//!   take a lease first; everything else passes straight through.
//! - [`lease`] is the protocol, behind one small trait ([`lease::LeaseTable`]) with a
//!   DynamoDB table for production and an in-process one for single-process use and
//!   deterministic simulation.
//! - [`dynamo`] is a DynamoDB client of our own: signed JSON requests, retries, typed
//!   errors, table provisioning.
//! - `deltalake` (feature `deltalake`) registers deltalake-core's `s3://` stores as
//!   `v013::CommitStore`s, so Delta tables commit through the leases.
//! - `race` (feature `harness`) is the Delta-style commit race that proves it, and the
//!   Iceberg-style pointer race that proves compare-and-swap; `bench` (the same feature)
//!   the benchmark scenarios. The `dynacommit` command line is feature `cli`; a default
//!   build has neither.
//! - `gateway` (feature `gateway`) is an S3 endpoint whose conditional writes go through
//!   a `CommitStore`: the protocol for clients in any language.
//!
//! The protocol and its guarantees are in `docs/protocol.md`.
#![deny(missing_docs)]
#![deny(clippy::unwrap_used, clippy::expect_used)]
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

#[cfg(feature = "harness")]
pub mod bench;
#[cfg(feature = "deltalake")]
pub mod deltalake;
pub mod dynamo;
#[cfg(feature = "gateway")]
pub mod gateway;
pub mod kv;
pub mod lease;
pub mod lock;
#[cfg(feature = "harness")]
pub mod race;
mod safeguards;
// The tables' layouts: the crate's own, public to the harness (the wire tests provision
// the commit lease table by it).
#[cfg(feature = "harness")]
pub mod schema;
#[cfg(not(feature = "harness"))]
mod schema;
mod store;
#[cfg(feature = "object-store-013")]
pub use store::v013;

pub use store::{CommitStore, Conditions, Enforced, FromOptionsError, may_have_applied};

// Compiles the README's example as a doctest, so it cannot rot.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
