//! The key-value store as Vault and Teleport use theirs: folders and an atomic batch, a
//! registration that must be unique, a compare-and-swap, a heartbeat that keeps a key
//! alive, and a watch that sees all of it. On DynamoDB when `AWS_ENDPOINT_URL_DYNAMODB`
//! is set (as `eval "$(scripts/services.sh env)"` does; the table `dynacommit-kv-example`
//! is created if missing), else in process. The example checks what it shows and exits
//! non-zero, saying what broke, if not.
//! Run: `cargo run --example kv`.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;

use dynacommit::kv::{DynamoKv, EventKind, KvError, KvStore, MemoryKv, TxnOp};
use futures::StreamExt;

type Error = Box<dyn std::error::Error>;

#[tokio::main]
async fn main() -> Result<(), Error> {
    let kv = open().await?;
    println!("store: {}", kv.describe());
    let mut watch = kv.watch(b"", None);
    expect(
        matches!(next(&mut watch).await?, EventKind::Ready),
        "a watch starts with Ready",
    )?;

    // Vault: secrets in folders, a mount written in one transaction.
    kv.transaction(vec![
        TxnOp::put(b"secret/app/db", Bytes::from("postgres://...")),
        TxnOp::put(b"secret/app/api", Bytes::from("token")),
        TxnOp::put(b"sys/mounts", Bytes::from("secret/")).if_absent(),
    ])
    .await?;
    let root = kv.list(b"").await?;
    println!("list(\"\") = {}", show(&root));
    expect(
        root == [b"secret/".to_vec(), b"sys/".to_vec()],
        "two folders at the root",
    )?;
    expect(
        kv.list(b"secret/app/").await?.len() == 2,
        "two secrets in secret/app/",
    )?;

    // Teleport: a node registers once, heartbeats with a 2 s expiry, and is gone when it
    // stops; a counter moves by compare-and-swap.
    let expiry = || SystemTime::now() + Duration::from_secs(2);
    kv.create(b"/nodes/n1", Bytes::from("10.0.0.1"), Some(expiry()))
        .await?;
    let again = kv
        .create(b"/nodes/n1", Bytes::from("10.0.0.9"), Some(expiry()))
        .await;
    expect(
        matches!(again, Err(KvError::AlreadyExists { .. })),
        "a second registration is refused",
    )?;
    kv.keep_alive(b"/nodes/n1", Some(expiry())).await?;
    kv.put(b"/counter", Bytes::from("0"), None).await?;
    kv.compare_and_swap(b"/counter", b"0", Bytes::from("1"), None)
        .await?;
    let stale = kv
        .compare_and_swap(b"/counter", b"0", Bytes::from("1"), None)
        .await;
    expect(
        matches!(stale, Err(KvError::CompareFailed { .. })),
        "a compare-and-swap from a stale value fails",
    )?;
    let nodes = kv.range(b"/nodes/", b"/nodes0", None).await?;
    expect(nodes.len() == 1, "one registered node")?;

    // Seven writes so far: the watch saw each, in order.
    let mut seen = Vec::new();
    while seen.len() < 7 {
        if let EventKind::Put(entry) = next(&mut watch).await? {
            seen.push(String::from_utf8_lossy(&entry.key).into_owned());
        }
    }
    println!("watch saw: {}", seen.join(", "));
    expect(
        seen[3] == "/nodes/n1" && seen[6] == "/counter",
        "events in order",
    )?;

    // The node stops heartbeating: its entry vanishes at its expiry, and a sweep
    // reports it to watchers.
    println!("waiting for /nodes/n1 to expire...");
    while kv.get(b"/nodes/n1").await?.is_some() {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    expect(
        kv.range(b"/nodes/", b"/nodes0", None).await?.is_empty(),
        "no live node",
    )?;
    kv.sweep_expired(b"/nodes/", b"/nodes0").await?;
    let expired = next(&mut watch).await?;
    if let EventKind::Expired { key } = &expired {
        println!("watch saw: {} expired", String::from_utf8_lossy(key));
    }
    expect(
        matches!(expired, EventKind::Expired { ref key } if key == b"/nodes/n1"),
        "the expiry is an event",
    )?;
    kv.delete_range(b"", b"").await?;
    println!("ok");
    Ok(())
}

async fn open() -> Result<Arc<dyn KvStore>, Error> {
    if std::env::var_os("AWS_ENDPOINT_URL_DYNAMODB").is_none() {
        return Ok(Arc::new(MemoryKv::new()));
    }
    let client = dynacommit::dynamo::DynamoClientBuilder::from_env().build()?;
    // A namespace of its own per run, so runs never see each other's keys.
    let namespace = format!("example-{}", std::process::id());
    let kv = DynamoKv::new(client, "dynacommit-kv-example").with_namespace(&namespace)?;
    kv.ensure_table().await?;
    Ok(Arc::new(kv))
}

async fn next(
    watch: &mut (impl futures::Stream<Item = Result<dynacommit::kv::WatchEvent, KvError>> + Unpin),
) -> Result<EventKind, Error> {
    match tokio::time::timeout(Duration::from_secs(20), watch.next()).await {
        Ok(Some(event)) => Ok(event?.kind),
        Ok(None) => Err("the watch ended".into()),
        Err(_) => Err("no event within 20 s".into()),
    }
}

fn show(names: &[Vec<u8>]) -> String {
    let names: Vec<String> = names
        .iter()
        .map(|n| String::from_utf8_lossy(n).into_owned())
        .collect();
    format!("{names:?}")
}

fn expect(holds: bool, what: &str) -> Result<(), Error> {
    if holds {
        Ok(())
    } else {
        Err(format!("not so: {what}").into())
    }
}
