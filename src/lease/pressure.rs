//! What contention a manager has met lately, kept per directory of lease keys.
//!
//! A writer whose checks failed, or that lost a wait to another writer, approaches the
//! same log differently for a while: its check goes first and a read of the record
//! follows, and it backs off once before its next operation (`docs/protocol.md`,
//! "Contention"). The versions of one log are keys of one directory, so that is what the
//! state is kept for: a process committing to several tables would otherwise carry one
//! hot log's contention into every other table's commits, each paying a GetItem, a round
//! trip more and a pause for nothing. Directories are hashed onto a fixed set of slots;
//! two that share a slot share their state, as every key of a manager once did. None of
//! this touches safety: it decides what a writer sends first and how long it pauses.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

/// Slots per manager: collisions only cost what a shared state costs, so a few dozen
/// suffice for the tables one process writes.
const SLOTS: usize = 64;

/// The contention state of a manager, per directory (see the module's comment).
#[derive(Debug)]
pub(super) struct Pressure {
    slots: Box<[Slot]>,
}

impl Default for Pressure {
    fn default() -> Self {
        Self {
            slots: (0..SLOTS).map(|_| Slot::default()).collect(),
        }
    }
}

impl Pressure {
    /// The state of `key`'s directory (everything before its last `/`).
    pub(super) fn of(&self, key: &str) -> &Slot {
        let directory = key.rsplit_once('/').map_or("", |(directory, _)| directory);
        // FNV-1a, fixed: a simulation replays its seed only if which directories share a
        // slot is the same every run, and on every toolchain (std's hasher may change).
        let hash = directory.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
        });
        let slot = usize::try_from(hash % SLOTS as u64).unwrap_or(0);
        &self.slots[slot]
    }
}

/// One directory's contention state.
#[derive(Debug, Default)]
pub(super) struct Slot {
    /// How often, lately, a first check failed (the object was already there) or a wait
    /// was lost: raised by 4 per failure or loss (at most 16), lowered by 1 per first
    /// check that passes, cleared by a success. While above zero, the check goes first.
    contended: AtomicU32,
    /// Losses in a row to another writer's operation since the last success here.
    losses_in_a_row: AtomicU32,
    /// Whether the next guarded operation here owes a pause for the last loss.
    owed: AtomicBool,
}

impl Slot {
    /// Whether checks failed or waits were lost here lately.
    pub(super) fn is_contended(&self) -> bool {
        self.contended.load(Ordering::Relaxed) > 0
    }

    /// Counts a first check's outcome: +4 for a failure, at most 16; -1 for a pass.
    pub(super) fn note_first_check(&self, passed: bool) {
        let _ = self
            .contended
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |c| {
                Some(if passed {
                    c.saturating_sub(1)
                } else {
                    (c + 4).min(16)
                })
            });
    }

    /// Counts a loss to another writer's operation (a check that failed while waiting on
    /// its lease, whatever the failure: a HEAD that erred counts too): the next operation
    /// here checks first, as after a failed first check, and owes a pause. A writer that
    /// waited on a holder it learned of from a refused PutItem learns of the next from a
    /// read.
    pub(super) fn note_loss(&self) {
        self.note_first_check(false);
        let _ = self
            .losses_in_a_row
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                Some(n.saturating_add(1))
            });
        self.owed.store(true, Ordering::Relaxed);
    }

    /// A guarded operation here succeeded: the losses in a row end, and so does the
    /// contention. A writer that has just committed a version is at the head of the log,
    /// ahead of those still learning of its commit: its next version is most likely
    /// free, and a check and a read before its PutItem would only lengthen the chain of
    /// commits (measured: the log race on SeaweedFS went from 115-133 to 212-219 commits/s,
    /// and its refused PutItems fell, the winner reaching each version before the pack).
    pub(super) fn note_success(&self) {
        self.losses_in_a_row.store(0, Ordering::Relaxed);
        self.contended.store(0, Ordering::Relaxed);
    }

    /// If a pause is owed here, takes it: the losses in a row (at most 4), which size it.
    pub(super) fn take_owed_pause(&self) -> Option<u32> {
        self.owed
            .swap(false, Ordering::Relaxed)
            .then(|| self.losses_in_a_row.load(Ordering::Relaxed).min(4))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_of_one_directory_share_a_state_and_others_mostly_do_not() {
        let pressure = Pressure::default();
        pressure.of("t/_delta_log/0.json").note_loss();
        assert!(pressure.of("t/_delta_log/1.json").is_contended());
        assert_eq!(
            pressure.of("t/_delta_log/7.json").take_owed_pause(),
            Some(1)
        );
        assert_eq!(pressure.of("t/_delta_log/8.json").take_owed_pause(), None);
        let apart = (0..100)
            .filter(|i| {
                !pressure
                    .of(&format!("table-{i}/_delta_log/0.json"))
                    .is_contended()
            })
            .count();
        // 100 other directories over 64 slots: about 1/64 of them share the hot one's.
        assert!(apart >= 90, "only {apart} of 100 other tables left alone");
    }

    #[test]
    fn contention_fades_after_four_passing_checks_per_failure_or_one_success() {
        let slot = Slot::default();
        slot.note_first_check(false);
        for _ in 0..3 {
            slot.note_first_check(true);
            assert!(slot.is_contended());
        }
        slot.note_first_check(true);
        assert!(!slot.is_contended());
        slot.note_loss();
        slot.note_loss();
        slot.note_success();
        assert!(!slot.is_contended());
    }
}
