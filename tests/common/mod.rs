//! Shared by the integration tests: the services the project's scripts start, and a
//! programmable loopback HTTP server standing in front of them.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

pub mod fake_server;
pub mod faults;
pub mod gateway;
pub mod old_protocol;
pub mod s3;
pub mod wire;

use std::time::Duration;

use dynacommit::dynamo::{DynamoClient, DynamoClientBuilder, RetryConfig};

/// Where DynamoDB Local listens (`scripts/services.sh env` prints it).
pub fn dynamodb_url() -> String {
    std::env::var("DYNACOMMIT_TEST_DYNAMODB").unwrap_or_else(|_| "http://127.0.0.1:8000".into())
}

/// Fast retries, so tests that exhaust them finish quickly.
pub fn quick_retries() -> RetryConfig {
    RetryConfig {
        max_attempts: 5,
        initial_backoff: Duration::from_millis(2),
        max_backoff: Duration::from_millis(20),
        max_elapsed: Duration::from_secs(10),
        ..RetryConfig::default()
    }
}

/// A client of the endpoint `url` with throwaway keys (DynamoDB Local 3 takes only
/// letters and digits in a key id).
pub fn client_for(url: &str, retry: RetryConfig) -> DynamoClient {
    DynamoClientBuilder::default()
        .with_endpoint(url)
        .with_region("us-east-1")
        .with_credentials("dynacommit", "dynacommitsecret", None)
        .with_retry(retry)
        .build()
        .unwrap()
}

/// A client of DynamoDB Local, after checking it answers. A missing service fails the
/// test loudly, saying how to start it: tests never skip.
pub async fn dynamodb() -> DynamoClient {
    let url = dynamodb_url();
    let probe = client_for(
        &url,
        RetryConfig {
            max_attempts: 3,
            ..quick_retries()
        },
    );
    match probe.describe_table("dynacommit-probe-no-such-table").await {
        Err(e) if e.code() == Some("ResourceNotFoundException") => {}
        other => panic!(
            "DynamoDB Local is not answering at {url} ({other:?}). Start it with \
             `scripts/services.sh start dynamodb`, or run the whole suite with `scripts/test.sh`."
        ),
    }
    client_for(&url, RetryConfig::default())
}

/// A table name no other test uses.
pub fn unique_name(prefix: &str) -> String {
    format!("{prefix}-{:016x}", rand::random::<u64>())
}

/// Request counts, for benchmarks that report requests per commit.
#[derive(Debug, Default)]
pub struct Counters {
    /// Object store requests.
    pub s3: std::sync::atomic::AtomicU64,
    /// DynamoDB writes (PutItem and the like).
    pub dynamo_writes: std::sync::atomic::AtomicU64,
    /// DynamoDB reads (GetItem, Query, Scan).
    pub dynamo_reads: std::sync::atomic::AtomicU64,
    /// Slowed requests sent but not yet answered (they go on when their caller gives up).
    pub in_flight: std::sync::atomic::AtomicU64,
    /// DynamoDB writes refused by their condition (counted within `dynamo_writes` too).
    pub dynamo_failed_writes: std::sync::atomic::AtomicU64,
    /// Object store answers of 500 and above (each one a retry by the client, which
    /// backs off first), where the counter sees HTTP.
    pub s3_server_errors: std::sync::atomic::AtomicU64,
}

impl Counters {
    /// Waits until every slowed request has been answered.
    pub async fn settled(&self) {
        while self.in_flight.load(std::sync::atomic::Ordering::SeqCst) > 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Sends `request` after a random delay from `delays` (ms), in a task of its own, so
    /// that it reaches the server even if its caller stops waiting: as a request already
    /// on the wire does.
    pub async fn slowed<T: Send + 'static>(
        self: &std::sync::Arc<Self>,
        delays: std::ops::Range<u64>,
        request: impl Future<Output = T> + Send + 'static,
    ) -> T {
        use std::sync::atomic::Ordering::SeqCst;
        let delay = Duration::from_millis(rand::random_range(delays));
        self.in_flight.fetch_add(1, SeqCst);
        let counters = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            let answer = request.await;
            counters.in_flight.fetch_sub(1, SeqCst);
            answer
        })
        .await
        .unwrap()
    }

    /// (S3 requests, DynamoDB writes, DynamoDB reads) so far.
    pub fn snapshot(&self) -> (u64, u64, u64) {
        use std::sync::atomic::Ordering::SeqCst;
        (
            self.s3.load(SeqCst),
            self.dynamo_writes.load(SeqCst),
            self.dynamo_reads.load(SeqCst),
        )
    }
}

/// The retries of every S3 client the benchmarks build, alike for every target: at most
/// 10, backing off from 10 ms to at most 100 ms. object_store's default backs off from
/// 100 ms doubling to 15 s, so a few server errors in a row (s3rver answers 500 to reads
/// racing writes) can add seconds to one operation of one target and decide a race's wall
/// time. Set by the benchmarks before they build a store; tests keep the defaults.
pub static BOUNDED_RETRIES: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

/// The request timeout of every S3 client the benchmarks build (with
/// [`BOUNDED_RETRIES`]).
pub const BENCH_REQUEST_TIMEOUT: Duration = Duration::from_secs(1);

