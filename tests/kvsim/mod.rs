//! The key-value store in the deterministic simulator: the real [`DynamoKv`], several
//! clients of it, over a table in process that answers as AWS does ([`table`]), on
//! Tokio's paused clock, all drawn from one seed. Each run's history is checked for
//! linearizability per key, expiry included ([`lincheck`](super::lincheck)), and every
//! `list` against the table's own record of what was there while it ran ([`folders`]).
//!
//! Replays: the faults, the clients' choices, the table's timings, the client's retry
//! jitter, the store's back-off and its counter shards all come from the seed; only the
//! names of revisions and the transactions' idempotency tokens are random, and they
//! steer nothing (they are only compared).

#[path = "../sim/clock.rs"]
pub mod clock;
pub mod expr;
pub mod folders;
pub mod stream;
pub mod table;
pub mod watchers;

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use dynacommit::dynamo::{DynamoClient, RetryConfig};
use dynacommit::kv::{DynamoKv, KvError, KvStore, TxnOp};
use dynacommit::lease::PlantedBug;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use tokio::time::Instant;

use super::lincheck::{self, Entry, Op, Outcome, Time};
use clock::NodeClock;
use table::{EPOCH_MS, FakeTable, Faults, Link};

/// The keys the clients work on: two top folders, one nested.
pub const KEYS: [&str; 4] = ["a/1", "a/2", "a/s/3", "b/4"];
/// The prefixes the clients list.
pub const PREFIXES: [&str; 3] = ["", "a/", "a/s/"];
/// Clients, each a store of its own over the one table.
const CLIENTS: usize = 4;
/// Watchers, each a store of its own over the one table.
const WATCHERS: usize = 2;
/// How long after the start the clients begin.
const WARMUP: Duration = Duration::from_secs(7 * 60);
/// How long the clients work.
const RUN_FOR: Duration = Duration::from_secs(6);

/// A client's clock: the commit simulator's node clock (`tests/sim/clock.rs`) at Tokio's
/// own rate and with no wall-clock offset, reading the simulations' epoch at `origin`, its
/// pauses drawn from `seed`.
pub fn clock(origin: Instant, seed: u64) -> Arc<NodeClock> {
    Arc::new(NodeClock::new(origin, 1, 1, 0, seed))
}

/// Times of the history: Tokio's nanoseconds since the start, shifted left 16 bits, and
/// made strictly increasing, so that events at one instant keep the order they happened
/// in (one thread runs them) and an expiry's instant compares with them.
struct Ticks {
    origin: Instant,
    last: Mutex<Time>,
}

impl Ticks {
    fn at(&self, at: Instant) -> Time {
        (at.saturating_duration_since(self.origin).as_nanos() as u64) << 16
    }

    fn tick(&self) -> Time {
        let mut last = self.last.lock().unwrap();
        *last = self.at(Instant::now()).max(*last + 1);
        *last
    }

    /// The time of wall-clock instant `ms`.
    fn of_wall_ms(&self, ms: u64) -> Time {
        (ms.saturating_sub(EPOCH_MS) * 1_000_000) << 16
    }
}

/// One `list` and what it returned.
#[derive(Debug, Clone)]
pub struct Listing {
    pub prefix: String,
    pub names: Vec<String>,
    pub invoke: Instant,
    pub complete: Instant,
}

/// What one seed's run did and found.
#[derive(Debug, Default)]
pub struct Run {
    pub operations: usize,
    pub unknown: usize,
    pub listings: usize,
    /// Events handed to watchers, and watches that ended with `WatchLost`.
    pub events: usize,
    pub watches_lost: usize,
    pub requests: u64,
    pub violations: Vec<String>,
    pub inconclusive: bool,
}

/// An entry written to expire: clients race its expiry (see [`Shared::edge`]).
#[derive(Debug, Clone)]
struct Edge {
    key: usize,
    value: Vec<u8>,
    revision: dynacommit::kv::Revision,
    expires: Instant,
}

