//! How long the guarded operations of one task waited before they could send (the queue,
//! back-off, acquisition, and the precondition check and its re-check under the lease),
//! for a caller that reports it: the gateway's access log. Nothing here changes what the
//! protocol does.

use std::cell::Cell;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::Clock;

tokio::task_local! {
    static WAITED: Cell<Option<Duration>>;
}

/// Runs `work` and returns its output with the longest time one of its guarded operations
/// waited (`None` if it ran none). The longest, not the sum: a batch's operations wait
/// side by side.
#[cfg_attr(not(feature = "gateway"), allow(dead_code))]
pub(crate) async fn measured<T>(work: impl Future<Output = T>) -> (T, Option<Duration>) {
    WAITED
        .scope(Cell::new(None), async {
            let out = work.await;
            (out, WAITED.with(Cell::get))
        })
        .await
}

/// One guarded operation's wait, from its start: noted when it is about to send, or, if
/// it ends without sending (its check failed, its lease could not be had), when dropped.
pub(crate) struct Wait {
    clock: Arc<dyn Clock>,
    began: Instant,
    noted: bool,
}

impl Wait {
    pub(crate) fn start(clock: &Arc<dyn Clock>) -> Self {
        Self {
            clock: clock.clone(),
            began: clock.now(),
            noted: false,
        }
    }

    /// The operation is about to send: its wait ends now.
    pub(crate) fn sending(&mut self) {
        if !self.noted {
            self.noted = true;
            note(self.clock.now().saturating_duration_since(self.began));
        }
    }
}

impl Drop for Wait {
    fn drop(&mut self) {
        self.sending();
    }
}

/// Counts `wait` for the task's caller, if it measures (a no-op otherwise).
fn note(wait: Duration) {
    let _ = WAITED.try_with(|waited| {
        waited.set(Some(waited.get().map_or(wait, |before| before.max(wait))));
    });
}
