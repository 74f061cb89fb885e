//! The simulated lease table: one shared in-process table (the real `MemoryLeaseTable`'s
//! conditions) that DynamoDB's TTL cleans up, and a faulty link to it for every node.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use dynacommit::lease::{
    Expect, LeaseRecord, LeaseTable, MemoryLeaseTable, PutOutcome, TableError,
};
use tokio::time::Instant;

use super::clock::EPOCH;
use super::world::{T, World};

/// The table every node shares.
pub struct SimTable {
    world: Arc<World>,
    records: MemoryLeaseTable,
    /// Owners whose records have been written released: none of them may write an
    /// unreleased record again (a renewal landing after its release resurrects the lease).
    released: Mutex<std::collections::BTreeSet<String>>,
}

impl SimTable {
    pub fn new(world: Arc<World>) -> Arc<Self> {
        Arc::new(Self {
            world,
            records: MemoryLeaseTable::new(),
            released: Mutex::default(),
        })
    }

    /// Applies a conditional write now, checking that no released lease comes back.
    async fn apply(&self, record: &LeaseRecord, expect: &Expect) -> PutOutcome {
        let outcome = match self.records.put(record, expect).await {
            Ok(outcome) => outcome,
            Err(e) => unreachable!("the in-process table does not fail: {e}"),
        };
        if outcome == PutOutcome::Written
            && let Some(owner) = &record.owner
        {
            let mut released = self.released.lock().unwrap();
            if record.released {
                released.insert(owner.clone());
            } else if released.contains(owner) {
                self.world.violation(format!(
                    "the lease on {}#{} of owner {owner} was written unreleased at generation {} \
                     after its release: resurrected",
                    record.path, record.etag, record.generation
                ));
            }
        }
        outcome
    }

    fn read(&self, path: &str, etag: &str) -> Option<LeaseRecord> {
        self.records
            .records()
            .into_iter()
            .find(|r| r.path == path && r.etag == etag)
    }

    /// Every record, for operators and checks.
    pub fn records(&self) -> Vec<LeaseRecord> {
        self.records.records()
    }

    /// Deletes a record, as an operator would.
    pub fn delete(&self, record: &LeaseRecord) {
        self.records.remove(&record.path, &record.etag);
    }

    /// DynamoDB's TTL: every so often, deletes some of the records whose `ttl` (epoch
    /// seconds) has passed by true time, so expired records vanish at random moments.
    pub async fn sweep_expired(self: Arc<Self>, until: Instant) {
        while Instant::now() < until {
            tokio::time::sleep(Duration::from_millis(50 + self.world.pick(0..450))).await;
            let now = (EPOCH + self.world.elapsed()).as_secs() as i64;
            for record in self.records.records() {
                if record.ttl.is_some_and(|ttl| ttl < now) && self.world.chance(0.3) {
                    self.records.remove(&record.path, &record.etag);
                }
            }
        }
    }
}

/// How one table write goes.
#[derive(Debug, Clone, Copy)]
enum Fate {
    Normal,
    LostAnswer,
    Retried,
    Failed,
    LateApply(Duration),
}

/// Own records by (path, etag, owner, generation): when first read back, and whether
/// reported.
type OwnReads = BTreeMap<(String, String, String, u64), (Instant, bool)>;

tokio::task_local! {
    /// Which of its node's tasks the running code serves, where a node runs several
    /// sharing one process: a task waiting on a sibling's lease is not waiting on itself.
    pub static TASK: usize;
}

/// The running task of its node: 0 outside a [`TASK`] scope (a node of one task, or a
/// background request).
fn task() -> usize {
    TASK.try_with(|t| *t).unwrap_or(0)
}

/// One node's link to the table.
pub struct NodeTable {
    world: Arc<World>,
    shared: Arc<SimTable>,
    node: usize,
    outage_until: Mutex<Option<Instant>>,
    /// The owner nonce of the latest acquisition attempt of each task of this node (see
    /// [`TASK`]; one, unless the node's tasks share its process).
    current_owner: Mutex<BTreeMap<usize, Option<String>>>,
    /// When this node first read each of its own records back: reading one again much
    /// later means it is waiting on itself.
    own_reads: Mutex<OwnReads>,
}

impl std::fmt::Debug for NodeTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "NodeTable({})", self.node)
    }
}

fn ambiguous(message: &str) -> TableError {
    TableError::Injected {
        message: message.into(),
        ambiguous: true,
    }
}

impl NodeTable {
    /// A new operation of the node begins: no acquisition of it has written yet, so a
    /// record it reads now (before its first PutItem, as a writer under contention reads
    /// first) is not its own, even if an earlier operation of the node wrote it.
    pub fn begin_operation(&self) {
        self.current_owner.lock().unwrap().insert(task(), None);
    }

    pub fn new(world: Arc<World>, shared: Arc<SimTable>, node: usize) -> Arc<Self> {
        Arc::new(Self {
            world,
            shared,
            node,
            outage_until: Mutex::default(),
            current_owner: Mutex::default(),
            own_reads: Mutex::default(),
        })
    }

    /// Takes the link down for `length`.
    pub fn outage(&self, length: Duration) {
        *self.outage_until.lock().unwrap() = Some(Instant::now() + length);
    }

    fn link_down(&self) -> bool {
        self.outage_until
            .lock()
            .unwrap()
            .is_some_and(|until| Instant::now() < until)
    }

