//! What every part of one simulation shares: the seed's random numbers, the fault
//! profile, the settings, and the list of invariant violations found.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use dynacommit::lease::LeaseConfig;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use tokio::time::Instant;

/// The lease timeout of every simulation; all other times are drawn relative to it.
pub const T: Duration = Duration::from_secs(1);

/// How long a simulation runs its workload before it lets what is in flight settle.
pub const RUN_FOR: Duration = Duration::from_secs(24);

/// The lease settings every node shares: the shortest record lifetime allowed, so TTL
/// deletions happen within a run.
pub fn lease_config() -> LeaseConfig {
    LeaseConfig::new("sim")
        .with_timeout(T)
        .with_max_clock_skew_rate(3)
        .with_poll_interval(Duration::from_millis(100))
        .with_ttl(Duration::from_secs(6))
}

/// How a seed's store may treat conditional writes (`store::Conditions` holds the
/// details drawn).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreKind {
    /// Refuses the headers (client-side, or with a 501).
    Refuses,
    /// Ignores them.
    Ignores,
    /// Enforces them atomically, from the start.
    Enforces,
    /// Ignores them until a moment of the run, enforces them from then on.
    EnforcesFrom,
}

/// How often each fault happens: probabilities per request or per operation.
#[derive(Debug, Clone)]
pub struct Profile {
    /// Table write applied, its answer lost (an ambiguous error).
    pub table_lost_answer: f64,
    /// Table write answered with an ambiguous error first, applied up to 2 T later.
    pub table_late_apply: f64,
    /// Table write applied, then answered as its own retry would be (a conflict showing
    /// the record it wrote).
    pub table_retried: f64,
    /// Table write not applied, ambiguous error.
    pub table_failed: f64,
    /// Table read failed.
    pub table_read_failed: f64,
    /// A table request slow (up to `table_slow_max` each way) instead of a few
    /// milliseconds.
    pub table_slow: f64,
    /// How slow a slow table request is at most, each way (T/3 in the mixed profile).
    pub table_slow_max: Duration,
    /// A node's link to the table goes down for 0.5 to 2 T at the start of an operation.
    pub table_outage: f64,
    /// TTL deletes expired records.
    pub ttl_deletes: bool,
    /// Object write slow in flight (up to 1.5 T), landing even if dropped.
    pub store_slow_write: f64,
    /// Object write (or delete) applied, its answer slow on the way back (up to T).
    pub store_slow_answer: f64,
    /// Object write applied, answer lost (a timeout: `Generic`).
    pub store_lost_answer: f64,
    /// Object write not applied (`Generic`).
    pub store_failed: f64,
    /// Object write answered `PermissionDenied` by a retry while the first attempt
    /// lingers and lands up to T after the answer.
    pub store_known_error_after_retry: f64,
    /// Object write applied twice: the answer to the first attempt is lost, the client
    /// retries after up to T, and the retry applies again (a new ETag) and is answered.
    /// Only in seeds that hold paths, unless `edge_faults_without_holding`: see
    /// `a_duplicated_write_is_a_known_gap`.
    pub store_duplicated: f64,
    /// Delete whose first attempt lingers: the client's retry applies and is answered,
    /// and the first attempt lands up to T after the answer. Only where
    /// `store_duplicated` is.
    pub store_lingering_delete: f64,
    /// Whether duplicated writes and lingering deletes happen in seeds that do not hold
    /// paths too (the known gaps' tests).
    pub edge_faults_without_holding: bool,
    /// The chance that a seed's nodes all hold paths (`CommitStore::hold_paths`): such a
    /// seed runs no object_store 0.12.5 writer.
    pub hold_paths: f64,
    /// The chance that a seed's nodes also copy and rename (`copy_ops` of their
    /// operations): each stages an object of its own and copies or renames it, if absent,
    /// to one of a few shared targets, which they also delete.
    pub copy_seeds: f64,
    /// In a seed that copies, the chance that an operation is a copy or a rename (or the
    /// delete of a target).
    pub copy_ops: f64,
    /// The chance that a seed's store gives the same bytes the same ETag (their digest,
    /// as S3's): its nodes then also write bytes a path held before (`rewrites`).
    pub content_etag_seeds: f64,
    /// In such a seed, the chance that an update of a log object writes bytes it held
    /// before: the current version's again, or an earlier one's (A, B, A).
    pub rewrites: f64,
    /// HEAD or GET stalled (its answer, read on arrival, held up to 4 T).
    pub store_read_stall: f64,
    /// An operation goes to a lock-style path instead of a log object: created if absent,
    /// deleted through the store if present (so kept create leases are released on
    /// delete, and re-creates race).
    pub create_delete: f64,
    /// An operation crashes (its future dropped) at a random point within 3 T.
    pub crash: f64,
    /// Tasks in each node process, sharing its `CommitStore` (so its lease manager), each
    /// running operations one after another: their races for one lease are settled in
    /// the manager's queue, and one task's crash drops only its own operation (the
    /// process restarts for the tasks that follow).
    pub tasks_per_node: usize,
    /// Longest pause between a node's operations.
    pub max_think: Duration,
    /// A pause of up to 8 s instead (a path left alone long enough for its lease records
    /// to expire and be deleted by TTL, or by an operator).
    pub long_think: f64,
    /// The kinds of store a seed draws from.
    pub store_kinds: Vec<StoreKind>,
    /// The chance that a seed runs an object_store 0.12.5 writer (`old.rs`) beside its
    /// nodes, on the same table and paths (every node of ours then in `lease` mode, as
    /// docs/protocol.md tells a fleet with 0.12.5 writers).
    pub old_writer: f64,
    /// The chance, every 0.5 s of the run, that a deleter outside our processes (a plain
    /// S3 client, a lifecycle rule) deletes a lock-style object if it is there.
    pub foreign_deletes: f64,
    /// If set, a create by one of our nodes that takes longer than this is a violation:
    /// for fault-free profiles, where no holder dies and no answer is lost, so no wait
    /// for a lease's expiry is ever due.
    pub max_create_wait: Option<Duration>,
    /// Whether node processes draw their condition mode (`lease`, `auto`, and `native`
    /// where the store enforces conditions throughout), again at each restart (a rolling
    /// move between modes); otherwise every process is in `lease` mode.
    pub mixed_modes: bool,
}

