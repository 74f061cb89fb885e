//! Queues within one process: the guarded operations of one lease manager on one lease
//! (path, etag) go one at a time.
//!
//! Tasks sharing a manager (one `CommitStore` serving many requests) that race for the
//! same lease would otherwise each send a PutItem that all but one lose, then poll the
//! object until the winner's write shows: requests that slow the winner on the servers,
//! and losses that make the manager back off on that log. Queued, a task learns what the operations
//! ahead of it did. One that joined before a successful write ahead of it was sent
//! overlapped that write's landing in time, so it may fail as if it came just after it,
//! when a create finds the object there and an update finds the ETag the write left.
//! Its caller either knows that without asking or has its check decide. A success whose
//! write was sent before the place was taken settles nothing: the object may have changed
//! again (a delete by another process) before the newcomer came; it only makes the
//! newcomer check first.
//!
//! A queue only adds a wait before the protocol, and behind a success a refusal or a check
//! the protocol could have given too; the operation at its front otherwise runs the whole
//! protocol, so the protocol's guarantees do not rest on it. A refusal's correctness
//! rests on counting only writes sent after the place was taken (see [`Front::sending`]),
//! which the simulator checks against each object's history.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::lock;

/// A scope no other caller has (see [`Queues::join`]): callers whose paths name different
/// objects (two `CommitStore`s over different buckets sharing one manager) must not learn
/// from each other's successes.
pub(crate) fn new_scope() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// The leases in use by this manager's guarded operations, each with its queue.
#[derive(Debug, Default)]
pub(super) struct Queues {
    /// By (scope, path, etag); an entry lives while an operation is at its front or waits.
    gates: Mutex<HashMap<Key, Arc<Gate>>>,
}

/// A queue's key: the caller's scope (one `CommitStore`, whose paths name its objects, or
/// 0), the path and the etag.
type Key = (u64, String, String);

/// One lease's queue (first come, first served) and what its operations did.
#[derive(Debug, Default)]
struct Gate {
    front: tokio::sync::Mutex<()>,
    state: Mutex<Done>,
}

/// What the operations of one queue did.
#[derive(Debug, Default)]
struct Done {
    /// Operations that sent their write (numbered from 1 in that order).
    sent: u64,
    /// Operations that succeeded.
    successes: u64,
    /// The latest that succeeded: the number of its send, and the ETag it left if known.
    success: Option<(u64, Option<String>)>,
}

/// What the operations ahead in a queue did while a place waited.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Ahead {
    /// None succeeded.
    NoSuccess,
    /// One did (the latest is described), leaving the object with this ETag if known.
    Succeeded {
        /// The ETag the write left, if its caller told it.
        etag_after: Option<String>,
        /// Whether its write was sent after this place was taken, so that it landed while
        /// this one waited (one sent before may have landed before this one came).
        sent_after_joining: bool,
    },
}

/// A place in one lease's queue: [`front`](Self::front) waits to reach its front.
/// Leaving the queue (dropping this) forgets the lease once nobody else is in it.
pub(super) struct Place<'a> {
    queues: &'a Queues,
    key: Key,
    /// Always `Some` until dropped (see `Drop`).
    gate: Option<Arc<Gate>>,
    /// Writes sent, and operations that succeeded, on the lease when this place was
    /// taken.
    sent_before: u64,
    successes_before: u64,
}

/// The front of one lease's queue, held until dropped.
pub(super) struct Front<'a> {
    gate: &'a Gate,
    ahead: Ahead,
    /// The number of this operation's send, once it sent (0 before).
    sent_as: AtomicU64,
    _held: tokio::sync::MutexGuard<'a, ()>,
}

impl Queues {
    /// Joins the queue of (path, etag) within `scope`.
    pub(super) fn join(&self, scope: u64, path: &str, etag: &str) -> Place<'_> {
        let key = (scope, path.to_owned(), etag.to_owned());
        let gate = Arc::clone(lock(&self.gates).entry(key.clone()).or_default());
        let (sent_before, successes_before) = {
            let done = lock(&gate.state);
            (done.sent, done.successes)
        };
        Place {
            queues: self,
            key,
            gate: Some(gate),
            sent_before,
            successes_before,
        }
    }
}

