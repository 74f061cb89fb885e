//! Watches in the simulator: each watcher reads the events under a prefix while the
//! clients work, stalls now and then (once in a while past an iterator's 15 minutes),
//! stops at a moment of its choosing, and resumes from its last checkpoint at once, after
//! 16 minutes, or after a day (when the stream has trimmed what came just after it).
//! Every key's events, across both sessions, must be the table's own changes of that key
//! in order, from some change on to the last, none repeated, none left out, unless the
//! watch said `WatchLost`, after which a prefix of them is enough.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use dynacommit::kv::{Checkpoint, DynamoKv, EventKind, KvError, KvStore};
use futures::StreamExt;
use rand::RngExt;
use rand::rngs::StdRng;
use serde_json::Value;
use tokio::time::Instant;

use super::expr::Item;
use super::table::{Change, FakeTable, Key};

/// An event as the checks compare it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Seen {
    Put(String),
    Deleted,
    Expired,
}

/// What one watcher saw.
#[derive(Debug, Default)]
pub struct WatchLog {
    pub prefix: String,
    /// When its first session said it was ready.
    pub ready: Option<Instant>,
    /// Every event handed to it, by key, in order.
    pub events: Vec<(String, Seen)>,
    /// Why its watch ended early, if it did.
    pub lost: Option<String>,
    /// What went wrong that never should.
    pub violations: Vec<String>,
    /// How long it waited before resuming, if it stopped.
    pub gap: Option<Duration>,
    /// Whether the checkpoint it resumed from held a shard by its iterator.
    pub resumed_by_iterator: bool,
}

/// How long a watch that is up to date waits for one more event before it ends.
const QUIET: Duration = Duration::from_secs(60);

fn seen(kind: EventKind) -> Option<(String, Seen)> {
    let name = |k: &[u8]| String::from_utf8_lossy(k).into_owned();
    match kind {
        EventKind::Ready => None,
        EventKind::Put(entry) => Some((name(&entry.key), Seen::Put(entry.revision.to_string()))),
        EventKind::Deleted { key } => Some((name(&key), Seen::Deleted)),
        EventKind::Expired { key } => Some((name(&key), Seen::Expired)),
    }
}

/// One session of a watch: reads until `stop_at` (if any), or until the clients are done
/// and nothing came for [`QUIET`]. Returns the last checkpoint handed out.
async fn session(
    kv: &DynamoKv,
    log: &mut WatchLog,
    from: Option<Checkpoint>,
    stop: Stop,
    done: &AtomicBool,
    rng: &mut StdRng,
) -> Option<Checkpoint> {
    let stop_at = match stop {
        Stop::At(at) => Some(at),
        _ => None,
    };
    let fresh = from.is_none();
    let mut events = kv.watch(log.prefix.as_bytes(), from.clone());
    let mut last = from;
    // One consumer in seven stalls once past an iterator's 15 minutes (costly: the reader
    // polls on meanwhile).
    let mut stall_at = rng.random_bool(0.15).then(|| rng.random_range(0..100usize));
    loop {
        if stop_at.is_some_and(|at| Instant::now() >= at) {
            return last;
        }
        let wait = match stop_at {
            Some(at) => at.saturating_duration_since(Instant::now()).min(QUIET),
            None => QUIET,
        };
        let next = match tokio::time::timeout(wait, events.next()).await {
            Ok(next) => next,
            Err(_) if stop_at.is_some() => continue,
            Err(_) if done.load(Ordering::SeqCst) => return last,
            Err(_) => continue,
        };
        match next {
            Some(Ok(event)) => {
                last = Some(event.checkpoint.clone());
                match seen(event.kind) {
                    Some(e) => log.events.push(e),
                    None if fresh && log.ready.is_none() => log.ready = Some(Instant::now()),
                    None => {}
                }
                if let Stop::AtAChild(after) = stop
                    && Instant::now() >= after
                    && event.checkpoint.as_str().contains("\"from\"")
                {
                    return last;
                }
            }
            Some(Err(KvError::WatchLost { problem })) => {
                if fresh {
                    log.violations.push(format!(
                        "a fresh watch of {:?} was lost: {problem}",
                        log.prefix
                    ));
                }
                log.lost = Some(problem);
                return None;
            }
            Some(Err(e)) => {
                log.violations
                    .push(format!("the watch of {:?} failed: {e}", log.prefix));
                log.lost = Some(e.to_string());
                return None;
            }
            None => {
                log.violations
                    .push(format!("the watch of {:?} ended with no error", log.prefix));
                return None;
            }
        }
        // A consumer slower than the reader, now and then far slower.
        if stall_at.is_some_and(|n| log.events.len() >= n) {
            stall_at = None;
            tokio::time::sleep(Duration::from_secs(16 * 60)).await;
        } else if rng.random_bool(0.1) {
            tokio::time::sleep(Duration::from_millis(rng.random_range(0..300))).await;
        }
    }
}

