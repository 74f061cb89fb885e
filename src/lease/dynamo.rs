//! The lease table in DynamoDB, wire-compatible with object_store 0.12's DynamoCommit.

use std::time::Duration;

use async_trait::async_trait;

use super::record::{Expect, LeaseRecord, PutOutcome};
use super::table::{LeaseTable, TableError};
use crate::dynamo::{
    AttributeValue, DynamoClient, DynamoError, EnsureReport, GetItem, Item, PutItem, Query, Scan,
};

/// The owner written into a record released by [`DynamoLeaseTable::break_lease`].
pub const BROKEN_BY_OPERATOR: &str = "broken-by-operator";

/// Lease records in a DynamoDB table of object_store 0.12.5's schema (hash key `path`,
/// range key `etag`, TTL on `ttl`).
///
/// Acquisitions are conditional PutItems with `ReturnValuesOnConditionCheckFailure=ALL_OLD`
/// on object_store 0.12.5's schema, so old writers and ours can share a table: a first
/// acquisition on `attribute_not_exists(#pk)`, as 0.12.5's; a reclaim on the record being
/// exactly as the waiter saw it (generation, owner and `ttl`: stricter than 0.12.5's
/// generation alone, which a record deleted and written afresh can pass). A conflict answer that lacks the old item (some emulators leave it out)
/// is followed by a consistent GetItem instead of failing.
///
/// ```no_run
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// use std::sync::Arc;
/// use dynacommit::dynamo::DynamoClientBuilder;
/// use dynacommit::lease::{DynamoLeaseTable, LeaseConfig, LeaseManager};
///
/// let table = DynamoLeaseTable::new(DynamoClientBuilder::from_env().build()?, "lake_leases");
/// table.ensure_table().await?;
/// for record in table.list("tbl/_delta_log/").await? {
///     println!("{} {} generation {}", record.path, record.etag, record.generation);
/// }
/// let leases = LeaseManager::new(Arc::new(table), LeaseConfig::new("lake_leases"))?;
/// # let _ = leases; Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct DynamoLeaseTable {
    client: DynamoClient,
    table: String,
    layout: Layout,
}

/// How records are keyed in the table.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Layout {
    /// object_store 0.12's DynamoCommit schema: hash `path`, range `etag`, both strings.
    Commit,
    /// The key-value store's schema ([`DynamoKv`](crate::kv::DynamoKv)): binary `pk` =
    /// [`LEASE_NAMESPACE`], a zero byte and the path; binary `sk` = the etag. `path` and
    /// `etag` are kept as plain attributes too, so records read the same in both layouts.
    Shared,
}

/// The namespace of lease records in a table shared with the key-value store; no
/// [`DynamoKv`](crate::kv::DynamoKv) may use it.
pub const LEASE_NAMESPACE: &str = crate::schema::LEASE_NAMESPACE;

impl DynamoLeaseTable {
    /// Leases in `table`, reached through `client`, in object_store 0.12's schema.
    pub fn new(client: DynamoClient, table: impl Into<String>) -> Self {
        Self {
            client,
            table: table.into(),
            layout: Layout::Commit,
        }
    }

    /// Leases in the table of a [`DynamoKv`](crate::kv::DynamoKv), beside its entries, so
    /// that one table holds a service's storage and its leader lock (as Vault's storage and
    /// HA backends on one DynamoDB table). Not for commit leases shared with object_store
    /// 0.12.5 writers, which know only [`new`](Self::new)'s schema.
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// use std::sync::Arc;
    /// use dynacommit::dynamo::DynamoClient;
    /// use dynacommit::kv::DynamoKv;
    /// use dynacommit::lease::{DynamoLeaseTable, LeaseManager};
    /// use dynacommit::lock::{LockClient, default_lock_config};
    ///
    /// let client = dynacommit::dynamo::DynamoClientBuilder::from_env().build()?;
    /// let kv = DynamoKv::new(client.clone(), "vault");
    /// kv.ensure_table().await?;
    /// let mut config = default_lock_config();
    /// config.table = "vault".into();
    /// let table = DynamoLeaseTable::in_kv_table(client, "vault");
    /// let locks = LockClient::with_leases(LeaseManager::new(Arc::new(table), config)?);
    /// let leader = locks.acquire("core/lock", "node-1").await?;
    /// # let _ = leader; Ok(()) }
    /// ```
    pub fn in_kv_table(client: DynamoClient, table: impl Into<String>) -> Self {
        Self {
            client,
            table: table.into(),
            layout: Layout::Shared,
        }
    }