struct Shared {
    ticks: Ticks,
    /// The entries written to expire, newest last.
    edges: Mutex<Vec<Edge>>,
    /// The revision each key was last seen written with, by any client.
    latest: Mutex<std::collections::HashMap<String, String>>,
    history: Mutex<Vec<Entry>>,
    listings: Mutex<Vec<Listing>>,
    violations: Mutex<Vec<String>>,
}

impl Shared {
    fn record(&self, client: usize, key: &str, op: Op, invoke: Time, outcome: Outcome) {
        let complete = self.ticks.tick();
        if let Outcome::Written(rev) = &outcome {
            self.latest
                .lock()
                .unwrap()
                .insert(key.to_owned(), rev.to_string());
        }
        self.history
            .lock()
            .unwrap()
            .push(Entry::new(client, key, op, outcome, invoke, complete));
    }

    /// Notes a write of `value` to key `key` that expires at `expires_ms`, if ever.
    fn wrote(
        &self,
        key: usize,
        value: &[u8],
        revision: &dynacommit::kv::Revision,
        expires_ms: Option<u64>,
    ) {
        if let Some(ms) = expires_ms {
            self.edges.lock().unwrap().push(Edge {
                key,
                value: value.to_vec(),
                revision: revision.clone(),
                expires: self.ticks.origin + Duration::from_millis(ms - EPOCH_MS),
            });
        }
    }

    /// The newest entry written to expire within the next 200 ms, and not overwritten since
    /// as far as the clients know, if any. A client then writes over it
    /// just before its expiry (a first attempt throttled then is retried after it), or
    /// reads it just after: the race in which a retry judged by a stale clock brings back
    /// an entry a reader has seen gone.
    fn edge(&self) -> Option<Edge> {
        let now = Instant::now();
        let latest = self.latest.lock().unwrap();
        self.edges
            .lock()
            .unwrap()
            .iter()
            .rev()
            .find(|e| {
                e.expires > now
                    && e.expires <= now + Duration::from_millis(200)
                    && latest.get(KEYS[e.key]).map(String::as_str) == Some(e.revision.as_str())
            })
            .cloned()
    }

    fn violation(&self, what: String) {
        self.violations.lock().unwrap().push(what);
    }

    /// The outcome of a write that failed: unknown if it may have applied; a definite
    /// failure the caller cannot have caused is a violation (a raw DynamoDB answer the
    /// store should have retried), and the write is left out (it did nothing).
    fn failed_write(&self, client: usize, key: &str, op: Op, invoke: Time, error: KvError) {
        if error.may_have_applied() {
            self.record(client, key, op, invoke, Outcome::Unknown);
        } else if !matches!(error, KvError::Contention { .. }) {
            self.violation(format!(
                "client {client}: {op:?} on {key} failed definitely: {error}"
            ));
        }
    }
}

/// The store of one client, with `planted` taken out.
pub fn store(
    table: &Arc<FakeTable>,
    clock: Arc<NodeClock>,
    planted: Option<PlantedBug>,
) -> DynamoKv {
    let retry = RetryConfig {
        request_timeout: Duration::from_secs(1),
        max_elapsed: Duration::from_secs(10),
        call_deadline: Duration::from_secs(20),
        ..RetryConfig::default()
    };
    let client = DynamoClient::builder()
        .with_endpoint("http://simulated.invalid:8000")
        .with_region("us-east-1")
        .with_credentials("sim", "sim", None)
        .with_retry(retry)
        .with_transport(Arc::new(Link(table.clone())))
        .build()
        .unwrap();
    let kv = DynamoKv::new(client, "kv")
        .with_ttl_grace(Some(Duration::from_secs(1)))
        .with_clock(clock);
    match planted {
        Some(bug) => kv.with_planted_bug(bug),
        None => kv,
    }
}

