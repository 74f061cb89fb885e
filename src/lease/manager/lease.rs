//! [`Lease`]: a lease this process holds, and what it knows of its record.

use std::time::Duration;

use tokio::time::Instant;

use crate::lease::config::safety_margin;
use crate::lease::record::{Expect, LeaseRecord};

use super::errors::LeaseError;

/// A lease we hold on (path, etag), until its local deadline unless renewed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    pub(super) path: String,
    pub(super) etag: String,
    pub(super) generation: u64,
    pub(super) owner: String,
    /// What the holder advertises in the record (a lock holder's address, say).
    pub(super) value: Option<String>,
    pub(super) timeout: Duration,
    /// When the write that gave us the current generation was sent (or, when that is not
    /// known exactly, an earlier instant): the lease is ours for `timeout` from then, on
    /// our clock.
    pub(super) written_at: Instant,
    /// Whether it was taken over from another holder (expired or released) rather than
    /// created fresh at the first try: the guarded state may have changed since it was
    /// last checked.
    pub(super) taken_over: bool,
    /// When the acquisition that won was sent, by the wall clock (ms since the epoch): shown
    /// in the record to people inspecting the table.
    pub(super) since_ms: Option<i64>,
    /// When the earliest renewal attempt not yet confirmed was sent. Kept in the lease, not
    /// in a call, so that an attempt dropped with its call (and landing later) still
    /// bounds the lease when a later renewal finds its record.
    pub(super) unconfirmed_since: Option<Instant>,
}

impl Lease {
    /// The object path.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// The ETag the lease guards (`*` for a create).
    pub fn etag(&self) -> &str {
        &self.etag
    }

    /// The current generation: strictly increasing across holders, usable as a fencing
    /// token.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// The nonce naming this holder in the record.
    pub fn owner(&self) -> &str {
        &self.owner
    }

    /// The value the holder advertises in the record.
    pub fn value(&self) -> Option<&str> {
        self.value.as_deref()
    }

    /// When the lease runs out on the manager's clock, unless renewed.
    pub fn deadline(&self) -> Instant {
        self.written_at + self.timeout
    }

    /// The last instant at which a guarded request may be started or carried on: the
    /// deadline less a safety margin of a tenth of the lease (the time between deciding to
    /// send and the request leaving the process).
    pub fn usable_until(&self) -> Instant {
        self.deadline() - safety_margin(self.timeout)
    }

    /// Whether the lease was taken over from an expired or released holder.
    pub fn was_taken_over(&self) -> bool {
        self.taken_over
    }

    /// Records that the write of `generation` sent at `sent` made the lease ours.
    pub(super) fn won(&mut self, generation: u64, sent: Instant, taken_over: bool) {
        self.generation = generation;
        self.written_at = sent;
        self.taken_over = taken_over;
    }

    /// The generation after `generation`, or an error at the counter's end.
    pub(super) fn after(&self, generation: u64) -> Result<u64, LeaseError> {
        generation
            .checked_add(1)
            .ok_or_else(|| LeaseError::GenerationExhausted {
                path: self.path.clone(),
                etag: self.etag.clone(),
            })
    }

    /// The condition that the stored record is still this lease, as we last wrote it.
    pub(super) fn still_ours(&self) -> Expect {
        Expect::Owned {
            generation: self.generation,
            owner: self.owner.clone(),
        }
    }

    /// Whether `record` was written by this acquisition (any of its attempts, or a renewal)
    /// and is not released.
    pub(super) fn is_ours(&self, record: &LeaseRecord) -> bool {
        record.owner.as_deref() == Some(self.owner.as_str()) && !record.released
    }
}

// Here rather than in `errors.rs`, which then needs nothing of the lease.
impl LeaseError {
    /// The error of `lease`, lost for `reason`.
    pub(super) fn lost(lease: &Lease, reason: impl Into<String>) -> Self {
        Self::Lost {
            path: lease.path.clone(),
            etag: lease.etag.clone(),
            generation: lease.generation,
            reason: reason.into(),
        }
    }
}
