//! object_store 0.12.5's DynamoCommit, step for step (its `aws/dynamo.rs`,
//! `conditional_op` and `try_lock`), as a writer sharing the simulation's table and
//! paths with ours: the precondition HEAD, a PutItem at generation 0 on
//! `attribute_not_exists`, and on a conflict a wait of `timeout x skew` from when the
//! conflict was seen, polling the HEAD every 100 ms, then a reclaim at generation g+1 on
//! `attribute_exists AND generation = :g` alone; its data write is plain, dropped at the
//! lease's expiry; it never renews or releases, and its records carry no owner. Its
//! deletes are plain.
//!
//! Its own requests to the object store are prompt and fault-free (reads never stall,
//! writes never linger): 0.12.5's zombie writes and stale checks are its own flaws,
//! shown elsewhere (`tests/zombie_writes.rs`); here it stands for the old writers a
//! rolling upgrade leaves beside ours, so that what ours do to it, and it to ours, is
//! what the run checks.

use std::sync::Arc;
use std::time::Duration;

use dynacommit::lease::{Clock, Expect, LeaseRecord, LeaseTable, PutOutcome};
use object_store::path::Path;
use object_store::{PutMode, PutResult};

use super::clock::NodeClock;
use super::store::SimStore;
use super::table::NodeTable;
use super::world::{T, lease_config};

/// 0.12.5's `test_interval`: how often a waiter re-runs the precondition.
const POLL: Duration = Duration::from_millis(100);

/// One 0.12.5 writer process.
pub struct OldWriter {
    pub table: Arc<NodeTable>,
    pub clock: Arc<NodeClock>,
    pub store: Arc<SimStore>,
}

/// What 0.12.5 remembers of a lease it saw: when it saw it, on its own clock.
struct Seen {
    acquire: tokio::time::Instant,
    generation: u64,
    timeout: Duration,
}

fn generic(message: &str) -> object_store::Error {
    object_store::Error::Generic {
        store: "DynamoDB",
        source: message.to_owned().into(),
    }
}

impl OldWriter {
    /// `check_precondition`: a create needs the object absent, an update its ETag.
    async fn check(&self, path: &Path, etag: Option<&str>) -> object_store::Result<()> {
        let found = self.store.head_now(path).await;
        match (etag, found) {
            (None, None) => Ok(()),
            (None, Some(_)) => Err(object_store::Error::AlreadyExists {
                path: path.to_string(),
                source: "exists".into(),
            }),
            (Some(expected), Some(etag)) if etag == expected => Ok(()),
            (Some(_), _) => Err(object_store::Error::Precondition {
                path: path.to_string(),
                source: "ETag mismatch".into(),
            }),
        }
    }

    /// A conditional put as 0.12.5 makes it.
    pub async fn put(
        &self,
        path: &Path,
        payload: bytes::Bytes,
        mode: PutMode,
    ) -> object_store::Result<PutResult> {
        let config = lease_config();
        let etag = match &mode {
            PutMode::Create => None,
            PutMode::Update(version) => version.e_tag.clone(),
            PutMode::Overwrite => unreachable!("0.12.5 takes no lease for a plain put"),
        };
        let etag = etag.as_deref();
        self.check(path, etag).await?;
        let mut previous: Option<Seen> = None;
        loop {
            let (generation, expect) = match &previous {
                None => (0, Expect::Absent),
                Some(seen) => (seen.generation + 1, Expect::Generation(seen.generation)),
            };
            let wall = self.clock.unix_time() + config.ttl;
            let record = LeaseRecord {
                path: path.to_string(),
                etag: etag.unwrap_or("*").to_owned(),
                generation,
                timeout: T,
                ttl: Some(wall.as_secs() as i64),
                owner: None,
                value: None,
                released: false,
                holder: None,
            };
            let acquire = self.clock.now();
            match self.table.put(&record, &expect).await {
                Ok(PutOutcome::Written) => {
                    let expiry = self.clock.sleep_until(acquire + T);
                    return tokio::select! {
                        written = self.store.put_plainly(path, payload) => written,
                        () = expiry => Err(generic("Failed to perform conditional operation")),
                    };
                }
                Ok(PutOutcome::Conflict(Some(stood))) => {
                    let seen = Seen {
                        acquire: self.clock.now(),
                        generation: stood.generation,
                        timeout: stood.timeout,
                    };
                    let expiry = seen.timeout * config.max_clock_skew_rate;
                    // `tokio::time::interval`: the first tick at once, then every 100 ms.
                    let mut first = true;
                    loop {
                        if !first {
                            self.clock.sleep(POLL).await;
                        }
                        first = false;
                        self.check(path, etag).await?;
                        if self.clock.now().saturating_duration_since(seen.acquire) > expiry {
                            previous = Some(seen);
                            break;
                        }
                    }
                }
                Ok(PutOutcome::Conflict(None)) => {
                    return Err(generic(
                        "Failed to extract lease from conflict ReturnValuesOnConditionCheckFailure response",
                    ));
                }
                Err(e) => return Err(generic(&e.to_string())),
            }
        }
    }
}
