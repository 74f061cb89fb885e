//! The commit scenario: nodes racing to create and update a few objects through
//! `CommitStore`, and to create and delete a few lock-style objects (so that kept create
//! leases are released on delete and re-creates race them), and the check of every write
//! and delete the store applied.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use dynacommit::lease::PlantedBug;
use dynacommit::{CommitStore, Conditions};
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, UpdateVersion};
use tokio::time::Instant;

use super::clock::NodeClock;
use super::old::OldWriter;
use super::store::{Applied, COPIER, DELETER, SimStore, StoreLink, WRITER, content_hash};
use super::table::{NodeTable, SimTable, TASK};
use super::world::{RUN_FOR, World, node_leases};

const NODES: usize = 4;
const PATHS: u64 = 3;
/// Lock-style paths: created if absent, deleted if present, never updated.
const LOCKS: u64 = 2;
/// Copy and rename targets: copied or renamed to if absent, deleted if present.
const COPY_TARGETS: u64 = 2;

/// What an operation asked for.
#[derive(Debug, Clone)]
enum Kind {
    Create,
    /// Replace the version with this ETag.
    Update(String),
    /// Delete a lock-style object (what is there).
    Delete,
}

impl Kind {
    /// The put mode that asks for it.
    fn mode(&self) -> PutMode {
        match self {
            Kind::Create | Kind::Delete => PutMode::Create,
            Kind::Update(etag) => PutMode::Update(UpdateVersion {
                e_tag: Some(etag.clone()),
                version: None,
            }),
        }
    }
}

#[derive(Debug)]
struct Op {
    kind: Kind,
    path: Path,
    acknowledged: bool,
    /// Refused without a request, as beaten by a sibling task's success on its lease: from
    /// when to when it ran.
    beaten: Option<(Instant, Instant)>,
    /// How long a create of one of our nodes took, and whether it ran to its end.
    took: Option<Duration>,
    /// When the call was made.
    issued: Instant,
    /// When a delete's or a log write's call ended: its answer came, or (a delete) its
    /// process crashed.
    ended: Option<Instant>,
    /// A log write's bytes, by `content_hash`.
    content: Option<u64>,
}

impl Op {
    fn new(kind: Kind, path: &Path) -> Self {
        Self {
            kind,
            path: path.clone(),
            acknowledged: false,
            beaten: None,
            took: None,
            issued: Instant::now(),
            ended: None,
            content: None,
        }
    }
}

/// Marks `payload`'s operation, run from `started` until now, as beaten if `error` says
/// it lost in its process's queue.
fn note_beaten(registry: &Registry, payload: &str, error: &object_store::Error, started: Instant) {
    if error
        .to_string()
        .contains("another write through this store")
        && let Some(op) = registry.lock().unwrap().get_mut(payload)
    {
        op.beaten = Some((started, Instant::now()));
    }
}

/// Marks `name`'s call as ended now, `acknowledged` or not.
fn note_end(registry: &Registry, name: &str, acknowledged: bool) {
    if let Some(op) = registry.lock().unwrap().get_mut(name) {
        op.ended = Some(Instant::now());
        op.acknowledged = acknowledged;
    }
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
    /// Operations refused in their process's queue, behind a sibling task's success.
    pub beaten: usize,
}

/// A fresh node process: its lease manager (on its own clock) and its `CommitStore`, in
/// a condition mode drawn for it where the profile mixes modes (`native` only on a store
/// that enforces conditions throughout, where it is safe).
fn node_process(
    world: &World,
    mixed: bool,
    link: &Arc<NodeTable>,
    clock: &Arc<NodeClock>,
    store: &Arc<SimStore>,
    planted: &[PlantedBug],
) -> CommitStore {
    let modes: &[Conditions] = match (mixed, store.enforces_throughout()) {
        (false, _) => &[Conditions::Lease],
        (true, false) => &[Conditions::Lease, Conditions::Auto],
        (true, true) => &[Conditions::Lease, Conditions::Auto, Conditions::Native],
    };
    let mode = modes[world.pick(0..modes.len() as u64) as usize];
    let inner: Arc<dyn ObjectStore> = Arc::new(StoreLink(store.clone()));
    let process = CommitStore::new(inner, node_leases(link, clock, planted)).with_conditions(mode);
    if world.holds_paths {
        process.hold_paths()
    } else {
        process
    }
}

