//! Transactions as both stores run them: the steps in order, each condition checked on
//! the state the earlier steps left (Vault's transactions write one key twice), and the
//! net change per key applied at once.

use std::collections::HashMap;
use std::time::SystemTime;

use bytes::Bytes;

use super::{Condition, KvError, Revision, TRANSACTION_MAX, TxnAction, TxnOp, check_write, key};

/// What a transaction leaves at one key.
#[derive(Debug, Clone)]
pub(crate) enum Net {
    /// Only checked.
    Unchanged,
    /// Written (by its last put).
    Put {
        value: Bytes,
        revision: Revision,
        expires: Option<SystemTime>,
    },
    /// Deleted (a missing key stays missing).
    Deleted,
}

/// A transaction worked out against one read of its keys.
pub(crate) struct Plan {
    /// One revision per put, in order.
    pub revisions: Vec<Option<Revision>>,
    /// The net change of each key, in order of first appearance.
    pub changes: Vec<(Vec<u8>, Net)>,
}

/// Runs `ops` against `live` (each key's live value and revision, `None` if there is none;
/// every key of `ops` must be in it), or names the step whose condition fails.
pub(crate) fn plan(
    ops: &[TxnOp],
    live: &HashMap<Vec<u8>, Option<(Bytes, Revision)>>,
) -> Result<Plan, KvError> {
    let mut state: HashMap<&[u8], Option<(Bytes, Revision)>> = HashMap::new();
    let mut changes: Vec<(Vec<u8>, Net)> = Vec::new();
    let mut revisions = Vec::with_capacity(ops.len());
    for (index, op) in ops.iter().enumerate() {
        let current = state
            .entry(op.key.as_slice())
            .or_insert_with(|| live.get(&op.key).cloned().flatten());
        if !op
            .condition
            .holds(current.as_ref().map(|(v, r)| (v.as_ref(), r)))
        {
            return Err(conflict(index, op));
        }
        let net = match &op.action {
            TxnAction::Put { value, expires } => {
                let revision = Revision::fresh();
                *current = Some((value.clone(), revision.clone()));
                revisions.push(Some(revision.clone()));
                Some(Net::Put {
                    value: value.clone(),
                    revision,
                    expires: *expires,
                })
            }
            TxnAction::Delete => {
                *current = None;
                revisions.push(None);
                Some(Net::Deleted)
            }
            TxnAction::Check => {
                revisions.push(None);
                None
            }
        };
        match changes.iter_mut().find(|(k, _)| *k == op.key) {
            Some((_, slot)) => {
                if let Some(net) = net {
                    *slot = net;
                }
            }
            None => changes.push((op.key.clone(), net.unwrap_or(Net::Unchanged))),
        }
    }
    // A put that a later step overwrote or deleted leaves no revision behind: no read will
    // ever see it, so none is returned for it.
    for (op, revision) in ops.iter().zip(revisions.iter_mut()) {
        let last = changes
            .iter()
            .find(|(k, _)| *k == op.key)
            .map(|(_, net)| net);
        let stands = matches!(
            (last, &*revision),
            (Some(Net::Put { revision: net, .. }), Some(mine)) if net == mine
        );
        if !stands {
            *revision = None;
        }
    }
    Ok(Plan { revisions, changes })
}

/// The error for step `index`, whose condition did not hold.
pub(crate) fn conflict(index: usize, op: &TxnOp) -> KvError {
    KvError::TransactionConflict {
        index,
        key: key::display(&op.key),
        condition: op.condition.to_string(),
    }
}

/// The most key and value bytes one transaction writes: DynamoDB's 4 MB per transaction,
/// less room for the other attributes of up to 100 items.
pub const TRANSACTION_BYTES_MAX: usize = 4_000_000 - 100 * 1024;

/// How many DynamoDB items `ops` may take as one transaction, at most: one per distinct
/// key (its write, delete or check), and one folder counter per distinct folder that holds
/// a key it puts or deletes (a key created or deleted changes a counter of each folder it
/// sits in). Both stores refuse a transaction over [`TRANSACTION_MAX`] by this count, before
/// reading anything, so a caller can tell beforehand and code tried on [`MemoryKv`]
/// behaves the same on [`DynamoKv`].
///
/// [`MemoryKv`]: super::MemoryKv
/// [`DynamoKv`]: super::DynamoKv
///
/// ```
/// use bytes::Bytes;
/// use dynacommit::kv::{TxnOp, transaction_items};
///
/// // Two keys in folder `a/` and one in `a/b/`: three items, and counters of `a/` and `a/b/`.
/// let ops = vec![
///     TxnOp::put(b"a/x", Bytes::from("1")),
///     TxnOp::delete(b"a/y"),
///     TxnOp::check(b"a/b/z").if_exists(),
/// ];
/// assert_eq!(transaction_items(&ops), 3 + 1);
/// ```
pub fn transaction_items(ops: &[TxnOp]) -> usize {
    let keys: std::collections::BTreeSet<&[u8]> = ops.iter().map(|op| op.key.as_slice()).collect();
    let folders: std::collections::BTreeSet<Vec<u8>> = ops
        .iter()
        .filter(|op| !matches!(op.action, TxnAction::Check))
        .flat_map(|op| {
            key::folders(&op.key)
                .into_iter()
                .map(|(parent, name)| [parent, name].concat())
        })
        .collect();
    keys.len() + folders.len()
}