/// The bounded retry settings, for an object_store crate's `RetryConfig` fields.
pub fn bounded_retries() -> Option<(usize, Duration, Duration)> {
    BOUNDED_RETRIES
        .load(std::sync::atomic::Ordering::Relaxed)
        .then_some((10, Duration::from_millis(10), Duration::from_millis(100)))
}

/// Lease settings for tests: the defaults, polling faster so races finish sooner.
pub fn test_lease_config(table: &str) -> dynacommit::lease::LeaseConfig {
    dynacommit::lease::LeaseConfig::new(table).with_poll_interval(Duration::from_millis(20))
}

/// A lease manager on a fresh DynamoDB Local table.
pub async fn dynamo_leases() -> dynacommit::lease::LeaseManager {
    use dynacommit::lease::{DynamoLeaseTable, LeaseManager};
    let name = unique_name("leases");
    let table = DynamoLeaseTable::new(dynamodb().await, &name);
    table.ensure_table().await.unwrap();
    LeaseManager::new(std::sync::Arc::new(table), test_lease_config(&name)).unwrap()
}

/// `count` writer processes over `inner`: a `CommitStore` each, with a lease manager of
/// its own on `leases`' table and settings. Tasks of one process share its manager, whose
/// queue settles their races for one lease without a request; processes meet only in the
/// table, where the protocol's renewals, waits and takeovers are tested.
pub fn processes(
    inner: &std::sync::Arc<dyn object_store::ObjectStore>,
    leases: &dynacommit::lease::LeaseManager,
    count: usize,
) -> Vec<std::sync::Arc<dyn object_store::ObjectStore>> {
    (0..count)
        .map(|_| {
            let own = dynacommit::lease::LeaseManager::new(
                leases.table().clone(),
                leases.config().clone(),
            )
            .unwrap();
            std::sync::Arc::new(dynacommit::CommitStore::new(inner.clone(), own))
                as std::sync::Arc<dyn object_store::ObjectStore>
        })
        .collect()
}

/// A lease manager on a fresh in-process table.
pub fn memory_leases() -> dynacommit::lease::LeaseManager {
    use dynacommit::lease::{LeaseManager, MemoryLeaseTable};
    LeaseManager::new(
        std::sync::Arc::new(MemoryLeaseTable::new()),
        test_lease_config("memory"),
    )
    .unwrap()
}

/// The `dynacommit` binary with no AWS or dynacommit configuration from the environment
/// that runs the tests, so that the embedded default is what runs unless a test says
/// otherwise.
pub fn dynacommit_command() -> std::process::Command {
    const AMBIENT: &[&str] = &[
        "AWS_ENDPOINT_URL_DYNAMODB",
        "AWS_ENDPOINT_URL",
        "AWS_ENDPOINT_URL_S3",
        "AWS_REGION",
        "AWS_DEFAULT_REGION",
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "DYNACOMMIT_STORE",
        "DYNACOMMIT_LEASE_TABLE",
        "DYNACOMMIT_LEASE_TIMEOUT_MS",
        "DYNACOMMIT_MAX_CLOCK_SKEW_RATE",
        "DYNACOMMIT_LEASE_TTL_SECS",
        "DYNACOMMIT_POLL_INTERVAL_MS",
        "DYNACOMMIT_KV_TABLE",
        "DYNACOMMIT_KV_FILE",
    ];
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_dynacommit"));
    for var in AMBIENT {
        command.env_remove(var);
    }
    command
}

/// Deletes a lease record behind the protocol's back, as DynamoDB's TTL or an operator
/// would.
pub async fn delete_behind_its_back(
    table: &dynacommit::lease::DynamoLeaseTable,
    path: &str,
    etag: &str,
) {
    use dynacommit::dynamo::{AttributeValue, DeleteItem, Item};
    let key: Item = [
        ("path".to_owned(), AttributeValue::from(path)),
        ("etag".to_owned(), AttributeValue::from(etag)),
    ]
    .into();
    table
        .client()
        .delete_item(&DeleteItem::new(table.table_name(), key))
        .await
        .unwrap();
}

/// Bytes as text, for output a test prints or searches.
pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The environment a command needs to reach DynamoDB Local at `url`, with throwaway keys.
pub fn local_dynamodb(url: &str) -> [(&'static str, &str); 3] {
    [
        ("AWS_ENDPOINT_URL_DYNAMODB", url),
        ("AWS_ACCESS_KEY_ID", "dynacommit"),
        ("AWS_SECRET_ACCESS_KEY", "dynacommitsecret"),
    ]
}

/// The next event of a key-value store's `watch`, within 20 s.
pub async fn next_event(
    watch: &mut (
             impl futures::Stream<Item = Result<dynacommit::kv::WatchEvent, dynacommit::kv::KvError>>
             + Unpin
         ),
) -> dynacommit::kv::WatchEvent {
    use futures::StreamExt;
    tokio::time::timeout(Duration::from_secs(20), watch.next())
        .await
        .expect("no event within 20 s")
        .expect("the watch ended")
        .expect("the watch failed")
}
