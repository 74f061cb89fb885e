//! `dynacommit gateway` against the store it fronts, side by side in one run on SeaweedFS
//! (leases in DynamoDB Local): passthrough PUT and GET (1 KiB and 64 MiB), conditional
//! creates through the gateway against `CommitStore` in process, and the gateway's peak
//! memory under 32 concurrent 64 MiB uploads. Needs `scripts/services.sh start`;
//! `scripts/bench.sh` does it all. Prints the tables of docs/benchmarks.md ("Gateway").

#[path = "../tests/common/mod.rs"]
mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::s3::S3Server;
use dynacommit::CommitStore;
use dynacommit::gateway::{Gateway, KeyPair, Upstream};
use dynacommit::lease::LeaseManager;
use dynacommit::race::Percentiles;
use object_store::aws::{AmazonS3, AmazonS3Builder, S3ConditionalPut};
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutPayload};

const KEY: &str = "bench";
const SECRET: &str = "bench-secret";

/// How much each scenario does.
#[derive(Debug, Clone, Copy)]
struct Sizes {
    /// Rotated runs; each gives every figure once, and the report gives their median.
    runs: usize,
    /// Small (1 KiB) puts and gets per run and target.
    small: usize,
    /// Large objects per run and target, and their size in MiB.
    large: (usize, usize),
    /// Conditional creates per run and target.
    creates: usize,
    /// Concurrent uploads to the gateway process, and their size in MiB.
    memory: (usize, usize),
}

impl Sizes {
    const FULL: Self = Self {
        runs: 5,
        small: 200,
        large: (3, 64),
        creates: 100,
        memory: (32, 64),
    };
    const SMOKE: Self = Self {
        runs: 1,
        small: 3,
        large: (1, 1),
        creates: 3,
        memory: (2, 1),
    };
}

/// A client of `endpoint` for `bucket`, signing with `key`.
fn client(endpoint: &str, bucket: &str, key: &str, secret: &str) -> AmazonS3 {
    AmazonS3Builder::new()
        .with_endpoint(endpoint)
        .with_allow_http(true)
        .with_region("us-east-1")
        .with_bucket_name(bucket)
        .with_access_key_id(key)
        .with_secret_access_key(secret)
        .with_conditional_put(S3ConditionalPut::ETagMatch)
        .build()
        .unwrap()
}

/// The latency of each of `count` operations `op(i)`, run one after another.
async fn timed<F, Fut>(count: usize, mut op: F) -> Vec<Duration>
where
    F: FnMut(usize) -> Fut,
    Fut: Future<Output = ()>,
{
    let mut samples = Vec::with_capacity(count);
    for i in 0..count {
        let start = Instant::now();
        op(i).await;
        samples.push(start.elapsed());
    }
    samples
}

fn p50(samples: Vec<Duration>) -> f64 {
    Percentiles::of(samples).p50.as_secs_f64() * 1e3
}

/// `median (min-max)` of `xs`.
fn spread(mut xs: Vec<f64>) -> String {
    xs.sort_by(f64::total_cmp);
    format!(
        "{:.2} ({:.2}-{:.2})",
        xs[xs.len() / 2],
        xs[0],
        xs[xs.len() - 1]
    )
}

/// Figures of one run for one target.
#[derive(Default, Clone)]
struct Figures {
    small_put_ms: f64,
    small_get_ms: f64,
    large_put_mib_s: f64,
    large_get_mib_s: f64,
    large_put_ms: f64,
    large_get_ms: f64,
    create_ms: f64,
}

/// Reads one figure.
type Figure = fn(&Figures) -> f64;