async fn node(
    world: Arc<World>,
    id: usize,
    mixed: bool,
    table: Arc<SimTable>,
    store: Arc<SimStore>,
    registry: Registry,
    planted: Vec<PlantedBug>,
) {
    let clock = world.node_clock();
    let link = NodeTable::new(world.clone(), table, id);
    let process = Mutex::new(Arc::new(node_process(
        &world, mixed, &link, &clock, &store, &planted,
    )));
    let node = Node {
        world: &world,
        id,
        mixed,
        link: &link,
        clock: &clock,
        store: &store,
        registry: &registry,
        planted: &planted,
        process: &process,
        read_before: Mutex::default(),
    };
    let tasks =
        (0..world.profile.tasks_per_node.max(1)).map(|task| TASK.scope(task, node.task(task)));
    futures::future::join_all(tasks).await;
}

/// One node process, shared by its tasks.
struct Node<'a> {
    world: &'a Arc<World>,
    id: usize,
    /// Whether processes draw their condition mode.
    mixed: bool,
    link: &'a Arc<NodeTable>,
    clock: &'a Arc<NodeClock>,
    store: &'a Arc<SimStore>,
    registry: &'a Registry,
    planted: &'a [PlantedBug],
    /// The process as it is now: a crash of one task's operation restarts it for the
    /// operations that follow (a sibling's operation in progress keeps the old one).
    process: &'a Mutex<Arc<CommitStore>>,
    /// The bytes this node last read of each log object, for writing them again later.
    read_before: Mutex<BTreeMap<Path, Bytes>>,
}

