//! Linearizability checker for a keyed register with revisions, as a Teleport-style key-value
//! backend exposes it (test support; std only, no dependency on the crate under test).
//!
//! Model: each key holds `Option<(Value, Rev)>`, absent at the start. Every successful write
//! returns a fresh revision that no other write returns, so a read of `(v, r)` names the write
//! it saw. Operations ([`Op`]) and their outcomes ([`Outcome`]):
//!
//! | op                                      | outcomes                                   |
//! | --------------------------------------- | ------------------------------------------ |
//! | `Get`                                   | `Found(None)`, `Found(Some((v, r)))`       |
//! | `Put(v)` (upsert)                       | `Written(r)`                               |
//! | `CompareAndSwap { expected, new }`      | `Written(r)`, `Mismatch`                   |
//! | `ConditionalDelete { rev }`             | `Deleted`, `Mismatch`                      |
//! | `Create(v)` (only if absent)            | `Written(r)`, `AlreadyExists`              |
//! | `PutUntil(v, e)`, `CreateUntil(v, e)`    | as `Put` and `Create`                       |
//!
//! `PutUntil` and `CreateUntil` write an entry that expires at time `e` (in the history's
//! units): from `e` on the key is absent unless written again, and a write that takes
//! effect at or after its own `e` leaves the key absent. Expiry is checked as one more
//! operation per such write, completed at exactly `e`, so that the search orders it
//! against the others by real time as it orders them among themselves; the state counts
//! the expiries passed, so that they pass in time order.
//!
//! and any of them may end `Unknown`: it may or may not have taken effect, at any time after
//! its invoke (even after later operations); it is never required to take effect. The
//! revision that such a write stored may be read later under a name that no completed write
//! returned; clients learn revisions only from completed operations, so a revision that no
//! completed operation returned (a guess) is the revision of no write.
//!
//! Record with a [`Recorder`] shared by all tasks, then run [`check`] (or
//! [`assert_linearizable`]) on [`Recorder::history`]. The history is split per key
//! (linearizability is local) and each key is searched with Wing & Gong's algorithm as
//! refined by Lowe: depth-first over the minimal pending operations, memoising the pairs
//! (set of linearized operations, model state) already explored. Prunings, all exact:
//! - an operation that can go next without changing the state goes next, with no branching;
//! - operations with an `Unknown` outcome are tried only where no completed operation can go
//!   next, and only where they take effect;
//! - a configuration that differs from an explored one only by more `Unknown` operations
//!   applied is covered by it;
//! - `Unknown` writes whose value no operation reads or expects leave indistinguishable
//!   states, and of two such with the same precondition only the first pending is tried.
//!
//! The search has a step and a time budget; running out makes the key [`Inconclusive`]
//! instead of hanging.
#![allow(dead_code)]

use std::collections::{BTreeMap, HashMap};
use std::fmt::{self, Write as _};
use std::sync::Mutex;
use std::time::{Duration, Instant};

pub type Value = Vec<u8>;
pub type Rev = String;
/// A point in time: nanoseconds for a [`Recorder`], any monotonic unit in hand-made histories.
pub type Time = u64;
/// The completion time of an operation whose outcome is [`Outcome::Unknown`].
pub const NEVER: Time = Time::MAX;

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    Get,
    Put(Value),
    CompareAndSwap {
        expected: Value,
        new: Value,
    },
    ConditionalDelete {
        rev: Rev,
    },
    Create(Value),
    /// A put of an entry that expires at the given time.
    PutUntil(Value, Time),
    /// A create of an entry that expires at the given time.
    CreateUntil(Value, Time),
}