/// One run's passthrough figures for `store` under `prefix`.
async fn passthrough(
    store: &dyn ObjectStore,
    prefix: &str,
    sizes: Sizes,
    large: &Bytes,
) -> Figures {
    let small = Bytes::from(vec![b's'; 1024]);
    let path = |kind: &str, i: usize| Path::from(format!("{prefix}/{kind}/{i}"));
    let small_put = timed(sizes.small, |i| {
        let (path, body) = (path("small", i), small.clone());
        async move {
            store.put(&path, body.into()).await.unwrap();
        }
    })
    .await;
    let small_get = timed(sizes.small, |i| {
        let path = path("small", i);
        async move {
            store.get(&path).await.unwrap().bytes().await.unwrap();
        }
    })
    .await;
    let large_put = timed(sizes.large.0, |i| {
        let (path, body) = (path("large", i), large.clone());
        async move {
            store.put(&path, PutPayload::from(body)).await.unwrap();
        }
    })
    .await;
    let large_get = timed(sizes.large.0, |i| {
        let path = path("large", i);
        async move {
            let got = store.get(&path).await.unwrap().bytes().await.unwrap();
            assert_eq!(got.len(), large.len());
        }
    })
    .await;
    let rate = |samples: &[Duration]| {
        let total: f64 = samples.iter().map(Duration::as_secs_f64).sum();
        (samples.len() * large.len()) as f64 / (1 << 20) as f64 / total
    };
    Figures {
        small_put_ms: p50(small_put),
        small_get_ms: p50(small_get),
        large_put_mib_s: rate(&large_put),
        large_get_mib_s: rate(&large_get),
        large_put_ms: p50(large_put),
        large_get_ms: p50(large_get),
        create_ms: 0.0,
    }
}

/// p50 of `count` creates of fresh paths under `prefix`.
async fn creates(store: &dyn ObjectStore, prefix: &str, count: usize) -> f64 {
    p50(timed(count, |i| {
        let path = Path::from(format!("{prefix}/create/{i:05}.json"));
        async move {
            store
                .put_opts(&path, "commit".into(), PutMode::Create.into())
                .await
                .unwrap();
        }
    })
    .await)
}

/// The gateway binary for the memory scenario: DYNACOMMIT_GATEWAY_BIN, else the release
/// build, else the debug build.
fn gateway_binary() -> Option<std::path::PathBuf> {
    if let Ok(path) = std::env::var("DYNACOMMIT_GATEWAY_BIN") {
        return Some(path.into());
    }
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target");
    ["release", "debug"]
        .iter()
        .map(|profile| root.join(profile).join("dynacommit"))
        .find(|path| path.exists())
}

/// Peak resident memory (VmHWM) of `pid`, in MiB.
fn peak_rss_mib(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kib: f64 = status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap();
    kib / 1024.0
}