impl Profile {
    /// Everything at once, at rates that leave most operations clean.
    pub fn mixed() -> Self {
        Self {
            table_lost_answer: 0.02,
            table_late_apply: 0.02,
            table_retried: 0.02,
            table_failed: 0.02,
            table_read_failed: 0.02,
            table_slow: 0.05,
            table_slow_max: T / 3,
            table_outage: 0.03,
            ttl_deletes: true,
            store_slow_write: 0.1,
            store_slow_answer: 0.05,
            store_lost_answer: 0.02,
            store_failed: 0.02,
            store_known_error_after_retry: 0.03,
            store_duplicated: 0.05,
            store_lingering_delete: 0.1,
            edge_faults_without_holding: false,
            hold_paths: 0.25,
            copy_seeds: 0.3,
            copy_ops: 0.3,
            content_etag_seeds: 0.3,
            rewrites: 0.3,
            store_read_stall: 0.08,
            create_delete: 0.25,
            crash: 0.15,
            tasks_per_node: 1,
            max_think: Duration::from_millis(2500),
            long_think: 0.15,
            store_kinds: vec![
                StoreKind::Refuses,
                StoreKind::Ignores,
                StoreKind::Enforces,
                StoreKind::EnforcesFrom,
            ],
            mixed_modes: true,
            old_writer: 0.3,
            foreign_deletes: 0.1,
            max_create_wait: None,
        }
    }

    /// No faults, no crashes, no 0.12.5 writer (whose leases are never released), but
    /// objects deleted by a deleter outside our processes: no create of ours may wait
    /// for a lease's expiry, so each finishes within `max_create_wait` (the liveness
    /// invariant).
    pub fn quiet() -> Self {
        Self {
            table_lost_answer: 0.0,
            table_late_apply: 0.0,
            table_retried: 0.0,
            table_failed: 0.0,
            table_read_failed: 0.0,
            table_slow: 0.0,
            table_outage: 0.0,
            store_slow_write: 0.0,
            store_slow_answer: 0.0,
            store_lost_answer: 0.0,
            store_failed: 0.0,
            store_known_error_after_retry: 0.0,
            store_read_stall: 0.0,
            create_delete: 0.5,
            crash: 0.0,
            old_writer: 0.0,
            hold_paths: 0.0,
            foreign_deletes: 0.5,
            max_create_wait: Some(T),
            ..Self::mixed()
        }
    }

    /// This profile with every process in `lease` mode on a store that does not enforce
    /// conditions (refusing or ignoring them): the lease protocol alone must keep every
    /// invariant, as the planted bugs of the lease core need to show.
    pub fn leases_alone(self) -> Self {
        Self {
            store_kinds: vec![StoreKind::Refuses, StoreKind::Ignores],
            mixed_modes: false,
            old_writer: 0.0,
            ..self
        }
    }

    /// A pause between two operations of a node.
    pub fn think(&self, world: &World) -> Duration {
        if world.chance(self.long_think) {
            world.upto(Duration::from_secs(8))
        } else {
            world.upto(self.max_think)
        }
    }
}

