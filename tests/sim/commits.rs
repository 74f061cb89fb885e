//! The commit scenario: nodes racing to create and update a few objects through
//! `CommitStore`, and to create and delete a few lock-style objects (so that kept create
//! leases are released on delete and re-creates race them), and the check of every write
//! and delete the store applied.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dynacommit::CommitStore;
use dynacommit::lease::PlantedBug;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, UpdateVersion};
use tokio::time::Instant;

use super::clock::NodeClock;
use super::store::{Applied, SimStore, StoreLink};
use super::table::{NodeTable, SimTable};
use super::world::{RUN_FOR, World, node_leases};

const NODES: usize = 4;
const PATHS: u64 = 3;
/// Lock-style paths: created if absent, deleted if present, never updated.
const LOCKS: u64 = 2;

/// What an operation asked for.
#[derive(Debug, Clone)]
enum Kind {
    Create,
    /// Replace the version with this ETag.
    Update(String),
}

#[derive(Debug)]
struct Op {
    kind: Kind,
    acknowledged: bool,
}

/// Every operation, by the payload it writes (unique per operation).
type Registry = Arc<Mutex<BTreeMap<String, Op>>>;

/// What one run did, for the report.
#[derive(Debug, Default, Clone, Copy)]
pub struct Tally {
    pub operations: usize,
    pub acknowledged: usize,
    pub applied: usize,
    /// Deletes applied (of lock-style paths, through `CommitStore`).
    pub deletes: usize,
}

/// A fresh node process: its lease manager (on its own clock) and its `CommitStore`.
fn node_process(
    link: &Arc<NodeTable>,
    clock: &Arc<NodeClock>,
    store: &Arc<SimStore>,
    planted: &[PlantedBug],
) -> CommitStore {
    CommitStore::new(
        Arc::new(StoreLink(store.clone())),
        node_leases(link, clock, planted),
    )
}

async fn node(
    world: Arc<World>,
    id: usize,
    table: Arc<SimTable>,
    store: Arc<SimStore>,
    registry: Registry,
    planted: Vec<PlantedBug>,
) {
    let until = world.origin + RUN_FOR;
    let clock = world.node_clock();
    let link = NodeTable::new(world.clone(), table, id);
    let reader = StoreLink(store.clone());
    let mut process = node_process(&link, &clock, &store, &planted);
    let mut seq = 0;
    while Instant::now() < until {
        world.between_operations(&link).await;
        seq += 1;
        let payload = format!("node{id}-op{seq}");
        if world.chance(world.profile.create_delete) {
            let path = Path::from(format!("lock/{}", world.pick(0..LOCKS)));
            let exists = match reader.head(&path).await {
                Ok(_) => true,
                Err(object_store::Error::NotFound { .. }) => false,
                Err(_) => continue,
            };
            let op = async {
                if exists {
                    process.delete(&path).await.map(|_| ())
                } else {
                    registry.lock().unwrap().insert(
                        payload.clone(),
                        Op {
                            kind: Kind::Create,
                            acknowledged: false,
                        },
                    );
                    let created = process
                        .put_opts(&path, payload.clone().into(), PutMode::Create.into())
                        .await;
                    if created.is_ok()
                        && let Some(op) = registry.lock().unwrap().get_mut(&payload)
                    {
                        op.acknowledged = true;
                    }
                    created.map(|_| ())
                }
            };
            if world.unless_crashed(op).await.is_none() {
                process = node_process(&link, &clock, &store, &planted);
            }
            continue;
        }
        let path = Path::from(format!("log/{}", world.pick(0..PATHS)));
        // Update what is there (as read, perhaps long ago), else create.
        let kind = match reader.head(&path).await {
            Ok(meta) => Kind::Update(meta.e_tag.unwrap_or_default()),
            Err(object_store::Error::NotFound { .. }) => Kind::Create,
            Err(_) => continue,
        };
        let mode = match &kind {
            Kind::Create => PutMode::Create,
            Kind::Update(etag) => PutMode::Update(UpdateVersion {
                e_tag: Some(etag.clone()),
                version: None,
            }),
        };
        registry.lock().unwrap().insert(
            payload.clone(),
            Op {
                kind,
                acknowledged: false,
            },
        );
        let put = process.put_opts(&path, payload.clone().into(), mode.into());
        match world.unless_crashed(put).await {
            Some(Ok(_)) => {
                if let Some(op) = registry.lock().unwrap().get_mut(&payload) {
                    op.acknowledged = true;
                }
            }
            Some(Err(_)) => {}
            // Crashed: the process restarts with nothing of its former state.
            None => process = node_process(&link, &clock, &store, &planted),
        }
    }
}