    /// The table name.
    pub fn table_name(&self) -> &str {
        &self.table
    }

    /// The client.
    pub fn client(&self) -> &DynamoClient {
        &self.client
    }

    /// Creates the table if it is missing, with TTL on `ttl`, and waits until it is active;
    /// an existing table whose key schema differs is an error, not changed.
    pub async fn ensure_table(&self) -> Result<EnsureReport, DynamoError> {
        let spec = match self.layout {
            Layout::Commit => crate::schema::commit_lease_table(&self.table),
            Layout::Shared => crate::schema::kv_table(&self.table),
        };
        self.client.ensure_table(&spec).await
    }

    /// A scan of the records whose path starts with `prefix` (all of them if empty).
    fn scan_from(&self, prefix: &str) -> Scan {
        let scan = Scan::new(&self.table);
        if prefix.is_empty() {
            // A shared table holds key-value entries too: only items with a path.
            return match self.layout {
                Layout::Commit => scan,
                Layout::Shared => scan.filter("attribute_exists(#pk)").name("#pk", "path"),
            };
        }
        scan.filter("begins_with(#pk, :prefix)")
            .name("#pk", "path")
            .value(":prefix", prefix)
    }

    /// Every lease record whose path starts with `prefix` (a full table scan: for
    /// inspection, not for the protocol).
    pub async fn list(&self, prefix: &str) -> Result<Vec<LeaseRecord>, TableError> {
        let mut records = self
            .client
            .scan_all(self.scan_from(prefix))
            .await?
            .iter()
            .map(from_item)
            .collect::<Result<Vec<_>, _>>()?;
        records.sort_by(|a, b| (&a.path, &a.etag).cmp(&(&b.path, &b.etag)));
        Ok(records)
    }

    /// At most `max` lease records whose path starts with `prefix`, in the table's order,
    /// reading no more pages than that needs; and whether more remain. For looking at a
    /// large table without scanning all of it.
    pub async fn list_at_most(
        &self,
        prefix: &str,
        max: usize,
    ) -> Result<(Vec<LeaseRecord>, bool), TableError> {
        use futures::TryStreamExt;
        let mut pages = std::pin::pin!(self.client.scan_pages(self.scan_from(prefix)));
        let mut records = Vec::new();
        while let Some(page) = pages.try_next().await? {
            for item in &page.items {
                if records.len() == max {
                    return Ok((records, true));
                }
                records.push(from_item(item)?);
            }
        }
        Ok((records, false))
    }

    /// Every lease record of one path (one per expected ETag).
    pub async fn records_at(&self, path: &str) -> Result<Vec<LeaseRecord>, TableError> {
        let query = match self.layout {
            Layout::Commit => Query::new(&self.table, "#pk = :path")
                .name("#pk", "path")
                .value(":path", path),
            Layout::Shared => Query::new(&self.table, "#pk = :pk")
                .name("#pk", "pk")
                .value(":pk", AttributeValue::B(shared_partition(path))),
        };
        self.client
            .query_all(query)
            .await?
            .iter()
            .map(from_item)
            .collect()
    }

    /// Marks `record` released at the next generation if it still stands exactly as read:
    /// for operators clearing a lease whose holder is known dead. The next writer takes it
    /// at once (object_store 0.12.5 writers, which ignore the flag, after `timeout x skew`).
    /// Dangerous otherwise: a live holder loses its lease without knowing, and another
    /// writer can commit over it.
    ///
    /// The record is rewritten, not deleted, so its generation never goes back: lock
    /// fencing tokens keep increasing across a break. `Ok(false)` if the record changed or
    /// went since it was read.
    pub async fn break_lease(&self, record: &LeaseRecord) -> Result<bool, TableError> {
        let Some(next) = record.generation.checked_add(1) else {
            return Err(TableError::Malformed {
                path: record.path.clone(),
                etag: record.etag.clone(),
                problem: "generation is at u64::MAX; delete the record instead".into(),
            });
        };
        let broken = LeaseRecord {
            generation: next,
            owner: Some(BROKEN_BY_OPERATOR.to_owned()),
            value: None,
            released: true,
            holder: None,
            ..record.clone()
        };
        match self.put(&broken, &record.unchanged()).await? {
            PutOutcome::Written => Ok(true),
            // An earlier attempt of this break (its answer lost) or another operator's.
            PutOutcome::Conflict(Some(found))
                if found.released
                    && found.generation == next
                    && found.owner.as_deref() == Some(BROKEN_BY_OPERATOR) =>
            {
                Ok(true)
            }
            PutOutcome::Conflict(_) => Ok(false),
        }
    }

