//! `dynacommit lease`: inspect lease records, and break one whose holder is dead.

use std::process::ExitCode;

use clap::Subcommand;
use dynacommit::lease::LeaseRecord;

use crate::backends::BackendArgs;
use crate::fail::Fail;

#[derive(Debug, Subcommand)]
pub enum LeaseCommand {
    /// List lease records whose path starts with PREFIX (all of them without one).
    #[command(
        after_help = "Example:\n  dynacommit lease list tbl/_delta_log/ --table lake_leases --json"
    )]
    List {
        /// Path prefix.
        prefix: Option<String>,
    },
    /// Show every lease record of one path.
    #[command(
        after_help = "Example:\n  dynacommit lease show tbl/_delta_log/00000000000000000042.json"
    )]
    Show {
        /// The object path.
        path: String,
    },
    /// Mark the lease records of a path released (at the next generation, never deleted),
    /// so the next writer need not wait for them to expire. Dangerous: see what it prints.
    #[command(
        after_help = "Example (explains and refuses; add --force once no writer is alive):\n  dynacommit lease break tbl/_delta_log/00000000000000000042.json"
    )]
    Break {
        /// The object path.
        path: String,
        /// Only the record expecting this ETag (`*` for a create).
        #[arg(long)]
        etag: Option<String>,
        /// Really break them.
        #[arg(long)]
        force: bool,
    },
}

fn state(r: &LeaseRecord) -> &'static str {
    if r.released {
        "released"
    } else {
        "held or expired"
    }
}

fn holder(r: &LeaseRecord) -> String {
    r.owner
        .clone()
        .unwrap_or_else(|| "(object_store 0.12 writer)".into())
}

fn json(r: &LeaseRecord) -> serde_json::Value {
    serde_json::json!({
        "path": r.path, "etag": r.etag, "generation": r.generation,
        "timeout_ms": r.timeout.as_millis() as u64, "ttl": r.ttl,
        "owner": r.owner, "value": r.value, "released": r.released,
    })
}

fn print_records(records: &[LeaseRecord]) {
    let rows: Vec<[String; 6]> = records
        .iter()
        .map(|r| {
            [
                r.path.clone(),
                r.etag.clone(),
                r.generation.to_string(),
                format!("{} ms", r.timeout.as_millis()),
                state(r).to_owned(),
                holder(r),
            ]
        })
        .collect();
    let header = ["PATH", "ETAG", "GEN", "TIMEOUT", "STATE", "OWNER"].map(str::to_owned);
    let mut widths = header.clone().map(|h| h.len());
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.len());
        }
    }
    for row in std::iter::once(&header).chain(&rows) {
        let line: Vec<String> = row
            .iter()
            .zip(widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        println!("{}", line.join("  ").trim_end());
    }
}

pub async fn run(
    backends: &BackendArgs,
    command: LeaseCommand,
    as_json: bool,
) -> Result<ExitCode, Fail> {
    let table = backends.require_dynamo_table(&backends.lease_table_name()?)?;
    let records = match &command {
        LeaseCommand::List { prefix } => table.list(prefix.as_deref().unwrap_or("")).await,
        LeaseCommand::Show { path } | LeaseCommand::Break { path, .. } => {
            table.records_at(path).await
        }
    }
    .map_err(|e| e.to_string())?;
    let records: Vec<LeaseRecord> = match &command {
        LeaseCommand::Break {
            etag: Some(etag), ..
        } => records.into_iter().filter(|r| &r.etag == etag).collect(),
        _ => records,
    };
    let LeaseCommand::Break { path, force, .. } = command else {
        if as_json {
            println!(
                "{}",
                serde_json::Value::Array(records.iter().map(json).collect())
            );
        } else if records.is_empty() {
            println!("no lease records");
        } else {
            print_records(&records);
        }
        return Ok(ExitCode::SUCCESS);
    };
    if records.is_empty() {
        println!("no lease records for {path}: nothing to break");
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "lease break would mark these records of {} released (at the next generation):",
        table.table_name()
    );
    print_records(&records);
    println!(
        "\nThis is safe only if no writer of {path} is alive. A live holder keeps writing, unaware \
         that it lost its lease, and the next writer may then commit over it: two winners, a lost \
         commit. A dead holder's lease expires by itself after timeout x skew (60 s by default)."
    );
    if !force {
        eprintln!("dynacommit: refusing without --force");
        return Ok(ExitCode::from(2));
    }
    let mut broken = 0;
    for record in &records {
        if table.break_lease(record).await.map_err(|e| e.to_string())? {
            broken += 1;
            println!(
                "released {}#{} at generation {}",
                record.path,
                record.etag,
                record.generation.saturating_add(1)
            );
        } else {
            println!(
                "kept {}#{}: it changed since it was read (a holder is alive)",
                record.path, record.etag
            );
        }
    }
    println!("{broken} of {} records released", records.len());
    Ok(ExitCode::SUCCESS)
}