impl Node<'_> {
    fn current(&self) -> Arc<CommitStore> {
        self.process.lock().unwrap().clone()
    }

    fn restart(&self) {
        *self.process.lock().unwrap() = Arc::new(node_process(
            self.world,
            self.mixed,
            self.link,
            self.clock,
            self.store,
            self.planted,
        ));
    }

    /// A copy or a rename to a shared target if it is absent, from an object this
    /// operation stages first under a path of its own (as a Delta writer's temporary
    /// file: the contenders' sources differ); or, if the target is there, its delete.
    /// The target's history names the operation `payload`; a rename's delete of its
    /// source is the operation `payload-source`.
    async fn copy_or_rename(&self, process: &CommitStore, payload: &str) {
        let (world, registry) = (self.world, self.registry);
        let note = |name: &str, kind: Kind, path: &Path| {
            registry
                .lock()
                .unwrap()
                .insert(name.to_owned(), Op::new(kind, path));
        };
        let ended = |name: &str, ok: bool| note_end(registry, name, ok);
        let target = Path::from(format!("copy/{}", world.pick(0..COPY_TARGETS)));
        match StoreLink(self.store.clone()).head(&target).await {
            Ok(_) => {
                note(payload, Kind::Delete, &target);
                let deleted = DELETER
                    .scope(payload.to_owned(), process.delete(&target))
                    .await;
                ended(payload, deleted.is_ok());
            }
            Err(object_store::Error::NotFound { .. }) => {
                let staged = format!("{payload}-staged");
                let stage = Path::from(format!("stage/{payload}"));
                note(&staged, Kind::Create, &stage);
                if process.put(&stage, staged.clone().into()).await.is_err() {
                    return;
                }
                ended(&staged, true);
                let rename = world.chance(0.5);
                note(payload, Kind::Create, &target);
                let source = format!("{payload}-source");
                let done = if rename {
                    note(&source, Kind::Delete, &stage);
                    let renamed = process.rename_if_not_exists(&stage, &target);
                    let renamed = DELETER.scope(source.clone(), renamed);
                    let done = COPIER.scope(payload.to_owned(), renamed).await;
                    ended(&source, done.is_ok());
                    done
                } else {
                    let copied = process.copy_if_not_exists(&stage, &target);
                    COPIER.scope(payload.to_owned(), copied).await
                };
                ended(payload, done.is_ok());
            }
            Err(_) => {}
        }
    }

    /// An update of `path` writing bytes it held before: its current bytes again (A, A), or
    /// half the time the bytes this node read of it last time, if they differ (A, B, A).
    /// `None` if there is no object; `Some(Err(()))` if the read failed.
    async fn bytes_held_before(
        &self,
        reader: &StoreLink,
        path: &Path,
    ) -> Option<Result<(Kind, Bytes), ()>> {
        let found = match reader.get(path).await {
            Ok(found) => found,
            Err(object_store::Error::NotFound { .. }) => return None,
            Err(_) => return Some(Err(())),
        };
        let etag = found.meta.e_tag.clone().unwrap_or_default();
        let Ok(now) = found.bytes().await else {
            return Some(Err(()));
        };
        let before = self
            .read_before
            .lock()
            .unwrap()
            .insert(path.clone(), now.clone());
        let body = match before {
            Some(before) if before != now && self.world.chance(0.5) => before,
            _ => now,
        };
        Some(Ok((Kind::Update(etag), body)))
    }

    /// One task's operations, one after another until the run ends.
    async fn task(&self, task: usize) {
        let (world, id, registry) = (self.world, self.id, self.registry);
        let until = world.origin + RUN_FOR;
        let reader = StoreLink(self.store.clone());
        let mut seq = 0;
        while Instant::now() < until {
            world.between_operations(self.link).await;
            seq += 1;
            let payload = format!("node{id}.{task}-op{seq}");
            let process = self.current();
            if world.copies && world.chance(world.profile.copy_ops) {
                if world
                    .unless_crashed(self.copy_or_rename(&process, &payload))
                    .await
                    .is_none()
                {
                    for op in [payload.clone(), format!("{payload}-source")] {
                        if let Some(op) = registry.lock().unwrap().get_mut(&op) {
                            op.ended.get_or_insert_with(Instant::now);
                        }
                    }
                    self.restart();
                }
                continue;
            }
            if world.chance(world.profile.create_delete) {
                let path = Path::from(format!("lock/{}", world.pick(0..LOCKS)));
                let exists = match reader.head(&path).await {
                    Ok(_) => true,
                    Err(object_store::Error::NotFound { .. }) => false,
                    Err(_) => continue,
                };
                let op = async {
                    if exists {
                        registry
                            .lock()
                            .unwrap()
                            .insert(payload.clone(), Op::new(Kind::Delete, &path));
                        let deleted = DELETER.scope(payload.clone(), process.delete(&path)).await;
                        note_end(registry, &payload, deleted.is_ok());
                        deleted
                    } else {
                        registry
                            .lock()
                            .unwrap()
                            .insert(payload.clone(), Op::new(Kind::Create, &path));
                        // A refusal is judged over the put's call alone.
                        let started = Instant::now();
                        let created = process
                            .put_opts(&path, payload.clone().into(), PutMode::Create.into())
                            .await;
                        if let Some(op) = registry.lock().unwrap().get_mut(&payload) {
                            op.took = Some(started.elapsed());
                        }
                        match &created {
                            Ok(_) => {
                                if let Some(op) = registry.lock().unwrap().get_mut(&payload) {
                                    op.acknowledged = true;
                                }
                            }
                            Err(e) => note_beaten(registry, &payload, e, started),
                        }
                        created.map(|_| ())
                    }
                };
                if world.unless_crashed(op).await.is_none() {
                    if let Some(op) = registry.lock().unwrap().get_mut(&payload) {
                        op.ended.get_or_insert_with(Instant::now);
                    }
                    self.restart();
                }
                continue;
            }
            let path = Path::from(format!("log/{}", world.pick(0..PATHS)));
            // Update what is there (as read, perhaps long ago), else create; or, where the
            // store's ETags are digests, now and then write bytes the object held before.
            let (kind, body) = if world.content_etags && world.chance(world.profile.rewrites) {
                match self.bytes_held_before(&reader, &path).await {
                    Some(Ok(found)) => found,
                    Some(Err(())) => continue,
                    None => (Kind::Create, Bytes::from(payload.clone())),
                }
            } else {
                match reader.head(&path).await {
                    Ok(meta) => (
                        Kind::Update(meta.e_tag.unwrap_or_default()),
                        Bytes::from(payload.clone()),
                    ),
                    Err(object_store::Error::NotFound { .. }) => {
                        (Kind::Create, Bytes::from(payload.clone()))
                    }
                    Err(_) => continue,
                }
            };
            let mode = kind.mode();
            let mut op = Op::new(kind, &path);
            op.content = Some(content_hash(&body));
            registry.lock().unwrap().insert(payload.clone(), op);
            let started = Instant::now();
            let put = WRITER.scope(
                payload.clone(),
                process.put_opts(&path, body.into(), mode.into()),
            );
            let put = world.unless_crashed(put).await;
            if let (Some(_), Some(op)) = (&put, registry.lock().unwrap().get_mut(&payload)) {
                op.ended = Some(Instant::now());
            }
            match put {
                Some(Ok(_)) => {
                    if let Some(op) = registry.lock().unwrap().get_mut(&payload) {
                        op.acknowledged = true;
                    }
                }
                Some(Err(e)) => note_beaten(registry, &payload, &e, started),
                // Crashed: the process restarts with nothing of its former state.
                None => self.restart(),
            }
        }
    }
}

