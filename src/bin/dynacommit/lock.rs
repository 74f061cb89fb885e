//! `dynacommit lock`: hold a leader lock, or see who holds one.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, Subcommand};
use dynacommit::lease::{LeaseConfig, LeaseTable, MemoryLeaseTable};
use dynacommit::lock::{DEFAULT_LOCK_TABLE, LockClient, default_lock_config};

use crate::backends::BackendArgs;
use crate::fail::Fail;
use crate::report::print_table;
use crate::signals::{INTERRUPTED, Interrupt};

#[derive(Debug, Subcommand)]
pub enum LockCommand {
    /// Take the lock and hold it until Ctrl-C or SIGTERM (releasing it) or until it is lost.
    #[command(
        after_help = "Example:\n  dynacommit lock hold cluster/leader 10.0.0.7:8200 --lock-table locks --lease-ms 10000"
    )]
    Hold(HoldArgs),
    /// Show whether the lock is held, and the holder's value.
    #[command(
        after_help = "Example:\n  dynacommit lock show cluster/leader --lock-table locks --json"
    )]
    Show {
        /// The lock's key.
        key: String,
        #[command(flatten)]
        table: LockTableArgs,
    },
}

#[derive(Debug, Args)]
pub struct LockTableArgs {
    /// The lock table in DynamoDB (default dynacommit_locks). Naming it asks for DynamoDB.
    #[arg(long)]
    lock_table: Option<String>,
}

#[derive(Debug, Args)]
pub struct HoldArgs {
    /// The lock's key.
    key: String,
    /// The value to advertise (this holder's address, say).
    value: String,
    #[command(flatten)]
    table: LockTableArgs,
    /// Lease length in milliseconds.
    #[arg(long, default_value_t = 15_000)]
    lease_ms: u64,
    /// Renew period in milliseconds (at most half the lease; default a third).
    #[arg(long)]
    renew_ms: Option<u64>,
}

impl LockTableArgs {
    /// The lock table: the flag's, else the default.
    fn name(&self) -> String {
        self.lock_table
            .clone()
            .unwrap_or_else(|| DEFAULT_LOCK_TABLE.to_owned())
    }
}

async fn client(
    backends: &BackendArgs,
    table: &LockTableArgs,
    lease_ms: u64,
    renew_ms: Option<u64>,
) -> Result<LockClient, Fail> {
    let mut config = default_lock_config().with_timeout(Duration::from_millis(lease_ms));
    config.table = table.name();
    config.renew_interval = Some(Duration::from_millis(renew_ms.unwrap_or(lease_ms / 3)));
    if let Some(poll) = backends.poll_ms {
        config.poll_interval = Duration::from_millis(poll);
    }
    let leases: Arc<dyn LeaseTable> = match backends
        .lock_table(&config.table, table.lock_table.is_some())?
    {
        Some(locks) => {
            backends.prepare_table(&locks).await?;
            Arc::new(locks)
        }
        None => {
            eprintln!("embedded default: the in-process lock table (only this process can see it)");
            Arc::new(MemoryLeaseTable::new())
        }
    };
    LockClient::new(leases, config).map_err(|e| Fail::Usage(e.to_string()))
}

pub async fn run(
    backends: &BackendArgs,
    command: LockCommand,
    json: bool,
    interrupt: Interrupt,
) -> Result<ExitCode, Fail> {
    match command {
        LockCommand::Show { key, table } => {
            // An in-process table would only ever show an empty lock: refuse, as `lease`
            // does, when no DynamoDB is configured.
            let name = table.name();
            let dynamo = backends.require_dynamo_table(&name)?;
            let config = LeaseConfig {
                table: name,
                ..default_lock_config()
            };
            let locks = LockClient::new(Arc::new(dynamo), config)
                .map_err(|e| Fail::Usage(e.to_string()))?;
            let state = tokio::select! {
                state = locks.value(&key) => state.map_err(|e| e.to_string())?,
                () = interrupt.wait() => return Ok(ExitCode::from(INTERRUPTED)),
            };
            if json {
                println!(
                    "{}",
                    serde_json::json!({"key": key, "held": state.held, "value": state.value, "generation": state.generation})
                );
            } else {
                print_table(&[
                    ("key", key),
                    ("held", state.held.to_string()),
                    ("value", state.value.unwrap_or_else(|| "(none)".into())),
                    (
                        "generation",
                        state.generation.map_or("(none)".into(), |g| g.to_string()),
                    ),
                ]);
            }
            Ok(ExitCode::SUCCESS)
        }
        LockCommand::Hold(args) => {
            let locks = client(backends, &args.table, args.lease_ms, args.renew_ms).await?;
            eprintln!("waiting for the lock on {} (Ctrl-C to give up)", args.key);
            let interrupted = interrupt.wait();
            let Some(mut guard) = locks
                .acquire_until(&args.key, &args.value, interrupted)
                .await
                .map_err(|e| e.to_string())?
            else {
                say(
                    json,
                    serde_json::json!({"event": "interrupted", "key": args.key}),
                    || format!("interrupted before acquiring {}", args.key),
                );
                return Ok(ExitCode::from(INTERRUPTED));
            };
            say(
                json,
                serde_json::json!({"event": "acquired", "key": args.key,
                    "fencing_token": guard.fencing_token(), "value": args.value}),
                || {
                    format!(
                        "acquired {} with fencing token {} (value {})",
                        args.key,
                        guard.fencing_token(),
                        args.value
                    )
                },
            );
            tokio::select! {
                reason = guard.lost() => {
                    say(json, serde_json::json!({"event": "lost", "key": args.key, "reason": reason}), || {
                        format!("lost the lock on {}: {reason}", args.key)
                    });
                    Ok(ExitCode::FAILURE)
                }
                () = interrupt.wait() => {
                    guard.release().await.map_err(|e| e.to_string())?;
                    say(json, serde_json::json!({"event": "released", "key": args.key}), || {
                        format!("released {}", args.key)
                    });
                    Ok(ExitCode::SUCCESS)
                }
            }
        }
    }
}

/// Prints one event: a JSON line with `--json`, else a sentence.
fn say(json: bool, value: serde_json::Value, sentence: impl FnOnce() -> String) {
    if json {
        println!("{value}");
    } else {
        println!("{}", sentence());
    }
}
