//! `dynacommit`: run and inspect the commit protocol from the command line.

mod backends;
mod bench;
mod fail;
mod gateway;
mod kv;
mod kv_file;
mod lease;
mod lock;
mod race;
mod report;
mod signals;
mod table;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Exit codes, at the end of every command's help.
const EXIT_CODES: &str = "Exit codes: 0 success; 1 failure (a service refused or was \
unreachable, a race found a broken log, a held lock was lost); 2 usage or configuration \
error (a bad flag, value or variable; a missing table outside loopback; lease break \
without --force); 130 interrupted (Ctrl-C or SIGTERM; a second one exits at once).";

/// Safe conditional writes on any object store, coordinated through DynamoDB leases.
///
/// With no configuration every command runs on the embedded default: an in-process lease
/// table and a local store. Point it at real services with --store and the usual AWS
/// variables (AWS_ENDPOINT_URL_DYNAMODB, AWS_ENDPOINT_URL_S3, AWS_REGION, AWS_ACCESS_KEY_ID,
/// AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN); `eval "$(scripts/services.sh env)"` sets them
/// for the local test services. DynamoDB holds the leases only when asked for: an endpoint,
/// --table (or DYNACOMMIT_LEASE_TABLE) or --dynamodb; AWS_REGION alone is not enough. Tables
/// are created unasked only on loopback endpoints. Without keys, credentials come from AWS's
/// standard chain: a web identity token file, ECS or container credentials, or the
/// instance metadata service (AWS_EC2_METADATA_DISABLED=true turns that off).
#[derive(Debug, Parser)]
#[command(
    name = "dynacommit",
    version,
    about,
    long_about,
    after_help = EXIT_CODES,
    after_long_help = concat!(
        "Examples:\n",
        "  dynacommit race                                    # the embedded default\n",
        "  eval \"$(scripts/services.sh env)\"                  # DynamoDB Local and s3rver\n",
        "  dynacommit race --store s3://testbucket/lake       # leases in DynamoDB\n",
        "  dynacommit lock hold cluster/leader 10.0.0.7:8200\n\n",
        "Exit codes: 0 success; 1 failure (a service refused or was unreachable, a race found \
         a broken log, a held lock was lost); 2 usage or configuration error (a bad flag, \
         value or variable; a missing table outside loopback; lease break without --force); \
         130 interrupted (Ctrl-C or SIGTERM; a second one exits at once).",
    )
)]
struct Cli {
    #[command(flatten)]
    backends: backends::BackendArgs,
    /// Print machine-readable JSON instead of a table.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Race writers appending to a Delta-style log and check every version was won once
    /// (--mode pointer: swapping an Iceberg-style pointer, and check no swap was lost).
    #[command(after_help = concat!(
        "Examples:\n",
        "  dynacommit race --writers 16 --commits 20\n",
        "  dynacommit race --store s3://testbucket/lake --table lake_leases --json\n",
        "  dynacommit race --mode pointer --writers 8 --commits 20   # 8 writers x 20 swaps\n",
        "  dynacommit race --mode pointer --unprotected              # without leases: fails\n\n",
        "Exit codes: 0 every version won once (every swap kept); 1 the log or the pointer's \
         chain is broken, or a service failed; 2 usage or configuration error; 130 \
         interrupted (the log or chain is checked as far as it got)."
    ))]
    Race(race::RaceArgs),
    /// Time the commit layer against the bare store it wraps.
    #[command(after_help = concat!(
        "Example:\n  dynacommit bench --ops 200 --json\n\n",
        "Exit codes: 0 done; 1 a scenario or service failed; 2 usage or configuration error; \
         130 interrupted."
    ))]
    Bench(bench::BenchArgs),
    /// Create or describe the lease table in DynamoDB.
    #[command(subcommand, after_help = concat!(
        "Example:\n  dynacommit table create --table lake_leases\n\n",
        "Exit codes: 0 done; 1 DynamoDB failed; 2 usage or configuration error; 130 interrupted."
    ))]
    Table(table::TableCommand),
    /// List, show or break lease records.
    #[command(subcommand, after_help = concat!(
        "Example:\n  dynacommit lease list tbl/_delta_log/ --table lake_leases\n\n",
        "Exit codes: 0 done; 1 DynamoDB failed; 2 usage or configuration error (and break \
         without --force); 130 interrupted."
    ))]
    Lease(lease::LeaseCommand),
    /// Hold a leader lock, or see who holds one.
    #[command(subcommand, after_help = concat!(
        "Example:\n  dynacommit lock hold cluster/leader 10.0.0.7:8200\n\n",
        "Exit codes: 0 released on Ctrl-C or SIGTERM (or shown); 1 the lock was lost, or \
         DynamoDB failed; 2 usage or configuration error; 130 interrupted before acquiring."
    ))]
    Lock(lock::LockCommand),
    /// Get, put, delete, list and watch keys in the key-value store.
    ///
    /// The keys are in DynamoDB, or in a local file on the embedded default.
    /// DynamoDB holds the keys when asked for, as for the leases (an endpoint, --dynamodb),
    /// or when --kv-table or DYNACOMMIT_KV_TABLE names the table (default dynacommit-kv);
    /// the table is created unasked only on loopback endpoints. Otherwise the keys are in
    /// the file .dynacommit/kv.json (--kv-file, DYNACOMMIT_KV_FILE), locked while each
    /// command runs so that commands run at the same time take turns. Keys and values are
    /// shown as text when they are UTF-8, else escaped; with --json, as key and value, or
    /// key_base64 and value_base64.
    #[command(after_help = concat!(
        "Examples:\n",
        "  dynacommit kv put config/limits 20\n",
        "  dynacommit kv get config/limits --json\n",
        "  dynacommit kv list config/\n",
        "  eval \"$(scripts/services.sh env)\"; dynacommit kv watch config/   # DynamoDB Local\n\n",
        "Exit codes: 0 done; 1 the store refused (already exists, not found, revision \
         mismatch) or failed; 2 usage or configuration error (a bad key, value, flag or \
         file); 130 interrupted."
    ))]
    Kv(kv::KvArgs),
    /// Serve an S3 endpoint whose conditional writes go through the leases.
    ///
    /// Every S3 client (Python deltalake, polars, boto3, the AWS CLI) gets put-if-absent,
    /// compare-and-swap on an ETag and copy-if-not-exists on any store, with one changed
    /// endpoint URL. Clients sign with the gateway's own key pairs; the gateway signs
    /// upstream with the AWS_* credentials, which never reach a client. See docs/gateway.md.
    #[command(after_help = concat!(
        "Examples:\n",
        "  dynacommit gateway --upstream memory:// --anonymous          # a local test server\n",
        "  DYNACOMMIT_GATEWAY_ACCESS_KEY_ID=writer DYNACOMMIT_GATEWAY_SECRET_ACCESS_KEY=... \\\n",
        "    dynacommit gateway --upstream s3://lake --table lake_leases --listen 127.0.0.1:9000\n\n",
        "Exit codes: 0 stopped on Ctrl-C or SIGTERM, requests in flight finished; 1 cannot \
         listen, or a service failed at start; 2 usage or configuration error."
    ))]
    Gateway(gateway::GatewayArgs),
}

