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

// ------------------------------------------------------------------ raw signed requests
// For what a client library will not send: bad signatures, replays, malformed headers.

use std::time::SystemTime;

use aws_credential_types::Credentials;
use aws_sigv4::http_request::{
    PayloadChecksumKind, PercentEncodingMode, SignableBody, SignableRequest, SignatureLocation,
    SigningSettings, UriPathNormalizationMode, sign,
};
use aws_sigv4::sign::v4;

/// A request signed with SigV4 by `secret` at `time`: in its headers, or (`presign`) in
/// its query, valid for that long.
pub struct Signed {
    pub method: &'static str,
    pub url: String,
    pub headers: Vec<(String, String)>,
}

pub fn signed(
    method: &'static str,
    url: &str,
    extra: &[(&str, &str)],
    body: &[u8],
    secret: &str,
    time: SystemTime,
    presign: Option<Duration>,
) -> Signed {
    let body = if presign.is_some() {
        SignableBody::UnsignedPayload
    } else {
        SignableBody::Bytes(body)
    };
    sign_request(method, url, extra, body, secret, time, presign)
}

/// A request signed now in its headers, its body not (`x-amz-content-sha256:
/// UNSIGNED-PAYLOAD`), as clients stream bodies they cannot hash first.
pub fn signed_unsigned_payload(method: &'static str, url: &str, extra: &[(&str, &str)]) -> Signed {
    let body = SignableBody::UnsignedPayload;
    sign_request(method, url, extra, body, SECRET, SystemTime::now(), None)
}

/// A request signed now with `x-amz-content-sha256: payload` (such as
/// `STREAMING-AWS4-HMAC-SHA256-PAYLOAD`, an aws-chunked body's seed signature).
pub fn signed_with_payload(
    method: &'static str,
    url: &str,
    extra: &[(&str, &str)],
    payload: &str,
) -> Signed {
    let body = SignableBody::Precomputed(payload.to_owned());
    sign_request(method, url, extra, body, SECRET, SystemTime::now(), None)
}

fn sign_request(
    method: &'static str,
    url: &str,
    extra: &[(&str, &str)],
    signable_body: SignableBody<'_>,
    secret: &str,
    time: SystemTime,
    presign: Option<Duration>,
) -> Signed {
    let identity = Credentials::new(ACCESS_KEY, secret, None, None, "test").into();
    let mut settings = SigningSettings::default();
    settings.payload_checksum_kind = PayloadChecksumKind::XAmzSha256;
    // S3 signs the path as sent: neither normalized (a//b) nor encoded twice.
    settings.uri_path_normalization_mode = UriPathNormalizationMode::Disabled;
    settings.percent_encoding_mode = PercentEncodingMode::Single;
    if let Some(expires) = presign {
        settings.signature_location = SignatureLocation::QueryParams;
        settings.expires_in = Some(expires);
        settings.payload_checksum_kind = PayloadChecksumKind::NoHeader;
    }
    let params = v4::SigningParams::builder()
        .identity(&identity)
        .region("us-east-1")
        .name("s3")
        .time(time)
        .settings(settings)
        .build()
        .unwrap()
        .into();
    let host = url.split('/').nth(2).unwrap().to_owned();
    let mut headers: Vec<(String, String)> = vec![("host".into(), host)];
    headers.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    let signable = SignableRequest::new(
        method,
        url,
        headers.iter().map(|(k, v)| (k.as_str(), v.as_str())),
        signable_body,
    )
    .unwrap();
    let (instructions, _) = sign(signable, &params).unwrap().into_parts();
    let mut request = http::Request::builder()
        .method(method)
        .uri(url)
        .body(())
        .unwrap();
    instructions.apply_to_request_http1x(&mut request);
    let headers = request
        .headers()
        .iter()
        .filter(|(name, _)| *name != "host")
        .map(|(k, v)| (k.to_string(), v.to_str().unwrap().to_owned()))
        .chain(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())))
        .collect();
    Signed {
        method,
        url: request.uri().to_string(),
        headers,
    }
}

/// The status and S3 error code of sending `request` with `body`.
pub async fn send(request: &Signed, body: Vec<u8>) -> (u16, String) {
    let client = reqwest::Client::new();
    let mut builder = client.request(request.method.parse().unwrap(), &request.url);
    for (name, value) in &request.headers {
        builder = builder.header(name, value);
    }
    let response = builder
        .body(body)
        .send()
        .await
        .expect("the gateway did not answer");
    let status = response.status().as_u16();
    let text = response.text().await.unwrap_or_default();
    let code = text
        .split("<Code>")
        .nth(1)
        .and_then(|rest| rest.split("</Code>").next())
        .unwrap_or_default()
        .to_owned();
    (status, code)
}

pub fn unsigned(method: &'static str, url: &str) -> Signed {
    Signed {
        method,
        url: url.to_owned(),
        headers: Vec::new(),
    }
}