/// A get of `key` by client `id`, invoked at `invoke`, recorded: the value and revision
/// found, if any.
async fn get(
    id: usize,
    kv: &DynamoKv,
    shared: &Shared,
    key: &str,
    invoke: Time,
) -> Option<(Vec<u8>, dynacommit::kv::Revision)> {
    match kv.get(key.as_bytes()).await {
        Ok(Some(entry)) => {
            let outcome = Outcome::found(entry.value.to_vec(), entry.revision.as_str());
            shared.record(id, key, Op::Get, invoke, outcome);
            Some((entry.value.to_vec(), entry.revision))
        }
        Ok(None) => {
            shared.record(id, key, Op::Get, invoke, Outcome::absent());
            None
        }
        Err(e) => {
            shared.violation(format!("client {id}: get {key} failed: {e}"));
            None
        }
    }
}

/// One client's work: random operations on [`KEYS`] until `until`.
async fn client(id: usize, kv: DynamoKv, shared: Arc<Shared>, mut rng: StdRng, until: Instant) {
    // What this client last saw of each key: the basis of its conditional operations.
    let mut seen: Vec<Option<(Vec<u8>, dynacommit::kv::Revision)>> = vec![None; KEYS.len()];
    let mut seq = 0u64;
    while Instant::now() < until {
        seq += 1;
        let mut k = rng.random_range(0..KEYS.len());
        let mut roll = rng.random_range(0..100);
        if rng.random_bool(0.5)
            && let Some(edge) = shared.edge()
        {
            // At an entry's expiry: a compare-and-swap just before it, or a get just after.
            let swap = rng.random_bool(0.5);
            let at = if swap {
                edge.expires - Duration::from_millis(rng.random_range(0..5))
            } else {
                edge.expires + Duration::from_millis(rng.random_range(0..3))
            };
            tokio::time::sleep_until(at).await;
            k = edge.key;
            if swap {
                seen[k] = Some((edge.value, edge.revision));
                roll = 60;
            } else {
                // A few reads across the moment a late retry would land.
                for after in [2, 5, 10, 20, 40] {
                    let invoke = shared.ticks.tick();
                    get(id, &kv, &shared, KEYS[k], invoke).await;
                    tokio::time::sleep_until(edge.expires + Duration::from_millis(after)).await;
                }
                roll = 0;
            }
        }
        let key = KEYS[k];
        let fresh = format!("c{id}-{seq}").into_bytes();
        // Some writes expire, soon enough to expire within the run.
        let expires_ms = rng.random_bool(0.4).then(|| {
            EPOCH_MS
                + Instant::now()
                    .duration_since(shared.ticks.origin)
                    .as_millis() as u64
                + rng.random_range(20..1500)
        });
        let expires = expires_ms.map(|ms| SystemTime::UNIX_EPOCH + Duration::from_millis(ms));
        let until_time = expires_ms.map(|ms| shared.ticks.of_wall_ms(ms));
        let invoke = shared.ticks.tick();
        if roll < 25 {
            if let Some(entry) = get(id, &kv, &shared, key, invoke).await {
                seen[k] = Some(entry);
            }
        } else if roll < 45 {
            let op = Op::put_until(fresh.clone(), until_time);
            match kv
                .put(key.as_bytes(), Bytes::from(fresh.clone()), expires)
                .await
            {
                Ok(rev) => {
                    shared.wrote(k, &fresh, &rev, expires_ms);
                    seen[k] = Some((fresh, rev.clone()));
                    shared.record(id, key, op, invoke, Outcome::written(rev.as_str()));
                }
                Err(e) => shared.failed_write(id, key, op, invoke, e),
            }
        } else if roll < 55 {
            let op = Op::create_until(fresh.clone(), until_time);
            match kv
                .create(key.as_bytes(), Bytes::from(fresh.clone()), expires)
                .await
            {
                Ok(rev) => {
                    shared.wrote(k, &fresh, &rev, expires_ms);
                    seen[k] = Some((fresh, rev.clone()));
                    shared.record(id, key, op, invoke, Outcome::written(rev.as_str()));
                }
                Err(KvError::AlreadyExists { .. }) => {
                    shared.record(id, key, op, invoke, Outcome::AlreadyExists)
                }
                Err(e) => shared.failed_write(id, key, op, invoke, e),
            }
        } else if roll < 70 && seen[k].is_some() {
            let expected = seen[k].as_ref().map(|s| s.0.clone()).unwrap_or_default();
            let op = Op::cas(expected.clone(), fresh.clone());
            match kv
                .compare_and_swap(key.as_bytes(), &expected, Bytes::from(fresh.clone()), None)
                .await
            {
                Ok(rev) => {
                    seen[k] = Some((fresh, rev.clone()));
                    shared.record(id, key, op, invoke, Outcome::written(rev.as_str()));
                }
                Err(KvError::CompareFailed { .. } | KvError::NotFound { .. }) => {
                    shared.record(id, key, op, invoke, Outcome::Mismatch)
                }
                Err(e) => shared.failed_write(id, key, op, invoke, e),
            }
        } else if roll < 80 && seen[k].is_some() {
            let rev = seen[k].as_ref().map(|s| s.1.clone()).unwrap();
            let op = Op::delete(rev.as_str());
            match kv.conditional_delete(key.as_bytes(), &rev).await {
                Ok(()) => {
                    seen[k] = None;
                    shared.record(id, key, op, invoke, Outcome::Deleted);
                }
                Err(KvError::RevisionMismatch { .. } | KvError::NotFound { .. }) => {
                    shared.record(id, key, op, invoke, Outcome::Mismatch)
                }
                Err(e) => shared.failed_write(id, key, op, invoke, e),
            }
        } else if roll < 90 {
            let prefix = PREFIXES[rng.random_range(0..PREFIXES.len())];
            let started = Instant::now();
            match kv.list(prefix.as_bytes()).await {
                Ok(names) => shared.listings.lock().unwrap().push(Listing {
                    prefix: prefix.to_owned(),
                    names: names
                        .into_iter()
                        .map(|n| String::from_utf8_lossy(&n).into_owned())
                        .collect(),
                    invoke: started,
                    complete: Instant::now(),
                }),
                Err(e) => shared.violation(format!("client {id}: list {prefix:?} failed: {e}")),
            }
        } else {
            // Two keys written in one transaction: each a put on its own key's history.
            let other = (k + 1 + rng.random_range(0..KEYS.len() - 1)) % KEYS.len();
            let second = format!("c{id}-{seq}t").into_bytes();
            let ops = vec![
                TxnOp::put(key.as_bytes(), Bytes::from(fresh.clone())),
                TxnOp::put(KEYS[other].as_bytes(), Bytes::from(second.clone())),
            ];
            let writes = [(k, fresh), (other, second)];
            match kv.transaction(ops).await {
                Ok(revisions) => {
                    for ((k, value), rev) in writes.into_iter().zip(revisions) {
                        let Some(rev) = rev else {
                            shared.violation(format!(
                                "client {id}: a put of a transaction has no revision"
                            ));
                            continue;
                        };
                        seen[k] = Some((value.clone(), rev.clone()));
                        shared.record(
                            id,
                            KEYS[k],
                            Op::put(value),
                            invoke,
                            Outcome::written(rev.as_str()),
                        );
                    }
                }
                Err(e) if e.may_have_applied() => {
                    for (k, value) in writes {
                        shared.record(id, KEYS[k], Op::put(value), invoke, Outcome::Unknown);
                    }
                }
                Err(KvError::Contention { .. }) => {}
                Err(e) => {
                    shared.violation(format!("client {id}: a transaction failed definitely: {e}"))
                }
            }
        }
    }
}

