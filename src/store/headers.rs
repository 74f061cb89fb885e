//! What the inner store is known to do with the condition headers, learnt from its answers
//! and from the probe.
//!
//! A write under a lease carries its condition (`If-None-Match: *`, `If-Match: ETAG`,
//! copy-if-not-exists) in every mode, unless the store was lately found to refuse the
//! header: on a store that enforces conditions, a leased write then cannot land on a
//! native writer's commit (a rolling move from `lease` to `auto`, a store that starts
//! enforcing under a running fleet), and on one that ignores them the header costs
//! nothing. A refusal is remembered for [`REFUSAL_KEPT`], then the header is tried again,
//! so a store that starts accepting it is noticed.

use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use super::conditions::Enforced;

/// How long a refused header is written without before it is tried again.
pub(crate) const REFUSAL_KEPT: Duration = Duration::from_secs(600);

/// How long a probe's findings stand before the next conditional write probes again, so
/// that a store whose enforcement changes under a running process is noticed.
pub(crate) const PROBE_KEPT: Duration = Duration::from_secs(600);

/// How long findings that a failed re-probe left standing are used before the next try.
pub(crate) const PROBE_RETRY: Duration = Duration::from_secs(30);

/// A condition header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Header {
    /// `If-None-Match: *` on a put (`PutMode::Create`).
    IfNoneMatch,
    /// `If-Match: ETAG` on a put (`PutMode::Update`).
    IfMatch,
    /// Copy-if-not-exists (`CopyMode::Create`, `RenameTargetMode::Create`).
    CopyIfAbsent,
}

impl Header {
    fn index(self) -> usize {
        match self {
            Self::IfNoneMatch => 0,
            Self::IfMatch => 1,
            Self::CopyIfAbsent => 2,
        }
    }
}

/// What one store (and every clone of its handle) knows of its answers to the headers.
#[derive(Debug, Default)]
pub(crate) struct Headers {
    state: Mutex<HeaderState>,
}

#[derive(Debug, Default)]
struct HeaderState {
    /// When each header was last refused, if lately.
    refused_at: [Option<Instant>; 3],
    /// `If-Match` must name ETags without their quotes (DigitalOcean Spaces honours only
    /// that form).
    unquoted: bool,
}

impl Headers {
    fn state(&self) -> std::sync::MutexGuard<'_, HeaderState> {
        // Every critical section stores one value: a poisoned lock still holds a whole one.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Whether a write under a lease sends `header`: unless it was refused lately.
    pub(crate) fn carries(&self, header: Header) -> bool {
        self.state().refused_at[header.index()].is_none_or(|at| at.elapsed() >= REFUSAL_KEPT)
    }

    /// The store refused `header` (an error answering the header, not a failed condition).
    pub(crate) fn refused(&self, header: Header) {
        tracing::warn!(
            ?header,
            "the store refuses a condition header: writes under a lease go without it for \
             the next 10 minutes"
        );
        self.state().refused_at[header.index()] = Some(Instant::now());
    }

    /// Takes what a probe found: the form of `If-Match`, and every header it found
    /// accepted carried again at once. (A probe's refusal alone is not taken: it may be a
    /// fault's, and a header wrongly left off a leased write could land it on a native
    /// writer's commit. Refusals are learnt from a write's answer, confirmed by a probe.)
    pub(crate) fn learn(&self, probe: &Probe) {
        let mut state = self.state();
        state.unquoted = probe.unquoted;
        for header in [Header::IfNoneMatch, Header::IfMatch, Header::CopyIfAbsent] {
            if probe.accepts(header) {
                state.refused_at[header.index()] = None;
            }
        }
    }

    /// Whether `If-Match` names ETags without their quotes.
    pub(crate) fn unquoted(&self) -> bool {
        self.state().unquoted
    }
}

/// What a probe found: the conditions the store enforces, the headers it accepts (a write
/// carrying one is applied where its condition holds: a store that ignores the header
/// accepts it), and the form of ETag its `If-Match` honours.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Probe {
    pub(crate) enforced: Enforced,
    pub(crate) accepted: Enforced,
    pub(crate) unquoted: bool,
}

impl Probe {
    /// Whether the store accepts `header`.
    pub(crate) fn accepts(&self, header: Header) -> bool {
        match header {
            Header::IfNoneMatch => self.accepted.create,
            Header::IfMatch => self.accepted.update,
            Header::CopyIfAbsent => self.accepted.copy,
        }
    }
}

/// The last probe's findings, shared by clones of a store's handle, and the turn to run
/// the next (one probe at a time per store).
#[derive(Debug, Default)]
pub(crate) struct Probed {
    found: Mutex<Found>,
    turn: tokio::sync::Mutex<()>,
}

#[derive(Debug, Default)]
struct Found {
    /// The findings and when the probe that made them started, unless forgotten.
    last: Option<(Probe, Instant)>,
    /// Bumped by every [`Probed::forget`]: a probe that started before a contradiction
    /// must not restore findings it contradicts.
    epoch: u64,
}