fn main() -> ExitCode {
    restore_default_sigpipe();
    let cli = Cli::parse();
    match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime.block_on(run(cli)),
        Err(error) => {
            eprintln!("dynacommit: error: cannot start the async runtime: {error}");
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> ExitCode {
    // Listen for Ctrl-C and SIGTERM before saying anything, so that whoever reads our first
    // line can rely on an interrupt being handled.
    let interrupt = match signals::install() {
        Ok(interrupt) => interrupt,
        Err(error) => {
            eprintln!("dynacommit: error: {error}");
            return ExitCode::FAILURE;
        }
    };
    let backends = &cli.backends;
    if let Err(refused) = refuse_inert_flags(&cli.command, std::env::args()) {
        return refused.report();
    }
    let outcome = match cli.command {
        Command::Race(args) => race::run(backends, args, cli.json, interrupt.clone()).await,
        Command::Bench(args) => {
            dropped_on_interrupt(bench::run(backends, args, cli.json), &interrupt).await
        }
        Command::Table(command) => {
            dropped_on_interrupt(table::run(backends, command, cli.json), &interrupt).await
        }
        Command::Lease(command) => {
            dropped_on_interrupt(lease::run(backends, command, cli.json), &interrupt).await
        }
        Command::Lock(command) => lock::run(backends, command, cli.json, interrupt.clone()).await,
        Command::Gateway(args) => gateway::run(backends, args, cli.json, interrupt.clone()).await,
        Command::Kv(args) if args.is_watch() => {
            kv::run(backends, args, cli.json, interrupt.clone()).await
        }
        Command::Kv(args) => {
            dropped_on_interrupt(
                kv::run(backends, args, cli.json, interrupt.clone()),
                &interrupt,
            )
            .await
        }
    };
    outcome.unwrap_or_else(fail::Fail::report)
}

/// Refuses a global flag given on the command line to a command that has no use for it,
/// instead of ignoring it silently (clap shows global flags under every command).
fn refuse_inert_flags(
    command: &Command,
    args: impl Iterator<Item = String>,
) -> Result<(), fail::Fail> {
    let given: Vec<String> = args
        .map(|a| a.split('=').next().unwrap_or_default().to_owned())
        .collect();
    let has = |flag: &str| given.iter().any(|a| a == flag);
    let (name, inert): (&str, &[(&str, &str)]) = match command {
        Command::Table(_) => ("table", &[("--store", "it works on the lease table only")]),
        Command::Lease(_) => ("lease", &[("--store", "it reads the lease table only")]),
        Command::Lock(_) => (
            "lock",
            &[
                ("--store", "locks keep no objects"),
                ("--table", "name the lock table with --lock-table"),
            ],
        ),
        Command::Kv(_) => (
            "kv",
            &[
                ("--store", "keys are not objects"),
                ("--table", "name the key-value table with --kv-table"),
                ("--poll-ms", "it waits for no lease"),
            ],
        ),
        Command::Race(args) if args.mode() == race::Mode::Pointer => (
            "race --mode pointer",
            &[(
                "--log",
                "the pointer race writes a POINTER and its metadata/ in a fresh location",
            )],
        ),
        Command::Gateway(_) => (
            "gateway",
            &[(
                "--store",
                "name the store behind the gateway with --upstream",
            )],
        ),
        Command::Race(_) | Command::Bench(_) => return Ok(()),
    };
    match inert.iter().find(|(flag, _)| has(flag)) {
        Some((flag, why)) => Err(fail::Fail::Usage(format!(
            "{flag} has no effect on `dynacommit {name}`: {why}"
        ))),
        None => Ok(()),
    }
}

/// Runs `work` until the first interrupt, then drops it: for commands that hold no lease
/// across an interrupt (dropping cancels their requests and removes scratch directories;
/// `race` and `lock hold` stop in their own way, releasing what they hold).
async fn dropped_on_interrupt(
    work: impl Future<Output = Result<ExitCode, fail::Fail>>,
    interrupt: &signals::Interrupt,
) -> Result<ExitCode, fail::Fail> {
    tokio::select! {
        outcome = work => outcome,
        () = interrupt.wait() => {
            eprintln!("dynacommit: interrupted");
            Ok(ExitCode::from(signals::INTERRUPTED))
        }
    }
}

/// Rust ignores SIGPIPE, so `dynacommit lease list | head` would panic on the closed pipe;
/// a command-line tool should end quietly instead, as the default disposition does.
fn restore_default_sigpipe() {
    #[cfg(unix)]
    // SAFETY: called first thing in main, before the runtime starts any thread; it only
    // sets the process's disposition for SIGPIPE back to the default.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}
