//! `ensure_table`: a table made to exist as its spec says, safely from many processes at
//! once, within one deadline.

use super::client::{Deadline, DynamoClient};
use super::error::DynamoError;
use super::stream_view::StreamViewType;
use super::table::{EnsureReport, TableDescription, TableSpec, is_not_found};

impl DynamoClient {
    /// Makes the table exist as `spec` says: creates it if missing (on-demand), waits until
    /// ACTIVE, enables a stream if asked and none is, turns TTL on if asked and off. Leaves
    /// a table that is already right alone, and refuses one whose key schema, stream view
    /// type or TTL attribute differs (checked before anything is changed). Safe to call from
    /// many processes at once.
    ///
    /// The whole call ends within `spec.active_timeout` (else
    /// [`DynamoError::DeadlineExceeded`] naming `ensure_table`, or
    /// [`DynamoError::TableNotReady`]). A table DescribeTable does not find just after
    /// CreateTable (AWS's reads are eventually consistent) is waited for within that bound.
    ///
    /// [`EnsureReport::created`] is set when this call created the table, including when
    /// CreateTable's first attempt got no definite answer (a 5xx, a lost connection) and
    /// its retry was told `ResourceInUseException`: that table is taken to be the first
    /// attempt's. (Another process creating the same table in that same moment would be
    /// reported as ours too; nothing on the wire tells the two apart.)
    ///
    /// ```no_run
    /// # async fn run(client: dynacommit::dynamo::DynamoClient) -> Result<(), dynacommit::dynamo::DynamoError> {
    /// use dynacommit::dynamo::{KeyAttribute, KeyType, TableSpec};
    ///
    /// let spec = TableSpec::new("leases", KeyAttribute::new("path", KeyType::S));
    /// let report = client.ensure_table(&spec).await?;
    /// if report.created {
    ///     println!("created {}", report.table.name);
    /// }
    /// # Ok(()) }
    /// ```
    #[cfg_attr(feature = "harness", visibility::make(pub))]
    pub(crate) async fn ensure_table(&self, spec: &TableSpec) -> Result<EnsureReport, DynamoError> {
        let deadline = Deadline::new("ensure_table", spec.active_timeout);
        let mut created = false;
        let found = match self.describe_table_by(&spec.name, &deadline).await {
            Ok(found) => Some(found),
            Err(e) if is_not_found(&e) => match self.create_table_by(spec, &deadline).await {
                Ok(description) => {
                    created = true;
                    tracing::info!(table = %spec.name, "created table");
                    Some(description)
                }
                // The table is there already. After an attempt of ours that got no definite
                // answer, that is most likely our own first attempt's doing (its answer was
                // lost): we report it as created by us. Otherwise another process created
                // it between our two calls. Either way, wait for it below: just after
                // CreateTable, DescribeTable may not find it yet.
                Err(e) if e.code() == Some("ResourceInUseException") => {
                    if e.is_ambiguous() {
                        created = true;
                        tracing::info!(table = %spec.name, "created table (its answer was lost)");
                    }
                    None
                }
                Err(e) => return Err(e),
            },
            Err(e) => return Err(e),
        };
        if let Some(found) = &found {
            self.check_schema(spec, found)?;
        }
        let mut table = match found {
            Some(found) if found.status == "ACTIVE" => found,
            _ => {
                let table = self.wait_active_by(&spec.name, &deadline).await?;
                self.check_schema(spec, &table)?;
                table
            }
        };
        // Before TTL, so that a table with the wrong stream is refused unchanged.
        let mut stream_enabled = false;
        if let Some(view) = spec.stream_view_type {
            if let Some(found) = table.stream_view_type {
                check_stream(spec, view, found)?;
            } else {
                match self.enable_stream_by(&spec.name, view, &deadline).await {
                    Ok(_) => {
                        stream_enabled = true;
                        tracing::info!(table = %spec.name, %view, "enabled stream");
                    }
                    // A concurrent caller may have enabled one first: DynamoDB then
                    // refuses ours. Accept theirs if it has the view type we want.
                    Err(e) if e.code() == Some("ValidationException") => {
                        let now = self.describe_table_by(&spec.name, &deadline).await?;
                        match now.stream_view_type {
                            Some(found) => check_stream(spec, view, found)?,
                            None => return Err(e),
                        }
                    }
                    Err(e) => return Err(e),
                }
                // Enabling a stream may put the table in UPDATING for a moment; what is
                // reported is the table once it is usable again, with its new stream ARN.
                table = self.wait_active_by(&spec.name, &deadline).await?;
            }
        }
        let mut ttl_enabled = false;
        if let Some(attribute) = &spec.ttl_attribute {
            let ttl = self.describe_time_to_live_by(&spec.name, &deadline).await?;
            if ttl.is_on() {
                if ttl.attribute.as_deref() != Some(attribute.as_str()) {
                    return Err(DynamoError::TtlMismatch {
                        table: spec.name.clone(),
                        expected: attribute.clone(),
                        found: ttl.attribute.unwrap_or_default(),
                    });
                }
            } else {
                match self
                    .update_time_to_live_by(&spec.name, attribute, true, &deadline)
                    .await
                {
                    Ok(()) => {
                        ttl_enabled = true;
                        tracing::info!(table = %spec.name, %attribute, "enabled TTL");
                    }
                    // A concurrent caller may have turned it on first: DynamoDB then
                    // refuses ours. Accept theirs if it is the attribute we want.
                    Err(e) if e.code() == Some("ValidationException") => {
                        let now = self.describe_time_to_live_by(&spec.name, &deadline).await?;
                        if !(now.is_on() && now.attribute.as_deref() == Some(attribute.as_str())) {
                            return Err(e);
                        }
                    }
                    Err(e) => return Err(e),
                }
            }
        }
        Ok(EnsureReport {
            created,
            ttl_enabled,
            stream_enabled,
            table,
        })
    }

    /// Refuses a table whose key schema is not the one `spec` asks for.
    fn check_schema(&self, spec: &TableSpec, found: &TableDescription) -> Result<(), DynamoError> {
        if found.key_schema == spec.key_schema {
            return Ok(());
        }
        Err(DynamoError::TableSchemaMismatch {
            table: spec.name.clone(),
            expected: spec.key_schema.to_string(),
            found: found.key_schema.to_string(),
        })
    }
}

/// Refuses a stream of view type `found` when `spec` asks for `wanted`.
fn check_stream(
    spec: &TableSpec,
    wanted: StreamViewType,
    found: StreamViewType,
) -> Result<(), DynamoError> {
    if wanted == found {
        return Ok(());
    }
    Err(DynamoError::StreamViewTypeMismatch {
        table: spec.name.clone(),
        expected: wanted,
        found,
    })
}