impl Op {
    pub fn put(value: impl Into<Value>) -> Op {
        Op::Put(value.into())
    }
    pub fn cas(expected: impl Into<Value>, new: impl Into<Value>) -> Op {
        Op::CompareAndSwap {
            expected: expected.into(),
            new: new.into(),
        }
    }
    pub fn delete(rev: impl Into<Rev>) -> Op {
        Op::ConditionalDelete { rev: rev.into() }
    }
    pub fn create(value: impl Into<Value>) -> Op {
        Op::Create(value.into())
    }
    /// A put, of an entry expiring at `until` if given.
    pub fn put_until(value: impl Into<Value>, until: Option<Time>) -> Op {
        match until {
            Some(t) => Op::PutUntil(value.into(), t),
            None => Op::Put(value.into()),
        }
    }
    /// A create, of an entry expiring at `until` if given.
    pub fn create_until(value: impl Into<Value>, until: Option<Time>) -> Op {
        match until {
            Some(t) => Op::CreateUntil(value.into(), t),
            None => Op::Create(value.into()),
        }
    }
    /// When the entry this op writes expires.
    fn expiry(&self) -> Option<Time> {
        match self {
            Op::PutUntil(_, t) | Op::CreateUntil(_, t) => Some(*t),
            _ => None,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// `Get`: the key's value and revision, or `None` when absent.
    Found(Option<(Value, Rev)>),
    /// `Put`, `CompareAndSwap` or `Create` took effect and stored this new revision.
    Written(Rev),
    /// `ConditionalDelete` took effect.
    Deleted,
    /// `CompareAndSwap` or `ConditionalDelete` found its condition false and did nothing.
    Mismatch,
    /// `Create` found the key present and did nothing.
    AlreadyExists,
    /// Timed out or ambiguous: may take effect at any time after the invoke, or never.
    Unknown,
}

impl Outcome {
    pub fn found(value: impl Into<Value>, rev: impl Into<Rev>) -> Outcome {
        Outcome::Found(Some((value.into(), rev.into())))
    }
    pub fn absent() -> Outcome {
        Outcome::Found(None)
    }
    pub fn written(rev: impl Into<Rev>) -> Outcome {
        Outcome::Written(rev.into())
    }
}

/// One operation of a history: `complete` is [`NEVER`] when the outcome is `Unknown`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub client: usize,
    pub key: String,
    pub op: Op,
    pub outcome: Outcome,
    pub invoke: Time,
    pub complete: Time,
}

impl Entry {
    /// An entry; an `Unknown` outcome gets `complete = NEVER` whatever is passed.
    pub fn new(
        client: usize,
        key: impl Into<String>,
        op: Op,
        outcome: Outcome,
        invoke: Time,
        complete: Time,
    ) -> Entry {
        let complete = if outcome == Outcome::Unknown {
            NEVER
        } else {
            complete
        };
        Entry {
            client,
            key: key.into(),
            op,
            outcome,
            invoke,
            complete,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Recorder

/// Records a history from many tasks or threads: wrap every request in
/// [`invoke`](Recorder::invoke) (just before sending it) and [`complete`](Recorder::complete)
/// (just after its answer). Timestamps come from one monotonic clock, strictly increasing, and
/// are taken under the recorder's lock, so real-time order is never inverted. A token dropped
/// without `complete` (a cancelled task) leaves its operation `Unknown`.
pub struct Recorder {
    start: Instant,
    inner: Mutex<RecorderInner>,
}

struct RecorderInner {
    last: Time,
    entries: Vec<Entry>,
    done: Vec<bool>,
}

/// Names one invoked operation; hand it back to [`Recorder::complete`].
#[must_use = "complete the operation with Recorder::complete"]
#[derive(Debug)]
pub struct Token {
    index: usize,
}

impl Default for Recorder {
    fn default() -> Self {
        Recorder::new()
    }
}

impl Recorder {
    pub fn new() -> Recorder {
        Recorder {
            start: Instant::now(),
            inner: Mutex::new(RecorderInner {
                last: 0,
                entries: Vec::new(),
                done: Vec::new(),
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, RecorderInner> {
        self.inner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn tick(&self, inner: &mut RecorderInner) -> Time {
        let now = u64::try_from(self.start.elapsed().as_nanos()).unwrap_or(NEVER - 1);
        inner.last = now.max(inner.last + 1);
        inner.last
    }

    /// Marks the start of `op` on `key` by `client`.
    pub fn invoke(&self, client: usize, key: impl Into<String>, op: Op) -> Token {
        let mut inner = self.lock();
        let invoke = self.tick(&mut inner);
        let index = inner.entries.len();
        inner.entries.push(Entry {
            client,
            key: key.into(),
            op,
            outcome: Outcome::Unknown,
            invoke,
            complete: NEVER,
        });
        inner.done.push(false);
        Token { index }
    }

    /// Marks the end of the operation with its outcome (`Unknown` keeps it open forever).
    pub fn complete(&self, token: Token, outcome: Outcome) {
        let mut inner = self.lock();
        let complete = if outcome == Outcome::Unknown {
            NEVER
        } else {
            self.tick(&mut inner)
        };
        let entry = &mut inner.entries[token.index];
        entry.outcome = outcome;
        entry.complete = complete;
        inner.done[token.index] = true;
    }

    /// The history so far; operations not completed yet are `Unknown`.
    pub fn history(&self) -> Vec<Entry> {
        self.lock().entries.clone()
    }

    pub fn len(&self) -> usize {
        self.lock().entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

// ---------------------------------------------------------------------------------------------
// Public results

/// Limits of one [`check_with`] run.
#[derive(Clone, Debug)]
pub struct Options {
    /// Wall-clock budget for the whole check, all keys together.
    pub time_budget: Duration,
    /// Search steps allowed for one key (one step = one operation tried at one point).
    pub step_budget: u64,
    /// On a violation, look for the shortest failing prefix of the key's history.
    pub minimise: bool,
    /// Wall-clock budget for that search.
    pub minimise_budget: Duration,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            time_budget: Duration::from_secs(60),
            step_budget: 50_000_000,
            minimise: true,
            minimise_budget: Duration::from_secs(10),
        }
    }
}

/// What a check that found no violation did.
#[derive(Clone, Debug, Default)]
pub struct CheckReport {
    pub keys: usize,
    pub ops: usize,
    /// Operations with an `Unknown` outcome (unknown `Get`s included; they are ignored).
    pub unknown: usize,
    /// Search steps over all keys.
    pub steps: u64,
    /// The largest memo table of a key.
    pub max_cache: usize,
    pub elapsed: Duration,
    /// Keys whose search ran out of budget: neither proved linearizable nor refuted.
    pub inconclusive: Vec<Inconclusive>,
}

impl CheckReport {
    /// True when every key was proved linearizable.
    pub fn is_conclusive(&self) -> bool {
        self.inconclusive.is_empty()
    }
}

impl fmt::Display for CheckReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} ops ({} unknown) on {} keys: {} steps, memo up to {} states, {:.3?}",
            self.ops, self.unknown, self.keys, self.steps, self.max_cache, self.elapsed
        )?;
        if self.is_conclusive() {
            write!(f, ": linearizable")
        } else {
            write!(f, ": INCONCLUSIVE on {} keys", self.inconclusive.len())?;
            for i in &self.inconclusive {
                write!(f, "\n  {i}")?;
            }
            Ok(())
        }
    }
}

#[derive(Clone, Debug)]
pub struct Inconclusive {
    pub key: String,
    pub ops: usize,
    pub steps: u64,
    pub elapsed: Duration,
    pub reason: String,
    /// Completed ops in the longest partial linearization found, of `completed`.
    pub linearized: usize,
    pub completed: usize,
    /// Where that partial linearization got stuck, explained as a [`Violation`] would be
    /// (none if it never got stuck).
    pub deepest: Option<String>,
}

impl fmt::Display for Inconclusive {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "key {:?} ({} ops) inconclusive after {} steps, {:.3?}: {}; got as far as {} of {} \
             completed ops",
            self.key,
            self.ops,
            self.steps,
            self.elapsed,
            self.reason,
            self.linearized,
            self.completed
        )
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ViolationKind {
    /// No order of the operations explains the outcomes.
    NotLinearizable,
    /// The history itself is ill-formed (an outcome that the operation cannot have, a
    /// completion before the invoke, one revision returned by two writes).
    Malformed,
}

/// One operation shown in a [`Violation`]: `index` is its position in the checked history.
#[derive(Clone, Debug)]
pub struct OpView {
    pub index: usize,
    pub entry: Entry,
    pub note: String,
}

/// Why a history is not linearizable, with the operations around the point where every
/// attempt to order them got stuck. Its `Display` is the full explanation.
#[derive(Clone, Debug)]
pub struct Violation {
    pub key: String,
    pub kind: ViolationKind,
    /// One line.
    pub summary: String,
    /// The rest (empty for a malformed history).
    pub detail: Box<ViolationDetail>,
}

/// The operations around the point where the search got stuck.
#[derive(Clone, Debug, Default)]
pub struct ViolationDetail {
    /// Operations of this key in the history.
    pub key_ops: usize,
    /// The shortest failing prefix found ends when this operation completes (the operations
    /// invoked by then, those still running counted as `Unknown`).
    pub prefix_end: Option<OpView>,
    /// Operations in that prefix.
    pub prefix_ops: usize,
    /// Completed operations in the longest partial linearization found.
    pub linearized: usize,
    /// Model state at the end of that partial linearization.
    pub state: String,
    /// The completed operation that had to take effect next, and could not.
    pub blocked: Option<OpView>,
    /// The last operations of the partial linearization, oldest first; `note` is the state after.
    pub last_linearized: Vec<OpView>,
    /// Every operation that could have gone next, and why it could not.
    pub candidates: Vec<OpView>,
    /// Operations overlapping the blocked one in real time.
    pub concurrent: Vec<OpView>,
    /// Times are shown relative to this (the key's first invoke).
    pub time_base: Time,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "key {:?}: {}", self.key, self.summary)?;
        if self.kind == ViolationKind::Malformed {
            return Ok(());
        }
        write!(f, "{}", self.detail)
    }
}

impl fmt::Display for ViolationDetail {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let base = self.time_base;
        writeln!(
            f,
            "  (times relative to the key's first invoke, in the history's unit: ns when recorded)"
        )?;
        if let Some(end) = &self.prefix_end {
            writeln!(
                f,
                "shortest failing prefix: {} of the key's {} ops, up to the completion of\n    {}",
                self.prefix_ops,
                self.key_ops,
                show_entry(end.index, &end.entry, base)
            )?;
        }
        writeln!(
            f,
            "longest partial linearization: {} completed ops, leaving the key {}",
            self.linearized, self.state
        )?;
        if !self.last_linearized.is_empty() {
            writeln!(f, "  its last steps (oldest first):")?;
            for v in &self.last_linearized {
                writeln!(
                    f,
                    "    {}\n        => {}",
                    show_entry(v.index, &v.entry, base),
                    v.note
                )?;
            }
        }
        if let Some(b) = &self.blocked {
            writeln!(
                f,
                "  then this op must take effect before it completes, and cannot:\n    {}",
                show_entry(b.index, &b.entry, base)
            )?;
        }
        writeln!(f, "  every op that could go next, and why not:")?;
        for v in &self.candidates {
            writeln!(
                f,
                "    {}\n        x {}",
                show_entry(v.index, &v.entry, base),
                v.note
            )?;
        }
        if !self.concurrent.is_empty() {
            writeln!(
                f,
                "  ops overlapping the blocked op in real time, and the writes of the revisions named:"
            )?;
            for v in &self.concurrent {
                writeln!(f, "    {}{}", show_entry(v.index, &v.entry, base), v.note)?;
            }
        }
        Ok(())
    }
}

impl std::error::Error for Violation {}

// ---------------------------------------------------------------------------------------------
// Entry points

/// Checks `history` with the default [`Options`]. `Ok` means no violation was found; look at
/// [`CheckReport::is_conclusive`] (or use [`assert_linearizable`]) before calling it a pass.
pub fn check(history: &[Entry]) -> Result<CheckReport, Violation> {
    check_with(history, &Options::default())
}

/// Panics with the explanation unless `history` is proved linearizable.
pub fn assert_linearizable(history: &[Entry]) -> CheckReport {
    match check(history) {
        Ok(report) if report.is_conclusive() => report,
        Ok(report) => panic!("linearizability check inconclusive: {report}"),
        Err(violation) => panic!("linearizability violation:\n{violation}"),
    }
}

pub fn check_with(history: &[Entry], options: &Options) -> Result<CheckReport, Violation> {
    let start = Instant::now();
    let deadline = start + options.time_budget;
    let mut by_key: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (i, e) in history.iter().enumerate() {
        by_key.entry(e.key.as_str()).or_default().push(i);
    }
    let mut report = CheckReport {
        keys: by_key.len(),
        ops: history.len(),
        unknown: history
            .iter()
            .filter(|e| e.outcome == Outcome::Unknown)
            .count(),
        ..CheckReport::default()
    };
    for (key, indices) in &by_key {
        let entries: Vec<(usize, Entry)> =
            indices.iter().map(|&i| (i, history[i].clone())).collect();
        let compiled = compile(&entries).map_err(|msg| malformed(key, entries.len(), msg))?;
        let key_start = Instant::now();
        let (result, steps, cache) = search(&compiled, deadline, options.step_budget);
        report.steps += steps;
        report.max_cache = report.max_cache.max(cache);
        match result {
            SearchResult::Linearizable => {}
            SearchResult::Inconclusive(reason, deepest) => {
                let completed = compiled.ops.iter().filter(|o| o.complete != NEVER).count();
                let linearized = deepest.as_ref().map_or(0, |d| d.depth);
                let no_minimising = Options {
                    minimise: false,
                    ..options.clone()
                };
                let deepest = deepest
                    .map(|d| explain(key, &entries, compiled, d, &no_minimising).to_string());
                report.inconclusive.push(Inconclusive {
                    key: key.to_string(),
                    ops: entries.len(),
                    steps,
                    elapsed: key_start.elapsed(),
                    reason,
                    linearized,
                    completed,
                    deepest,
                });
            }
            SearchResult::Stuck(stuck) => {
                return Err(explain(key, &entries, compiled, stuck, options));
            }
        }
    }
    report.elapsed = start.elapsed();
    Ok(report)
}

fn malformed(key: &str, key_ops: usize, msg: String) -> Violation {
    Violation {
        key: key.to_string(),
        kind: ViolationKind::Malformed,
        summary: format!("malformed history: {msg}"),
        detail: Box::new(ViolationDetail {
            key_ops,
            ..ViolationDetail::default()
        }),
    }
}

// ---------------------------------------------------------------------------------------------
// Compilation of one key's history into interned steps

/// A revision as the model state holds it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum RevSym {
    /// Returned by a completed write (index into `Compiled::known_revs`).
    Known(u32),
    /// Stored by the write with an unknown outcome at this op index: its revision was never
    /// reported, a read may name it once.
    Fresh(u32),
    /// Stored by a write with an unknown outcome whose value and revision no op can tell apart
    /// from another's (its value is never read nor expected, no revision can name it): all
    /// such writes leave the same state, with the value `OPAQUE`.
    Opaque,
}

/// The value a write leaves when no op can observe it (see `RevSym::Opaque`).
const OPAQUE: u32 = u32::MAX;

/// A revision as an operation names it (a read's result, a conditional delete's argument).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Obs {
    Known(u32),
    /// A completed read returned it, no completed write did: only a write with an unknown
    /// outcome can have stored it (index into `Compiled::unresolved`).
    Unresolved(u32),
    /// No completed op returned it: since clients learn revisions only from completed ops,
    /// it is the revision of no write (index into `Compiled::unresolved`).
    Phantom(u32),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Step {
    ReadAbsent,
    Read(u32, Obs),
    /// A put; with the index of its expiry when it has one.
    Put(u32, RevSym, Option<u32>),
    Cas {
        expected: u32,
        new: u32,
        rev: RevSym,
    },
    CasFail(u32),
    Delete(Obs),
    DeleteFail(Obs),
    Create(u32, RevSym, Option<u32>),
    CreateFail,
    /// The `k`th expiry (in time order) passes.
    Expire(u32),
}

impl Step {
    /// Whether the step, wherever it can go without changing the state, changes no state
    /// anywhere it can go: true of reads and failed conditions, which only constrain the
    /// order. Not of an expiring write, which leaves the key as it is where its expiry has
    /// passed and the key is absent, but empties it where the key holds a later write.
    fn is_constraint(&self) -> bool {
        !matches!(
            self,
            Step::Put(_, _, Some(_)) | Step::Create(_, _, Some(_)) | Step::Expire(_)
        )
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
struct State {
    current: Option<(u32, RevSym)>,
    /// The expiry of the entry held, if it has one.
    current_expiry: Option<u32>,
    /// How many expiries have passed.
    expired: u32,
    /// Unresolved revision -> the unknown write that stored it, sorted; usually empty.
    bindings: Vec<(u32, u32)>,
    /// (unresolved revision, unknown write) pairs found different (by a `Mismatch`).
    distinct: Vec<(u32, u32)>,
}

struct KeyOp {
    /// Position in the checked history.
    index: usize,
    /// Position in the key's entry list.
    entry: usize,
    invoke: Time,
    /// `NEVER` when the outcome is unknown.
    complete: Time,
    step: Step,
}

struct Compiled {
    ops: Vec<KeyOp>,
    values: Vec<Value>,
    known_revs: Vec<Rev>,
    unresolved: Vec<Rev>,
}

fn expected_outcomes(op: &Op) -> &'static str {
    match op {
        Op::Get => "Found",
        Op::Put(_) | Op::PutUntil(..) => "Written",
        Op::CompareAndSwap { .. } => "Written or Mismatch",
        Op::ConditionalDelete { .. } => "Deleted or Mismatch",
        Op::Create(_) | Op::CreateUntil(..) => "Written or AlreadyExists",
    }
}

fn compile(entries: &[(usize, Entry)]) -> Result<Compiled, String> {
    let mut values: HashMap<Value, u32> = HashMap::new();
    let mut value_list: Vec<Value> = Vec::new();
    let mut known: HashMap<&str, (u32, usize)> = HashMap::new();
    let mut known_list: Vec<Rev> = Vec::new();
    for (index, e) in entries {
        let fits = matches!(
            (&e.op, &e.outcome),
            (_, Outcome::Unknown)
                | (Op::Get, Outcome::Found(_))
                | (Op::Put(_) | Op::PutUntil(..), Outcome::Written(_))
                | (
                    Op::CompareAndSwap { .. },
                    Outcome::Written(_) | Outcome::Mismatch
                )
                | (
                    Op::ConditionalDelete { .. },
                    Outcome::Deleted | Outcome::Mismatch
                )
                | (
                    Op::Create(_) | Op::CreateUntil(..),
                    Outcome::Written(_) | Outcome::AlreadyExists
                )
        );
        if !fits {
            return Err(format!(
                "op #{index} {:?} cannot end {:?} (expected {} or Unknown)",
                e.op,
                e.outcome,
                expected_outcomes(&e.op)
            ));
        }
        if e.outcome != Outcome::Unknown && e.complete < e.invoke {
            return Err(format!(
                "op #{index} completes at {} before its invoke at {}",
                e.complete, e.invoke
            ));
        }
        if let Outcome::Written(rev) = &e.outcome {
            let id = known_list.len() as u32;
            if let Some((_, other)) = known.insert(rev.as_str(), (id, *index)) {
                return Err(format!(
                    "revision {} returned by two writes, #{other} and #{index}",
                    show_bytes(rev.as_bytes())
                ));
            }
            known_list.push(rev.clone());
        }
    }
    let mut unresolved: HashMap<Rev, u32> = HashMap::new();
    let mut unresolved_list: Vec<Rev> = Vec::new();
    let mut value = |v: &Value| -> u32 {
        if let Some(&id) = values.get(v) {
            return id;
        }
        value_list.push(v.clone());
        values.insert(v.clone(), value_list.len() as u32 - 1);
        value_list.len() as u32 - 1
    };
    let read: HashMap<&str, ()> = entries
        .iter()
        .filter_map(|(_, e)| match &e.outcome {
            Outcome::Found(Some((_, r))) => Some((r.as_str(), ())),
            _ => None,
        })
        .collect();
    let mut observe = |r: &Rev| -> Obs {
        if let Some((id, _)) = known.get(r.as_str()) {
            return Obs::Known(*id);
        }
        let id = match unresolved.get(r) {
            Some(&id) => id,
            None => {
                unresolved_list.push(r.clone());
                unresolved.insert(r.clone(), unresolved_list.len() as u32 - 1);
                unresolved_list.len() as u32 - 1
            }
        };
        if read.contains_key(r.as_str()) {
            Obs::Unresolved(id)
        } else {
            Obs::Phantom(id)
        }
    };
    // A write of unknown outcome is blind when no op can tell its effect from another blind
    // write's: no read returns its value and no compare-and-swap expects it. (Nor can a
    // revision name it: a name that a read returned goes with the value read, and a name that
    // no completed op returned is a phantom.)
    let mut observed: HashMap<&[u8], ()> = HashMap::new();
    for (_, e) in entries {
        if let (_, Outcome::Found(Some((v, _)))) | (Op::CompareAndSwap { expected: v, .. }, _) =
            (&e.op, &e.outcome)
        {
            observed.insert(v.as_slice(), ());
        }
    }
    let blind = |e: &Entry| -> bool {
        let written = match &e.op {
            Op::Put(v) | Op::Create(v) | Op::CompareAndSwap { new: v, .. } => v,
            _ => return false,
        };
        e.outcome == Outcome::Unknown && !observed.contains_key(written.as_slice())
    };
    // The expiries, in time order: (time, entry).
    let mut expiries: Vec<(Time, usize)> = entries
        .iter()
        .enumerate()
        .filter_map(|(i, (_, e))| e.op.expiry().map(|t| (t, i)))
        .collect();
    expiries.sort_unstable();
    let expiry_of: HashMap<usize, u32> = expiries
        .iter()
        .enumerate()
        .map(|(k, &(_, i))| (i, k as u32))
        .collect();
    let mut order: Vec<usize> = (0..entries.len()).collect();
    order.sort_by_key(|&i| (entries[i].1.invoke, i));
    let mut ops = Vec::with_capacity(entries.len() + expiries.len());
    // Each expiry: an op completed at its instant, named by the write it ends, in the
    // list where its instant falls among the invokes.
    let push_expiry = |ops: &mut Vec<KeyOp>, k: usize| {
        let (at, i) = expiries[k];
        ops.push(KeyOp {
            index: entries[i].0,
            entry: i,
            invoke: at,
            complete: at,
            step: Step::Expire(k as u32),
        });
    };
    let mut next_expiry = 0;
    for i in order {
        let (index, e) = &entries[i];
        while next_expiry < expiries.len() && expiries[next_expiry].0 < e.invoke {
            push_expiry(&mut ops, next_expiry);
            next_expiry += 1;
        }
        let unknown = e.outcome == Outcome::Unknown;
        let this = ops.len() as u32;
        let new_rev = match &e.outcome {
            Outcome::Written(r) => RevSym::Known(known[r.as_str()].0),
            _ if blind(e) => RevSym::Opaque,
            _ => RevSym::Fresh(this),
        };
        let mut value = |v: &Value| -> u32 {
            if new_rev == RevSym::Opaque && !observed.contains_key(v.as_slice()) {
                OPAQUE
            } else {
                value(v)
            }
        };
        let step = match (&e.op, &e.outcome) {
            // A read that may not have happened tells nothing and changes nothing.
            (Op::Get, Outcome::Unknown) => continue,
            (Op::Get, Outcome::Found(None)) => Step::ReadAbsent,
            (Op::Get, Outcome::Found(Some((v, r)))) => Step::Read(value(v), observe(r)),
            (Op::Put(v) | Op::PutUntil(v, _), _) => {
                Step::Put(value(v), new_rev, expiry_of.get(&i).copied())
            }
            (Op::CompareAndSwap { expected, .. }, Outcome::Mismatch) => {
                Step::CasFail(value(expected))
            }
            (Op::CompareAndSwap { expected, new }, _) => Step::Cas {
                expected: value(expected),
                new: value(new),
                rev: new_rev,
            },
            (Op::ConditionalDelete { rev }, Outcome::Mismatch) => Step::DeleteFail(observe(rev)),
            (Op::ConditionalDelete { rev }, _) => Step::Delete(observe(rev)),
            (Op::Create(_) | Op::CreateUntil(..), Outcome::AlreadyExists) => Step::CreateFail,
            (Op::Create(v) | Op::CreateUntil(v, _), _) => {
                Step::Create(value(v), new_rev, expiry_of.get(&i).copied())
            }
            (op, outcome) => unreachable!("{op:?} {outcome:?} passed the outcome check"),
        };
        ops.push(KeyOp {
            index: *index,
            entry: i,
            invoke: e.invoke,
            complete: if unknown { NEVER } else { e.complete },
            step,
        });
    }
    while next_expiry < expiries.len() {
        push_expiry(&mut ops, next_expiry);
        next_expiry += 1;
    }
    Ok(Compiled {
        ops,
        values: value_list,
        known_revs: known_list,
        unresolved: unresolved_list,
    })
}

// ---------------------------------------------------------------------------------------------
// The model

/// Does the state's revision equal the named one? May bind an unresolved name to the unknown
/// write whose revision the state holds.
fn rev_match(held: RevSym, named: Obs, state: &mut State) -> bool {
    match (held, named) {
        (RevSym::Known(a), Obs::Known(b)) => a == b,
        (RevSym::Fresh(op), Obs::Unresolved(name)) => {
            match state.bindings.binary_search_by_key(&name, |b| b.0) {
                Ok(i) => state.bindings[i].1 == op,
                Err(i) => {
                    // Free unless that write's revision has another name already, or this
                    // name was found to be another revision than that write's.
                    let free = !state.bindings.iter().any(|b| b.1 == op)
                        && !state.distinct.contains(&(name, op));
                    if free {
                        state.bindings.insert(i, (name, op));
                    }
                    free
                }
            }
        }
        _ => false,
    }
}

/// Can the state's revision differ from the named one? Records the difference when it is a
/// choice (an unresolved name and an unknown write's revision, both unbound).
fn rev_differ(held: RevSym, named: Obs, state: &mut State) -> bool {
    match (held, named) {
        (RevSym::Known(a), Obs::Known(b)) => a != b,
        (RevSym::Fresh(op), Obs::Unresolved(name)) => {
            match state.bindings.binary_search_by_key(&name, |b| b.0) {
                Ok(i) => state.bindings[i].1 != op,
                Err(_) => {
                    if !state.bindings.iter().any(|b| b.1 == op)
                        && !state.distinct.contains(&(name, op))
                    {
                        state.distinct.push((name, op));
                        state.distinct.sort_unstable();
                    }
                    true
                }
            }
        }
        _ => true,
    }
}

/// The state after `step`, or `None` when the step's outcome is impossible in `state`.
fn apply(step: &Step, state: &State) -> Option<State> {
    let with = |current: Option<(u32, RevSym)>| State {
        current,
        current_expiry: None,
        ..state.clone()
    };
    // A write with an expiry: absent at once if that expiry has passed.
    let expiring = |current: (u32, RevSym), expiry: Option<u32>| match expiry {
        Some(k) if k < state.expired => with(None),
        _ => State {
            current: Some(current),
            current_expiry: expiry,
            ..state.clone()
        },
    };
    match *step {
        Step::ReadAbsent => state.current.is_none().then(|| state.clone()),
        Step::Read(v, named) => {
            let (held_v, held_r) = state.current?;
            if held_v != v {
                return None;
            }
            let mut next = state.clone();
            rev_match(held_r, named, &mut next).then_some(next)
        }
        Step::Put(v, r, expiry) => Some(expiring((v, r), expiry)),
        Step::Cas { expected, new, rev } => match state.current {
            Some((held, _)) if held == expected => Some(with(Some((new, rev)))),
            _ => None,
        },
        Step::CasFail(expected) => match state.current {
            Some((held, _)) if held == expected => None,
            _ => Some(state.clone()),
        },
        Step::Delete(named) => {
            let (_, held_r) = state.current?;
            let mut next = state.clone();
            if rev_match(held_r, named, &mut next) {
                next.current = None;
                next.current_expiry = None;
                Some(next)
            } else {
                None
            }
        }
        Step::DeleteFail(named) => {
            let mut next = state.clone();
            match state.current {
                Some((_, held)) => rev_differ(held, named, &mut next).then_some(next),
                None => Some(next),
            }
        }
        Step::Create(v, r, expiry) => state.current.is_none().then(|| expiring((v, r), expiry)),
        Step::CreateFail => state.current.is_some().then(|| state.clone()),
        Step::Expire(k) => (k == state.expired).then(|| {
            let mut next = state.clone();
            next.expired += 1;
            if state.current_expiry == Some(k) {
                next.current = None;
                next.current_expiry = None;
            }
            next
        }),
    }
}

// ---------------------------------------------------------------------------------------------
// The search

/// Doubly linked list over nodes `1..=n`, with sentinels `0` (head) and `n + 1` (tail), from
/// which nodes are lifted and put back in LIFO order.
struct Links {
    next: Vec<u32>,
    prev: Vec<u32>,
}

impl Links {
    fn new(n: usize) -> Links {
        let n = n as u32;
        Links {
            next: (1..=n + 1).chain([n + 1]).collect(),
            prev: [0].into_iter().chain(0..=n).collect(),
        }
    }
    fn tail(&self) -> u32 {
        self.next.len() as u32 - 1
    }
    fn lift(&mut self, i: u32) {
        let (p, n) = (self.prev[i as usize], self.next[i as usize]);
        self.next[p as usize] = n;
        self.prev[n as usize] = p;
    }
    fn restore(&mut self, i: u32) {
        let (p, n) = (self.prev[i as usize], self.next[i as usize]);
        self.next[p as usize] = i;
        self.prev[n as usize] = i;
    }
}

#[derive(Clone, Copy, Debug)]
enum Cursor {
    /// Just stepped: look first for an op that can go next without changing the state.
    Fresh,
    /// At a node of the list of completed ops' invoke and completion events.
    Main(u32),
    /// Trying unknown ops invoked no later than `bound`, the completion of `blocked`, the
    /// first pending completion.
    Unknown {
        node: u32,
        bound: Time,
        blocked: u32,
    },
    /// Undo the last step and go on where it left off.
    Backtrack,
}

struct Frame {
    op: u32,
    before: State,
    resume: Cursor,
}

/// The completed ops linearized (as the highest one and the holes below it) and the state.
#[derive(PartialEq, Eq, Hash)]
struct MemoKey {
    top: u32,
    holes: Box<[u32]>,
    state: State,
}

struct Stuck {
    /// Completed ops linearized.
    depth: usize,
    blocked: u32,
    state: State,
    /// Last linearized ops with the state after each, oldest first.
    tail: Vec<(u32, State)>,
    candidates: Vec<u32>,
    /// Bit per op: linearized at that point.
    linearized: Vec<u64>,
}

enum SearchResult {
    Linearizable,
    Stuck(Stuck),
    /// Out of budget; with the deepest point reached.
    Inconclusive(String, Option<Stuck>),
}

const TAIL: usize = 8;
const NONE: u32 = u32::MAX;

fn set_bit(bits: &mut [u64], i: usize) {
    bits[i / 64] |= 1 << (i % 64);
}

fn clear_bit(bits: &mut [u64], i: usize) {
    bits[i / 64] &= !(1 << (i % 64));
}

fn memo_key(bits: &[u64], state: &State) -> MemoKey {
    let Some(last) = bits.iter().rposition(|w| *w != 0) else {
        return MemoKey {
            top: 0,
            holes: Box::new([]),
            state: state.clone(),
        };
    };
    let top = last as u32 * 64 + (64 - bits[last].leading_zeros());
    let mut holes = Vec::new();
    for (w, &word) in bits[..=last].iter().enumerate() {
        let mut missing = !word;
        if w == last && !top.is_multiple_of(64) {
            missing &= (1 << (top % 64)) - 1;
        }
        while missing != 0 {
            holes.push(w as u32 * 64 + missing.trailing_zeros());
            missing &= missing - 1;
        }
    }
    MemoKey {
        top,
        holes: holes.into_boxed_slice(),
        state: state.clone(),
    }
}

fn members(bits: &[u64]) -> Box<[u32]> {
    let mut out = Vec::new();
    for (w, &word) in bits.iter().enumerate() {
        let mut word = word;
        while word != 0 {
            out.push(w as u32 * 64 + word.trailing_zeros());
            word &= word - 1;
        }
    }
    out.into_boxed_slice()
}

/// `a ⊆ b`, both sorted.
fn subset(a: &[u32], b: &[u32]) -> bool {
    let mut b = b.iter();
    a.iter().all(|x| b.any(|y| y == x))
}

/// Configurations already explored (or being explored further up the path). A configuration
/// that differs from a stored one only by more unknown ops applied is dominated by it: every
/// way on from it is a way on from the stored one (leaving those unknown ops out).
#[derive(Default)]
struct Memo {
    map: HashMap<MemoKey, Vec<Box<[u32]>>>,
    len: usize,
}

impl Memo {
    /// False when the configuration is already covered.
    fn insert(&mut self, done: &[u64], applied: &[u64], state: &State) -> bool {
        let applied = members(applied);
        let sets = self.map.entry(memo_key(done, state)).or_default();
        if sets.iter().any(|s| subset(s, &applied)) {
            return false;
        }
        sets.retain(|s| !subset(&applied, s));
        sets.push(applied);
        self.len += 1;
        true
    }
}

/// Lowe's just-in-time linearization over one key, with the memo above.
struct Searcher<'a> {
    ops: &'a [KeyOp],
    /// (time, is completion, op) for completed ops, in time order; an invoke sorts before a
    /// completion at the same time (the two ops then count as concurrent).
    events: Vec<(Time, bool, u32)>,
    /// Ops with an unknown outcome, in invoke order.
    unknown_ops: Vec<u32>,
    /// Per op: its invoke and completion nodes in `main`, or its node in `unknown`.
    call_node: Vec<u32>,
    ret_node: Vec<u32>,
    unknown_node: Vec<u32>,
    /// Per op: its bit in `done` (completed ops) or in `applied` (unknown ops).
    rank: Vec<usize>,
    /// Per unknown op: the one before it with the same step, or `NONE`. Two such ops are
    /// interchangeable once both are invoked, so only the first still pending is tried.
    same_before: Vec<u32>,
    main: Links,
    unknown: Links,
    done: Vec<u64>,
    applied: Vec<u64>,
    /// Bit per op, for the explanation.
    linearized: Vec<u64>,
    total_completed: usize,
    remaining: usize,
    state: State,
    stack: Vec<Frame>,
    memo: Memo,
    best: Option<Stuck>,
}

impl<'a> Searcher<'a> {
    fn new(ops: &'a [KeyOp]) -> Searcher<'a> {
        let n = ops.len();
        let mut events = Vec::new();
        let mut unknown_ops = Vec::new();
        let mut rank = vec![0; n];
        for (i, op) in ops.iter().enumerate() {
            if op.complete == NEVER {
                rank[i] = unknown_ops.len();
                unknown_ops.push(i as u32);
            } else {
                rank[i] = events.len() / 2;
                events.push((op.invoke, false, i as u32));
                events.push((op.complete, true, i as u32));
            }
        }
        events.sort_unstable();
        let mut call_node = vec![0; n];
        let mut ret_node = vec![0; n];
        for (k, &(_, is_return, op)) in events.iter().enumerate() {
            let node = k as u32 + 1;
            if is_return {
                ret_node[op as usize] = node;
            } else {
                call_node[op as usize] = node;
            }
        }
        let mut unknown_node = vec![0; n];
        let mut same_before = vec![NONE; n];
        let mut last_of: HashMap<Step, u32> = HashMap::new();
        for (k, &op) in unknown_ops.iter().enumerate() {
            unknown_node[op as usize] = k as u32 + 1;
            if let Some(before) = last_of.insert(ops[op as usize].step, op) {
                same_before[op as usize] = before;
            }
        }
        let total_completed = events.len() / 2;
        Searcher {
            ops,
            main: Links::new(events.len()),
            unknown: Links::new(unknown_ops.len()),
            done: vec![0; total_completed.div_ceil(64)],
            applied: vec![0; unknown_ops.len().div_ceil(64)],
            linearized: vec![0; n.div_ceil(64)],
            events,
            unknown_ops,
            call_node,
            ret_node,
            unknown_node,
            rank,
            same_before,
            total_completed,
            remaining: total_completed,
            state: State::default(),
            stack: Vec::new(),
            memo: Memo::default(),
            best: None,
        }
    }

    fn is_unknown(&self, op: u32) -> bool {
        self.ops[op as usize].complete == NEVER
    }

    /// Is an interchangeable unknown op invoked before `op` still pending?
    fn twin_pending(&self, op: u32) -> bool {
        let mut before = self.same_before[op as usize];
        while before != NONE {
            if self.applied[self.rank[before as usize] / 64] >> (self.rank[before as usize] % 64)
                & 1
                == 0
            {
                return true;
            }
            before = self.same_before[before as usize];
        }
        false
    }

    /// Linearizes `op`, leading to `next`, unless that configuration is covered already.
    fn push(&mut self, op: u32, next: State, resume: Cursor) -> bool {
        let (o, r) = (op as usize, self.rank[op as usize]);
        let unknown = self.is_unknown(op);
        if unknown {
            set_bit(&mut self.applied, r);
        } else {
            set_bit(&mut self.done, r);
        }
        if !self.memo.insert(&self.done, &self.applied, &next) {
            if unknown {
                clear_bit(&mut self.applied, r);
            } else {
                clear_bit(&mut self.done, r);
            }
            return false;
        }
        if unknown {
            self.unknown.lift(self.unknown_node[o]);
        } else {
            self.main.lift(self.call_node[o]);
            self.main.lift(self.ret_node[o]);
            self.remaining -= 1;
        }
        set_bit(&mut self.linearized, o);
        let before = std::mem::replace(&mut self.state, next);
        self.stack.push(Frame { op, before, resume });
        true
    }

    /// Linearizes `op` if its outcome fits the state; where to go next.
    fn try_op(&mut self, op: u32, on_fail: Cursor) -> Cursor {
        let pushed = match apply(&self.ops[op as usize].step, &self.state) {
            Some(next) => self.push(op, next, on_fail),
            None => false,
        };
        if pushed { Cursor::Fresh } else { on_fail }
    }

    /// Undoes the last step; `None` when there is none.
    fn pop(&mut self) -> Option<Cursor> {
        let frame = self.stack.pop()?;
        let (o, r) = (frame.op as usize, self.rank[frame.op as usize]);
        self.state = frame.before;
        clear_bit(&mut self.linearized, o);
        if self.is_unknown(frame.op) {
            clear_bit(&mut self.applied, r);
            self.unknown.restore(self.unknown_node[o]);
        } else {
            clear_bit(&mut self.done, r);
            self.main.restore(self.ret_node[o]);
            self.main.restore(self.call_node[o]);
            self.remaining += 1;
        }
        Some(frame.resume)
    }

    /// The completed op whose completion comes first among those pending.
    fn first_pending_completion(&self) -> u32 {
        let mut node = self.main.next[0];
        loop {
            let (_, is_return, op) = self.events[node as usize - 1];
            if is_return {
                return op;
            }
            node = self.main.next[node as usize];
        }
    }

    /// Notes how far the search got, if farther than before.
    fn note_stuck(&mut self, blocked: u32, bound: Time) {
        let depth = self.total_completed - self.remaining;
        if self.best.as_ref().is_some_and(|b| depth <= b.depth) {
            return;
        }
        let from = self.stack.len().saturating_sub(TAIL);
        let tail = (from..self.stack.len())
            .map(|i| {
                let after = self.stack.get(i + 1).map_or(&self.state, |f| &f.before);
                (self.stack[i].op, after.clone())
            })
            .collect();
        let mut candidates = Vec::new();
        let mut node = self.main.next[0];
        while node != self.main.tail() {
            let (_, is_return, op) = self.events[node as usize - 1];
            if is_return {
                break;
            }
            candidates.push(op);
            node = self.main.next[node as usize];
        }
        let mut node = self.unknown.next[0];
        while node != self.unknown.tail() {
            let op = self.unknown_ops[node as usize - 1];
            if self.ops[op as usize].invoke > bound {
                break;
            }
            candidates.push(op);
            node = self.unknown.next[node as usize];
        }
        self.best = Some(Stuck {
            depth,
            blocked,
            state: self.state.clone(),
            tail,
            candidates,
            linearized: self.linearized.clone(),
        });
    }

    fn run(&mut self, deadline: Instant, step_budget: u64) -> (SearchResult, u64) {
        let mut steps: u64 = 0;
        let mut cursor = Cursor::Fresh;
        loop {
            if self.remaining == 0 {
                return (SearchResult::Linearizable, steps);
            }
            steps += 1;
            if steps.is_multiple_of(1024) {
                let why = if steps >= step_budget {
                    format!("step budget of {step_budget} spent")
                } else if Instant::now() >= deadline {
                    "time budget spent".to_string()
                } else {
                    String::new()
                };
                if !why.is_empty() {
                    return (SearchResult::Inconclusive(why, self.best.take()), steps);
                }
            }
            cursor = match cursor {
                Cursor::Fresh => {
                    // An op that can go now without changing the state goes now, without
                    // trying alternatives: put first, it spoils no order that works.
                    let mut next_cursor = Cursor::Main(self.main.next[0]);
                    let mut node = self.main.next[0];
                    loop {
                        let (_, is_return, op) = self.events[node as usize - 1];
                        if is_return {
                            break;
                        }
                        let step = &self.ops[op as usize].step;
                        if step.is_constraint()
                            && let Some(next) = apply(step, &self.state)
                            && next == self.state
                        {
                            next_cursor = if self.push(op, next, Cursor::Backtrack) {
                                Cursor::Fresh
                            } else {
                                Cursor::Backtrack
                            };
                            break;
                        }
                        node = self.main.next[node as usize];
                    }
                    next_cursor
                }
                Cursor::Main(node) => {
                    let (_, is_return, op) = self.events[node as usize - 1];
                    if is_return {
                        Cursor::Unknown {
                            node: self.unknown.next[0],
                            bound: self.ops[op as usize].complete,
                            blocked: op,
                        }
                    } else {
                        let on_fail = Cursor::Main(self.main.next[node as usize]);
                        self.try_op(op, on_fail)
                    }
                }
                Cursor::Unknown {
                    node,
                    bound,
                    blocked,
                } => {
                    let op = (node != self.unknown.tail())
                        .then(|| self.unknown_ops[node as usize - 1])
                        .filter(|&op| self.ops[op as usize].invoke <= bound);
                    match op {
                        Some(op) => {
                            let on_fail = Cursor::Unknown {
                                node: self.unknown.next[node as usize],
                                bound,
                                blocked,
                            };
                            if self.twin_pending(op) {
                                on_fail
                            } else {
                                self.try_op(op, on_fail)
                            }
                        }
                        None => {
                            self.note_stuck(blocked, bound);
                            Cursor::Backtrack
                        }
                    }
                }
                Cursor::Backtrack => match self.pop() {
                    Some(resume) => resume,
                    None => {
                        if self.best.is_none() {
                            let blocked = self.first_pending_completion();
                            let bound = self.ops[blocked as usize].complete;
                            self.note_stuck(blocked, bound);
                        }
                        let stuck = self.best.take().expect("noted just above");
                        return (SearchResult::Stuck(stuck), steps);
                    }
                },
            };
        }
    }
}

/// Searches one key; also returns the steps taken and the memo's size.
fn search(compiled: &Compiled, deadline: Instant, step_budget: u64) -> (SearchResult, u64, usize) {
    let mut searcher = Searcher::new(&compiled.ops);
    let (result, steps) = searcher.run(deadline, step_budget);
    (result, steps, searcher.memo.len)
}

// ---------------------------------------------------------------------------------------------
// Explaining a violation

/// The key's history cut at `end`: ops invoked by then, those not completed by then `Unknown`.
fn prefix(entries: &[(usize, Entry)], end: Time) -> Vec<(usize, Entry)> {
    entries
        .iter()
        .filter(|(_, e)| e.invoke <= end)
        .map(|(i, e)| {
            let mut e = e.clone();
            if e.complete > end {
                e.outcome = Outcome::Unknown;
                e.complete = NEVER;
            }
            (*i, e)
        })
        .collect()
}

fn explain(
    key: &str,
    entries: &[(usize, Entry)],
    compiled: Compiled,
    stuck: Stuck,
    options: &Options,
) -> Violation {
    let mut compiled = compiled;
    let mut stuck = stuck;
    let mut prefix_end = None;
    let mut prefix_entries: Option<Vec<(usize, Entry)>> = None;
    if options.minimise {
        // Failing prefixes are closed upwards: binary search the shortest.
        let deadline = Instant::now() + options.minimise_budget;
        let mut ends: Vec<(Time, usize)> = entries
            .iter()
            .enumerate()
            .filter(|(_, (_, e))| e.complete != NEVER)
            .map(|(k, (_, e))| (e.complete, k))
            .collect();
        ends.sort_unstable();
        let (mut lo, mut hi) = (0usize, ends.len().saturating_sub(1));
        while lo < hi {
            let mid = (lo + hi) / 2;
            let cut = prefix(entries, ends[mid].0);
            let Ok(c) = compile(&cut) else { break };
            match search(&c, deadline, options.step_budget).0 {
                SearchResult::Stuck(s) => {
                    hi = mid;
                    compiled = c;
                    stuck = s;
                    prefix_entries = Some(cut);
                    prefix_end = Some(ends[mid].1);
                }
                SearchResult::Linearizable => lo = mid + 1,
                SearchResult::Inconclusive(..) => break,
            }
        }
        if prefix_end.is_none() && !ends.is_empty() {
            prefix_end = Some(ends[ends.len() - 1].1);
        }
    }
    let shown_entries = prefix_entries.as_deref().unwrap_or(entries);
    let time_base = entries.iter().map(|(_, e)| e.invoke).min().unwrap_or(0);
    let original = |op: u32| -> (usize, &Entry) {
        let k = compiled.ops[op as usize].entry;
        let (index, _) = &shown_entries[k];
        let e = entries
            .iter()
            .find(|(i, _)| i == index)
            .map(|(_, e)| e)
            .expect("prefix entries come from the key's entries");
        (*index, e)
    };
    let view = |op: u32, note: String| {
        let (index, entry) = original(op);
        OpView {
            index,
            entry: entry.clone(),
            note,
        }
    };
    let names = Names {
        compiled: &compiled,
        entries: shown_entries,
    };
    let blocked = view(stuck.blocked, String::new());
    let (b_from, b_to) = (blocked.entry.invoke, blocked.entry.complete);
    let mut shown: Vec<usize> = (0..entries.len())
        .filter(|&k| {
            let (i, e) = &entries[k];
            *i != blocked.index && e.invoke <= b_to && e.complete >= b_from
        })
        .take(40)
        .collect();
    // The writes of the revisions that the blocked op, the candidates and the overlapping
    // ops name: often the write that is in the wrong place.
    let writer: HashMap<&str, usize> = (0..entries.len())
        .filter_map(|k| match &entries[k].1.outcome {
            Outcome::Written(r) => Some((r.as_str(), k)),
            _ => None,
        })
        .collect();
    let named_by = |e: &Entry| -> Option<Rev> {
        match (&e.op, &e.outcome) {
            (_, Outcome::Found(Some((_, r)))) | (Op::ConditionalDelete { rev: r }, _) => {
                Some(r.clone())
            }
            _ => None,
        }
    };
    let mut naming: Vec<&Entry> = vec![&blocked.entry];
    naming.extend(stuck.candidates.iter().map(|&op| original(op).1));
    naming.extend(shown.iter().map(|&k| &entries[k].1));
    let mut writers = Vec::new();
    for e in naming {
        if let Some(k) = named_by(e).and_then(|r| writer.get(r.as_str()).copied())
            && entries[k].0 != blocked.index
            && !shown.contains(&k)
            && !writers.contains(&k)
        {
            writers.push(k);
        }
    }
    shown.extend(writers);
    shown.sort_by_key(|&k| (entries[k].1.invoke, k));
    let position: HashMap<usize, u32> = compiled
        .ops
        .iter()
        .enumerate()
        .map(|(op, o)| (shown_entries[o.entry].0, op as u32))
        .collect();
    let concurrent: Vec<OpView> = shown
        .into_iter()
        .map(|k| {
            let (index, e) = &entries[k];
            let overlaps = e.invoke <= b_to && e.complete >= b_from;
            let mut note = match position.get(index) {
                None => "  [after the failing prefix]".to_string(),
                Some(&op) if stuck.linearized[op as usize / 64] >> (op % 64) & 1 == 1 => {
                    "  [in the partial linearization]".to_string()
                }
                Some(_) => "  [not linearized]".to_string(),
            };
            if !overlaps {
                note.push_str(" (write of a revision named above)");
            }
            OpView {
                index: *index,
                entry: e.clone(),
                note,
            }
        })
        .collect();
    let candidates = stuck
        .candidates
        .iter()
        .map(|&op| {
            let why = match apply(&compiled.ops[op as usize].step, &stuck.state) {
                Some(_) => "possible here, but every way on from there failed".to_string(),
                None => names.why_not(&compiled.ops[op as usize].step, &stuck.state),
            };
            let pending = if compiled.ops[op as usize].complete == NEVER {
                " (outcome unknown, or still running at the prefix end)"
            } else {
                ""
            };
            view(op, format!("{why}{pending}"))
        })
        .collect();
    let last_linearized = stuck
        .tail
        .iter()
        .map(|(op, after)| view(*op, names.state(after)))
        .collect();
    let prefix_end = prefix_end.map(|k| OpView {
        index: entries[k].0,
        entry: entries[k].1.clone(),
        note: String::new(),
    });
    let state = names.state(&stuck.state);
    Violation {
        key: key.to_string(),
        kind: ViolationKind::NotLinearizable,
        summary: format!(
            "not linearizable: op #{} ({}) can take effect in no order consistent with the others \
             (key holds {} at that point)",
            blocked.index,
            show_op(&blocked.entry),
            state
        ),
        detail: Box::new(ViolationDetail {
            key_ops: entries.len(),
            prefix_ops: shown_entries.len(),
            prefix_end,
            linearized: stuck.depth,
            state,
            blocked: Some(blocked),
            last_linearized,
            candidates,
            concurrent,
            time_base,
        }),
    }
}

struct Names<'a> {
    compiled: &'a Compiled,
    entries: &'a [(usize, Entry)],
}

impl Names<'_> {
    fn value(&self, v: u32) -> String {
        match self.compiled.values.get(v as usize) {
            Some(value) => show_bytes(value),
            None => "<a value no op observes>".to_string(),
        }
    }
    fn rev(&self, r: RevSym) -> String {
        match r {
            RevSym::Known(k) => show_bytes(self.compiled.known_revs[k as usize].as_bytes()),
            RevSym::Fresh(op) => {
                let k = self.compiled.ops[op as usize].entry;
                format!("<rev of #{}, outcome unknown>", self.entries[k].0)
            }
            RevSym::Opaque => "<rev of a write of unknown outcome>".to_string(),
        }
    }
    fn obs(&self, r: Obs) -> String {
        match r {
            Obs::Known(k) => show_bytes(self.compiled.known_revs[k as usize].as_bytes()),
            Obs::Unresolved(u) => format!(
                "{} (returned by no completed write)",
                show_bytes(self.compiled.unresolved[u as usize].as_bytes())
            ),
            Obs::Phantom(u) => format!(
                "{} (returned by no completed op)",
                show_bytes(self.compiled.unresolved[u as usize].as_bytes())
            ),
        }
    }
    fn state(&self, state: &State) -> String {
        match state.current {
            None => "absent".to_string(),
            Some((v, r)) => format!("{} @ {}", self.value(v), self.rev(r)),
        }
    }
    fn why_not(&self, step: &Step, state: &State) -> String {
        let held = self.state(state);
        match *step {
            Step::ReadAbsent => format!("reads absent, but the key holds {held}"),
            Step::Read(v, r) => {
                let read = format!("{} @ {}", self.value(v), self.obs(r));
                match state.current {
                    Some((hv, _)) if hv == v => {
                        format!("reads {read}: same value, other revision than {held}")
                    }
                    _ => format!("reads {read}, but the key holds {held}"),
                }
            }
            Step::Cas { expected, .. } => {
                format!(
                    "swaps from {}, but the key holds {held}",
                    self.value(expected)
                )
            }
            Step::CasFail(expected) => format!(
                "reports Mismatch, but the key holds the expected {}",
                self.value(expected)
            ),
            Step::Delete(r) => format!("deletes rev {}, but the key holds {held}", self.obs(r)),
            Step::DeleteFail(r) => format!(
                "reports Mismatch, but the key holds the named rev {}",
                self.obs(r)
            ),
            Step::Create(..) => format!("creates, but the key holds {held}"),
            Step::CreateFail => "reports AlreadyExists, but the key is absent".to_string(),
            Step::Put(..) => "a put always applies".to_string(),
            Step::Expire(k) => format!(
                "expiry {k} passes, but {} expiries have passed",
                state.expired
            ),
        }
    }
}

