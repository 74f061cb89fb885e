//! The lease record and the conditions a write of one can carry.

use std::time::Duration;

/// The `etag` of a lease guarding the creation of an object that must not exist yet.
pub const CREATE_ETAG: &str = "*";

/// One lease as stored: the row of the lease table.
///
/// The first five fields are object_store 0.12's DynamoCommit schema, unchanged, so old
/// and new writers read each other's records. `owner` and `released` are ours; old
/// writers ignore them, and their own writes (whole-item puts) drop them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseRecord {
    /// The object's path (hash key).
    pub path: String,
    /// The ETag the operation expects, or [`CREATE_ETAG`] (range key).
    pub etag: String,
    /// Strictly increasing per (path, etag) while the record lives: each acquisition,
    /// reclaim and renewal writes the next one.
    pub generation: u64,
    /// How long the holder may hold it without renewing (the `timeout` attribute, in ms).
    pub timeout: Duration,
    /// When the table may delete the record (epoch seconds on the writer's wall clock;
    /// DynamoDB TTL), or `None` for records that must never expire (lock records, whose
    /// generations are fencing tokens).
    pub ttl: Option<i64>,
    /// A random nonce naming the acquisition that wrote the record; `None` in records
    /// of old writers.
    pub owner: Option<String>,
    /// What the holder advertises (a lock holder's address); `None` for commit leases.
    pub value: Option<String>,
    /// Set by a holder whose operation has a known outcome: the next writer need not wait.
    /// Stored as the number 1 (old writers parse only strings and numbers).
    pub released: bool,
    /// Who wrote it and when, for people reading the table (`dynacommit lease list`), and
    /// for a waiter's timing: a record written once and never renewed is a commit in
    /// progress, whose outcome it looks for after about one hold. Never used for safety.
    /// `None` in records of old writers.
    pub holder: Option<Holder>,
}

/// Who wrote a lease record, and when, by the writer's wall clock: for telling a dead
/// holder from a live one when inspecting a table. Stored as strings and numbers, which
/// object_store 0.12.5 writers read past.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    /// The writing process: `HOST pid PID`.
    pub process: String,
    /// When its acquisition was sent, in milliseconds since the epoch.
    pub since_ms: i64,
    /// When this version of the record was sent, in milliseconds since the epoch: its age
    /// says how long ago the holder last renewed.
    pub written_ms: i64,
}

impl LeaseRecord {
    /// The condition that this record still stands unchanged.
    pub fn unchanged(&self) -> Expect {
        Expect::Unchanged {
            generation: self.generation,
            owner: self.owner.clone(),
            ttl: self.ttl,
        }
    }

    /// Whether the record was written once by its holder, never renewed: ours carry when
    /// the lease was first taken and when the record was written (equal on the first
    /// write); object_store 0.12.5's carry neither and start at generation 0.
    pub(crate) fn is_written_once(&self) -> bool {
        match &self.holder {
            Some(holder) => holder.since_ms == holder.written_ms,
            None => self.generation == 0,
        }
    }

    /// Whether this is the record an acquisition by `owner` at `generation` wrote.
    pub fn is_written_by(&self, owner: &str, generation: u64) -> bool {
        self.generation == generation && self.owner.as_deref() == Some(owner)
    }
}

/// What must be true of the stored record for a write to apply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expect {
    /// No record at this (path, etag): a first acquisition.
    Absent,
    /// A record at exactly this generation, whatever else it holds: object_store
    /// 0.12.5's reclaim condition. The protocol reclaims with [`Expect::Unchanged`].
    Generation(u64),
    /// The record exactly as a waiter saw it: same generation, same owner (or none, for an
    /// old writer's record) and same `ttl`. Reclaiming an expired or released lease with
    /// this condition cannot succeed over a record that was deleted and written afresh at
    /// the same generation meanwhile (by DynamoDB's TTL, an operator, or an old writer).
    Unchanged {
        /// The generation seen.
        generation: u64,
        /// The owner seen.
        owner: Option<String>,
        /// The `ttl` seen.
        ttl: Option<i64>,
    },
    /// A record at this generation written by this owner: renewing or releasing our own.
    Owned {
        /// The generation we hold.
        generation: u64,
        /// Our nonce.
        owner: String,
    },
}

/// The answer to a conditional write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PutOutcome {
    /// The condition held and the record was written.
    Written,
    /// The condition failed; the record that stood, if the table sent it back (or
    /// `None` if there was none, or the table would not say).
    Conflict(Option<LeaseRecord>),
}
