//! Benchmark scenarios, run side by side on any number of targets (this crate's
//! `CommitStore`, a bare store, object_store 0.12.5's DynamoCommit, a store's native
//! conditional PUT) so that their ratios come from one run on one machine.
//!
//! Targets implement [`Target`]; [`StoreTarget`] adapts any object_store 0.14 store.
//! `benches/protocols.rs` adds 0.12.5 and prints the tables of `docs/benchmarks.md`.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use futures::TryStreamExt;
use object_store::path::Path;
use object_store::{CopyMode, CopyOptions, ObjectStore, ObjectStoreExt, PutMode, UpdateVersion};
use tokio::time::Instant;

use crate::race::Percentiles;

/// What a benchmark target can do. Errors are text: targets come from different crates.
#[async_trait]
pub trait Target: Send + Sync {
    /// Creates `path` unless it exists: `Ok(true)` if this call wrote it.
    async fn create(&self, path: &Path, body: Bytes) -> Result<bool, String>;
    /// Replaces `path` if its ETag is `etag`: `Ok(false)` if it was not.
    async fn update(&self, path: &Path, body: Bytes, etag: &str) -> Result<bool, String>;
    /// Copies `from` to `to` unless `to` exists: `Ok(true)` if this call wrote it.
    async fn copy_if_absent(&self, from: &Path, to: &Path) -> Result<bool, String>;
    /// The body and ETag at `path`, if any.
    async fn get(&self, path: &Path) -> Result<Option<(Bytes, String)>, String>;
    /// Writes `path` unconditionally.
    async fn put(&self, path: &Path, body: Bytes) -> Result<(), String>;
    /// Deletes `path`.
    async fn delete(&self, path: &Path) -> Result<(), String>;
    /// Counts the objects under `prefix`.
    async fn list(&self, prefix: &Path) -> Result<usize, String>;
    /// Waits until work the target does in the background after an operation (a lease
    /// release) is done, so that it does not weigh on the next target's timing. Not timed.
    async fn settled(&self) {}
}

/// A [`Target`] over a [`CommitStore`](crate::CommitStore): its operations are
/// [`StoreTarget`]'s, and it settles by waiting for the background lease releases.
#[derive(Debug, Clone)]
pub struct CommitTarget(pub Arc<crate::CommitStore>);

#[async_trait]
impl Target for CommitTarget {
    async fn create(&self, path: &Path, body: Bytes) -> Result<bool, String> {
        self.store().create(path, body).await
    }
    async fn update(&self, path: &Path, body: Bytes, etag: &str) -> Result<bool, String> {
        self.store().update(path, body, etag).await
    }
    async fn copy_if_absent(&self, from: &Path, to: &Path) -> Result<bool, String> {
        self.store().copy_if_absent(from, to).await
    }
    async fn get(&self, path: &Path) -> Result<Option<(Bytes, String)>, String> {
        self.store().get(path).await
    }
    async fn put(&self, path: &Path, body: Bytes) -> Result<(), String> {
        self.store().put(path, body).await
    }
    async fn delete(&self, path: &Path) -> Result<(), String> {
        self.store().delete(path).await
    }
    async fn list(&self, prefix: &Path) -> Result<usize, String> {
        self.store().list(prefix).await
    }
    async fn settled(&self) {
        self.0.leases().settled().await;
    }
}

impl CommitTarget {
    fn store(&self) -> StoreTarget {
        StoreTarget(self.0.clone())
    }
}

/// In which order the targets take their turn at each operation of a latency scenario.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Order {
    /// Rotated every operation (lane 0 first, then lane 1 first, ...): no target always
    /// follows another. What the reported figures use.
    #[default]
    Rotated,
    /// Always lane 0, lane 1, ...
    Forward,
    /// Always the last lane first.
    Reversed,
}

/// A [`Target`] over an object_store 0.14 store, using its conditional put and copy modes
/// (so a `CommitStore` goes through leases, and a store with native conditions uses them).
#[derive(Debug, Clone)]
pub struct StoreTarget(pub Arc<dyn ObjectStore>);