/// When a watcher's first session stops.
#[derive(Debug, Clone, Copy)]
enum Stop {
    Never,
    At(Instant),
    /// At the first event after this instant whose checkpoint names a child shard with
    /// nothing handed out from it yet.
    AtAChild(Instant),
}

/// How long records are kept.
const DAY: Duration = Duration::from_secs(24 * 3600);

/// The nastiest moment to resume from `checkpoint`, if there is one: when the stream has
/// trimmed a record of a child shard the checkpoint holds at its first sequence number
/// (nothing handed out from it yet), and nothing else the checkpoint points at, so that
/// only that child can tell the watch it lost records. `None` if no moment does that.
fn child_trimmed_alone(
    checkpoint: &Checkpoint,
    prefix: &str,
    table: &FakeTable,
) -> Option<Instant> {
    let position: Value =
        serde_json::from_str(checkpoint.as_str().strip_prefix("dynamodb:")?).ok()?;
    let mut trimmed_from: Option<Instant> = None;
    let mut kept_until: Option<Instant> = None;
    let earlier = |bound: &mut Option<Instant>, at: Instant| {
        *bound = Some(bound.map_or(at, |b| b.min(at)));
    };
    for (shard, place) in position.get("shards")?.as_object()? {
        let place = place.as_object()?;
        let seq = |name: &str| place.get(name)?.as_str()?.parse::<u128>().ok();
        let (child, from) = match (seq("from"), seq("after")) {
            (Some(first), _) => (true, first),
            (None, Some(after)) => (false, after + 1),
            // An iterator or a read from the oldest record: lost after a day regardless.
            (None, None) => return None,
        };
        // A child's record counts if it is an event of this watch; any record of
        // another shard is trimmed too, and fails the watch.
        let (record, closed) = table
            .stream(|s| {
                s.shard_times(shard, from, |key, old, new| {
                    !child || event_of(prefix, key, old, new)
                })
            })
            .unwrap_or_default();
        if let Some(closed) = closed {
            // Still in the stream.
            earlier(&mut kept_until, closed + DAY);
        }
        match (child, record) {
            (true, Some(at)) => earlier(&mut trimmed_from, at + DAY),
            (false, Some(at)) => earlier(&mut kept_until, at + DAY),
            (_, None) => {}
        }
    }
    // As early as can be: the watch reads the other shards' next records soon after.
    let at = trimmed_from? + Duration::from_micros(100);
    kept_until.is_none_or(|until| at < until).then_some(at)
}