    fn key(&self, path: &str, etag: &str) -> Item {
        match self.layout {
            Layout::Commit => [
                ("path".to_owned(), AttributeValue::from(path)),
                ("etag".to_owned(), AttributeValue::from(etag)),
            ]
            .into(),
            Layout::Shared => [
                ("pk".to_owned(), AttributeValue::B(shared_partition(path))),
                (
                    "sk".to_owned(),
                    AttributeValue::B(bytes::Bytes::copy_from_slice(etag.as_bytes())),
                ),
            ]
            .into(),
        }
    }

    /// The item a record is stored as.
    fn item(&self, record: &LeaseRecord) -> Item {
        let mut item = to_item(record);
        if self.layout == Layout::Shared {
            item.extend(self.key(&record.path, &record.etag));
        }
        item
    }
}

/// The partition of lease records of `path` in a shared table.
fn shared_partition(path: &str) -> bytes::Bytes {
    crate::schema::partition_key(LEASE_NAMESPACE.as_bytes(), path.as_bytes())
}

/// The item a record is stored as.
pub(crate) fn to_item(record: &LeaseRecord) -> Item {
    let mut item: Item = [
        (
            "path".to_owned(),
            AttributeValue::from(record.path.as_str()),
        ),
        (
            "etag".to_owned(),
            AttributeValue::from(record.etag.as_str()),
        ),
    ]
    .into();
    let timeout_ms = u64::try_from(record.timeout.as_millis()).unwrap_or(u64::MAX);
    item.extend([
        (
            "generation".to_owned(),
            AttributeValue::from(record.generation),
        ),
        ("timeout".to_owned(), AttributeValue::from(timeout_ms)),
    ]);
    if let Some(ttl) = record.ttl {
        item.insert("ttl".to_owned(), AttributeValue::from(ttl));
    }
    if let Some(owner) = &record.owner {
        item.insert("owner".to_owned(), AttributeValue::from(owner.as_str()));
    }
    if let Some(value) = &record.value {
        item.insert("value".to_owned(), AttributeValue::from(value.as_str()));
    }
    if let Some(holder) = &record.holder {
        item.extend([
            (
                "holder".to_owned(),
                AttributeValue::from(holder.process.as_str()),
            ),
            (
                "held_since".to_owned(),
                AttributeValue::from(holder.since_ms),
            ),
            (
                "written".to_owned(),
                AttributeValue::from(holder.written_ms),
            ),
        ]);
    }
    if record.released {
        // A number, not a BOOL: object_store 0.12.5 fails to parse a conflict answer
        // holding any attribute type other than S and N.
        item.insert("released".to_owned(), AttributeValue::from(1u8));
    }
    item
}