#[async_trait]
impl Target for StoreTarget {
    async fn create(&self, path: &Path, body: Bytes) -> Result<bool, String> {
        crate::race::create_if_absent(&*self.0, path, body).await
    }

    async fn update(&self, path: &Path, body: Bytes, etag: &str) -> Result<bool, String> {
        let mode = PutMode::Update(UpdateVersion {
            e_tag: Some(etag.to_owned()),
            version: None,
        });
        match self.0.put_opts(path, body.into(), mode.into()).await {
            Ok(_) => Ok(true),
            Err(object_store::Error::Precondition { .. }) => Ok(false),
            Err(e) => Err(e.to_string()),
        }
    }

    async fn copy_if_absent(&self, from: &Path, to: &Path) -> Result<bool, String> {
        let options = CopyOptions::new().with_mode(CopyMode::Create);
        match self.0.copy_opts(from, to, options).await {
            Ok(()) => Ok(true),
            Err(object_store::Error::AlreadyExists { .. }) => Ok(false),
            Err(e) => Err(e.to_string()),
        }
    }

    async fn get(&self, path: &Path) -> Result<Option<(Bytes, String)>, String> {
        match self.0.get(path).await {
            Ok(result) => {
                let etag = result.meta.e_tag.clone().unwrap_or_default();
                let body = result.bytes().await.map_err(|e| e.to_string())?;
                Ok(Some((body, etag)))
            }
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(e.to_string()),
        }
    }

    async fn put(&self, path: &Path, body: Bytes) -> Result<(), String> {
        self.0
            .put(path, body.into())
            .await
            .map(|_| ())
            .map_err(|e| e.to_string())
    }

    async fn delete(&self, path: &Path) -> Result<(), String> {
        self.0.delete(path).await.map_err(|e| e.to_string())
    }

    async fn list(&self, prefix: &Path) -> Result<usize, String> {
        let listed: Vec<_> = self
            .0
            .list(Some(prefix))
            .try_collect()
            .await
            .map_err(|e| e.to_string())?;
        Ok(listed.len())
    }
}

/// One target and the prefix its objects go under.
pub type Lane<'a> = (&'a dyn Target, Path);

