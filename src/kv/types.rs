//! The values the store hands out and takes in.

use std::fmt;
use std::time::SystemTime;

use bytes::Bytes;

use super::KvError;
use super::key::display;

/// The revision of a stored value: a fresh random token on every write, so an entry
/// deleted and written again never comes back at a revision seen before.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Revision(String);

impl Revision {
    /// A fresh revision: 128 random bits as hex.
    pub(crate) fn fresh() -> Self {
        Self(format!("{:032x}", rand::random::<u128>()))
    }

    /// The revision as text, as stored.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl From<String> for Revision {
    fn from(text: String) -> Self {
        Self(text)
    }
}

impl From<&str> for Revision {
    fn from(text: &str) -> Self {
        Self(text.to_owned())
    }
}

impl fmt::Display for Revision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for Revision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Revision({})", self.0)
    }
}

/// A live entry.
#[derive(Clone, PartialEq, Eq)]
pub struct Entry {
    /// Its key.
    pub key: Vec<u8>,
    /// Its value.
    pub value: Bytes,
    /// The revision of the write that stored it.
    pub revision: Revision,
    /// When it expires, if ever (to the millisecond).
    pub expires: Option<SystemTime>,
}

impl fmt::Debug for Entry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Entry")
            .field("key", &display(&self.key))
            .field("value_len", &self.value.len())
            .field("revision", &self.revision)
            .field("expires", &self.expires)
            .finish()
    }
}

/// What must hold of a key's live entry for a write, delete or transaction step to apply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Condition {
    /// Nothing.
    Always,
    /// No live entry.
    Absent,
    /// A live entry.
    Exists,
    /// A live entry holding exactly this value.
    Value(Bytes),
    /// A live entry at this revision.
    Revision(Revision),
}

impl Condition {
    /// The error a write at `key` fails with when this condition does not hold.
    pub fn failure(&self, key: &[u8]) -> KvError {
        let key = display(key);
        match self {
            Self::Absent => KvError::AlreadyExists { key },
            Self::Exists | Self::Always => KvError::NotFound { key },
            Self::Value(_) => KvError::CompareFailed { key },
            Self::Revision(expected) => KvError::RevisionMismatch {
                key,
                expected: expected.clone(),
            },
        }
    }

    /// Whether it holds of `current`, the live entry's value and revision if any.
    pub fn holds(&self, current: Option<(&[u8], &Revision)>) -> bool {
        match (self, current) {
            (Self::Always, _) => true,
            (Self::Absent, None) => true,
            (Self::Absent, Some(_)) => false,
            (Self::Exists, current) => current.is_some(),
            (Self::Value(expected), Some((value, _))) => expected.as_ref() == value,
            (Self::Revision(expected), Some((_, revision))) => expected == revision,
            (Self::Value(_) | Self::Revision(_), None) => false,
        }
    }
}

impl fmt::Display for Condition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Always => f.write_str("always"),
            Self::Absent => f.write_str("no live entry"),
            Self::Exists => f.write_str("a live entry"),
            Self::Value(v) => write!(
                f,
                "a live entry holding the expected {}-byte value",
                v.len()
            ),
            Self::Revision(r) => write!(f, "a live entry at revision {r}"),
        }
    }
}

/// What one step of a transaction does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TxnAction {
    /// Writes a value.
    Put {
        /// The value.
        value: Bytes,
        /// When it expires, if ever.
        expires: Option<SystemTime>,
    },
    /// Deletes the key (a missing key is fine, unless the condition says otherwise).
    Delete,
    /// Only checks the condition.
    Check,
}

/// One step of a [`KvStore::transaction`](super::KvStore::transaction).
///
/// ```
/// use bytes::Bytes;
/// use dynacommit::kv::{Revision, TxnOp};
///
/// let seen = Revision::from("0123abcd");
/// let ops = vec![
///     TxnOp::check(b"config/version").if_revision(seen),
///     TxnOp::put(b"config/a", Bytes::from("1")),
///     TxnOp::delete(b"config/old"),
/// ];
/// # let _ = ops;
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnOp {
    /// The key.
    pub key: Vec<u8>,
    /// What must hold first.
    pub condition: Condition,
    /// What to do.
    pub action: TxnAction,
}

impl TxnOp {
    /// Writes `value` at `key`, never expiring.
    pub fn put(key: &[u8], value: Bytes) -> Self {
        Self {
            key: key.to_vec(),
            condition: Condition::Always,
            action: TxnAction::Put {
                value,
                expires: None,
            },
        }
    }

    /// Deletes `key`.
    pub fn delete(key: &[u8]) -> Self {
        Self {
            key: key.to_vec(),
            condition: Condition::Always,
            action: TxnAction::Delete,
        }
    }

    /// Checks `key` (give the condition with one of the `if_` methods).
    pub fn check(key: &[u8]) -> Self {
        Self {
            key: key.to_vec(),
            condition: Condition::Always,
            action: TxnAction::Check,
        }
    }

    /// Only if the live entry is at `revision`.
    pub fn if_revision(mut self, revision: Revision) -> Self {
        self.condition = Condition::Revision(revision);
        self
    }

    /// Only if there is no live entry.
    pub fn if_absent(mut self) -> Self {
        self.condition = Condition::Absent;
        self
    }

    /// Only if there is a live entry.
    pub fn if_exists(mut self) -> Self {
        self.condition = Condition::Exists;
        self
    }

    /// Only if the live entry holds `value`.
    pub fn if_value(mut self, value: Bytes) -> Self {
        self.condition = Condition::Value(value);
        self
    }

    /// For a put: the value expires at `at`.
    pub fn expires(mut self, at: SystemTime) -> Self {
        if let TxnAction::Put { expires, .. } = &mut self.action {
            *expires = Some(at);
        }
        self
    }
}

/// Where a watch stands: give it back to [`KvStore::watch`](super::KvStore::watch) to
/// resume right after the event that carried it. Opaque text, safe to store anywhere.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Checkpoint(pub(crate) String);

impl Checkpoint {
    /// The checkpoint as text, to store.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// A checkpoint stored earlier as text.
    pub fn from_text(text: impl Into<String>) -> Self {
        Self(text.into())
    }
}

impl fmt::Debug for Checkpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Checkpoint({})", self.0)
    }
}

/// What a watch saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EventKind {
    /// The watch is in place: every change from here on will be reported.
    Ready,
    /// An entry was written.
    Put(Entry),
    /// A key was deleted.
    Deleted {
        /// The key.
        key: Vec<u8>,
    },
    /// A key's entry was removed because it had expired (by a sweep or by DynamoDB's TTL).
    Expired {
        /// The key.
        key: Vec<u8>,
    },
}

/// One event of a watch, with the checkpoint to resume after it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatchEvent {
    /// What happened.
    pub kind: EventKind,
    /// Resume after this event.
    pub checkpoint: Checkpoint,
}

impl WatchEvent {
    /// The key the event is about (none for `Ready`).
    pub fn key(&self) -> Option<&[u8]> {
        match &self.kind {
            EventKind::Ready => None,
            EventKind::Put(entry) => Some(&entry.key),
            EventKind::Deleted { key } | EventKind::Expired { key } => Some(key),
        }
    }
}
