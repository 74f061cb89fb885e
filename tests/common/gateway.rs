//! `dynacommit gateway` as a process of its own, in front of one of the S3 servers the
//! scripts start, its leases in a fresh DynamoDB Local table: what a user runs.

use std::io::{BufRead, BufReader};
use std::process::{Child, Stdio};
use std::time::Duration;

use object_store::aws::{AmazonS3, AmazonS3Builder, S3ConditionalPut, S3CopyIfNotExists};

use super::s3::S3Server;

/// The key pair clients sign with (the gateway's own, not the upstream's).
pub const ACCESS_KEY: &str = "gateway-client";
pub const SECRET: &str = "gateway-client-secret";

/// A running `dynacommit gateway`, killed when dropped.
pub struct Gateway {
    child: Child,
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    /// The bucket it serves.
    pub bucket: String,
    /// Its access log so far (stdout after the first line), read by a thread.
    log: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

/// How a gateway is started.
pub struct Settings {
    pub server: S3Server,
    pub bucket: String,
    /// The lease table (a fresh one unless two gateways share it).
    pub table: String,
    /// Lease timeout, in ms.
    pub lease_timeout_ms: u64,
    pub extra: Vec<String>,
}

impl Settings {
    /// A fresh bucket of `server` and a fresh lease table.
    pub async fn fresh(server: S3Server) -> Self {
        Self {
            server,
            bucket: server.fresh_bucket().await,
            table: super::unique_name("gateway"),
            lease_timeout_ms: 5_000,
            extra: Vec::new(),
        }
    }
}

impl Gateway {
    /// Starts a gateway and waits for its first line (it is listening then), failing
    /// loudly if it exits first.
    pub fn start(settings: &Settings) -> Self {
        let (key, secret) = settings.server.keys();
        let mut command = super::dynacommit_command();
        command
            .args(["gateway", "--listen", "127.0.0.1:0"])
            .arg("--upstream")
            .arg(format!("s3://{}", settings.bucket))
            .arg("--table")
            .arg(format!("{}:{}", settings.table, settings.lease_timeout_ms))
            .args(["--poll-ms", "20"])
            .args(&settings.extra)
            .env("AWS_ENDPOINT_URL_DYNAMODB", super::dynamodb_url())
            .env("AWS_ENDPOINT_URL_S3", settings.server.url())
            .env("AWS_ACCESS_KEY_ID", key)
            .env("AWS_SECRET_ACCESS_KEY", secret)
            .env("AWS_REGION", "us-east-1")
            .env("DYNACOMMIT_GATEWAY_ACCESS_KEY_ID", ACCESS_KEY)
            .env("DYNACOMMIT_GATEWAY_SECRET_ACCESS_KEY", SECRET)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        let mut child = command.spawn().expect("cannot start dynacommit gateway");
        let stdout = child.stdout.take().expect("piped stdout");
        let mut lines = BufReader::new(stdout).lines();
        let first = match lines.next() {
            Some(Ok(line)) => line,
            other => {
                let status = child.wait();
                panic!("dynacommit gateway did not start ({other:?}; exit {status:?})")
            }
        };
        let url = first
            .split_whitespace()
            .find(|w| w.starts_with("http://"))
            .unwrap_or_else(|| panic!("no address in the gateway's first line: {first}"))
            .to_owned();
        let log = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let sink = log.clone();
        std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                sink.lock().unwrap().push(line);
            }
        });
        Self {
            child,
            url,
            bucket: settings.bucket.clone(),
            log,
        }
    }

    /// A client store on the gateway, as any object_store user would make one: copies
    /// made if absent by `If-None-Match: *`, conditional puts by S3's headers.
    pub fn client(&self) -> AmazonS3 {
        self.client_with(ACCESS_KEY, SECRET)
    }

    /// A client store signing with `key`/`secret`.
    pub fn client_with(&self, key: &str, secret: &str) -> AmazonS3 {
        AmazonS3Builder::new()
            .with_endpoint(&self.url)
            .with_allow_http(true)
            .with_region("us-east-1")
            .with_bucket_name(&self.bucket)
            .with_access_key_id(key)
            .with_secret_access_key(secret)
            .with_conditional_put(S3ConditionalPut::ETagMatch)
            .with_copy_if_not_exists(S3CopyIfNotExists::Header(
                "If-None-Match".into(),
                "*".into(),
            ))
            .with_retry(object_store::RetryConfig {
                max_retries: 3,
                retry_timeout: Duration::from_secs(30),
                ..Default::default()
            })
            .build()
            .unwrap()
    }

    /// The access log lines so far.
    pub fn log(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }

    /// Kills the gateway at once (SIGKILL): nothing it held in memory survives.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Stops it as an operator would (SIGTERM) and returns its exit status.
    pub fn terminate(&mut self) -> std::process::ExitStatus {
        // SAFETY: kill(2) on our own child's pid, which we have not reaped yet.
        unsafe {
            libc::kill(self.child.id() as i32, libc::SIGTERM);
        }
        self.child.wait().unwrap()
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        self.kill();
    }
}