/// Runs the scenario and checks its history; violations go to `world`.
pub async fn run(world: Arc<World>, planted: &[PlantedBug]) -> Tally {
    let table = SimTable::new(world.clone());
    let store = SimStore::new(world.clone());
    let registry = Registry::default();
    let settle = world.origin + RUN_FOR + Duration::from_secs(10);
    if world.profile.ttl_deletes {
        tokio::spawn(table.clone().sweep_expired(settle));
    }
    let nodes: Vec<_> = (0..NODES)
        .map(|id| {
            tokio::spawn(node(
                world.clone(),
                id,
                table.clone(),
                store.clone(),
                registry.clone(),
                planted.to_vec(),
            ))
        })
        .collect();
    for node in nodes {
        node.await.expect("a node panicked");
    }
    // Let everything in flight land: late table writes, lingering object writes.
    tokio::time::sleep_until(settle).await;
    check(&world, &store.history(), &registry.lock().unwrap())
}

/// Every write the store applied was allowed, and every acknowledged one stands in the
/// history with nothing but an update naming it after it.
fn check(
    world: &World,
    history: &BTreeMap<Path, Vec<Applied>>,
    ops: &BTreeMap<String, Op>,
) -> Tally {
    let mut tally = Tally {
        operations: ops.len(),
        acknowledged: ops.values().filter(|op| op.acknowledged).count(),
        ..Tally::default()
    };
    for (path, applied) in history {
        let deletes = applied.iter().filter(|w| w.deleted).count();
        tally.deletes += deletes;
        tally.applied += applied.len() - deletes;
        let mut acknowledged_creates = 0;
        for (i, write) in applied.iter().enumerate() {
            if write.deleted {
                // A new life of the path begins: one acknowledged create again.
                acknowledged_creates = 0;
                continue;
            }
            let Some(op) = ops.get(&write.payload) else {
                world.violation(format!("{path}: unknown write {}", write.payload));
                continue;
            };
            // What the write landed on: nothing after a delete.
            let before = i.checked_sub(1).map(|j| &applied[j]).filter(|b| !b.deleted);
            if before.is_some_and(|b| b.payload == write.payload) {
                // The same write applied again by its client's retry, nothing in between.
                continue;
            }
            match (&op.kind, before) {
                (Kind::Create, None) => {
                    acknowledged_creates += usize::from(op.acknowledged);
                    if acknowledged_creates > 1 {
                        world.violation(format!(
                            "{path}: create {} acknowledged, a second in one life of the path",
                            write.payload
                        ));
                    }
                }
                (Kind::Create, Some(before)) => world.violation(format!(
                    "{path}: create {} ({}) landed over {}",
                    write.payload,
                    if op.acknowledged {
                        "acknowledged"
                    } else {
                        "not acknowledged"
                    },
                    before.payload
                )),
                (Kind::Update(etag), Some(before)) if before.etag == *etag => {}
                (Kind::Update(etag), before) => world.violation(format!(
                    "{path}: update {} naming {etag} landed over {}",
                    write.payload,
                    before.map_or("nothing".to_owned(), |b| format!(
                        "{} ({})",
                        b.payload, b.etag
                    ))
                )),
            }
        }
        if std::env::var_os("DYNACOMMIT_SIM_TRACE").is_some() {
            let line: Vec<String> = applied
                .iter()
                .map(|w| {
                    if w.deleted {
                        return "(deleted)".to_owned();
                    }
                    let op = ops.get(&w.payload);
                    format!(
                        "{}={}{:?}{}",
                        w.etag,
                        w.payload,
                        op.map(|o| &o.kind),
                        if op.is_some_and(|o| o.acknowledged) {
                            " ack"
                        } else {
                            ""
                        }
                    )
                })
                .collect();
            eprintln!("{path}: {}", line.join(" -> "));
        }
    }
    for (payload, op) in ops {
        let landed = history.values().flatten().any(|w| w.payload == *payload);
        if op.acknowledged && !landed {
            world.violation(format!("acknowledged write {payload} never landed"));
        }
    }
    tally
}