impl Place<'_> {
    /// Waits until every operation that joined before is done.
    pub(super) async fn front(&self) -> Front<'_> {
        // Some until dropped, which cannot happen while borrowed.
        let gate: &Gate = self.gate.as_deref().unwrap_or_else(|| unreachable!());
        let held = gate.front.lock().await;
        let ahead = {
            let done = lock(&gate.state);
            match &done.success {
                Some((sent_as, etag_after)) if done.successes > self.successes_before => {
                    Ahead::Succeeded {
                        etag_after: etag_after.clone(),
                        sent_after_joining: *sent_as > self.sent_before,
                    }
                }
                _ => Ahead::NoSuccess,
            }
        };
        Front {
            gate,
            ahead,
            sent_as: AtomicU64::new(0),
            _held: held,
        }
    }
}

impl Front<'_> {
    /// What the operations ahead of this one did while it waited.
    pub(super) fn ahead(&self) -> &Ahead {
        &self.ahead
    }

    /// Notes that the operation at the front is sending its write now.
    pub(super) fn sending(&self) {
        let mut done = lock(&self.gate.state);
        done.sent += 1;
        self.sent_as.store(done.sent, Ordering::Relaxed);
    }

    /// Whether the operation at the front has sent its write.
    pub(super) fn has_sent(&self) -> bool {
        self.sent_as.load(Ordering::Relaxed) > 0
    }

    /// Records the operation at the front as succeeded, leaving the object with
    /// `etag_after` if known, for those waiting behind it. Only a write that was sent
    /// (see [`sending`](Self::sending)) counts.
    pub(super) fn succeeded(&self, etag_after: Option<String>) {
        let sent_as = self.sent_as.load(Ordering::Relaxed);
        if sent_as > 0 {
            let mut done = lock(&self.gate.state);
            done.successes += 1;
            done.success = Some((sent_as, etag_after));
        }
    }
}

impl Drop for Place<'_> {
    fn drop(&mut self) {
        let mut gates = lock(&self.queues.gates);
        // Our share goes under the lock, as places are made under it: then one share
        // left is the map's alone, and nobody is queued.
        drop(self.gate.take());
        if gates
            .get(&self.key)
            .is_some_and(|gate| Arc::strong_count(gate) == 1)
        {
            gates.remove(&self.key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_place_learns_of_a_success_and_whether_it_was_sent_after_it_came() {
        let queues = Queues::default();
        let first = queues.join(1, "p", "e");
        let second = queues.join(1, "p", "e");
        let other_etag = queues.join(1, "p", "f");
        let other_scope = queues.join(2, "p", "e");
        let late = {
            let front = first.front().await;
            assert_eq!(front.ahead(), &Ahead::NoSuccess);
            // The second waits while the first is at the front.
            assert!(
                futures::FutureExt::now_or_never(second.front()).is_none(),
                "two operations at the front at once"
            );
            // Another lease, or the same in another scope, is not in this queue.
            assert_eq!(other_etag.front().await.ahead(), &Ahead::NoSuccess);
            assert_eq!(other_scope.front().await.ahead(), &Ahead::NoSuccess);
            front.sending();
            // A newcomer while the write is on its way: it may have landed already.
            let late = queues.join(1, "p", "e");
            front.succeeded(Some("e2".into()));
            late
        };
        assert_eq!(
            second.front().await.ahead(),
            &Ahead::Succeeded {
                etag_after: Some("e2".into()),
                sent_after_joining: true,
            },
            "the success while it waited was missed"
        );
        assert_eq!(
            late.front().await.ahead(),
            &Ahead::Succeeded {
                etag_after: Some("e2".into()),
                sent_after_joining: false,
            }
        );
        // One that comes after the success learns nothing of it; a success that sent
        // nothing is no success.
        let third = queues.join(1, "p", "e");
        let fourth = queues.join(1, "p", "e");
        third.front().await.succeeded(None);
        assert_eq!(fourth.front().await.ahead(), &Ahead::NoSuccess);
        drop((first, second, other_etag, other_scope, late, third, fourth));
        assert!(lock(&queues.gates).is_empty(), "queues left behind");
    }
}