/// `uploads` concurrent single-request uploads of `mib` MiB each through a gateway process
/// with a `budget_mib` body budget: its peak memory, and how long they took.
async fn memory(bucket: &str, uploads: usize, mib: usize, budget_mib: usize) {
    let Some(binary) = gateway_binary() else {
        println!("\n(no dynacommit binary: build it with --features cli for the memory scenario)");
        return;
    };
    let (key, secret) = S3Server::SeaweedFs.keys();
    let mut child = std::process::Command::new(&binary)
        .args(["gateway", "--listen", "127.0.0.1:0", "--embedded"])
        .arg("--upstream")
        .arg(format!("s3://{bucket}"))
        .arg("--max-body-memory-mib")
        .arg(budget_mib.to_string())
        .env("AWS_ENDPOINT_URL_S3", S3Server::SeaweedFs.url())
        .env("AWS_ACCESS_KEY_ID", key)
        .env("AWS_SECRET_ACCESS_KEY", secret)
        .env("AWS_REGION", "us-east-1")
        .env("DYNACOMMIT_GATEWAY_ACCESS_KEY_ID", KEY)
        .env("DYNACOMMIT_GATEWAY_SECRET_ACCESS_KEY", SECRET)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut first = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.as_mut().unwrap()),
        &mut first,
    )
    .unwrap();
    let url = first
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .unwrap()
        .to_owned();
    let idle = peak_rss_mib(child.id());
    let store = Arc::new(client(&url, bucket, KEY, SECRET));
    let body = Bytes::from(vec![b'm'; mib << 20]);
    let start = Instant::now();
    let tasks: Vec<_> = (0..uploads)
        .map(|i| {
            let (store, body) = (store.clone(), body.clone());
            tokio::spawn(async move {
                store
                    .put(&Path::from(format!("memory/{i}")), PutPayload::from(body))
                    .await
                    .unwrap();
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    let took = start.elapsed();
    let peak = peak_rss_mib(child.id());
    let _ = child.kill();
    let _ = child.wait();
    println!("\n## Gateway memory: {uploads} concurrent uploads of {mib} MiB\n");
    println!("| body budget | peak RSS | idle RSS | uploads took |");
    println!("|---|---|---|---|");
    println!(
        "| {budget_mib} MiB | {peak:.0} MiB | {idle:.0} MiB | {:.1} s ({:.0} MiB/s) |",
        took.as_secs_f64(),
        (uploads * mib) as f64 / took.as_secs_f64()
    );
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let sizes = if std::env::var("DYNACOMMIT_BENCH_SMOKE").is_ok() {
        println!("smoke run (DYNACOMMIT_BENCH_SMOKE): tiny sizes, timings mean nothing");
        Sizes::SMOKE
    } else {
        Sizes::FULL
    };
    let server = S3Server::SeaweedFs;
    let bucket = server.fresh_bucket().await;
    let (key, secret) = server.keys();
    let direct = client(&server.url(), &bucket, &key, &secret);
    let leases = common::dynamo_leases().await;
    let own = |leases: &LeaseManager| {
        LeaseManager::new(leases.table().clone(), leases.config().clone()).unwrap()
    };
    // In process: the wrapper over the same bucket and lease table the gateway uses.
    let in_process = CommitStore::new(
        Arc::new(server.store(&bucket, S3ConditionalPut::Disabled)),
        own(&leases),
    );
    let upstream = CommitStore::new(
        Arc::new(server.store(&bucket, S3ConditionalPut::Disabled)),
        own(&leases),
    );
    let gateway = Gateway::builder(bucket.clone(), Upstream::s3(upstream))
        .with_key(KeyPair::new(KEY, SECRET))
        .with_access_log(|_| {})
        .build()
        .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let serving = tokio::spawn(gateway.serve(listener, async move {
        let _ = stopped.await;
    }));
    let via = client(&url, &bucket, KEY, SECRET);
    let large = Bytes::from(vec![b'l'; sizes.large.1 << 20]);
    let (mut bare, mut through) = (Vec::new(), Vec::new());
    for run in 0..sizes.runs {
        // Rotated: who goes first alternates, so that a warm cache or a busy moment does
        // not favour one side.
        let order: [bool; 2] = if run % 2 == 0 {
            [false, true]
        } else {
            [true, false]
        };
        let (mut b, mut t) = (Figures::default(), Figures::default());
        for gateway_side in order {
            let prefix = format!("run{run}/{}", if gateway_side { "via" } else { "direct" });
            if gateway_side {
                t = passthrough(&via, &prefix, sizes, &large).await;
                t.create_ms = creates(&via, &prefix, sizes.creates).await;
            } else {
                b = passthrough(&direct, &prefix, sizes, &large).await;
                b.create_ms = creates(&in_process, &prefix, sizes.creates).await;
            }
        }
        bare.push(b);
        through.push(t);
    }
    let column =
        |figures: &[Figures], f: fn(&Figures) -> f64| figures.iter().map(f).collect::<Vec<_>>();
    let ratio = |f: fn(&Figures) -> f64| {
        bare.iter()
            .zip(&through)
            .map(|(b, t)| f(t) / f(b))
            .collect::<Vec<_>>()
    };
    println!("\n## Gateway against the store it fronts (SeaweedFS 4.48 + DynamoDB Local)\n");
    println!(
        "{} rotated runs; medians (min-max) across runs. Small: {} x 1 KiB; large: {} x {} MiB; creates: {} fresh paths.\n",
        sizes.runs, sizes.small, sizes.large.0, sizes.large.1, sizes.creates
    );
    println!("| scenario | bare store / in process | through the gateway | gateway / bare |");
    println!("|---|---|---|---|");
    let rows: [(&str, Figure); 7] = [
        ("PUT 1 KiB p50 (ms)", |f| f.small_put_ms),
        ("GET 1 KiB p50 (ms)", |f| f.small_get_ms),
        ("PUT large p50 (ms)", |f| f.large_put_ms),
        ("GET large p50 (ms)", |f| f.large_get_ms),
        ("PUT large throughput (MiB/s)", |f| f.large_put_mib_s),
        ("GET large throughput (MiB/s)", |f| f.large_get_mib_s),
        (
            "conditional create p50 (ms): CommitStore in process vs gateway",
            |f| f.create_ms,
        ),
    ];
    for (name, f) in rows {
        println!(
            "| {name} | {} | {} | {} |",
            spread(column(&bare, f)),
            spread(column(&through, f)),
            spread(ratio(f))
        );
    }
    let _ = stop.send(());
    serving.await.unwrap().unwrap();
    memory(&bucket, sizes.memory.0, sizes.memory.1, 512).await;
}