/// A runtime of one thread on Tokio's paused clock: what makes a seed replay.
pub fn paused_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap()
}

/// Runs seed `seed`, with `planted` taken out of every client's store.
pub fn run_seed(seed: u64, planted: Option<PlantedBug>) -> Run {
    let runtime = paused_runtime();
    runtime.block_on(async move {
        if std::env::var_os("DYNACOMMIT_KV_SIM_WATCH").is_some() {
            eprintln!("seed {seed}");
        }
        let mut rng = StdRng::seed_from_u64(seed);
        let faults = Faults::draw(&mut rng);
        let table = FakeTable::new(rng.random(), faults);
        let origin = Instant::now();
        let shared = Arc::new(Shared {
            ticks: Ticks {
                origin,
                last: Mutex::new(0),
            },
            edges: Mutex::default(),
            latest: Mutex::default(),
            history: Mutex::default(),
            listings: Mutex::default(),
            violations: Mutex::default(),
        });
        // The watchers begin first, and the clients once the watches are older than the
        // margin a watch allows for clocks apart (6 minutes): from then on, a shard it
        // adopts is one it reads from its first record, not from its oldest passing over
        // what came before the watch.
        let start = origin + WARMUP;
        let until = start + RUN_FOR;
        table.stream(|s| s.busy(start, until));
        let mut stores = Vec::new();
        let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let mut watchers = Vec::new();
        for _ in 0..WATCHERS {
            // A watcher's clock up to four minutes off the table's (AWS refuses requests
            // signed over five minutes off): it judges the ages of shards and of itself.
            let skew = rng.random_range(-240_000..=240_000);
            let clock = Arc::new(NodeClock::new(origin, 1, 1, skew, rng.random()));
            let kv = store(&table, clock, planted);
            stores.push(kv.clone());
            let prefix = PREFIXES[rng.random_range(0..PREFIXES.len())];
            let watcher_rng = StdRng::seed_from_u64(rng.random());
            watchers.push(tokio::spawn(watchers::watcher(
                kv,
                prefix,
                watcher_rng,
                start,
                done.clone(),
                table.clone(),
            )));
        }
        tokio::time::sleep_until(start).await;
        let sweeper = tokio::spawn(table.clone().sweep_ttl(until + Duration::from_secs(3)));
        let mut clients = Vec::new();
        for id in 0..CLIENTS {
            let clock = clock(origin, rng.random());
            let kv = store(&table, clock, planted);
            stores.push(kv.clone());
            let client_rng = StdRng::seed_from_u64(rng.random());
            clients.push(tokio::spawn(client(
                id,
                kv,
                shared.clone(),
                client_rng,
                until,
            )));
        }
        for c in clients {
            c.await.unwrap();
        }
        // Let what is still in flight (late writes, transactions) land.
        tokio::time::sleep(Duration::from_secs(3)).await;
        sweeper.await.unwrap();
        done.store(true, std::sync::atomic::Ordering::SeqCst);
        let mut logs = Vec::new();
        for w in watchers {
            logs.push(w.await.unwrap());
        }

        let history = shared.history.lock().unwrap().clone();
        let listings = shared.listings.lock().unwrap().clone();
        let mut run = Run {
            operations: history.len(),
            unknown: history
                .iter()
                .filter(|e| e.outcome == Outcome::Unknown)
                .count(),
            listings: listings.len(),
            events: 0,
            watches_lost: 0,
            requests: stores.iter().map(|s| s.client().requests_sent()).sum(),
            violations: std::mem::take(&mut *shared.violations.lock().unwrap()),
            inconclusive: false,
        };
        if std::env::var_os("DYNACOMMIT_KV_SIM_TRACE").is_some() {
            for (i, e) in history.iter().enumerate() {
                eprintln!("#{i} {e:?}");
            }
        }
        // The step budget alone bounds the search: a verdict that depends on how busy the
        // machine is would make a seed pass on one run and fail on the next.
        let options = lincheck::Options {
            time_budget: Duration::from_secs(3600),
            ..lincheck::Options::default()
        };
        match lincheck::check_with(&history, &options) {
            Ok(report) => run.inconclusive = !report.is_conclusive(),
            Err(violation) => run
                .violations
                .push(format!("not linearizable:\n{violation}")),
        }
        let (changes, commits) = table.changes();
        run.violations
            .extend(folders::check(&listings, &changes, &commits, &table));
        for log in &logs {
            run.events += log.events.len();
            run.watches_lost += usize::from(log.lost.is_some());
            run.violations.extend(watchers::check(log, &table));
        }
        run
    })
}
