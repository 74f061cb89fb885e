//! `dynacommit gateway`: an S3 endpoint in front of a store, its conditional writes made
//! through the lease table.

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use dynacommit::gateway::{Gateway, KeyPair, Upstream};
use dynacommit::lease::LeaseManager;
use dynacommit::{CommitStore, Conditions};
use object_store::ClientConfigKey;
use object_store::aws::AmazonS3ConfigKey;

use crate::backends::{BackendArgs, env, local_store, private_leases_warning, s3_builder};
use crate::fail::Fail;
use crate::signals::Interrupt;

/// The variables that give one key pair for clients (beside --credentials-file).
const KEY_VAR: &str = "DYNACOMMIT_GATEWAY_ACCESS_KEY_ID";
const SECRET_VAR: &str = "DYNACOMMIT_GATEWAY_SECRET_ACCESS_KEY";

#[derive(Debug, Args)]
pub struct GatewayArgs {
    /// The address to listen on (port 0: any free port, printed when ready). A
    /// non-loopback address opens the gateway to the network: put TLS in front of it.
    #[arg(long, default_value = "127.0.0.1:9000")]
    listen: SocketAddr,
    /// The store behind the gateway: s3://BUCKET (at AWS_ENDPOINT_URL_S3 or
    /// AWS_ENDPOINT_URL if set, signed with the AWS_* credentials), file:///DIR, or
    /// memory:// (gone when the gateway stops).
    #[arg(long)]
    upstream: String,
    /// The bucket name clients address (default: the upstream bucket's; `lake` for
    /// file:// and memory://).
    #[arg(long)]
    bucket: Option<String>,
    /// How conditional requests are made: through leases (lease), or natively where a
    /// probe finds the store enforcing every condition (auto).
    #[arg(long, default_value = "lease", value_parser = parse_conditions)]
    conditions: Conditions,
    /// A file of key pairs clients sign with, one `ACCESS_KEY_ID SECRET` per line (# starts
    /// a comment). DYNACOMMIT_GATEWAY_ACCESS_KEY_ID and DYNACOMMIT_GATEWAY_SECRET_ACCESS_KEY
    /// give one more.
    #[arg(long)]
    credentials_file: Option<PathBuf>,
    /// Let unsigned requests in: they may read and write the whole bucket.
    #[arg(long)]
    anonymous: bool,
    /// Hold each path while any write or delete of it may still land (docs/protocol.md,
    /// "Held paths"): for paths that are deleted and written again (lock objects).
    #[arg(long)]
    hold_paths: bool,
    /// What all request bodies in flight may hold in memory together, in MiB (at least
    /// 32); a quarter of it is the largest single PutObject or part taken.
    #[arg(long, default_value_t = 1024)]
    max_body_memory_mib: u64,
    /// How long a shutdown (Ctrl-C, SIGTERM) waits for requests in flight, in seconds.
    #[arg(long, default_value_t = 30)]
    shutdown_grace_s: u64,
    /// Take virtual-host requests under this domain too (BUCKET.DOMAIN must resolve to
    /// the gateway); path-style requests keep working.
    #[arg(long)]
    virtual_host_domain: Option<String>,
    /// The region GetBucketLocation names.
    #[arg(long, default_value = "us-east-1")]
    region: String,
}

fn parse_conditions(text: &str) -> Result<Conditions, String> {
    match text.parse()? {
        Conditions::Native => Err(
            "native: the gateway exists to guard conditions; use lease, or auto (native where \
             the store is found to enforce them)"
                .into(),
        ),
        other => Ok(other),
    }
}

