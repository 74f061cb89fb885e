//! Table provisioning: the table's shape, CreateTable, DescribeTable, the TTL calls and
//! enabling a stream (`ensure.rs` puts them together).

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::client::{Deadline, DynamoClient};
use super::error::DynamoError;
use super::stream_view::StreamViewType;

/// The type of a key attribute.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum KeyType {
    /// String.
    S,
    /// Number.
    N,
    /// Binary.
    B,
}

/// A key attribute: its name and type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyAttribute {
    /// The attribute name.
    pub name: String,
    /// Its type.
    pub kind: KeyType,
}

impl KeyAttribute {
    /// A key attribute of type `kind`.
    pub fn new(name: impl Into<String>, kind: KeyType) -> Self {
        Self {
            name: name.into(),
            kind,
        }
    }
}

/// A table's primary key: a hash key and an optional range key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeySchema {
    /// The partition key.
    pub hash: KeyAttribute,
    /// The sort key, if any.
    pub range: Option<KeyAttribute>,
}

impl std::fmt::Display for KeySchema {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "[hash {} ({:?})", self.hash.name, self.hash.kind)?;
        if let Some(range) = &self.range {
            write!(f, ", range {} ({:?})", range.name, range.kind)?;
        }
        write!(f, "]")
    }
}

/// What a table must look like: what [`DynamoClient::ensure_table`] makes true.
///
/// ```
/// use dynacommit::dynamo::TableSpec;
///
/// use dynacommit::dynamo::{KeyAttribute, KeyType};
///
/// let spec = TableSpec::new("delta_log_leases", KeyAttribute::new("path", KeyType::S))
///     .with_range_key(KeyAttribute::new("etag", KeyType::S))
///     .with_ttl("ttl");
/// assert_eq!(spec.key_schema.to_string(), "[hash path (S), range etag (S)]");
/// assert_eq!(spec.ttl_attribute.as_deref(), Some("ttl"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableSpec {
    /// The table name.
    pub name: String,
    /// The primary key.
    pub key_schema: KeySchema,
    /// The attribute holding expiry times (epoch seconds), if TTL is wanted.
    pub ttl_attribute: Option<String>,
    /// The view type of the DynamoDB Stream wanted on the table, if any. `None` asks for
    /// nothing: a table's stream, if it has one, is left as it is.
    pub stream_view_type: Option<StreamViewType>,
    /// The deadline of [`DynamoClient::ensure_table`] as a whole: describing, creating,
    /// waiting for the table to become ACTIVE, enabling a stream, and turning TTL on.
    pub active_timeout: Duration,
}

impl TableSpec {
    /// A table with a hash key only and no TTL.
    pub fn new(name: impl Into<String>, hash: KeyAttribute) -> Self {
        Self {
            name: name.into(),
            key_schema: KeySchema { hash, range: None },
            ttl_attribute: None,
            stream_view_type: None,
            active_timeout: Duration::from_secs(120),
        }
    }

    /// Adds a range key.
    pub fn with_range_key(mut self, range: KeyAttribute) -> Self {
        self.key_schema.range = Some(range);
        self
    }

    /// Turns TTL on for `attribute`.
    pub fn with_ttl(mut self, attribute: impl Into<String>) -> Self {
        self.ttl_attribute = Some(attribute.into());
        self
    }

    /// Asks for a DynamoDB Stream of view type `view` on the table: created with it, or
    /// enabled on an existing table that has none. A table whose stream has another view
    /// type is refused ([`DynamoError::StreamViewTypeMismatch`]), never changed.
    pub fn with_stream(mut self, view: StreamViewType) -> Self {
        self.stream_view_type = Some(view);
        self
    }

    /// The deadline of [`DynamoClient::ensure_table`], waiting for ACTIVE included.
    pub fn with_active_timeout(mut self, timeout: Duration) -> Self {
        self.active_timeout = timeout;
        self
    }
}