/// A watcher of `prefix`: a session from now, stopping at a drawn moment of the clients'
/// run, which begins at `start` (or never), and one resumed from its last checkpoint
/// after a drawn gap. One in three stops where its checkpoint holds a child shard with
/// nothing handed out yet, and resumes, when there is such a moment, once the stream has
/// trimmed the child's first record and nothing else the checkpoint points at.
pub async fn watcher(
    kv: DynamoKv,
    prefix: &str,
    mut rng: StdRng,
    start: Instant,
    done: Arc<AtomicBool>,
    table: Arc<FakeTable>,
) -> WatchLog {
    let mut log = WatchLog {
        prefix: prefix.to_owned(),
        ..WatchLog::default()
    };
    let stop = match rng.random_range(0..6) {
        0 => Stop::Never,
        1..3 => Stop::AtAChild(start + Duration::from_millis(rng.random_range(500..3000))),
        _ => Stop::At(start + Duration::from_millis(rng.random_range(500..6500))),
    };
    let checkpoint = session(&kv, &mut log, None, stop, &done, &mut rng).await;
    let (false, Some(checkpoint)) = (matches!(stop, Stop::Never), checkpoint) else {
        return log;
    };
    let mut resume_at = None;
    if matches!(stop, Stop::AtAChild(_)) {
        // What the stream will hold is known once the clients are done.
        while !done.load(Ordering::SeqCst) {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        resume_at = child_trimmed_alone(&checkpoint, prefix, &table);
    }
    let gap = match (resume_at, rng.random_range(0..10)) {
        (Some(at), _) => at.saturating_duration_since(Instant::now()),
        (None, 0..4) => Duration::from_millis(rng.random_range(0..1000)),
        (None, 4..6) => Duration::from_secs(16 * 60),
        // A day and up to a second and a half: the stream has trimmed some of what came
        // after the checkpoint, and kept the rest (shards live 1 to 4 s in the run).
        (None, _) => DAY + Duration::from_millis(rng.random_range(0..1500)),
    };
    log.gap = Some(gap);
    log.resumed_by_iterator = checkpoint.as_str().contains("\"iterator\"");
    if std::env::var_os("DYNACOMMIT_KV_SIM_WATCH").is_some() {
        eprintln!(
            "watch {prefix:?} stops ({stop:?}, window {}) at {:?} after {} events, resumes after {gap:?} from {}",
            resume_at.is_some(),
            Instant::now().duration_since(start),
            log.events.len(),
            checkpoint.as_str()
        );
    }
    tokio::time::sleep(gap).await;
    session(
        &kv,
        &mut log,
        Some(checkpoint),
        Stop::Never,
        &done,
        &mut rng,
    )
    .await;
    if std::env::var_os("DYNACOMMIT_KV_SIM_WATCH").is_some() {
        eprintln!(
            "watch {prefix:?} ends with {} events, lost: {:?}",
            log.events.len(),
            log.lost
        );
    }
    log
}

/// A key's name in the store, if `key` is an entry's place (not a counter's: `item`,
/// either image of it, has a revision).
fn entry_name(key: &Key, old: Option<&Item>, new: Option<&Item>) -> Option<String> {
    if !old.into_iter().chain(new).any(|i| i.contains_key("rev")) {
        return None;
    }
    let zero = key.0.iter().position(|&b| b == 0)?;
    let mut name = key.0[zero + 1..].to_vec();
    name.extend_from_slice(&key.1);
    Some(String::from_utf8_lossy(&name).into_owned())
}

/// The event a change of `key` from `old` to `new` is to a watch of everything, if any.
fn event(old: Option<&Item>, new: Option<&Item>, by_ttl: bool) -> Option<Seen> {
    let rev = |i: &Item| {
        i.get("rev")
            .and_then(|r| r.get("S"))
            .and_then(Value::as_str)
            .map(str::to_owned)
    };
    match (new, old) {
        (Some(new), Some(old)) if rev(new) == rev(old) => None,
        (Some(new), _) => Some(Seen::Put(rev(new).unwrap_or_default())),
        (None, Some(old)) if by_ttl || old.contains_key("swept") => Some(Seen::Expired),
        (None, Some(_)) => Some(Seen::Deleted),
        (None, None) => None,
    }
}

/// Whether a change of `key` from `old` to `new` is an event of a watch of `prefix`.
fn event_of(prefix: &str, key: &Key, old: Option<&Item>, new: Option<&Item>) -> bool {
    entry_name(key, old, new).is_some_and(|n| n.starts_with(prefix))
        && event(old, new, false).is_some()
}

/// The events a watch of `prefix` owes for the table's changes (`commits`, as GetItem
/// saw them, which is the stream's order), by key: each with the instant it happened.
fn owed(
    prefix: &str,
    commits: &[Change],
) -> std::collections::BTreeMap<String, Vec<(Instant, Seen)>> {
    let mut owed: std::collections::BTreeMap<String, Vec<(Instant, Seen)>> = Default::default();
    let mut items: std::collections::HashMap<&Key, &Item> = Default::default();
    for change in commits {
        let before = match &change.item {
            Some(item) => items.insert(&change.key, item),
            None => items.remove(&change.key),
        };
        let new = change.item.as_ref();
        let Some(name) = entry_name(&change.key, before, new) else {
            continue;
        };
        if !name.starts_with(prefix) {
            continue;
        }
        let Some(event) = event(before, new, change.by_ttl) else {
            continue;
        };
        owed.entry(name).or_default().push((change.at, event));
    }
    owed
}

/// Every way `log` broke the watch's promise over the table's changes.
pub fn check(log: &WatchLog, table: &FakeTable) -> Vec<String> {
    let mut violations = log.violations.clone();
    let Some(ready) = log.ready else {
        return violations;
    };
    // A resume may be lost only where its checkpoint cannot be resumed from: an iterator
    // over 15 minutes old, or a place the stream trimmed or dropped, a day on.
    if let (Some(problem), Some(gap)) = (&log.lost, log.gap) {
        // (A day counted from the stop, less the minute at most since the checkpoint.)
        let a_day = gap >= DAY - Duration::from_secs(60);
        let may_be_lost = a_day || (gap > Duration::from_secs(15 * 60) && log.resumed_by_iterator);
        if !may_be_lost {
            violations.push(format!(
                "the watch of {:?} resumed after {gap:?} was lost: {problem}",
                log.prefix
            ));
        }
    }
    let (_, commits) = table.changes();
    let owed = owed(&log.prefix, &commits);
    let mut handed: std::collections::BTreeMap<&str, Vec<&Seen>> = Default::default();
    for (key, event) in &log.events {
        handed.entry(key).or_default().push(event);
    }
    let keys: std::collections::BTreeSet<&str> = owed
        .keys()
        .map(String::as_str)
        .chain(handed.keys().copied())
        .collect();
    for key in keys {
        let owed: &[(Instant, Seen)] = owed.get(key).map_or(&[], Vec::as_slice);
        let got: &[&Seen] = handed.get(key).map_or(&[], Vec::as_slice);
        // Changes from before the watch was ready may or may not be handed out; every one
        // after must be, in order, once each, up to the last (or, after `WatchLost`, up
        // to where the watch ended).
        let latest_start = owed.iter().take_while(|(at, _)| *at < ready).count();
        let fits = (0..=latest_start).any(|j| {
            owed.len() >= j + got.len()
                && owed[j..j + got.len()]
                    .iter()
                    .zip(got)
                    .all(|((_, o), g)| o == *g)
                && (log.lost.is_some() || j + got.len() == owed.len())
        });
        if !fits {
            violations.push(format!(
                "the watch of {:?} (resumed after {:?}, {}) handed out for {key:?} {:?}; the table's changes were {:?} ({} before it was ready)",
                log.prefix,
                log.gap,
                log.lost.as_deref().map_or("not lost".to_owned(), |p| format!("lost: {p}")),
                got,
                owed.iter().map(|(at, e)| (table.since_start(*at), e)).collect::<Vec<_>>(),
                latest_start,
            ));
        }
    }
    violations
}