/// The record an item holds, or what is wrong with it.
pub(crate) fn from_item(item: &Item) -> Result<LeaseRecord, TableError> {
    let text = |name: &str| item.get(name).and_then(AttributeValue::as_str);
    let path = text("path").unwrap_or_default().to_owned();
    let etag = text("etag").unwrap_or_default().to_owned();
    let malformed = |problem: String| TableError::Malformed {
        path: path.clone(),
        etag: etag.clone(),
        problem,
    };
    if path.is_empty() || etag.is_empty() {
        return Err(malformed("no string path or etag".into()));
    }
    let number = |name: &str| -> Result<u64, TableError> {
        item.get(name)
            .and_then(AttributeValue::as_u64)
            .ok_or_else(|| malformed(format!("{name} is missing or not a whole number")))
    };
    // Optional attributes must have their type when present: a record whose `ttl` or
    // `owner` could not be compared could never be reclaimed (conditions name them).
    let optional_text = |name: &str| -> Result<Option<String>, TableError> {
        item.get(name)
            .map(|v| {
                v.as_str()
                    .map(str::to_owned)
                    .ok_or_else(|| malformed(format!("{name} is not a string")))
            })
            .transpose()
    };
    let ttl = item
        .get("ttl")
        .map(|v| {
            v.as_i64()
                .ok_or_else(|| malformed("ttl is not a whole number".into()))
        })
        .transpose()?;
    Ok(LeaseRecord {
        generation: number("generation")?,
        timeout: Duration::from_millis(number("timeout")?),
        ttl,
        owner: optional_text("owner")?,
        value: optional_text("value")?,
        released: item
            .get("released")
            .is_some_and(|v| v.as_u64().is_some_and(|n| n != 0) || v.as_bool() == Some(true)),
        // Only for people reading the table: taken when whole, never an error.
        holder: match (
            text("holder"),
            item.get("held_since").and_then(AttributeValue::as_i64),
            item.get("written").and_then(AttributeValue::as_i64),
        ) {
            (Some(process), Some(since_ms), Some(written_ms)) => Some(super::Holder {
                process: process.to_owned(),
                since_ms,
                written_ms,
            }),
            _ => None,
        },
        path: path.clone(),
        etag: etag.clone(),
    })
}

/// The PutItem that writes `item` (`record`'s) if `expect` holds. `path` is in every
/// record's item, whatever the layout, so conditions name it as the key.
fn conditional_put(table: &str, item: Item, expect: &Expect) -> PutItem {
    let put = PutItem::new(table, item)
        .name("#pk", "path")
        .return_old_item_on_condition_failure();
    match expect {
        Expect::Absent => put.condition("attribute_not_exists(#pk)"),
        Expect::Generation(g) => put
            .condition("attribute_exists(#pk) AND generation = :g")
            .value(":g", *g),
        Expect::Unchanged {
            generation,
            owner,
            ttl,
        } => {
            let mut put = put
                .name("#owner", "owner")
                .name("#ttl", "ttl")
                .value(":g", *generation);
            let owner_cond = match owner {
                Some(owner) => {
                    put = put.value(":owner", owner.as_str());
                    "#owner = :owner"
                }
                None => "attribute_not_exists(#owner)",
            };
            let ttl_cond = match ttl {
                Some(ttl) => {
                    put = put.value(":ttl", *ttl);
                    "#ttl = :ttl"
                }
                None => "attribute_not_exists(#ttl)",
            };
            put.condition(format!(
                "attribute_exists(#pk) AND generation = :g AND {owner_cond} AND {ttl_cond}"
            ))
        }
        Expect::Owned { generation, owner } => put
            .condition("attribute_exists(#pk) AND generation = :g AND #owner = :owner")
            .name("#owner", "owner")
            .value(":g", *generation)
            .value(":owner", owner.as_str()),
    }
}

#[async_trait]
impl LeaseTable for DynamoLeaseTable {
    async fn put(&self, record: &LeaseRecord, expect: &Expect) -> Result<PutOutcome, TableError> {
        let request = conditional_put(&self.table, self.item(record), expect);
        let error = match self.client.put_item(&request).await {
            Ok(_) => return Ok(PutOutcome::Written),
            Err(e) => e,
        };
        // A failed condition is a conflict even when an earlier attempt of this call may
        // have applied (the client retried after a lost answer): the record that stood at
        // the retry is what the caller needs, and every writer recognises its own record
        // by its owner nonce. A lingering earlier attempt can still land later, which the
        // protocol allows for (docs/protocol.md).
        match error.underlying() {
            DynamoError::ConditionalCheckFailed {
                old_item: Some(old),
                ..
            } => Ok(PutOutcome::Conflict(Some(from_item(old)?))),
            DynamoError::ConditionalCheckFailed { old_item: None, .. } => {
                // The server did not send the old item back: read it ourselves.
                let current = self.get(&record.path, &record.etag).await?;
                Ok(PutOutcome::Conflict(current))
            }
            _ => Err(error.into()),
        }
    }