/// An object_store 0.12.5 writer (`old.rs`): the same operations as a node's, its
/// lock-style deletes plain.
async fn old_node(
    world: Arc<World>,
    id: usize,
    table: Arc<SimTable>,
    store: Arc<SimStore>,
    registry: Registry,
) {
    let link = NodeTable::new(world.clone(), table, id);
    let writer = OldWriter {
        table: link.clone(),
        clock: world.node_clock(),
        store: store.clone(),
    };
    let until = world.origin + RUN_FOR;
    let mut seq = 0;
    while Instant::now() < until {
        world.between_operations(&link).await;
        seq += 1;
        let payload = format!("old{id}-op{seq}");
        let (path, kind) = if world.chance(world.profile.create_delete) {
            let path = Path::from(format!("lock/{}", world.pick(0..LOCKS)));
            if store.head_now(&path).await.is_some() {
                world.unless_crashed(store.delete_plainly(&path)).await;
                continue;
            }
            (path, Kind::Create)
        } else {
            let path = Path::from(format!("log/{}", world.pick(0..PATHS)));
            let kind = match store.head_now(&path).await {
                Some(etag) => Kind::Update(etag),
                None => Kind::Create,
            };
            (path, kind)
        };
        let mode = kind.mode();
        registry
            .lock()
            .unwrap()
            .insert(payload.clone(), Op::new(kind, &path));
        let put = writer.put(&path, payload.clone().into(), mode);
        if let Some(Ok(_)) = world.unless_crashed(put).await
            && let Some(op) = registry.lock().unwrap().get_mut(&payload)
        {
            op.acknowledged = true;
        }
    }
}

/// A deleter outside our processes (a plain S3 client, a lifecycle rule): every 0.5 s,
/// with the profile's chance, deletes a lock-style object if it is there.
async fn foreign_deleter(world: Arc<World>, store: Arc<SimStore>) {
    let until = world.origin + RUN_FOR;
    while Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(500)).await;
        if world.chance(world.profile.foreign_deletes) {
            let path = Path::from(format!("lock/{}", world.pick(0..LOCKS)));
            if store.head_now(&path).await.is_some() {
                store.delete_plainly(&path).await;
            }
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
    // An object_store 0.12.5 writer beside ours: every process of ours then leases. None
    // beside nodes that hold paths (0.12.5 takes one lease per version).
    let old = !world.holds_paths && world.chance(world.profile.old_writer);
    let mixed = world.profile.mixed_modes && !old;
    let mut nodes: Vec<_> = (0..NODES)
        .map(|id| {
            tokio::spawn(node(
                world.clone(),
                id,
                mixed,
                table.clone(),
                store.clone(),
                registry.clone(),
                planted.to_vec(),
            ))
        })
        .collect();
    if world.profile.foreign_deletes > 0.0 {
        nodes.push(tokio::spawn(foreign_deleter(world.clone(), store.clone())));
    }
    if old {
        nodes.push(tokio::spawn(old_node(
            world.clone(),
            NODES,
            table.clone(),
            store.clone(),
            registry.clone(),
        )));
    }
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
        beaten: ops.values().filter(|op| op.beaten.is_some()).count(),
        ..Tally::default()
    };
    for (path, applied) in history {
        // The probe's own objects: no operation of the run's.
        if path.as_ref().starts_with(".dynacommit-probe") {
            continue;
        }
        let deletes = applied.iter().filter(|w| w.deleted).count();
        tally.deletes += deletes;
        tally.applied += applied.len() - deletes;
        let mut acknowledged_creates = 0;
        for (i, write) in applied.iter().enumerate() {
            if write.deleted {
                // A new life of the path begins: one acknowledged create again.
                acknowledged_creates = 0;
                deleted_in_its_call(world, path, applied, i, ops);
                landed_together(world, path, applied, i);
                continue;
            }
            landed_together(world, path, applied, i);
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
                    acknowledgement(op),
                    before.payload
                )),
                (Kind::Delete, _) => world.violation(format!(
                    "{path}: delete {} recorded as a write",
                    write.payload
                )),
                (Kind::Update(etag), Some(before)) if before.etag == bare(etag) => {}
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
        // An acknowledged write of bytes the object held anyway (a rewrite refused over
        // the same bytes written by another, read as its own: docs/protocol.md, "Bytes
        // equal to ours are taken for ours") counts if those bytes were there by its end.
        let landed = history.values().flatten().any(|w| w.payload == *payload)
            || op.content.is_some_and(|content| {
                history.get(&op.path).is_some_and(|writes| {
                    writes.iter().any(|w| {
                        !w.deleted
                            && w.content == content
                            && op.ended.is_none_or(|ended| w.at <= ended)
                    })
                })
            });
        if op.acknowledged && !landed && !matches!(op.kind, Kind::Delete) {
            world.violation(format!("acknowledged write {payload} never landed"));
        }
        if let (Some(bound), Some(took)) = (world.profile.max_create_wait, op.took)
            && took > bound
        {
            world.violation(format!(
                "create {payload} of {} took {took:?}, more than {bound:?} with no fault to \
                 wait out",
                op.path
            ));
        }
        if let Some((started, ended)) = op.beaten
            && !refusal_holds_at_some_point(&op.kind, history.get(&op.path), started, ended)
        {
            world.violation(format!(
                "{payload} ({:?} of {}) was refused as beaten by a sibling's success, but \
                 from {:?} to {:?} the object was as it expected throughout",
                op.kind,
                op.path,
                started - world.origin,
                ended - world.origin
            ));
        }
    }
    tally
}