    fn fate(&self) -> Fate {
        let p = &self.world.profile;
        let roll = self.world.pick(0..1_000_000) as f64 / 1_000_000.0;
        let mut edge = p.table_lost_answer;
        if roll < edge {
            return Fate::LostAnswer;
        }
        edge += p.table_late_apply;
        if roll < edge {
            return Fate::LateApply(self.world.upto(T * 2));
        }
        edge += p.table_retried;
        if roll < edge {
            return Fate::Retried;
        }
        edge += p.table_failed;
        if roll < edge {
            return Fate::Failed;
        }
        Fate::Normal
    }

    /// Checks that a record this node reads back is not its own, read long before too.
    fn check_not_waiting_on_itself(&self, record: &LeaseRecord) {
        let current = self
            .current_owner
            .lock()
            .unwrap()
            .get(&task())
            .cloned()
            .flatten();
        if record.released || record.owner.is_none() || record.owner != current {
            return;
        }
        let key = (
            record.path.clone(),
            record.etag.clone(),
            current.unwrap_or_default(),
            record.generation,
        );
        let now = Instant::now();
        let mut reads = self.own_reads.lock().unwrap();
        let (first, reported) = reads.entry(key).or_insert((now, false));
        // One poll interval on the slowest clock, and the read's own round trips.
        let allowed = Duration::from_millis(300);
        if now - *first > allowed && !*reported {
            *reported = true;
            self.world.violation(format!(
                "node {} has waited {:?} on its own lease {}#{} at generation {}",
                self.node,
                now - *first,
                record.path,
                record.etag,
                record.generation
            ));
        }
    }
}

#[async_trait]
impl LeaseTable for NodeTable {
    async fn put(&self, record: &LeaseRecord, expect: &Expect) -> Result<PutOutcome, TableError> {
        if !matches!(expect, Expect::Owned { .. }) {
            self.current_owner
                .lock()
                .unwrap()
                .insert(task(), record.owner.clone());
        }
        let p = &self.world.profile;
        let (to, back) = (
            self.world.delay(p.table_slow, p.table_slow_max),
            self.world.delay(p.table_slow, p.table_slow_max),
        );
        if self.link_down() {
            tokio::time::sleep(to).await;
            return Err(ambiguous("no route to the table"));
        }
        let fate = self.fate();
        if trace() {
            eprintln!(
                "{:?} node {} put {}#{} g{} {} released={} expect {:?} fate {:?}",
                self.world.elapsed(),
                self.node,
                record.path,
                record.etag,
                record.generation,
                short(&record.owner),
                record.released,
                expect,
                fate
            );
        }
        let (shared, record, expect) = (self.shared.clone(), record.clone(), expect.clone());
        let (answer, answered) = tokio::sync::oneshot::channel();
        // From here the request is on the wire: it goes its way whether or not the caller
        // still waits for the answer.
        tokio::spawn(async move {
            tokio::time::sleep(to).await;
            let outcome = match fate {
                Fate::Normal => Ok(shared.apply(&record, &expect).await),
                Fate::LostAnswer => {
                    shared.apply(&record, &expect).await;
                    Err(ambiguous("answer lost after the write applied"))
                }
                Fate::Retried => {
                    shared.apply(&record, &expect).await;
                    Ok(shared.apply(&record, &expect).await)
                }
                Fate::Failed => Err(ambiguous("failed before applying")),
                Fate::LateApply(extra) => {
                    tokio::time::sleep(back).await;
                    let _ = answer.send(Err(ambiguous("timed out; the write is still on its way")));
                    tokio::time::sleep(extra).await;
                    shared.apply(&record, &expect).await;
                    return;
                }
            };
            tokio::time::sleep(back).await;
            let _ = answer.send(outcome);
        });
        answered
            .await
            .unwrap_or_else(|_| Err(ambiguous("the request was lost")))
    }

    async fn get(&self, path: &str, etag: &str) -> Result<Option<LeaseRecord>, TableError> {
        let p = &self.world.profile;
        let (to, back) = (
            self.world.delay(p.table_slow, p.table_slow_max),
            self.world.delay(p.table_slow, p.table_slow_max),
        );
        tokio::time::sleep(to).await;
        if self.link_down() || self.world.chance(p.table_read_failed) {
            return Err(TableError::Injected {
                message: "read failed".into(),
                ambiguous: false,
            });
        }
        let record = self.shared.read(path, etag);
        tokio::time::sleep(back).await;
        if trace() {
            eprintln!(
                "{:?} node {} get {path}#{etag} -> {:?}",
                self.world.elapsed(),
                self.node,
                record
                    .as_ref()
                    .map(|r| (r.generation, short(&r.owner), r.released))
            );
        }
        if let Some(record) = &record {
            self.check_not_waiting_on_itself(record);
        }
        Ok(record)
    }

    fn describe(&self) -> String {
        format!("simulated table, node {}", self.node)
    }
}

/// Whether to print every table request (`DYNACOMMIT_SIM_TRACE`, with one seed).
fn trace() -> bool {
    std::env::var_os("DYNACOMMIT_SIM_TRACE").is_some()
}

/// The first characters of an owner nonce, for traces.
fn short(owner: &Option<String>) -> String {
    owner
        .as_deref()
        .map_or("-".to_owned(), |o| o.chars().take(6).collect())
}