fn show_bytes(bytes: &[u8]) -> String {
    const MAX: usize = 48;
    match std::str::from_utf8(bytes) {
        Ok(s) if s.chars().all(|c| !c.is_control()) => {
            if s.chars().count() > MAX {
                format!("{:?}...", s.chars().take(MAX).collect::<String>())
            } else {
                format!("{s:?}")
            }
        }
        _ => {
            let mut hex = String::from("0x");
            for b in bytes.iter().take(MAX / 2) {
                let _ = write!(hex, "{b:02x}");
            }
            if bytes.len() > MAX / 2 {
                hex.push_str("...");
            }
            hex
        }
    }
}

fn show_op(e: &Entry) -> String {
    let op = match &e.op {
        Op::Get => "Get".to_string(),
        Op::Put(v) => format!("Put({})", show_bytes(v)),
        Op::CompareAndSwap { expected, new } => {
            format!("CAS({} -> {})", show_bytes(expected), show_bytes(new))
        }
        Op::ConditionalDelete { rev } => format!("Delete(rev {})", show_bytes(rev.as_bytes())),
        Op::Create(v) => format!("Create({})", show_bytes(v)),
        Op::PutUntil(v, t) => format!("Put({}, expires {t})", show_bytes(v)),
        Op::CreateUntil(v, t) => format!("Create({}, expires {t})", show_bytes(v)),
    };
    let outcome = match &e.outcome {
        Outcome::Found(None) => "absent".to_string(),
        Outcome::Found(Some((v, r))) => {
            format!("{} @ {}", show_bytes(v), show_bytes(r.as_bytes()))
        }
        Outcome::Written(r) => format!("Written {}", show_bytes(r.as_bytes())),
        other => format!("{other:?}"),
    };
    format!("{op} -> {outcome}")
}

fn show_entry(index: usize, e: &Entry, base: Time) -> String {
    let end = if e.complete == NEVER {
        "?".to_string()
    } else {
        (e.complete - base).to_string()
    };
    format!(
        "#{index} client {} [{}..{}] {}",
        e.client,
        e.invoke - base,
        end,
        show_op(e)
    )
}