/// Runs `op` `n` times on every lane, interleaved (each operation on every lane, in
/// `order`, then the next), so that drift in the servers over the run weighs on every lane
/// alike; after each lane's turn its background work settles, untimed, so that it does not
/// slow the next lane's. Returns each lane's latencies.
async fn interleaved<'a, F, Fut>(
    lanes: &[Lane<'a>],
    n: usize,
    order: Order,
    mut op: F,
) -> Result<Vec<Percentiles>, String>
where
    F: FnMut(&'a dyn Target, &Path, usize) -> Fut,
    Fut: Future<Output = Result<(), String>>,
{
    let mut samples = vec![Vec::with_capacity(n); lanes.len()];
    let count = lanes.len();
    for i in 0..n {
        for turn in 0..count {
            let k = match order {
                Order::Rotated => (i + turn) % count,
                Order::Forward => turn,
                Order::Reversed => count - 1 - turn,
            };
            let (target, prefix) = &lanes[k];
            let started = Instant::now();
            op(*target, prefix, i).await?;
            samples[k].push(started.elapsed());
            target.settled().await;
        }
    }
    Ok(samples.into_iter().map(Percentiles::of).collect())
}

/// Scenario 1: `n` creates of fresh paths, one at a time per lane, the lanes taking turns
/// in `order`.
pub async fn uncontended_create(
    lanes: &[Lane<'_>],
    n: usize,
    order: Order,
) -> Result<Vec<Percentiles>, String> {
    interleaved(lanes, n, order, |t, prefix, i| {
        let path = prefix.clone().join(format!("create-{i}"));
        async move {
            let won = t.create(&path, Bytes::from_static(b"{}")).await?;
            if won {
                Ok(())
            } else {
                Err(format!("{path}: a fresh path was taken"))
            }
        }
    })
    .await
}

/// Scenario 2: object_store's own race: `workers` each incrementing a counter at `path`
/// `increments` times with read-then-conditional-update. Returns the wall time after
/// checking the final count.
pub async fn increment_race(
    t: &dyn Target,
    path: &Path,
    workers: usize,
    increments: usize,
) -> Result<Duration, String> {
    let started = Instant::now();
    let worker = || async {
        for _ in 0..increments {
            loop {
                let done = match t.get(path).await? {
                    Some((body, etag)) => {
                        let n: usize = std::str::from_utf8(&body)
                            .ok()
                            .and_then(|s| s.parse().ok())
                            .ok_or_else(|| format!("counter holds {body:?}"))?;
                        t.update(path, Bytes::from((n + 1).to_string()), &etag)
                            .await?
                    }
                    None => t.create(path, Bytes::from_static(b"1")).await?,
                };
                if done {
                    break;
                }
            }
        }
        Ok::<(), String>(())
    };
    futures::future::try_join_all((0..workers).map(|_| worker())).await?;
    let elapsed = started.elapsed();
    let final_count = t.get(path).await?.map(|(b, _)| b).unwrap_or_default();
    let expected = (workers * increments).to_string();
    if final_count.as_ref() != expected.as_bytes() {
        return Err(format!(
            "the counter ended at {final_count:?}, not {expected}: increments were lost"
        ));
    }
    Ok(elapsed)
}

/// Scenario 3: `rounds` of create, delete, create again at one path per lane; returns
/// the time of each re-create.
pub async fn delete_then_recreate(
    lanes: &[Lane<'_>],
    rounds: usize,
) -> Result<Vec<Percentiles>, String> {
    interleaved(lanes, rounds, Order::Rotated, |t, prefix, _| {
        let path = prefix.clone().join("recreated");
        async move {
            t.create(&path, Bytes::from_static(b"v1")).await?;
            t.delete(&path).await?;
            // Only the re-create is timed in the report's sense; the first create and
            // delete cost the same on every lane.
            let recreated = t.create(&path, Bytes::from_static(b"v2")).await?;
            t.delete(&path).await?;
            if recreated {
                Ok(())
            } else {
                Err(format!("{path}: the re-create found the deleted object"))
            }
        }
    })
    .await
}

/// Scenario 4: `n` copies of one source to fresh targets, each if absent.
pub async fn copy_if_absent(lanes: &[Lane<'_>], n: usize) -> Result<Vec<Percentiles>, String> {
    for (t, prefix) in lanes {
        t.put(
            &prefix.clone().join("copy-source"),
            Bytes::from_static(b"source"),
        )
        .await?;
    }
    interleaved(lanes, n, Order::Rotated, |t, prefix, i| {
        let (from, to) = (
            prefix.clone().join("copy-source"),
            prefix.clone().join(format!("copy-{i}")),
        );
        async move {
            let won = t.copy_if_absent(&from, &to).await?;
            if won {
                Ok(())
            } else {
                Err(format!("{to}: a fresh target was taken"))
            }
        }
    })
    .await
}

/// Scenario 5's three passthrough operations, per lane: `n` unconditional 1 KiB puts,
/// `n` gets, and `n` listings of the `n` objects.
pub async fn passthrough(lanes: &[Lane<'_>], n: usize) -> Result<[Vec<Percentiles>; 3], String> {
    let path = |prefix: &Path, i: usize| prefix.clone().join(format!("plain-{i}"));
    let puts = interleaved(lanes, n, Order::Rotated, |t, prefix, i| {
        let path = path(prefix, i);
        async move { t.put(&path, Bytes::from(vec![7u8; 1024])).await }
    })
    .await?;
    let gets = interleaved(lanes, n, Order::Rotated, |t, prefix, i| {
        let path = path(prefix, i);
        async move {
            t.get(&path)
                .await?
                .map(|_| ())
                .ok_or_else(|| format!("{path} vanished"))
        }
    })
    .await?;
    let lists = interleaved(lanes, n, Order::Rotated, |t, prefix, _| {
        let prefix = prefix.clone();
        async move {
            let count = t.list(&prefix).await?;
            if count == n {
                Ok(())
            } else {
                Err(format!("listed {count} of {n}"))
            }
        }
    })
    .await?;
    Ok([puts, gets, lists])
}