/// One simulation's shared state.
pub struct World {
    pub profile: Profile,
    /// Whether this seed's nodes hold paths (`Profile::hold_paths`).
    pub holds_paths: bool,
    /// Whether this seed's nodes copy and rename (`Profile::copy_seeds`).
    pub copies: bool,
    /// Whether this seed's store gives ETags by content (`Profile::content_etag_seeds`).
    pub content_etags: bool,
    /// Tokio time at the start.
    pub origin: Instant,
    rng: Mutex<StdRng>,
    violations: Mutex<Vec<String>>,
}

impl World {
    pub fn new(seed: u64, profile: Profile) -> Arc<Self> {
        // Drawn apart from the seed's other numbers, so that seeds which neither hold paths
        // nor copy run as they did before these choices existed.
        let apart = |salt: u64, p: f64| {
            p > 0.0 && StdRng::seed_from_u64(seed ^ salt).random_bool(p.min(1.0))
        };
        let holds_paths = apart(0x686f_6c64_7061_7468, profile.hold_paths);
        let copies = apart(0x636f_7069_6573_0000, profile.copy_seeds);
        let content_etags = apart(0x6162_6162_6162_6100, profile.content_etag_seeds);
        Arc::new(Self {
            profile,
            holds_paths,
            copies,
            content_etags,
            origin: Instant::now(),
            rng: Mutex::new(StdRng::seed_from_u64(seed)),
            violations: Mutex::default(),
        })
    }

    /// Whether duplicated writes and lingering deletes happen in this seed.
    pub fn edge_faults(&self) -> bool {
        self.holds_paths || self.profile.edge_faults_without_holding
    }

    /// True time since the start, for reports.
    pub fn elapsed(&self) -> Duration {
        Instant::now() - self.origin
    }

    /// Whether an event of probability `p` happens.
    pub fn chance(&self, p: f64) -> bool {
        p > 0.0 && self.rng.lock().unwrap().random_bool(p.min(1.0))
    }

    /// A whole number in `range`.
    pub fn pick(&self, range: std::ops::Range<u64>) -> u64 {
        self.rng.lock().unwrap().random_range(range)
    }

    /// A duration up to `max`, to the millisecond.
    pub fn upto(&self, max: Duration) -> Duration {
        Duration::from_millis(self.pick(0..max.as_millis() as u64 + 1))
    }

    /// A one-way network delay: a few milliseconds, or up to `slow` with probability `p`.
    pub fn delay(&self, p: f64, slow: Duration) -> Duration {
        if self.chance(p) {
            self.upto(slow)
        } else {
            Duration::from_millis(self.pick(0..4))
        }
    }

    /// Records an invariant violation.
    pub fn violation(&self, what: String) {
        let at = self.elapsed();
        self.violations
            .lock()
            .unwrap()
            .push(format!("at {at:?}: {what}"));
    }

    /// A node's clock: its monotonic time at a rate of 0.8 to 1.25, its wall clock off by
    /// up to 0.2 s.
    pub fn node_clock(&self) -> Arc<super::clock::NodeClock> {
        let rate = self.pick(800..1251);
        let offset = self.pick(0..401) as i64 - 200;
        let seed = self.pick(0..u64::MAX);
        Arc::new(super::clock::NodeClock::new(
            self.origin,
            rate,
            1000,
            offset,
            seed,
        ))
    }

    /// The pause before a node's next operation, and perhaps an outage of its table link
    /// starting then.
    pub async fn between_operations(&self, link: &super::table::NodeTable) {
        tokio::time::sleep(self.profile.think(self)).await;
        link.begin_operation();
        if self.chance(self.profile.table_outage) {
            link.outage(T / 2 + self.upto(T * 3 / 2));
        }
    }

    /// `op`'s output, or `None` if the node crashes first (with the profile's chance, at a
    /// random moment within three leases): dropping `op` at an await point is the crash.
    pub async fn unless_crashed<O>(&self, op: impl std::future::Future<Output = O>) -> Option<O> {
        if !self.chance(self.profile.crash) {
            return Some(op.await);
        }
        let crash_after = self.upto(T * 3);
        tokio::select! {
            biased;
            out = op => Some(out),
            () = tokio::time::sleep(crash_after) => None,
        }
    }

    pub fn violations(&self) -> Vec<String> {
        self.violations.lock().unwrap().clone()
    }
}

/// A fresh node process's lease manager: the shared settings, the node's link and clock,
/// and the bugs a test plants.
pub fn node_leases(
    link: &std::sync::Arc<super::table::NodeTable>,
    clock: &std::sync::Arc<super::clock::NodeClock>,
    planted: &[dynacommit::lease::PlantedBug],
) -> dynacommit::lease::LeaseManager {
    let leases = dynacommit::lease::LeaseManager::new(link.clone(), lease_config())
        .expect("valid settings")
        .with_clock(clock.clone());
    planted
        .iter()
        .fold(leases, |leases, bug| leases.with_planted_bug(*bug))
}
