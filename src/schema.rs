//! The layouts of dynacommit's DynamoDB tables, in one place: the lease core and the
//! key-value store both lay out their items by these, and the wire client knows none of
//! them.
//!
//! - **Commit leases**: object_store 0.12's `DynamoCommit` schema, hash `path` (S), range
//!   `etag` (S), TTL on `ttl`, so that writers of both share one table.
//! - **Key-value**: `pk` and `sk`, both binary, TTL on `ttl`, a stream of new and old
//!   images for watches. A partition key is a namespace, a zero byte, and a folder (for
//!   the key-value store) or a path (for lease records kept in the same table under
//!   [`LEASE_NAMESPACE`]).

use bytes::Bytes;

use crate::dynamo::{KeyAttribute, KeyType, StreamViewType, TableSpec};

/// The namespace of lease records in a table shared with the key-value store; no
/// [`DynamoKv`](crate::kv::DynamoKv) may use it.
pub const LEASE_NAMESPACE: &str = "dynacommit.lease";

/// The commit lease table `name`: object_store 0.12's `DynamoCommit` schema.
pub fn commit_lease_table(name: impl Into<String>) -> TableSpec {
    TableSpec::new(name, KeyAttribute::new("path", KeyType::S))
        .with_range_key(KeyAttribute::new("etag", KeyType::S))
        .with_ttl("ttl")
}

/// The key-value table `name` (which may hold lease records too).
pub fn kv_table(name: impl Into<String>) -> TableSpec {
    TableSpec::new(name, KeyAttribute::new("pk", KeyType::B))
        .with_range_key(KeyAttribute::new("sk", KeyType::B))
        .with_ttl("ttl")
        .with_stream(StreamViewType::NewAndOldImages)
}

/// The partition key of `within` (a folder, or a lease's path) in `namespace`.
pub fn partition_key(namespace: &[u8], within: &[u8]) -> Bytes {
    let mut pk = Vec::with_capacity(namespace.len() + 1 + within.len());
    pk.extend_from_slice(namespace);
    pk.push(0);
    pk.extend_from_slice(within);
    Bytes::from(pk)
}
