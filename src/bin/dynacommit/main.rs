//! `dynacommit`: run and inspect the commit protocol from the command line.

mod backends;
mod bench;
mod lease;
mod lock;
mod race;
mod report;
mod signals;
mod table;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Safe conditional writes on any object store, coordinated through DynamoDB leases.
///
/// With no configuration every command runs on the embedded default: an in-process lease
/// table and a local store. Point it at real services with --store and the usual AWS
/// variables (AWS_ENDPOINT_URL_DYNAMODB, AWS_ENDPOINT_URL_S3, AWS_REGION, AWS_ACCESS_KEY_ID,
/// AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN). Without keys, credentials come from AWS's
/// standard chain: a web identity token file, ECS or container credentials, or the
/// instance metadata service (AWS_EC2_METADATA_DISABLED=true turns that off).
#[derive(Debug, Parser)]
#[command(name = "dynacommit", version, about, long_about)]
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
    /// Race writers appending to a Delta-style log and check every version was won once.
    Race(race::RaceArgs),
    /// Time the commit layer against the bare store it wraps.
    Bench(bench::BenchArgs),
    /// Create or describe the lease table in DynamoDB.
    #[command(subcommand)]
    Table(table::TableCommand),
    /// List, show or break lease records.
    #[command(subcommand)]
    Lease(lease::LeaseCommand),
    /// Hold a leader lock, or see who holds one.
    #[command(subcommand)]
    Lock(lock::LockCommand),
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
            ExitCode::from(2)
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
    };
    match outcome {
        Ok(code) => code,
        Err(error) => {
            eprintln!("dynacommit: error: {error}");
            ExitCode::from(2)
        }
    }
}

/// Runs `work` until the first interrupt, then drops it: for commands that hold no lease
/// across an interrupt (dropping cancels their requests and removes scratch directories;
/// `race` and `lock hold` stop in their own way, releasing what they hold).
async fn dropped_on_interrupt(
    work: impl Future<Output = Result<ExitCode, String>>,
    interrupt: &signals::Interrupt,
) -> Result<ExitCode, String> {
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
