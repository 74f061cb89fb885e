//! `dynacommit table`: provisioning the lease table.

use std::process::ExitCode;

use clap::Subcommand;

use crate::backends::BackendArgs;
use crate::fail::Fail;
use crate::report::print_table;

#[derive(Debug, Subcommand)]
pub enum TableCommand {
    /// Create the lease table if missing (on-demand, TTL on `ttl`); check it if present.
    #[command(after_help = "Example:\n  dynacommit table create --table lake_leases")]
    Create,
    /// Show the lease table's schema, status and TTL.
    #[command(after_help = "Example:\n  dynacommit table describe --table lake_leases --json")]
    Describe,
}

pub async fn run(
    backends: &BackendArgs,
    command: TableCommand,
    json: bool,
) -> Result<ExitCode, Fail> {
    let table = backends.require_dynamo_table(&backends.lease_table_name()?)?;
    let client = table.client();
    let (action, description) = match command {
        TableCommand::Create => {
            let report = table.ensure_table().await.map_err(|e| e.to_string())?;
            let action = match (report.created, report.ttl_enabled) {
                (true, _) => "created the table and enabled TTL on ttl",
                (false, true) => "the table existed; enabled TTL on ttl",
                (false, false) => {
                    "the table already exists with the right schema and TTL: nothing to do"
                }
            };
            (Some(action), report.table)
        }
        TableCommand::Describe => (
            None,
            client
                .describe_table(table.table_name())
                .await
                .map_err(|e| {
                    if e.code() == Some("ResourceNotFoundException") {
                        format!(
                            "table {} does not exist at {}: create it with `dynacommit table \
                             create --table {}`",
                            table.table_name(),
                            client.endpoint(),
                            table.table_name()
                        )
                    } else {
                        e.to_string()
                    }
                })?,
        ),
    };
    let ttl = client
        .describe_time_to_live(table.table_name())
        .await
        .map_err(|e| e.to_string())?;
    if json {
        println!(
            "{}",
            serde_json::json!({
                "table": description.name,
                "status": description.status,
                "key_schema": description.key_schema.to_string(),
                "billing_mode": description.billing_mode,
                "item_count": description.item_count,
                "ttl_status": ttl.status,
                "ttl_attribute": ttl.attribute,
                "action": action,
            })
        );
    } else {
        if let Some(action) = action {
            println!("{action}");
        }
        print_table(&[
            ("table", description.name),
            ("endpoint", client.endpoint().to_owned()),
            ("status", description.status),
            ("key schema", description.key_schema.to_string()),
            (
                "billing",
                description
                    .billing_mode
                    .unwrap_or_else(|| "(not reported)".into()),
            ),
            (
                "items (approx.)",
                description
                    .item_count
                    .map_or("(not reported)".into(), |n| n.to_string()),
            ),
            (
                "ttl",
                format!(
                    "{} on {}",
                    ttl.status,
                    ttl.attribute.unwrap_or_else(|| "(none)".into())
                ),
            ),
        ]);
    }
    Ok(ExitCode::SUCCESS)
}