/// What every store checks of a transaction before touching anything.
pub(crate) fn check(ops: &[TxnOp], namespace_len: usize) -> Result<(), KvError> {
    if ops.is_empty() {
        return Err(KvError::InvalidTransaction {
            problem: "it has no operations".into(),
        });
    }
    if ops.len() > TRANSACTION_MAX {
        return Err(KvError::InvalidTransaction {
            problem: format!(
                "it has {} operations, over the {TRANSACTION_MAX} one transaction takes: split it",
                ops.len()
            ),
        });
    }
    let items = transaction_items(ops);
    if items > TRANSACTION_MAX {
        return Err(KvError::InvalidTransaction {
            problem: format!(
                "its keys and the folder counters they may change make {items} items, over the {TRANSACTION_MAX} of one transaction (`kv::transaction_items` counts them): split it"
            ),
        });
    }
    let mut bytes = 0;
    for op in ops {
        match &op.action {
            TxnAction::Put { value, .. } => {
                check_write(&op.key, value, namespace_len)?;
                bytes += value.len() + op.key.len();
            }
            TxnAction::Delete | TxnAction::Check => key::validate(&op.key, namespace_len)?,
        }
    }
    if bytes > TRANSACTION_BYTES_MAX {
        return Err(KvError::InvalidTransaction {
            problem: format!(
                "its keys and values come to {bytes} bytes, over the {TRANSACTION_BYTES_MAX} one DynamoDB transaction carries: split it"
            ),
        });
    }
    Ok(())
}

/// Whether a step on `key` relies on its stored entry being live: a condition other than
/// `Always` or `Absent` on a step that sees the stored entry.
pub(crate) fn relies_on_live(ops: &[TxnOp], key: &[u8]) -> bool {
    // Only steps before the transaction's own first put or delete of `key` see the stored
    // entry: a later condition is met, or not, by the transaction itself.
    for op in ops.iter().filter(|op| op.key == key) {
        if !matches!(op.condition, Condition::Always | Condition::Absent) {
            return true;
        }
        if !matches!(op.action, TxnAction::Check) {
            return false;
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn live(pairs: &[(&str, Option<&str>)]) -> HashMap<Vec<u8>, Option<(Bytes, Revision)>> {
        pairs
            .iter()
            .map(|(k, v)| {
                let entry =
                    v.map(|v| (Bytes::from(v.to_owned()), Revision::from(format!("r-{v}"))));
                (k.as_bytes().to_vec(), entry)
            })
            .collect()
    }

    #[test]
    fn later_steps_see_earlier_ones_and_the_last_write_wins() {
        let ops = vec![
            TxnOp::put(b"foo", Bytes::from("bar2")),
            TxnOp::delete(b"gone"),
            TxnOp::put(b"foo", Bytes::from("bar3")).if_value(Bytes::from("bar2")),
            TxnOp::check(b"gone").if_absent(),
        ];
        let plan = plan(&ops, &live(&[("foo", Some("bar")), ("gone", Some("x"))])).unwrap();
        assert_eq!(plan.changes.len(), 2);
        let Net::Put {
            value, revision, ..
        } = &plan.changes[0].1
        else {
            panic!("{:?}", plan.changes[0].1)
        };
        assert_eq!(value, "bar3");
        assert!(matches!(plan.changes[1].1, Net::Deleted));
        // Only the put that stands has a revision: the first, overwritten by the third,
        // was never visible.
        assert_eq!(plan.revisions, [None, None, Some(revision.clone()), None]);
    }

    #[test]
    fn a_put_deleted_by_a_later_step_has_no_revision() {
        let ops = vec![
            TxnOp::put(b"a", Bytes::from("1")),
            TxnOp::delete(b"a"),
            TxnOp::put(b"b", Bytes::from("2")),
        ];
        let plan = plan(&ops, &live(&[("a", None), ("b", None)])).unwrap();
        assert_eq!(plan.revisions[..2], [None, None]);
        assert!(plan.revisions[2].is_some());
    }

    #[test]
    fn the_failing_step_is_named() {
        let ops = vec![
            TxnOp::put(b"a", Bytes::from("1")),
            TxnOp::check(b"b").if_revision(Revision::from("old")),
        ];
        match plan(&ops, &live(&[("a", None), ("b", Some("x"))])) {
            Err(KvError::TransactionConflict { index: 1, key, .. }) => assert_eq!(key, "b"),
            other => panic!("{:?}", other.err()),
        }
    }
}