    async fn get(&self, path: &str, etag: &str) -> Result<Option<LeaseRecord>, TableError> {
        let item = self
            .client
            .get_item(&GetItem::new(&self.table, self.key(path, etag)))
            .await?;
        item.as_ref().map(from_item).transpose()
    }

    fn describe(&self) -> String {
        format!("dynamodb table {}", self.table)
    }

    fn dynamodb_table(&self) -> Option<&str> {
        Some(&self.table)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record() -> LeaseRecord {
        LeaseRecord {
            path: "log/00001.json".into(),
            etag: "*".into(),
            generation: 4,
            timeout: Duration::from_millis(20_000),
            ttl: Some(1_800_000_000),
            owner: Some("n0nce".into()),
            value: Some("10.0.0.7:8200".into()),
            released: true,
            holder: Some(super::super::Holder {
                process: "host-1 pid 42".into(),
                since_ms: 1_800_000_000_000,
                written_ms: 1_800_000_005_000,
            }),
        }
    }

    #[test]
    fn records_round_trip_through_items() {
        assert_eq!(from_item(&to_item(&record())).unwrap(), record());
    }

    #[test]
    fn every_attribute_is_a_string_or_a_number_as_object_store_0_12_5_requires() {
        for (name, value) in to_item(&record()) {
            assert!(
                matches!(value, AttributeValue::S(_) | AttributeValue::N(_)),
                "{name}: {value:?}"
            );
        }
    }

    #[test]
    fn an_old_writers_item_is_a_record_without_owner() {
        let mut item = to_item(&record());
        item.remove("owner");
        item.remove("value");
        item.remove("released");
        let parsed = from_item(&item).unwrap();
        assert_eq!(parsed.owner, None);
        assert!(!parsed.released);
    }

    #[test]
    fn a_foreign_item_is_malformed_not_a_panic() {
        let mut item = to_item(&record());
        item.insert("generation".into(), AttributeValue::from("seven"));
        let e = from_item(&item).unwrap_err().to_string();
        assert!(e.contains("generation"), "{e}");
        assert!(from_item(&Item::new()).is_err());
    }

    #[test]
    fn a_table_name_given_twice_must_agree() {
        use super::super::{LeaseConfig, LeaseManager};
        let client = DynamoClient::builder()
            .with_endpoint("http://127.0.0.1:9")
            .with_region("us-east-1")
            .with_credentials("k", "s", None)
            .build()
            .unwrap();
        let table = std::sync::Arc::new(DynamoLeaseTable::new(client.clone(), "a"));
        let e = LeaseManager::new(table, LeaseConfig::new("b"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("\"a\"") && e.contains("\"b\""), "{e}");
        assert!(e.contains("LeaseManager::dynamodb"), "{e}");
        let manager = LeaseManager::dynamodb(client, LeaseConfig::new("b")).unwrap();
        assert_eq!(manager.table().describe(), "dynamodb table b");
    }

    #[test]
    fn optional_attributes_of_the_wrong_type_are_malformed_not_ignored() {
        // Ignored, they would make a reclaim condition that can never hold.
        for (name, value) in [
            ("ttl", AttributeValue::from("tomorrow")),
            ("owner", AttributeValue::from(7u8)),
            ("value", AttributeValue::from(7u8)),
        ] {
            let mut item = to_item(&record());
            item.insert(name.into(), value);
            let e = from_item(&item).unwrap_err().to_string();
            assert!(e.contains(name), "{e}");
        }
    }

    #[test]
    fn conditions_match_object_store_0_12_5_on_the_wire() {
        let json = |expect| {
            serde_json::to_value(conditional_put("t", to_item(&record()), &expect)).unwrap()
        };
        let absent = json(Expect::Absent);
        assert_eq!(absent["ConditionExpression"], "attribute_not_exists(#pk)");
        assert_eq!(absent["ExpressionAttributeNames"]["#pk"], "path");
        assert_eq!(absent["ReturnValuesOnConditionCheckFailure"], "ALL_OLD");
        let reclaim = json(Expect::Generation(3));
        assert_eq!(
            reclaim["ConditionExpression"],
            "attribute_exists(#pk) AND generation = :g"
        );
        assert_eq!(reclaim["ExpressionAttributeValues"][":g"]["N"], "3");
        assert_eq!(reclaim["Item"]["timeout"]["N"], "20000");
    }
}