/// A table as DescribeTable reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableDescription {
    /// The name.
    pub name: String,
    /// `CREATING`, `ACTIVE`, `UPDATING`, `DELETING`, ...
    pub status: String,
    /// The primary key.
    pub key_schema: KeySchema,
    /// Approximate item count (refreshed by DynamoDB about every six hours).
    pub item_count: Option<u64>,
    /// `PAY_PER_REQUEST` or `PROVISIONED`, when reported.
    pub billing_mode: Option<String>,
    /// The ARN of the table's latest stream, when it has had one. That stream may be
    /// disabled: DynamoDB keeps reporting it after the stream is turned off (see
    /// `stream_view_type`).
    pub latest_stream_arn: Option<String>,
    /// The view type of the table's stream while one is enabled; `None` when it has no
    /// enabled stream.
    pub stream_view_type: Option<StreamViewType>,
}

/// TTL as DescribeTimeToLive reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TimeToLive {
    /// `ENABLED`, `ENABLING`, `DISABLED` or `DISABLING`.
    pub status: String,
    /// The attribute, when TTL is (being) enabled.
    pub attribute: Option<String>,
}

impl TimeToLive {
    pub(super) fn is_on(&self) -> bool {
        matches!(self.status.as_str(), "ENABLED" | "ENABLING")
    }
}

/// What a table's `ensure_table` did
/// ([`DynamoLeaseTable`](crate::lease::DynamoLeaseTable::ensure_table),
/// [`DynamoKv`](crate::kv::DynamoKv::ensure_table)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnsureReport {
    /// The table was missing and this call created it. Also set when CreateTable's first
    /// attempt got no definite answer and its retry found the table already there
    /// (`ResourceInUseException`): that is taken to be the first attempt's doing.
    pub created: bool,
    /// TTL was off and was turned on.
    pub ttl_enabled: bool,
    /// The spec asked for a stream, the existing table had none enabled, and this call
    /// enabled it (a new stream, with a new ARN in `table.latest_stream_arn`).
    pub stream_enabled: bool,
    /// The table as it now stands.
    pub table: TableDescription,
}

