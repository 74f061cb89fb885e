//! `dynacommit lease`: inspect lease records, and break one whose holder is dead.

use std::process::ExitCode;

use clap::Subcommand;
use dynacommit::lease::LeaseRecord;

use crate::backends::BackendArgs;
use crate::fail::Fail;
use crate::report::print_columns;

#[derive(Debug, Subcommand)]
pub enum LeaseCommand {
    /// List lease records whose path starts with PREFIX (all of them without one).
    #[command(
        after_help = "Example:\n  dynacommit lease list tbl/_delta_log/ --table lake_leases --json"
    )]
    List {
        /// Path prefix.
        prefix: Option<String>,
        /// Show at most this many records (the table is read only as far as that needs).
        /// Records expire by themselves: DynamoDB's TTL deletes each about an hour after its
        /// last write (its `ttl`), lock records excepted.
        #[arg(long, default_value_t = 1000)]
        limit: usize,
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

/// The wall clock, in milliseconds since the epoch.
fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// A duration in words a person reads at a glance.
fn age(ms: i64) -> String {
    let secs = ms.max(0) / 1000;
    match secs {
        0..=119 => format!("{secs} s"),
        120..=7199 => format!("{} min", secs / 60),
        _ => format!("{} h", secs / 3600),
    }
}

/// What a record says about its holder, by the age of its last write against its own
/// timeout (by this machine's wall clock, so only as good as the clocks agree).
fn state(r: &LeaseRecord, now_ms: i64) -> String {
    let Some(holder) = &r.holder else {
        return if r.released {
            "released".to_owned()
        } else {
            "held or expired (no timestamps: an object_store 0.12 writer)".to_owned()
        };
    };
    let since_write = now_ms - holder.written_ms;
    let timeout = r.timeout.as_millis() as i64;
    if r.released {
        format!("released {} ago", age(since_write))
    } else if since_write <= timeout {
        format!("held, renewed {} ago", age(since_write))
    } else if r.etag == dynacommit::lease::CREATE_ETAG {
        // Creates keep their lease once done, until their object is deleted.
        format!(
            "expired: last written {} ago (lease {}): a finished create, or its holder is \
             gone or cut off",
            age(since_write),
            age(timeout)
        )
    } else {
        format!(
            "expired: last written {} ago (lease {}): its holder is gone or cut off",
            age(since_write),
            age(timeout)
        )
    }
}

fn holder(r: &LeaseRecord, now_ms: i64) -> String {
    match (&r.holder, &r.owner) {
        (Some(h), _) => format!("{} since {} ago", h.process, age(now_ms - h.since_ms)),
        (None, Some(owner)) => owner.clone(),
        (None, None) => "(object_store 0.12 writer)".into(),
    }
}

fn json(r: &LeaseRecord, now_ms: i64) -> serde_json::Value {
    serde_json::json!({
        "path": r.path, "etag": r.etag, "generation": r.generation,
        "timeout_ms": r.timeout.as_millis() as u64, "ttl": r.ttl,
        "owner": r.owner, "value": r.value, "released": r.released,
        "state": state(r, now_ms),
        "holder": r.holder.as_ref().map(|h| serde_json::json!({
            "process": h.process, "since_ms": h.since_ms, "written_ms": h.written_ms,
        })),
    })
}

fn print_records(records: &[LeaseRecord]) {
    let now = now_ms();
    let rows: Vec<[String; 6]> = records
        .iter()
        .map(|r| {
            [
                r.path.clone(),
                r.etag.clone(),
                r.generation.to_string(),
                format!("{} ms", r.timeout.as_millis()),
                state(r, now),
                holder(r, now),
            ]
        })
        .collect();
    print_columns(["PATH", "ETAG", "GEN", "TIMEOUT", "STATE", "HOLDER"], &rows);
}

pub async fn run(
    backends: &BackendArgs,
    command: LeaseCommand,
    as_json: bool,
) -> Result<ExitCode, Fail> {
    let table = backends.require_dynamo_table(&backends.lease_table_name()?)?;
    let mut more = false;
    let records = match &command {
        LeaseCommand::List { prefix, limit } => table
            .list_at_most(prefix.as_deref().unwrap_or(""), *limit)
            .await
            .map(|(records, beyond)| {
                more = beyond;
                records
            }),
        LeaseCommand::Show { path } | LeaseCommand::Break { path, .. } => {
            table.records_at(path).await
        }
    }
    .map_err(|e| e.to_string())?;
    let records: Vec<LeaseRecord> = match &command {
        LeaseCommand::Break {
            etag: Some(etag), ..
        } => {
            // Lease keys name an ETag quoted; one typed bare or weak names it too.
            let bare = |e: &str| e.trim_start_matches("W/").trim_matches('"').to_owned();
            records
                .into_iter()
                .filter(|r| r.etag == *etag || bare(&r.etag) == bare(etag))
                .collect()
        }
        _ => records,
    };
    let LeaseCommand::Break { path, force, .. } = command else {
        let now = now_ms();
        if as_json {
            println!(
                "{}",
                serde_json::Value::Array(records.iter().map(|r| json(r, now)).collect())
            );
        } else if records.is_empty() {
            println!("no lease records");
        } else {
            print_records(&records);
        }
        if more {
            eprintln!(
                "(more records not shown: narrow with a path prefix, or raise --limit; records \
                 expire by themselves about an hour after their last write)"
            );
        }
        return Ok(ExitCode::SUCCESS);
    };
    let (released, records): (Vec<LeaseRecord>, Vec<LeaseRecord>) =
        records.into_iter().partition(|r| r.released);
    for r in &released {
        println!(
            "{}#{} is released already: the next writer takes it at once",
            r.path, r.etag
        );
    }
    if records.is_empty() {
        println!("no held lease records for {path}: nothing to break");
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