pub async fn run(
    backends: &BackendArgs,
    args: GatewayArgs,
    json: bool,
    interrupt: Interrupt,
) -> Result<ExitCode, Fail> {
    let mut keys = match &args.credentials_file {
        Some(path) => read_keys(path)?,
        None => Vec::new(),
    };
    match (env(KEY_VAR), env(SECRET_VAR)) {
        (Some(id), Some(secret)) => keys.push(KeyPair::new(id, secret)),
        (None, None) => {}
        _ => {
            return Err(Fail::Usage(format!(
                "set both {KEY_VAR} and {SECRET_VAR}, or neither"
            )));
        }
    }
    let leases = backends.leases().await?;
    if leases.embedded && args.upstream.starts_with("s3://") {
        eprintln!(
            "{}",
            private_leases_warning(&format!("--upstream {}", args.upstream))
        );
    }
    let manager = LeaseManager::new(leases.table.clone(), leases.config.clone())
        .map_err(|e| Fail::Usage(e.to_string()))?;
    let (upstream, bucket, upstream_text) = open_upstream(&args, manager)?;
    let (log, dropped, log_thread) = access_log_writer();
    let mut gateway = Gateway::builder(bucket.clone(), upstream)
        .with_region(args.region.clone())
        .with_max_body_memory(args.max_body_memory_mib.saturating_mul(1 << 20))
        .with_shutdown_grace(Duration::from_secs(args.shutdown_grace_s))
        .with_access_log(move |record| {
            use std::sync::mpsc::TrySendError;
            let line = if json {
                serde_json::json!({
                    "peer": record.peer.to_string(),
                    "method": record.method,
                    "path": record.path,
                    "condition": record.condition,
                    "status": record.status,
                    "ms": record.duration.as_secs_f64() * 1000.0,
                    "lease_wait_ms": record.lease_wait.map(|w| w.as_secs_f64() * 1000.0),
                })
                .to_string()
            } else {
                record.to_string()
            };
            // Written by a thread of its own: a slow or full stdout must not stop the
            // gateway (its lease renewals included). Lines it cannot keep up with are
            // counted, and the count written when it catches up.
            match log.try_send(line) {
                Ok(()) | Err(TrySendError::Disconnected(_)) => {}
                Err(TrySendError::Full(_)) => {
                    dropped.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
            }
        });
    for key in keys {
        gateway = gateway.with_key(key);
    }
    if args.anonymous {
        gateway = gateway.allow_anonymous();
    }
    if let Some(domain) = &args.virtual_host_domain {
        gateway = gateway.with_virtual_host_domain(domain.clone());
    }
    let gateway = gateway.build().map_err(|e| Fail::Usage(e.to_string()))?;
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .map_err(|e| Fail::Failure(format!("cannot listen on {}: {e}", args.listen)))?;
    let address = listener
        .local_addr()
        .map_err(|e| Fail::Failure(format!("cannot read the listening address: {e}")))?;
    if !address.ip().is_loopback() {
        eprintln!(
            "note: listening on {address}, beyond this machine; the gateway speaks plain HTTP: \
             put a TLS-terminating proxy in front of it"
        );
    }
    // The first line says where and on what: scripts wait for it.
    println!(
        "dynacommit gateway: listening on http://{address} bucket {bucket}; objects in \
         {upstream_text}; leases in {}; conditions {:?}",
        leases.text, args.conditions
    );
    let _ = std::io::stdout().flush();
    gateway
        .serve(listener, async move { interrupt.wait().await })
        .await
        .map_err(|e| Fail::Failure(format!("the gateway failed: {e}")))?;
    // The gateway, and with it the log's sender, is gone: the thread writes what is
    // queued and ends.
    let _ = log_thread.join();
    eprintln!("dynacommit gateway: stopped");
    Ok(ExitCode::SUCCESS)
}

/// How many access-log lines may wait for stdout.
const LOG_BACKLOG: usize = 4096;

/// A sender of access-log lines to a thread that writes them to stdout, and the count of
/// lines dropped because the backlog was full.
fn access_log_writer() -> (
    std::sync::mpsc::SyncSender<String>,
    Arc<std::sync::atomic::AtomicU64>,
    std::thread::JoinHandle<()>,
) {
    let (send, receive) = std::sync::mpsc::sync_channel::<String>(LOG_BACKLOG);
    let dropped = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let counted = dropped.clone();
    let thread = std::thread::spawn(move || {
        let stdout = std::io::stdout();
        for line in receive {
            let mut out = stdout.lock();
            let lost = counted.swap(0, std::sync::atomic::Ordering::Relaxed);
            if lost > 0 {
                let _ = writeln!(
                    out,
                    "({lost} access-log lines dropped: stdout was too slow)"
                );
            }
            // A closed stdout must not stop the gateway: the line is lost, not the request.
            let _ = writeln!(out, "{line}");
        }
    });
    (send, dropped, thread)
}

/// The upstream store, the bucket name clients use, and a description.
fn open_upstream(
    args: &GatewayArgs,
    leases: LeaseManager,
) -> Result<(Upstream, String, String), Fail> {
    let bad = |why: String| {
        Fail::Usage(format!(
            "--upstream {:?}: {why}; use s3://BUCKET, file:///DIR or memory://",
            args.upstream
        ))
    };
    let (scheme, rest) = args
        .upstream
        .split_once("://")
        .ok_or_else(|| bad("no scheme".into()))?;
    let named = |default: &str| args.bucket.clone().unwrap_or_else(|| default.to_owned());
    match scheme {
        "s3" => {
            let bucket = rest.trim_end_matches('/');
            if bucket.is_empty() || bucket.contains('/') {
                return Err(bad(
                    "name a bucket and nothing under it (the gateway serves whole buckets)".into(),
                ));
            }
            let (mut builder, endpoint) = s3_builder(bucket);
            // object_store bounds a whole request by 30 s by default, and a download to a
            // slow client takes longer: an hour for the whole request, and 5 minutes for
            // an answer to begin (a body of up to a quarter of the budget goes first).
            for (key, value) in [
                (ClientConfigKey::Timeout, "1h"),
                (ClientConfigKey::ReadTimeout, "300s"),
            ] {
                builder = builder.with_config(AmazonS3ConfigKey::Client(key), value);
            }
            let s3 = builder.build().map_err(|e| bad(e.to_string()))?;
            let store = configured(CommitStore::new(Arc::new(s3), leases), args);
            let text = format!(
                "s3://{bucket}{}",
                endpoint.map(|e| format!(" at {e}")).unwrap_or_default()
            );
            Ok((Upstream::s3(store), named(bucket), text))
        }
        "file" => {
            let (local, dir) = local_store(rest).map_err(bad)?;
            let local: Arc<dyn object_store::ObjectStore> = Arc::new(local);
            let store = configured(CommitStore::new(local, leases), args);
            Ok((
                Upstream::store(store),
                named("lake"),
                format!("a local store in {}", dir.display()),
            ))
        }
        "memory" => {
            let memory = object_store::memory::InMemory::new();
            let store = configured(CommitStore::new(Arc::new(memory), leases), args);
            Ok((
                Upstream::in_memory(store),
                named("lake"),
                "memory (gone when the gateway stops)".into(),
            ))
        }
        other => Err(bad(format!("unknown scheme {other:?}"))),
    }
}

/// `store` in the condition mode asked for, its paths held if asked.
fn configured<T: object_store::ObjectStore + ?Sized>(
    store: CommitStore<T>,
    args: &GatewayArgs,
) -> CommitStore<T> {
    let store = store.with_conditions(args.conditions);
    if args.hold_paths {
        store.hold_paths()
    } else {
        store
    }
}

/// Key pairs from `path`: `ACCESS_KEY_ID SECRET` per line. Errors name the line, never
/// its content.
fn read_keys(path: &PathBuf) -> Result<Vec<KeyPair>, Fail> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| Fail::Usage(format!("--credentials-file {}: {e}", path.display())))?;
    let mut keys = Vec::new();
    for (number, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let mut words = line.split_whitespace();
        match (words.next(), words.next(), words.next()) {
            (Some(id), Some(secret), None) => keys.push(KeyPair::new(id, secret)),
            _ => {
                return Err(Fail::Usage(format!(
                    "--credentials-file {} line {}: expected `ACCESS_KEY_ID SECRET`",
                    path.display(),
                    number + 1
                )));
            }
        }
    }
    if keys.is_empty() {
        return Err(Fail::Usage(format!(
            "--credentials-file {}: no key pair in it",
            path.display()
        )));
    }
    Ok(keys)
}
