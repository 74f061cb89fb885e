//! What an operator of `dynacommit gateway` relies on: `/health` without credentials, one
//! access-log line per request that names the key, the condition and the outcome and no
//! secret, and a shutdown (SIGTERM) that lets a commit in flight finish.

mod common;

use std::time::Duration;

use common::gateway::{Gateway, Settings, signed_unsigned_payload};
use common::s3::S3Server;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutMode};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_and_one_access_log_line_per_request() {
    let gateway = Gateway::start(&Settings::fresh(S3Server::S3rver).await);
    let health = reqwest::get(format!("{}/health", gateway.url))
        .await
        .unwrap();
    assert_eq!(health.status(), 200);
    let client = gateway.client();
    let path = Path::from("log/0.json");
    client
        .put_opts(&path, "a".into(), PutMode::Create.into())
        .await
        .unwrap();
    let again = client
        .put_opts(&path, "b".into(), PutMode::Create.into())
        .await;
    assert!(
        matches!(again, Err(object_store::Error::AlreadyExists { .. })),
        "{again:?}"
    );
    // The log is written as each answer goes: wait for the three lines.
    let log = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let log = gateway.log();
            if log.len() >= 3 {
                return log;
            }
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("no access log lines");
    let key = format!("PUT /{}/log/0.json if-none-match", gateway.bucket);
    assert!(log[0].contains("GET /health - 200"), "{log:#?}");
    assert!(log[1].contains(&format!("{key} 200")), "{log:#?}");
    assert!(log[2].contains(&format!("{key} 412")), "{log:#?}");
    // A conditional write says how long it waited for its lease; /health took none.
    let waited = |line: &str| line.rsplit_once(" lease ").map(|(_, w)| w.to_owned());
    assert_eq!(waited(&log[0]).as_deref(), Some("-"), "{log:#?}");
    // Both creates took the lease; the second, refused (412), waited too.
    for line in &log[1..3] {
        let wait = waited(line).unwrap_or_default();
        assert!(
            wait.ends_with("ms") && wait.trim_end_matches("ms").parse::<f64>().is_ok(),
            "{log:#?}"
        );
    }
    for line in &log {
        assert!(!line.contains(common::gateway::SECRET) && !line.contains("Signature"));
    }
}

/// SIGTERM while an upload is in flight (its head read, its body not yet sent): the
/// gateway takes no new connection, finishes the upload, answers it, and exits 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shutdown_finishes_the_commit_in_flight() {
    let mut gateway = Gateway::start(&Settings::fresh(S3Server::S3rver).await);
    let address = gateway.url.trim_start_matches("http://").to_owned();
    let url = format!("{}/{}/log/1.json", gateway.url, gateway.bucket);
    let body = b"the commit in flight";
    let length = body.len().to_string();
    let request = signed_unsigned_payload(
        "PUT",
        &url,
        &[("if-none-match", "*"), ("content-length", &length)],
    );
    let mut head = format!(
        "PUT /{}/log/1.json HTTP/1.1\r\nhost: {address}\r\nexpect: 100-continue\r\n",
        gateway.bucket
    );
    for (name, value) in &request.headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    let socket = tokio::net::TcpStream::connect(&address).await.unwrap();
    let (read, mut write) = socket.into_split();
    let mut read = BufReader::new(read);
    write.write_all(head.as_bytes()).await.unwrap();
    // `100 Continue` comes once the gateway reads the body: the request is in its hands.
    let mut line = String::new();
    read.read_line(&mut line).await.unwrap();
    assert!(line.starts_with("HTTP/1.1 100"), "{line}");
    read.read_line(&mut line).await.unwrap();
    let terminate = std::thread::spawn(move || {
        let status = gateway.terminate();
        (status, gateway)
    });
    // New connections are refused once the gateway stops accepting.
    tokio::time::timeout(Duration::from_secs(10), async {
        while tokio::net::TcpStream::connect(&address).await.is_ok() {
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("the gateway kept accepting connections after SIGTERM");
    write.write_all(body).await.unwrap();
    let mut answer = String::new();
    read.read_to_string(&mut answer).await.unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let (status, gateway) = terminate.join().unwrap();
    assert!(status.success(), "the gateway exited with {status}");
    let bare = S3Server::S3rver.store(
        &gateway.bucket,
        object_store::aws::S3ConditionalPut::Disabled,
    );
    let stored = bare
        .get(&Path::from("log/1.json"))
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    assert_eq!(stored.as_ref(), body);
}

/// With `--virtual-host-domain`, `BUCKET.DOMAIN` names the bucket (as SDKs address
/// buckets by default), and path-style requests keep working beside it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn virtual_host_and_path_style_requests_reach_one_bucket() {
    let mut settings = Settings::fresh(S3Server::S3rver).await;
    settings.extra = vec!["--virtual-host-domain".into(), "s3.lake.test".into()];
    let gateway = Gateway::start(&settings);
    let address: std::net::SocketAddr = gateway.url.trim_start_matches("http://").parse().unwrap();
    let host = format!("{}.s3.lake.test", gateway.bucket);
    let url = format!("http://{host}:{}/vhost/key", address.port());
    let request = common::gateway::signed(
        "PUT",
        &url,
        &[("if-none-match", "*")],
        b"by virtual host",
        common::gateway::SECRET,
        std::time::SystemTime::now(),
        None,
    );
    // The name resolves to the gateway only for this client: no DNS is needed.
    let client = reqwest::Client::builder()
        .resolve(&host, address)
        .build()
        .unwrap();
    let mut put = client.put(&request.url);
    for (name, value) in &request.headers {
        put = put.header(name, value);
    }
    let answer = put.body("by virtual host").send().await.unwrap();
    assert_eq!(
        answer.status(),
        200,
        "{}",
        answer.text().await.unwrap_or_default()
    );
    // Read back path-style, through the usual client.
    let stored = gateway
        .client()
        .get(&Path::from("vhost/key"))
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    assert_eq!(stored.as_ref(), b"by virtual host");
}