impl Probed {
    fn found(&self) -> std::sync::MutexGuard<'_, Found> {
        self.found
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The findings, if the probe ran within [`PROBE_KEPT`].
    pub(crate) fn fresh(&self) -> Option<Probe> {
        self.found()
            .last
            .filter(|(_, at)| at.elapsed() < PROBE_KEPT)
            .map(|(probe, _)| probe)
    }

    /// The findings, if fresh and made by a probe that started at `since` or later.
    pub(crate) fn fresh_since(&self, since: Instant) -> Option<Probe> {
        self.found()
            .last
            .filter(|(_, at)| *at >= since && at.elapsed() < PROBE_KEPT)
            .map(|(probe, _)| probe)
    }

    /// The last findings, however old (for Debug output).
    pub(crate) fn last(&self) -> Option<Enforced> {
        self.found().last.map(|(probe, _)| probe.enforced)
    }

    /// The epoch a probe starts in, for [`Self::keep`].
    pub(crate) fn epoch(&self) -> u64 {
        self.found().epoch
    }

    /// Keeps `probe`'s findings, dated `started`, unless an answer contradicted the
    /// store's findings since the probe started (then the next write probes again).
    pub(crate) fn keep(&self, probe: Probe, started: Instant, epoch: u64) {
        let mut found = self.found();
        if found.epoch == epoch {
            found.last = Some((probe, started));
        }
    }

    /// A re-probe that started in `epoch` failed: the last findings stand (a store that
    /// answered once goes on being taken as it was, rather than every conditional write
    /// failing with the probe's error), dated so that
    /// the next try comes after [`PROBE_RETRY`], not at every conditional write; unless
    /// they were forgotten since (then there are none, and the failure is the answer).
    pub(crate) fn retry_later(&self, epoch: u64) -> Option<Probe> {
        let mut found = self.found();
        if found.epoch != epoch {
            return None;
        }
        let now = Instant::now();
        let dated = now.checked_sub(PROBE_KEPT - PROBE_RETRY).unwrap_or(now);
        let probe = found.last.as_ref()?.0;
        found.last = Some((probe, dated));
        Some(probe)
    }

    /// An answer contradicted the findings: the next conditional write probes again.
    pub(crate) fn forget(&self) {
        let mut found = self.found();
        found.last = None;
        found.epoch += 1;
    }

    /// The turn to probe: held while one runs, so clones do not probe side by side.
    pub(crate) async fn turn(&self) -> tokio::sync::MutexGuard<'_, ()> {
        self.turn.lock().await
    }
}

/// The HTTP status an object store client's error names in its text, if any
/// (object_store's own error type, which holds it, is not public): "... status code: 501
/// Not Implemented ...".
pub(crate) fn status_in(error: &(dyn std::error::Error + 'static)) -> Option<u16> {
    let mut next = Some(error);
    while let Some(e) = next {
        let text = e.to_string();
        if let Some(at) = text.find("status code: ") {
            let digits = &text[at + "status code: ".len()..];
            if let Some(status) = digits.get(..3).and_then(|d| d.parse().ok()) {
                return Some(status);
            }
        }
        next = e.source();
    }
    None
}

/// Whether an answer to a conditional write refuses its header, not its condition or its
/// body: a 501 (Backblaze B2 and Alibaba OSS answer `If-None-Match` so). Such a request
/// was not applied. Nothing else is read so from a write's answer: a 400 or 405 can be the
/// answer to the body or the key (a digest mismatch, a timeout), a 403 a policy's, a 412
/// a condition's, and a header wrongly left off a leased write could land it on a native
/// writer's commit. A refusal that leaves the condition holding is settled by a probe on
/// a fresh key instead (`CommitStore::after_refusal`).
pub(crate) fn refuses_a_header(error: &(dyn std::error::Error + 'static)) -> bool {
    status_in(error) == Some(501)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error(
        "Error performing PUT http://x/y in 3ms - Server returned non-2xx status code: 501 Not Implemented: <Error/>"
    )]
    struct Answer;

    #[derive(Debug, thiserror::Error)]
    #[error("wrapped")]
    struct Wrapped(#[source] Answer);

    #[test]
    fn the_status_is_read_from_anywhere_in_the_chain() {
        assert_eq!(status_in(&Wrapped(Answer)), Some(501));
        assert!(refuses_a_header(&Wrapped(Answer)));
        #[derive(Debug, thiserror::Error)]
        #[error(
            "Server returned non-2xx status code: 400 Bad Request: BadDigest: the Content-MD5 you specified did not match"
        )]
        struct Digest;
        assert!(
            !refuses_a_header(&Digest),
            "a 400 naming `match` is no refused header"
        );
        let timeout = std::io::Error::other("timed out");
        assert_eq!(status_in(&timeout), None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_refusal_is_kept_for_a_while_then_tried_again() {
        let headers = Headers::default();
        assert!(headers.carries(Header::IfNoneMatch));
        headers.refused(Header::IfNoneMatch);
        assert!(!headers.carries(Header::IfNoneMatch));
        assert!(headers.carries(Header::IfMatch));
        tokio::time::advance(REFUSAL_KEPT).await;
        assert!(headers.carries(Header::IfNoneMatch));
    }
}
