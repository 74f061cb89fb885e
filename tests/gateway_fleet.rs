//! Two `dynacommit gateway`s over one s3rver bucket and one lease table, as behind a
//! load balancer, with writers racing to create a Delta-style log through both; one
//! gateway is killed (SIGKILL) mid-race. Every acknowledged commit must stand: nothing in
//! a gateway's memory is needed for safety. The same race on the bare s3rver loses
//! acknowledged commits, which shows the check catching a loss.

mod common;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::gateway::{Gateway, Settings};
use common::s3::S3Server;
use object_store::aws::S3ConditionalPut;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutMode};

const WRITERS: usize = 6;
const COMMITS: usize = 8;

/// The commits each writer was told it made: version -> what it wrote.
type Acknowledged = Arc<Mutex<Vec<(usize, String)>>>;

/// One writer: creates the next free version until it has made `COMMITS` or its store
/// fails (its gateway killed). Returns whether it finished.
async fn writer(
    id: usize,
    store: Arc<dyn ObjectStore>,
    acked: Acknowledged,
    progress: Arc<tokio::sync::Notify>,
) -> bool {
    let mut version = 0;
    let mut made = 0;
    while made < COMMITS {
        let path = Path::from(format!("log/{version:020}.json"));
        let body = format!("writer {id} commit {made}");
        match store
            .put_opts(&path, body.clone().into(), PutMode::Create.into())
            .await
        {
            Ok(_) => {
                acked.lock().unwrap().push((version, body));
                progress.notify_waiters();
                made += 1;
                version += 1;
            }
            Err(object_store::Error::AlreadyExists { .. }) => version += 1,
            Err(e) => {
                eprintln!("writer {id} stopped: {e}");
                return false;
            }
        }
    }
    true
}

/// Acknowledged commits that are not in the store as acknowledged: overwritten by a
/// rival, or two writers told they made one version.
async fn lost(store: &dyn ObjectStore, acked: &[(usize, String)]) -> Vec<String> {
    let mut by_version: BTreeMap<usize, Vec<&String>> = BTreeMap::new();
    for (version, body) in acked {
        by_version.entry(*version).or_default().push(body);
    }
    let mut lost = Vec::new();
    for (version, bodies) in by_version {
        let path = Path::from(format!("log/{version:020}.json"));
        let stored = store.get(&path).await.unwrap().bytes().await.unwrap();
        for body in bodies {
            if stored.as_ref() != body.as_bytes() {
                lost.push(format!(
                    "version {version}: acknowledged {body:?}, stored {stored:?}"
                ));
            }
        }
    }
    lost
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_acknowledged_commit_stands_when_one_of_two_gateways_is_killed_mid_race() {
    let mut settings = Settings::fresh(S3Server::S3rver).await;
    settings.lease_timeout_ms = 1_000;
    let mut first = Gateway::start(&settings);
    let second = Gateway::start(&settings);
    let acked: Acknowledged = Arc::default();
    let progress = Arc::new(tokio::sync::Notify::new());
    let mut tasks = Vec::new();
    for id in 0..WRITERS {
        let gateway = if id % 2 == 0 { &first } else { &second };
        let store: Arc<dyn ObjectStore> = Arc::new(gateway.client());
        let (acked, progress) = (acked.clone(), progress.clone());
        tasks.push(tokio::spawn(writer(id, store, acked, progress)));
    }
    // Kill the first gateway once a third of the commits are in: its writers are mid-race,
    // some of their requests in flight, their leases held.
    let third = WRITERS * COMMITS / 3;
    tokio::time::timeout(Duration::from_secs(60), async {
        while acked.lock().unwrap().len() < third {
            progress.notified().await;
        }
    })
    .await
    .expect("a third of the commits did not come within a minute");
    first.kill();
    let mut finished = 0;
    for task in tasks {
        finished += usize::from(task.await.unwrap());
    }
    let acked = acked.lock().unwrap().clone();
    let bare = S3Server::S3rver.store(&settings.bucket, S3ConditionalPut::Disabled);
    let lost = lost(&bare, &acked).await;
    eprintln!(
        "{} commits acknowledged, {finished} of {WRITERS} writers finished, {} lost",
        acked.len(),
        lost.len()
    );
    assert!(lost.is_empty(), "acknowledged commits lost: {lost:#?}");
    // The second gateway's writers finished, behind any lease the killed one held.
    assert!(
        finished >= WRITERS / 2,
        "the surviving gateway's writers did not finish"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_race_on_the_bare_s3rver_loses_acknowledged_commits() {
    for attempt in 1..=3 {
        let bucket = S3Server::S3rver.fresh_bucket().await;
        let acked: Acknowledged = Arc::default();
        let mut tasks = Vec::new();
        for id in 0..WRITERS {
            let store: Arc<dyn ObjectStore> =
                Arc::new(S3Server::S3rver.store(&bucket, S3ConditionalPut::ETagMatch));
            let progress = Arc::new(tokio::sync::Notify::new());
            tasks.push(tokio::spawn(writer(id, store, acked.clone(), progress)));
        }
        for task in tasks {
            task.await.unwrap();
        }
        let acked = acked.lock().unwrap().clone();
        let bare = S3Server::S3rver.store(&bucket, S3ConditionalPut::Disabled);
        let lost = lost(&bare, &acked).await;
        eprintln!(
            "bare s3rver, race {attempt}: {} acknowledged, {} lost",
            acked.len(),
            lost.len()
        );
        if !lost.is_empty() {
            return;
        }
    }
    panic!("three races on the bare s3rver lost nothing: the check would not see a loss");
}