/// A delete of ours (`applied[i]`) removed only what its call could have met: never an
/// object whose write was made after the delete's acknowledged call had ended (an earlier
/// attempt that lingered past the answer), nor, where paths are held, after the call ended
/// at all (its process crashed, or its error left it possibly applied).
fn deleted_in_its_call(
    world: &World,
    path: &Path,
    applied: &[Applied],
    i: usize,
    ops: &BTreeMap<String, Op>,
) {
    let Some(delete) = ops.get(&applied[i].payload) else {
        return; // a deleter outside our processes
    };
    let Some(ended) = delete
        .ended
        .filter(|_| delete.acknowledged || world.holds_paths)
    else {
        return;
    };
    let removed = i
        .checked_sub(1)
        .map(|j| &applied[j])
        .filter(|w| !w.deleted)
        .and_then(|w| ops.get(&w.payload).map(|op| (w, op)));
    if let Some((w, op)) = removed
        && op.issued > ended
    {
        world.violation(format!(
            "{path}: delete {} ({}), ended at {:?}, removed {} ({}), written by a call \
             made at {:?}, after it",
            applied[i].payload,
            acknowledgement(delete),
            ended - world.origin,
            w.payload,
            acknowledgement(op),
            op.issued - world.origin
        ));
    }
}

/// "acknowledged" or "not acknowledged", for reports.
fn acknowledgement(op: &Op) -> &'static str {
    if op.acknowledged {
        "acknowledged"
    } else {
        "not acknowledged"
    }
}

/// Where `applied[i]` is a second landing of one operation of ours (a write applied again
/// by its client's retry, a delete's lingering first attempt), nothing of another
/// operation landed on the path between the two: a lease that covers every attempt of an
/// operation keeps others off the path until the last has landed.
fn landed_together(world: &World, path: &Path, applied: &[Applied], i: usize) {
    let this = &applied[i];
    if this.payload.is_empty() {
        return;
    }
    let Some(earlier) = applied[..i].iter().rposition(|w| w.payload == this.payload) else {
        return;
    };
    // A deleter outside our processes (a plain client) is outside every lease.
    if let Some(between) = applied[earlier + 1..i]
        .iter()
        .find(|w| !w.payload.is_empty() && w.payload != this.payload)
    {
        world.violation(format!(
            "{path}: {} landed twice, {} between its landings",
            this.payload, between.payload
        ));
    }
}

/// Whether, at some instant from `started` to `ended`, the object (as `applied` to it)
/// was not as an operation of `kind` needed: present for a create, absent or at another
/// ETag for an update. A refusal is linearizable only then.
fn refusal_holds_at_some_point(
    kind: &Kind,
    applied: Option<&Vec<Applied>>,
    started: Instant,
    ended: Instant,
) -> bool {
    let refused_by = |etag: Option<&str>| match kind {
        Kind::Create => etag.is_some(),
        Kind::Update(expected) => etag != Some(bare(expected)),
        Kind::Delete => false,
    };
    let mut current: Option<&str> = None;
    let mut holds = false;
    for w in applied.into_iter().flatten() {
        if w.at > ended {
            break;
        }
        // The state before `w` held just before it, within the interval if `w` is.
        if w.at > started {
            holds |= refused_by(current);
        }
        current = (!w.deleted).then_some(w.etag.as_str());
        if w.at >= started {
            holds |= refused_by(current);
        }
    }
    holds || refused_by(current)
}

/// An ETag as the store keeps it: without quotes (its answers may add them).
pub fn bare(etag: &str) -> &str {
    etag.trim_start_matches("W/").trim_matches('"')
}