// ---- wire shapes

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct WireAttributeDefinition {
    attribute_name: String,
    attribute_type: KeyType,
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct WireKeyElement {
    attribute_name: String,
    key_type: String,
}

#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct CreateTableRequest<'a> {
    table_name: &'a str,
    attribute_definitions: Vec<WireAttributeDefinition>,
    key_schema: Vec<WireKeyElement>,
    billing_mode: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    stream_specification: Option<WireStreamSpecification>,
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct WireStreamSpecification {
    stream_enabled: bool,
    // Only meaningful with `StreamEnabled: true`, and only sent then.
    #[serde(skip_serializing_if = "Option::is_none")]
    stream_view_type: Option<StreamViewType>,
}

impl WireStreamSpecification {
    fn enabled(view: StreamViewType) -> Self {
        Self {
            stream_enabled: true,
            stream_view_type: Some(view),
        }
    }
}

#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct UpdateStreamRequest<'a> {
    table_name: &'a str,
    stream_specification: WireStreamSpecification,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct UpdateTableOutput {
    table_description: WireTable,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct WireTable {
    table_name: String,
    table_status: String,
    key_schema: Vec<WireKeyElement>,
    attribute_definitions: Vec<WireAttributeDefinition>,
    item_count: Option<u64>,
    billing_mode_summary: Option<WireBillingMode>,
    stream_specification: Option<WireStreamSpecification>,
    latest_stream_arn: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct WireBillingMode {
    billing_mode: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct DescribeTableOutput {
    table: WireTable,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct CreateTableOutput {
    table_description: WireTable,
}

#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct TableNameRequest<'a> {
    table_name: &'a str,
}

#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct UpdateTimeToLiveRequest<'a> {
    table_name: &'a str,
    time_to_live_specification: TtlSpecification<'a>,
}

#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct TtlSpecification<'a> {
    enabled: bool,
    attribute_name: &'a str,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct DescribeTimeToLiveOutput {
    time_to_live_description: WireTtl,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct WireTtl {
    time_to_live_status: String,
    attribute_name: Option<String>,
}

#[derive(Deserialize)]
struct Ignored {}

impl WireTable {
    fn into_description(self) -> Result<TableDescription, DynamoError> {
        let find = |role: &str| -> Result<Option<KeyAttribute>, DynamoError> {
            let Some(element) = self.key_schema.iter().find(|k| k.key_type == role) else {
                return Ok(None);
            };
            let definition = self
                .attribute_definitions
                .iter()
                .find(|d| d.attribute_name == element.attribute_name)
                .ok_or_else(|| {
                    DynamoError::InvalidRequest(format!(
                        "table {} reports key {} without an attribute definition",
                        self.table_name, element.attribute_name
                    ))
                })?;
            Ok(Some(KeyAttribute::new(
                &element.attribute_name,
                definition.attribute_type,
            )))
        };
        let hash = find("HASH")?.ok_or_else(|| {
            DynamoError::InvalidRequest(format!("table {} reports no hash key", self.table_name))
        })?;
        let range = find("RANGE")?;
        Ok(TableDescription {
            name: self.table_name,
            status: self.table_status,
            key_schema: KeySchema { hash, range },
            item_count: self.item_count,
            billing_mode: self.billing_mode_summary.and_then(|b| b.billing_mode),
            latest_stream_arn: self.latest_stream_arn,
            stream_view_type: self
                .stream_specification
                .filter(|s| s.stream_enabled)
                .and_then(|s| s.stream_view_type),
        })
    }
}

impl DynamoClient {
    /// CreateTable, on-demand (PAY_PER_REQUEST), with a stream if `spec` asks for one.
    /// Returns at once; the table is usually `CREATING` until
    /// [`wait_until_active`](Self::wait_until_active).
    #[cfg_attr(feature = "harness", visibility::make(pub))]
    pub(crate) async fn create_table(
        &self,
        spec: &TableSpec,
    ) -> Result<TableDescription, DynamoError> {
        self.create_table_by(spec, &self.deadline("CreateTable"))
            .await
    }

    pub(super) async fn create_table_by(
        &self,
        spec: &TableSpec,
        deadline: &Deadline,
    ) -> Result<TableDescription, DynamoError> {
        let keys = std::iter::once((&spec.key_schema.hash, "HASH"))
            .chain(spec.key_schema.range.as_ref().map(|r| (r, "RANGE")));
        let (attribute_definitions, key_schema) = keys
            .map(|(k, role)| {
                (
                    WireAttributeDefinition {
                        attribute_name: k.name.clone(),
                        attribute_type: k.kind,
                    },
                    WireKeyElement {
                        attribute_name: k.name.clone(),
                        key_type: role.to_owned(),
                    },
                )
            })
            .unzip();
        let request = CreateTableRequest {
            table_name: &spec.name,
            attribute_definitions,
            key_schema,
            billing_mode: "PAY_PER_REQUEST",
            stream_specification: spec.stream_view_type.map(WireStreamSpecification::enabled),
        };
        let output: CreateTableOutput = self.call_by("CreateTable", &request, deadline).await?;
        output.table_description.into_description()
    }

    /// DescribeTable. A missing table is a [`DynamoError::Service`] with code
    /// `ResourceNotFoundException`.
    #[cfg_attr(feature = "harness", visibility::make(pub))]
    pub(crate) async fn describe_table(
        &self,
        table: &str,
    ) -> Result<TableDescription, DynamoError> {
        self.describe_table_by(table, &self.deadline("DescribeTable"))
            .await
    }

    pub(super) async fn describe_table_by(
        &self,
        table: &str,
        deadline: &Deadline,
    ) -> Result<TableDescription, DynamoError> {
        let output: DescribeTableOutput = self
            .call_by(
                "DescribeTable",
                &TableNameRequest { table_name: table },
                deadline,
            )
            .await?;
        output.table.into_description()
    }

    /// Polls DescribeTable until the table is ACTIVE; the whole call, each DescribeTable
    /// and its retries included, ends within `timeout`.
    ///
    /// A table DescribeTable does not find is waited for too: just after CreateTable, AWS
    /// may answer `ResourceNotFoundException` for a while (its reads are eventually
    /// consistent). One still missing at the end is [`DynamoError::TableNotReady`] with
    /// status `NOT_FOUND`.
    #[cfg_attr(feature = "harness", visibility::make(pub))]
    pub(crate) async fn wait_until_active(
        &self,
        table: &str,
        timeout: Duration,
    ) -> Result<TableDescription, DynamoError> {
        self.wait_active_by(table, &Deadline::new("wait_until_active", timeout))
            .await
    }

    pub(super) async fn wait_active_by(
        &self,
        table: &str,
        deadline: &Deadline,
    ) -> Result<TableDescription, DynamoError> {
        let mut delay = Duration::from_millis(50);
        loop {
            let status = match self.describe_table_by(table, deadline).await {
                Ok(description) if description.status == "ACTIVE" => return Ok(description),
                Ok(description) => description.status,
                Err(e) if is_not_found(&e) => {
                    tracing::debug!(table, "not visible yet: waiting");
                    "NOT_FOUND".to_owned()
                }
                Err(e) => return Err(e),
            };
            if delay >= deadline.remaining() {
                return Err(DynamoError::TableNotReady {
                    table: table.to_owned(),
                    status,
                    waited: deadline.elapsed(),
                });
            }
            tokio::time::sleep(delay).await;
            delay = (delay * 2).min(Duration::from_secs(2));
        }
    }

    /// UpdateTable enabling a stream of view type `view` on `table`. DynamoDB refuses it
    /// (`ValidationException`) when the table already has an enabled stream, whatever its
    /// view type. Returns at once; the table may be `UPDATING` for a moment.
    #[cfg_attr(feature = "harness", visibility::make(pub))]
    pub(crate) async fn enable_stream(
        &self,
        table: &str,
        view: StreamViewType,
    ) -> Result<TableDescription, DynamoError> {
        self.enable_stream_by(table, view, &self.deadline("UpdateTable"))
            .await
    }

    pub(super) async fn enable_stream_by(
        &self,
        table: &str,
        view: StreamViewType,
        deadline: &Deadline,
    ) -> Result<TableDescription, DynamoError> {
        let request = UpdateStreamRequest {
            table_name: table,
            stream_specification: WireStreamSpecification::enabled(view),
        };
        let output: UpdateTableOutput = self.call_by("UpdateTable", &request, deadline).await?;
        output.table_description.into_description()
    }

    /// UpdateTimeToLive: turns expiry by `attribute` on or off.
    #[cfg_attr(feature = "harness", visibility::make(pub))]
    pub(crate) async fn update_time_to_live(
        &self,
        table: &str,
        attribute: &str,
        enabled: bool,
    ) -> Result<(), DynamoError> {
        let deadline = self.deadline("UpdateTimeToLive");
        self.update_time_to_live_by(table, attribute, enabled, &deadline)
            .await
    }

    pub(super) async fn update_time_to_live_by(
        &self,
        table: &str,
        attribute: &str,
        enabled: bool,
        deadline: &Deadline,
    ) -> Result<(), DynamoError> {
        let request = UpdateTimeToLiveRequest {
            table_name: table,
            time_to_live_specification: TtlSpecification {
                enabled,
                attribute_name: attribute,
            },
        };
        let _: Ignored = self.call_by("UpdateTimeToLive", &request, deadline).await?;
        Ok(())
    }

    /// DescribeTimeToLive.
    #[cfg_attr(feature = "harness", visibility::make(pub))]
    pub(crate) async fn describe_time_to_live(
        &self,
        table: &str,
    ) -> Result<TimeToLive, DynamoError> {
        self.describe_time_to_live_by(table, &self.deadline("DescribeTimeToLive"))
            .await
    }

    pub(super) async fn describe_time_to_live_by(
        &self,
        table: &str,
        deadline: &Deadline,
    ) -> Result<TimeToLive, DynamoError> {
        let output: DescribeTimeToLiveOutput = self
            .call_by(
                "DescribeTimeToLive",
                &TableNameRequest { table_name: table },
                deadline,
            )
            .await?;
        let ttl = output.time_to_live_description;
        Ok(TimeToLive {
            status: ttl.time_to_live_status,
            attribute: ttl.attribute_name,
        })
    }
}

/// Whether `error` says the table does not exist (or is not visible yet).
pub(super) fn is_not_found(error: &DynamoError) -> bool {
    error.code() == Some("ResourceNotFoundException")
}
